"""Prompts written by code, not by a template: Modelfile ``RENDERER`` names (Ollama's ``model/renderers``).

Ollama renders some families' prompts with built-in renderers, so that a GGUF
without a usable chat template still chats, calls tools and thinks. A
``RENDERER`` line naming one of these makes the prompt ours, from the
messages as templates receive them (system, user, assistant with its thinking
and tool calls, tool results) and the request's tools; the other renderer
names choose only the output format (``families.RENDERERS``), and the model's
template writes the prompt.

Built in (as Ollama writes them): ``qwen3-coder`` and ``qwen3.5`` (ChatML, tools
listed in the system turn, calls as ``<tool_call><function=NAME><parameter=P>``
XML, tool results in a user turn's ``<tool_response>``; Qwen 3.5 thinks in
``<think>`` by default and answers inside an empty block when told not to).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .thinking import Think

Renderer = Callable[[list[dict[str, Any]], list[dict[str, Any]], Think], str]

START, END = "<|im_start|>", "<|im_end|>"

QWEN_CALL_FORMAT = """If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT>"""

QWEN_CODER_SYSTEM = "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks."


def _compact(value: Any) -> str:
    """JSON as Go's encoder writes it (Ollama's renderers): no spaces."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _argument(value: Any) -> str:
    """A call's argument as Qwen's XML holds it: strings raw, everything else JSON."""
    return value if isinstance(value, str) else _compact(value) if isinstance(value, (dict, list)) else json.dumps(value)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function", tool) if isinstance(tool, dict) else {}
    return function if isinstance(function, dict) else {}


def _calls(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        arguments = function.get("arguments") or {}
        calls.append((str(function.get("name", "")), arguments if isinstance(arguments, dict) else {}))
    return calls


def _tool_result(out: list[str], messages: list[dict[str, Any]], i: int) -> None:
    """Consecutive tool results share one user turn, each in its ``<tool_response>``."""
    if i == 0 or messages[i - 1]["role"] != "tool":
        out.append(START + "user")
    out.append("\n<tool_response>\n" + messages[i].get("content", "") + "\n</tool_response>")
    if i == len(messages) - 1 or messages[i + 1]["role"] != "tool":
        out.append(END + "\n")


def _qwen3_coder(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    system = next((m.get("content", "") for m in messages if m["role"] == "system"), "")
    turns = [m for m in messages if m["role"] != "system"]
    out: list[str] = []
    if system or tools:
        out.append(START + "system\n" + (system or QWEN_CODER_SYSTEM))
        if tools:
            out.append("\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>")
            for tool in tools:
                function = _function(tool)
                out.append("\n<function>\n<name>" + str(function.get("name", "")) + "</name>")
                if function.get("description"):
                    out.append("\n<description>" + str(function["description"]) + "</description>")
                out.append("\n<parameters>")
                parameters = function.get("parameters") or {}
                for name, spec in (parameters.get("properties") or {}).items():
                    spec = spec if isinstance(spec, dict) else {}
                    out.append("\n<parameter>\n<name>" + name + "</name>")
                    kind = spec.get("type")
                    if kind:
                        out.append("\n<type>" + (kind if isinstance(kind, str) else _compact(kind)) + "</type>")
                    if spec.get("description"):
                        out.append("\n<description>" + str(spec["description"]) + "</description>")
                    out.append(_extra_keys(spec, ("type", "description")) + "\n</parameter>")
                out.append(_extra_keys(parameters, ("type", "properties")) + "\n</parameters>\n</function>")
            out.append("\n</tools>\n\n" + QWEN_CALL_FORMAT)
        out.append(END + "\n")
    for i, message in enumerate(turns):
        last = i == len(turns) - 1
        prefill = last and message["role"] == "assistant"
        if message["role"] == "assistant":
            calls = _calls(message)
            out.append(START + "assistant\n")
            if calls:
                if message.get("content"):
                    out.append(message["content"] + "\n")
                for name, arguments in calls:
                    out.append("\n<tool_call>\n<function=" + name + ">")
                    out.extend(f"\n<parameter={key}>\n{_argument(value)}\n</parameter>" for key, value in arguments.items())
                    out.append("\n</function>\n</tool_call>")
                out.append(END + "\n")
            else:
                out.append(message.get("content", "") + ("" if prefill else END + "\n"))
        elif message["role"] == "tool":
            _tool_result(out, turns, i)
        else:
            out.append(START + message["role"] + "\n" + message.get("content", "") + END + "\n")
        if last and not prefill:
            out.append(START + "assistant\n")
    return "".join(out)


def _extra_keys(spec: dict[str, Any], handled: tuple[str, ...]) -> str:
    """A schema's other keys as ``<key>value</key>`` lines (objects and lists as JSON), as Qwen's template does."""
    parts = []
    for key, value in spec.items():
        if key in handled or value is None:
            continue
        text = _compact(value) if isinstance(value, (dict, list)) else str(value)
        parts.append(f"\n<{key}>{text}</{key}>")
    return "".join(parts)


def _qwen35(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    thinking = True if think is None else bool(think)
    out: list[str] = []
    first_system = messages[0].get("content", "").strip() if messages and messages[0]["role"] == "system" else None
    if tools:
        out.append(START + "system\n# Tools\n\nYou have access to the following functions:\n\n<tools>")
        out.extend("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
        out.append("\n</tools>\n\n" + QWEN_CALL_FORMAT)
        if first_system:
            out.append("\n\n" + first_system)
        out.append(END + "\n")
    elif first_system is not None:
        out.append(START + "system\n" + first_system + END + "\n")
    last_query = len(messages) - 1  # the last user message that is not tool output
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content", "").strip()
        if messages[i]["role"] == "user" and not (content.startswith("<tool_response>")
                                                  and content.endswith("</tool_response>")):
            last_query = i
            break
    for i, message in enumerate(messages):
        content = message.get("content", "").strip()
        last = i == len(messages) - 1
        prefill = last and message["role"] == "assistant"
        if message["role"] == "user" or (message["role"] == "system" and i != 0):
            out.append(START + message["role"] + "\n" + content + END + "\n")
        elif message["role"] == "assistant":
            if thinking and i > last_query:  # this turn's own reasoning goes back in, older turns' does not
                reasoning = (message.get("thinking") or "").strip()
                out.append(START + "assistant\n<think>\n" + reasoning + "\n</think>\n\n" + content)
            else:
                out.append(START + "assistant\n" + content)
            for j, (name, arguments) in enumerate(_calls(message)):
                out.append(("\n\n" if content else "") if j == 0 else "\n")
                out.append("<tool_call>\n<function=" + name + ">\n")
                out.extend(f"<parameter={key}>\n{_argument(value)}\n</parameter>\n" for key, value in arguments.items())
                out.append("</function>\n</tool_call>")
            if not prefill:
                out.append(END + "\n")
        elif message["role"] == "tool":
            _tool_result(out, messages, i)
        if last and not prefill:
            out.append(START + "assistant\n" + ("<think>\n" if thinking else "<think>\n\n</think>\n\n"))
    return "".join(out)


#: Ollama's renderer names that we render built in.
BUILT_IN: dict[str, Renderer] = {"qwen3-coder": _qwen3_coder, "qwen3.5": _qwen35}


def built_in_renderer(name: str | None) -> Renderer | None:
    """The renderer a Modelfile's ``RENDERER`` names, when it is one we write prompts with."""
    return BUILT_IN.get(name or "")
