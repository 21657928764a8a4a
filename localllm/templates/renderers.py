"""Prompts written by code, not by a template: Modelfile ``RENDERER`` names (Ollama's ``model/renderers``).

Ollama renders some families' prompts with built-in renderers, so that a GGUF
without a usable chat template still chats, calls tools and thinks. A
``RENDERER`` line naming one of these makes the prompt ours, from the
messages as templates receive them (system, user, assistant with its thinking
and tool calls, tool results) and the request's tools; the other renderer
names choose only the output format (``families.RENDERERS``), and the model's
template writes the prompt.

Built in (as Ollama writes them, checked against the cases of Ollama's own
``*_test.go``): ``qwen3-coder`` and ``qwen3.5`` / ``ornith`` / ``qwen3.8`` (ChatML, calls as
``<tool_call><function=NAME><parameter=P>`` XML), ``qwen3-vl-instruct`` /
``qwen3-vl-thinking`` (ChatML, Hermes JSON calls), ``deepseek3.1`` and
``cogito`` (DeepSeek's full-width tokens), ``glm-4.7`` and ``glm-ocr`` (``<arg_key>`` pairs),
``lfm2`` / ``lfm2-thinking`` (Python-list calls), ``nemotron-3-nano`` / ``nemotron-3.5-nano``
(Qwen XML calls), ``laguna`` / ``poolside-v1`` (Poolside's, ``<arg_key>`` calls), ``cohere`` (Command A's
``<|START_ACTION|>`` JSON), ``glimmer`` (messages by recipient, ``<atem:invoke>`` calls), ``olmo3`` / ``olmo3.1`` /
``olmo3-think`` / ``olmo3-32b-think``, and ``gemma4`` / ``gemma4-small`` /
``gemma4-large`` (Gemma 4's ``<|"|>``-quoted notation), ``functiongemma`` (the same
with ``<escape>``). Tools are written as Go
marshals Ollama's tool structs: its key order, and ``<>&`` escaped where Go
escapes them. Images are not marked in these prompts.
"""

from __future__ import annotations

import datetime
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


def _compact(value: Any, spaced: bool = False) -> str:
    """JSON as Go's ``json.Marshal`` writes it (Ollama's renderers): no spaces, ``<>&`` escaped;
    ``spaced`` adds a space after each ``:`` and ``,`` (Ollama's ``marshalWithSpaces``)."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


#: Go's field order for Ollama's tool structs (``api.Tool``, ``ToolFunction``, ``ToolFunctionParameters``,
#: ``ToolProperty``): a tool marshalled by Go lists its keys in this order, whatever order the request gave.
_TOOL_ORDER = ("type", "items", "function")
_FUNCTION_ORDER = ("name", "description", "parameters")
_PARAMETERS_ORDER = ("type", "$defs", "items", "required", "properties")
_PROPERTY_ORDER = ("anyOf", "type", "items", "description", "enum", "properties", "required")


def _ordered(value: dict[str, Any], order: tuple[str, ...], omit_empty: tuple[str, ...] = ()) -> dict[str, Any]:
    return {key: value[key] for key in order if key in value and not (key in omit_empty and not value[key])}


def _property(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    ordered = _ordered(spec, _PROPERTY_ORDER, _PROPERTY_ORDER)
    if "anyOf" in ordered:
        ordered["anyOf"] = [_property(item) for item in ordered["anyOf"]]
    if "properties" in ordered:
        ordered["properties"] = {name: _property(item) for name, item in ordered["properties"].items()}
    return ordered


def _go_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as Ollama holds it once Go has decoded it: Go's key order, empty optional keys left out."""
    function = _function(tool)
    parameters = function.get("parameters") or {}
    ordered_parameters = _ordered({"type": "", "properties": None, **parameters}, _PARAMETERS_ORDER,
                                  ("$defs", "items", "required"))
    if ordered_parameters["properties"] is not None:
        ordered_parameters["properties"] = {n: _property(p) for n, p in ordered_parameters["properties"].items()}
    go_function = _ordered({"name": "", **function, "parameters": ordered_parameters}, _FUNCTION_ORDER,
                           ("description",))
    return _ordered({"type": "", **tool, "function": go_function}, _TOOL_ORDER, ("items",))


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


def _tool_result(out: list[str], messages: list[dict[str, Any]], i: int, content: str | None = None) -> None:
    """Consecutive tool results share one user turn, each in its ``<tool_response>`` (``content``: the result's
    text as the renderer shapes it, else as sent)."""
    if i == 0 or messages[i - 1]["role"] != "tool":
        out.append(START + "user")
    out.append("\n<tool_response>\n" + (messages[i].get("content", "") if content is None else content)
               + "\n</tool_response>")
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


QWEN38_XHIGH = ("Reasoning effort is set to xhigh. Please think carefully through the task, validate key assumptions, "
                "consider plausible alternatives, and prioritize correctness, consistency, and clarity in the final "
                "answer.")
QWEN38_LOW = ("Reasoning effort is set to low. Keep your thinking brief and focused, moving directly to the conclusion "
              "without unnecessary elaboration.")


def _qwen38_instructions(think: Think) -> str:
    """Qwen3.8's effort sentence in its system turn: xhigh unless asked (``true`` is Ollama's "medium": none)."""
    if think is None or think == "high":
        return QWEN38_XHIGH
    return QWEN38_LOW if think == "low" else ""


def _qwen38_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Qwen3.8 takes one leading system turn: every system message folds into it, in order. A conversation
    without a user query (only tool results) is refused, as Ollama refuses it."""
    systems = [m for m in messages if m["role"] == "system"]
    if len(systems) > 1 or (systems and messages[0]["role"] != "system"):
        joined = "\n\n".join(text for m in systems if (text := m.get("content", "").strip()))
        messages = [{"role": "system", "content": joined}, *(m for m in messages if m["role"] != "system")]
    if _last_query(messages, strip=True, found_only=True) < 0:
        raise ValueError("no user query found in messages")
    return messages


def _qwen35_reasoning(content: str, thinking: str, block: bool, from_content: bool) -> tuple[str, str]:
    """An assistant turn's reasoning and answer: its ``thinking`` when the turn's block is written, else (older
    Qwen 3.5 turns) the text before a ``</think>`` in its content, taken out of the answer."""
    if block and thinking:
        return thinking.strip(), content
    if not from_content or (end := content.find("</think>")) < 0:
        return "", content
    before = content[:end]
    opening = before.rfind("<think>")
    reasoning = before[opening + len("<think>"):] if opening >= 0 else before
    return reasoning.strip(), content[end + len("</think>"):].lstrip("\n")


def _qwen35(always_think_block: bool = False, qwen38: bool = False) -> Renderer:
    """Qwen 3.5 (and its kin: ``ornith`` writes every assistant turn's think block, ``qwen3.8`` also states the
    reasoning effort in the system turn): ChatML, XML calls, an open ``<think>`` (an empty block when not thinking)."""
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
        if qwen38:
            messages = _qwen38_messages(messages)
        thinking = True if think is None else bool(think)
        instructions = _qwen38_instructions(think) if qwen38 else ""
        out: list[str] = []
        system = messages[0].get("content", "").strip() if messages and messages[0]["role"] == "system" else None
        if tools:
            out.append(START + "system\n" + (instructions + "\n\n" if instructions else "")
                       + "# Tools\n\nYou have access to the following functions:\n\n<tools>")
            out.extend("\n" + _compact(_go_tool(tool), spaced=True) for tool in tools)
            out.append("\n</tools>\n\n" + QWEN_CALL_FORMAT + ("\n\n" + system if system else "") + END + "\n")
        elif system is not None and (not qwen38 or system or instructions):
            out.append(START + "system\n" + instructions + ("\n\n" if instructions and system else "") + system
                       + END + "\n")
        elif instructions:
            out.append(START + "system\n" + instructions + END + "\n")
        last_query = _last_query(messages, strip=True)
        for i, message in enumerate(messages):
            content = message.get("content", "").strip()
            last = i == len(messages) - 1
            prefill = last and message["role"] == "assistant"
            if message["role"] == "user" or (message["role"] == "system" and i != 0):
                out.append(START + message["role"] + "\n" + content + END + "\n")
            elif message["role"] == "assistant":
                block = always_think_block or (thinking and i > last_query)  # older turns' reasoning is left out
                reasoning, content = _qwen35_reasoning(content, message.get("thinking") or "", block, not qwen38)
                out.append(START + "assistant\n" + ("<think>\n" + reasoning + "\n</think>\n\n" if block else "")
                           + content)
                for j, (name, arguments) in enumerate(_calls(message)):
                    out.append(("\n\n" if content.strip() else "") if j == 0 else "\n")
                    out.append("<tool_call>\n<function=" + name + ">\n")
                    out.extend(f"<parameter={key}>\n{_argument(value)}\n</parameter>\n"
                               for key, value in arguments.items())
                    out.append("</function>\n</tool_call>")
                if not prefill:
                    out.append(END + "\n")
            elif message["role"] == "tool":
                _tool_result(out, messages, i, content)
            if last and not prefill:
                out.append(START + "assistant\n" + ("<think>\n" if thinking else "<think>\n\n</think>\n\n"))
        return "".join(out)
    return render


def _last_query(messages: list[dict[str, Any]], strip: bool, found_only: bool = False) -> int:
    """The last user message that is not tool output (the turn whose reasoning Qwen keeps); without one, the
    last message (-1 when ``found_only``)."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content", "")
        content = content.strip() if strip else content
        if messages[i]["role"] == "user" and not (content.startswith("<tool_response>")
                                                  and content.endswith("</tool_response>")):
            return i
    return -1 if found_only else len(messages) - 1


QWEN_VL_TOOLS = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
QWEN_VL_CALL_FORMAT = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                       "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                       '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def _qwen3_vl(thinks: bool) -> Renderer:
    """Qwen3-VL (instruct, or thinking by default): Hermes-style JSON calls in ``<tool_call>``."""
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
        thinking = thinks if think is None else bool(think)
        out: list[str] = []
        has_system = bool(messages) and messages[0]["role"] == "system"
        if tools:
            out.append(START + "system\n" + (messages[0].get("content", "") + "\n\n" if has_system else ""))
            out.append(QWEN_VL_TOOLS)
            out.extend("\n" + _compact(_go_tool(tool), spaced=True) for tool in tools)
            out.append(QWEN_VL_CALL_FORMAT + END + "\n")
        elif has_system:
            out.append(START + "system\n" + messages[0].get("content", "") + END + "\n")
        last_query = _last_query(messages, strip=False)
        for i, message in enumerate(messages):
            content = message.get("content", "")
            last = i == len(messages) - 1
            prefill = last and message["role"] == "assistant"
            if message["role"] == "user" or (message["role"] == "system" and i != 0):
                out.append(START + message["role"] + "\n" + content + END + "\n")
            elif message["role"] == "assistant":
                reasoning = (message.get("thinking") or "") if thinking else ""
                if thinking and i > last_query and (last or reasoning):
                    out.append(START + "assistant\n<think>\n" + reasoning.strip("\n"))
                    if content:
                        out.append("\n</think>\n\n" + content.lstrip("\n"))
                else:
                    out.append(START + "assistant\n" + content)
                for j, (name, arguments) in enumerate(_calls(message)):
                    out.append("\n" if j > 0 or content else "")
                    out.append('<tool_call>\n{"name": "' + name + '", "arguments": ' + _compact(arguments, spaced=True)
                               + "}\n</tool_call>")
                if not prefill:
                    out.append(END + "\n")
            elif message["role"] == "tool":
                _tool_result(out, messages, i)
            if last and not prefill:
                out.append(START + "assistant\n" + ("<think>\n" if thinking else ""))
        return "".join(out)
    return render


BOS_DEEPSEEK = "<｜begin▁of▁sentence｜>"
EOS_DEEPSEEK = "<｜end▁of▁sentence｜>"
DEEPSEEK_TOOL_FORMAT = (
    "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>"
    "{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n"
    "- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
    "- For multiple tool calls, chain them directly without separators or spaces\n")


def _deepseek31(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """DeepSeek-V3.1: thinks only when asked; ``</think>`` opens an answer that does not."""
    thinking = bool(think)
    out = [BOS_DEEPSEEK, "\n\n".join(m.get("content", "") for m in messages if m["role"] == "system")]
    if tools:
        out.append("\n\n## Tools\nYou have access to the following tools:\n")
        for tool in tools:
            function = _go_tool(tool)["function"]
            out.append("\n### " + function["name"] + "\nDescription: " + str(function.get("description", "")))
            out.append("\n\nParameters: " + _compact(function["parameters"]) + "\n")
        out.append(DEEPSEEK_TOOL_FORMAT)
    after_user = after_tool = False
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    for i, message in enumerate(messages):
        content = message.get("content", "")
        if message["role"] == "user":
            after_user, after_tool = True, False
            out.append("<｜User｜>" + content)
        elif message["role"] == "assistant" and message.get("tool_calls"):
            out.append("<｜Assistant｜></think>" if after_user else "")
            after_user = after_tool = False
            out.append(content + "<｜tool▁calls▁begin｜>")
            out.extend("<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>" + _compact(arguments) + "<｜tool▁call▁end｜>"
                       for name, arguments in _calls(message))
            out.append("<｜tool▁calls▁end｜>" + EOS_DEEPSEEK)
        elif message["role"] == "assistant":
            if after_user:
                opens = bool(message.get("thinking")) and thinking and i > last_user
                out.append("<｜Assistant｜>" + ("<think>" if opens else "</think>"))
            if not after_tool and "</think>" in content:
                content = content.split("</think>", 1)[1]
            after_user = after_tool = False
            out.append(content + EOS_DEEPSEEK)
        elif message["role"] == "tool":
            after_user, after_tool = False, True
            out.append("<｜tool▁output▁begin｜>" + content + "<｜tool▁output▁end｜>")
    if after_user:
        out.append("<｜Assistant｜>" + ("<think>" if thinking else "</think>"))
    return "".join(out)


COGITO_SYSTEM = ("You are Cogito, an AI assistant created by Deep Cogito, which is an AI research lab based in "
                 "San Francisco.")


def _cogito(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """Deep Cogito (DeepSeek tokens): thinking is a system-prompt switch, tools are indented JSON blocks."""
    thinking = bool(think)
    system = messages[0].get("content", "") if messages and messages[0]["role"] == "system" else ""
    turns = messages[1:] if messages and messages[0]["role"] == "system" else messages
    prompt = ("Enable deep thinking subroutine.\n\n" if thinking else "") + COGITO_SYSTEM
    if system:
        prompt += "\n\n" + system + ("\n\n" if thinking else "")
    if tools:
        prompt += "\nYou have the following functions available:\n"
        prompt += "".join("```json\n" + _indented(_go_tool(tool)) + "\n```\n" for tool in tools)
    out = [BOS_DEEPSEEK + prompt]
    after_user = False
    for i, message in enumerate(turns):
        content = message.get("content", "")
        after_user = message["role"] == "user"
        if message["role"] == "user":
            out.append("<｜User｜>" + content + "<｜Assistant｜>")
        elif message["role"] == "assistant" and message.get("tool_calls"):
            out.append(content + "<｜tool▁calls▁begin｜>")
            out.append("\n".join("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n" + _compact(arguments)
                                 + "\n```<｜tool▁call▁end｜>" for name, arguments in _calls(message)))
            out.append("<｜tool▁calls▁end｜>" + EOS_DEEPSEEK)
        elif message["role"] == "assistant":
            out.append(content + EOS_DEEPSEEK)
        elif message["role"] == "tool":
            if i == 0 or turns[i - 1]["role"] != "tool":
                out.append("<｜tool▁outputs▁begin｜>")
            out.append("<｜tool▁output▁begin｜>" + content + "<｜tool▁output▁end｜>")
            next_is_tool = i + 1 < len(turns) and turns[i + 1]["role"] == "tool"
            out.append("\n" if next_is_tool else "<｜tool▁outputs▁end｜>")
    if not after_user:
        out.append("<｜Assistant｜>")
    return "".join(out) + ("<think>\n" if thinking else "")


def _indented(value: Any) -> str:
    """Go's ``json.MarshalIndent(v, "", "    ")``."""
    return json.dumps(value, ensure_ascii=False, indent=4).replace("<", "\\u003c").replace(">", "\\u003e").replace(
        "&", "\\u0026")


GLM_TOOLS = ("<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n")
GLM_CALL_FORMAT = ("</tools>\n\nFor each function call, output the function name and arguments within the following "
                   "XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}"
                   "</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>")


def _glm_tools(tools: list[dict[str, Any]]) -> str:
    """GLM's tool list (a system turn opening the prompt), empty without tools."""
    if not tools:
        return ""
    return GLM_TOOLS + "".join(_compact(_go_tool(tool), spaced=True) + "\n" for tool in tools) + GLM_CALL_FORMAT


def _glm_arguments(arguments: dict[str, Any]) -> str:
    return "".join(f"<arg_key>{key}</arg_key><arg_value>{_argument(value)}</arg_value>"
                   for key, value in arguments.items())


def _glm_ocr(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """GLM-OCR: GLM's tokens with newlines after each role, and thinking only when asked (``/nothink`` when not)."""
    no_think = think is not None and not think
    out = ["[gMASK]<sop>" + _glm_tools(tools)]
    for i, message in enumerate(messages):
        content = message.get("content", "")
        if message["role"] == "user":
            out.append("<|user|>\n" + content + ("/nothink" if no_think and not content.endswith("/nothink") else ""))
        elif message["role"] == "assistant":
            thinking = (message.get("thinking") or "").strip()
            out.append("<|assistant|>\n<think>" + thinking + "</think>" + ("\n" + content.strip() if content else ""))
            out.extend("\n<tool_call>" + name + _glm_arguments(arguments) + "</tool_call>"
                       for name, arguments in _calls(message))
            out.append("\n")
        elif message["role"] == "tool":
            out.append(("" if i > 0 and messages[i - 1]["role"] == "tool" else "<|observation|>")
                       + "\n<tool_response>\n" + content + "\n</tool_response>\n")
        elif message["role"] == "system":
            out.append("<|system|>\n" + content + "\n")
    return "".join(out) + "<|assistant|>\n" + ("<think></think>\n" if no_think else "")


def _glm47(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """GLM-4.7: thinks by default, calls as ``<arg_key>``/``<arg_value>`` pairs, results in ``<|observation|>``."""
    out = ["[gMASK]<sop>" + _glm_tools(tools)]
    for i, message in enumerate(messages):
        content = message.get("content", "")
        if message["role"] == "user":
            out.append("<|user|>" + content)
        elif message["role"] == "assistant":
            thinking = message.get("thinking") or ""
            out.append("<|assistant|>" + ("<think>" + thinking + "</think>" if thinking else "</think>") + content)
            out.extend("<tool_call>" + name + _glm_arguments(arguments) + "</tool_call>"
                       for name, arguments in _calls(message))
        elif message["role"] == "tool":
            out.append(("" if i > 0 and messages[i - 1]["role"] == "tool" else "<|observation|>")
                       + "<tool_response>" + content + "</tool_response>")
        elif message["role"] == "system":
            out.append("<|system|>" + content)
    return "".join(out) + "<|assistant|>" + ("</think>" if think is not None and not think else "<think>")


OLMO3_SYSTEM = "You are a helpful function-calling AI assistant. "
OLMO31_SYSTEM = ("You are Olmo, a helpful AI assistant built by Ai2. Your date cutoff is December 2024, and your model "
                 "weights are available at https://huggingface.co/allenai. ")
OLMO3_NO_FUNCTIONS = "You do not currently have access to any functions. "
OLMO3_FUNCTIONS = ("You are provided with function signatures within <functions></functions> XML tags. You may call "
                   "one or more functions to assist with the user query. Output any function calls within "
                   "<function_calls></function_calls> XML tags. Do not make assumptions about what values to plug "
                   "into functions.")


def _split_system(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Olmo's first system message (the others are dropped) and the turns without any."""
    system = next((m.get("content", "") for m in messages if m["role"] == "system"), None)
    return system, [m for m in messages if m["role"] != "system"]


def _olmo3(default_system: str) -> Renderer:
    """Olmo 3 / 3.1 instruct: tools as JSON in ``<functions>``, calls as Python ``name(key=value)`` lines."""
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
        system, turns = _split_system(messages)
        functions = "<functions>" + _compact([_go_tool(tool) for tool in tools], spaced=True) + "</functions>"
        if system is not None:
            out = [START + "system\n" + system + (functions if tools else "") + END + "\n"]
        else:
            out = [START + "system\n" + default_system + (OLMO3_FUNCTIONS + functions if tools else
                                                           OLMO3_NO_FUNCTIONS + "<functions></functions>") + END + "\n"]
        for i, message in enumerate(turns):
            content = message.get("content", "")
            if message["role"] == "user":
                out.append(START + "user\n" + content + END + "\n")
            elif message["role"] == "assistant":
                calls = _calls(message)
                out.append(START + "assistant\n" + content)
                if calls:
                    out.append("<function_calls>" + "\n".join(
                        name + "(" + ", ".join(f"{key}={_compact(arguments[key])}" for key in sorted(arguments)) + ")"
                        for name, arguments in calls) + "</function_calls>")
                if i < len(turns) - 1 or calls:
                    out.append(END + "\n")
            elif message["role"] == "tool":
                out.append(START + "environment\n" + content + END + "\n")
        last = turns[-1] if turns else None
        if not (last and last["role"] == "assistant" and not last.get("tool_calls") and last.get("content")):
            out.append(START + "assistant\n")
        return "".join(out)
    return render


OLMO3_THINK_FUNCTIONS = " You do not currently have access to any functions. <functions></functions>"


def _olmo3_think(default_system: str) -> Renderer:
    """Olmo 3 Think: no tools (tool turns are left out), always thinking."""
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
        system, turns = _split_system(messages)
        out = [START + "system\n" + (default_system if system is None else system + OLMO3_THINK_FUNCTIONS) + END + "\n"]
        out.extend(START + m["role"] + "\n" + m.get("content", "") + END + "\n"
                   for m in turns if m["role"] in ("user", "assistant"))
        return "".join(out) + START + "assistant\n<think>"
    return render


def _lfm2(thinks: bool) -> Renderer:
    """LFM2 (and its thinking variant): tools listed in the system turn, calls as a Python list in
    ``<|tool_call_start|>``; past reasoning is dropped unless thinking was asked of a thinking model."""
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
        def spaced(value: Any) -> str:  # Ollama's lfm2JSON: spaced, and HTML characters left as they are
            return json.dumps(value, ensure_ascii=False)

        has_system = bool(messages) and messages[0]["role"] == "system"
        system = messages[0].get("content", "") if has_system else ""
        if tools:
            system += ("\n" if system else "") + "List of tools: <|tool_list_start|>[" + ", ".join(
                spaced(_go_tool(tool)["function"]) for tool in tools) + "]<|tool_list_end|>"
        out = ["<|startoftext|>" + (START + "system\n" + system + END + "\n" if system else "")]
        keep_thinking = thinks and bool(think)
        last_assistant = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
        for i in range(1 if has_system else 0, len(messages)):
            message = messages[i]
            content = message.get("content", "")
            if message["role"] == "assistant":
                calls = _calls(message)
                if calls and "<|tool_call_start|>" not in content:
                    written = "<|tool_call_start|>[" + ",".join(name + "(" + ",".join(
                        f"{key}={spaced(arguments[key])}" for key in sorted(arguments)) + ")"
                        for name, arguments in calls) + "]<|tool_call_end|>"
                    content = written + ("\n" + content if content.strip() else content)
                if thinks and message.get("thinking") and "</think>" not in content:
                    content = "<think>" + message["thinking"] + "</think>" + content
                if not keep_thinking and i != last_assistant and "</think>" in content:
                    content = content.rsplit("</think>", 1)[1].strip()
            elif message["role"] == "tool" and "<|tool_response_start|>" not in content:
                content = "<|tool_response_start|>" + content + "<|tool_response_end|>"
            prefill = i == len(messages) - 1 and message["role"] == "assistant"
            out.append(START + message["role"] + "\n" + content + ("" if prefill else END + "\n"))
        if not (messages and messages[-1]["role"] == "assistant"):
            out.append(START + "assistant\n")
        return "".join(out)
    return render


GEMMA4_QUOTE = '<|"|>'  # Gemma 4's string delimiter
_GEMMA4_SCHEMA_KEYS = ("description", "type", "properties", "required", "nullable")


def _gemma4_value(value: Any, quote_keys: bool = False, quote: str = GEMMA4_QUOTE, null: str = "null") -> str:
    """A call argument (or, with ``quote_keys``, a schema value) in Gemma 4's own notation, keys sorted; FunctionGemma
    writes the same with ``<escape>`` quotes (and Go's ``<nil>`` for null)."""
    if value is None:
        return null
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote + value + quote
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        q = quote if quote_keys else ""
        return "{" + ",".join(q + key + q + ":" + _gemma4_value(value[key], quote_keys, quote, null)
                              for key in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gemma4_value(item, quote_keys, quote, null) for item in value) + "]"
    return str(value)


def _gemma4_strings(values: list[Any]) -> str:
    return "[" + ",".join(GEMMA4_QUOTE + str(v) + GEMMA4_QUOTE for v in values) + "]"


def _gemma4_types(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.upper()]
    return [str(v).upper() for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _gemma4_type(names: list[str]) -> str:
    return "type:" + (GEMMA4_QUOTE + names[0] + GEMMA4_QUOTE if len(names) == 1 else _gemma4_strings(names))


def _gemma4_typed(properties: dict[str, Any]) -> dict[str, Any]:
    """A tool's top-level properties as Ollama reads them (``ToolProperty`` fields only; several types, or an
    ``anyOf`` of bare types, become one ``['A', 'B']`` type string)."""
    typed = {}
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        types = prop.get("type")
        types = [types] if isinstance(types, str) else types if isinstance(types, list) else []
        if not types and prop.get("anyOf") and all(
                isinstance(b, dict) and b.get("type") and set(b) == {"type"} for b in prop["anyOf"]):
            types = list(dict.fromkeys(t for b in prop["anyOf"] for t in _go_type_list(b["type"])))
        out: dict[str, Any] = {}
        if types:
            out["type"] = types[0] if len(types) == 1 else "[" + ", ".join(f"'{t.upper()}'" for t in types) + "]"
        for key in ("description", "enum", "items"):
            if prop.get(key):
                out[key] = prop[key]
        if isinstance(prop.get("properties"), dict):
            out["properties"] = _gemma4_typed(prop["properties"])
        if prop.get("required"):
            out["required"] = prop["required"]
        typed[name] = out
    return typed


def _go_type_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _gemma4_properties(properties: dict[str, Any]) -> str:
    written = []
    for name in sorted(properties):
        prop = properties[name]
        if name in _GEMMA4_SCHEMA_KEYS or not isinstance(prop, dict):
            continue
        parts = []
        if isinstance(prop.get("description"), str) and prop["description"]:
            parts.append("description:" + GEMMA4_QUOTE + prop["description"] + GEMMA4_QUOTE)
        types = _gemma4_types(prop.get("type"))
        kind = types[0] if types else ""
        if kind == "STRING" and isinstance(prop.get("enum"), list) and prop["enum"]:
            parts.append("enum:" + _gemma4_strings(prop["enum"]))
        if kind == "ARRAY" and isinstance(prop.get("items"), dict) and prop["items"]:
            parts.append("items:{" + _gemma4_items(prop["items"]) + "}")
        if prop.get("nullable") is True:
            parts.append("nullable:true")
        if kind == "OBJECT":
            nested = prop["properties"] if isinstance(prop.get("properties"), dict) else prop
            parts.append("properties:{" + _gemma4_properties(nested) + "}")
            required = [r for r in prop.get("required") or [] if isinstance(r, str)]
            if required:
                parts.append("required:" + _gemma4_strings(required))
        if types:
            parts.append(_gemma4_type(types))
        written.append(name + ":{" + ",".join(parts) + "}")
    return ",".join(written)


def _gemma4_items(items: dict[str, Any]) -> str:
    parts = []
    for key in sorted(items):
        value = items[key]
        if value is None:
            continue
        if key == "properties":
            parts.append("properties:{" + (_gemma4_properties(value) if isinstance(value, dict) else "") + "}")
        elif key == "required":
            parts.append("required:" + _gemma4_strings([r for r in value if isinstance(r, str)]))
        elif key == "type":
            types = _gemma4_types(value)
            parts.append(_gemma4_type(types) if types else "")
        else:
            parts.append(key + ":" + _gemma4_value(value, quote_keys=True))
    return ",".join(parts)


def _gemma4_declaration(tool: dict[str, Any]) -> str:
    function = _function(tool)
    parameters = function.get("parameters") or {}
    out = ("<|tool>declaration:" + str(function.get("name", "")) + "{description:" + GEMMA4_QUOTE
           + str(function.get("description", "")) + GEMMA4_QUOTE)
    properties, kind = parameters.get("properties"), parameters.get("type") or ""
    if properties is not None or kind:
        parts = []
        if properties:
            parts.append("properties:{" + _gemma4_properties(_gemma4_typed(properties)) + "}")
        if parameters.get("required"):
            parts.append("required:" + _gemma4_strings(parameters["required"]))
        if kind:
            parts.append("type:" + GEMMA4_QUOTE + kind.upper() + GEMMA4_QUOTE)
        out += ",parameters:{" + ",".join(parts) + "}"
    return out + "}<tool|>"


def _gemma4_strip_thoughts(text: str) -> str:
    """An answer without the ``<|channel>…<channel|>`` thoughts it may hold (an unclosed one ends it)."""
    kept = []
    while (start := text.find("<|channel>")) != -1:
        kept.append(text[:start])
        end = text.find("<channel|>", start)
        if end == -1:
            text = ""
            break
        text = text[end + len("<channel|>"):]
    return ("".join(kept) + text).strip()


def _gemma4(empty_thought_when_not_thinking: bool) -> Renderer:
    """Gemma 4: ``<|turn>`` turns, tools declared in the system turn, a model turn's calls followed by their
    results, thinking switched on by ``<|think|>``."""
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
        has_system = bool(messages) and messages[0]["role"] in ("system", "developer")
        turns = messages[1:] if has_system else messages
        thinking = bool(think)
        out = ["<bos>"]
        if has_system or tools or thinking:
            out.append("<|turn>system\n" + ("<|think|>\n" if thinking else "")
                       + (messages[0].get("content", "").strip() if has_system else "")
                       + "".join(_gemma4_declaration(tool) for tool in tools) + "<turn|>\n")
        last_user = max((i for i, m in enumerate(turns) if m["role"] == "user"), default=-1)
        previous, previous_role = "", ""
        for i, message in enumerate(turns):
            if message["role"] == "tool":
                continue
            previous = ""
            role = "model" if message["role"] == "assistant" else message["role"]
            if not (role == "model" and previous_role == "assistant"):
                out.append("<|turn>" + role + "\n")
            if message["role"] == "assistant" and message.get("thinking") and i > last_user:
                out.append("<|channel>thought\n" + message["thinking"] + "\n<channel|>")
            calls = message.get("tool_calls") or []
            for name, arguments in _calls(message):
                out.append("<|tool_call>call:" + name + "{" + ",".join(
                    key + ":" + _gemma4_value(arguments[key]) for key in sorted(arguments)) + "}<tool_call|>")
                previous = "tool_call"
            answered = False
            k = i + 1
            while calls and k < len(turns) and turns[k]["role"] == "tool":
                result = turns[k]
                name = result.get("tool_name") or "unknown"
                name = next((c.get("function", {}).get("name", name) for c in calls
                             if result.get("tool_call_id") and c.get("id") == result["tool_call_id"]), name)
                out.append("<|tool_response>response:" + name + "{value:" + _gemma4_value(result.get("content", ""))
                           + "}<tool_response|>")
                answered, previous, k = True, "tool_response", k + 1
            content = message.get("content", "")
            content = _gemma4_strip_thoughts(content) if role == "model" and content else content.strip()
            out.append(content)
            following = next((m["role"] for m in turns[i + 1:] if m["role"] != "tool"), "")
            continues = role == "model" and following == "assistant" and (not calls or answered)
            if previous == "tool_call" and not answered:
                out.append("<|tool_response>")
            elif not continues and not (answered and not content.strip() and following == ""):
                out.append("<turn|>\n")
            previous_role = message["role"]
        if previous not in ("tool_response", "tool_call"):
            out.append("<|turn>model\n" + ("<|channel>thought\n<channel|>" if empty_thought_when_not_thinking
                                             and not thinking else ""))
        elif previous == "tool_response" and thinking:
            out.append("<|channel>thought\n")
        return "".join(out)
    return render


def _nemotron_json(value: Any, schema: bool = False) -> str:
    """Ollama's Nemotron ``pythonJSON``: spaced JSON, plain objects' keys sorted, a tool property (``schema``)
    in Go's field order with its nested properties in the order given."""
    if schema and isinstance(value, dict):
        return "{" + ", ".join(json.dumps(key) + ": " + _nemotron_field(key, item)
                               for key, item in _property(value).items()) + "}"
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _nemotron_field(key: str, item: Any) -> str:
    """One field of a tool property: its ``anyOf`` branches and ``properties`` are tool properties themselves."""
    if key == "anyOf":
        return "[" + ", ".join(_nemotron_json(branch, schema=True) for branch in item) + "]"
    if key == "properties":
        return "{" + ", ".join(json.dumps(name, ensure_ascii=False) + ": " + _nemotron_json(p, schema=True)
                               for name, p in item.items()) + "}"
    return _nemotron_json(item)


def _nemotron_value(value: Any) -> str:
    """A call argument as Nemotron's template prints it: Python's ``None``/``True``/``False``, strings raw."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (dict, list)):
        return _nemotron_json(value)
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _nemotron_tools(tools: list[dict[str, Any]]) -> str:
    out = ["# Tools\n\nYou have access to the following functions:\n\n<tools>"]
    for tool in tools:
        function = _function(tool)
        parameters = function.get("parameters") or {}
        out.append("\n<function>\n<name>" + str(function.get("name", "")) + "</name>")
        if function.get("description"):
            out.append("\n<description>" + str(function["description"]).strip() + "</description>")
        out.append("\n<parameters>")
        for name, spec in (parameters.get("properties") or {}).items():
            spec = _property(spec) if isinstance(spec, dict) else {}
            out.append("\n<parameter>\n<name>" + name + "</name>")
            types = _go_type_list(spec.get("type"))
            if types:
                out.append("\n<type>" + (types[0] if len(types) == 1 else
                                         "[" + ", ".join(f"'{t}'" for t in types) + "]") + "</type>")
            if spec.get("description"):
                out.append("\n<description>" + str(spec["description"]).strip() + "</description>")
            if spec.get("enum"):
                out.append("\n<enum>" + _nemotron_json(spec["enum"]) + "</enum>")
            out.extend(f"\n<{key}>{_nemotron_field(key, spec[key])}</{key}>"
                       for key in ("anyOf", "items", "properties", "required") if key in spec)
            out.append("\n</parameter>")
        for key in ("$defs", "items"):
            if parameters.get(key):
                out.append(f"\n<{key}>{_nemotron_value(parameters[key])}</{key}>")
        if parameters.get("required"):
            out.append("\n<required>" + _nemotron_json(parameters["required"]) + "</required>")
        out.append("\n</parameters>\n</function>")
    return "".join(out) + "\n</tools>\n\n" + QWEN_CALL_FORMAT


def _strip_think_toggles(text: str) -> str:
    """Nemotron's ``/think`` and ``/no_think`` switches taken out of a message (``</think>`` kept)."""
    return text.replace("</think>", "<_end_think>").replace("/think", "").replace("/no_think", "").replace(
        "<_end_think>", "</think>")


def _nemotron(v35: bool) -> Renderer:
    """Nemotron 3 Nano: Qwen-style XML calls, an empty ``<think></think>`` marking turns without reasoning, and
    ``/think`` or ``/no_think`` in a user or system message overriding the request. Nemotron 3.5 (``v35``): only
    the request decides, messages pass unaltered, an assistant's reasoning closes without a newline, and
    ``think: "medium"`` asks for efficient reasoning at the last user message."""
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
        thinking = think is None or bool(think)
        for message in messages if not v35 else ():
            if message["role"] in ("user", "system"):
                content = message.get("content", "")
                if "/think" in content.replace("</think>", ""):
                    thinking = True
                elif "/no_think" in content:
                    thinking = False
        has_system = bool(messages) and messages[0]["role"] == "system"
        system = messages[0].get("content", "") if has_system else ""
        system = system if v35 else _strip_think_toggles(system)
        turns = messages[1:] if has_system else messages
        last_user = max((i for i, m in enumerate(turns) if m["role"] == "user"), default=-1)
        out = [START + "system\n" + system + ("\n\n" if system and tools else "")
               + (_nemotron_tools(tools) if tools else "") + END + "\n"]
        for i, message in enumerate(turns):
            content = message.get("content", "")
            if message["role"] == "assistant":
                if message.get("thinking"):
                    content = "<think>\n" + message["thinking"] + ("</think>" if v35 else "\n</think>\n") + content
                elif "<think>" not in content and "</think>" not in content:
                    content = "<think></think>" + content
                older = i < last_user
                if message.get("tool_calls"):
                    if not content.strip():
                        content = "<think></think>"
                    elif older:
                        kept = (content.split("</think>")[-1] if "</think>" in content
                                else content.split("<think>")[0] if "<think>" in content else content)
                        content = ("<think></think>" + kept.strip()).strip() + "\n"
                    else:
                        content = content.strip() + "\n"
                    out.append(START + "assistant\n" + content)
                    for name, arguments in _calls(message):
                        out.append("<tool_call>\n<function=" + name + ">\n" + "".join(
                            f"<parameter={key}>\n{_nemotron_value(value)}\n</parameter>\n"
                            for key, value in arguments.items()) + "</function>\n</tool_call>\n")
                    out.append(END + "\n")
                else:
                    if older and "<think>" in content and "</think>" in content:
                        content = "<think></think>" + content.split("</think>")[-1]
                    out.append(START + "assistant\n" + content.strip() + END + "\n")
            elif message["role"] in ("user", "system"):
                if not v35:
                    content = _strip_think_toggles(content).strip()
                elif message["role"] == "user" and i == last_user and think == "medium":
                    content += "\n\n{reasoning effort: efficient}"
                out.append(START + message["role"] + "\n" + content + END + "\n")
            elif message["role"] == "tool":
                if i > 0 and turns[i - 1]["role"] != "tool":
                    out.append(START + "user\n")
                out.append("<tool_response>\n" + content + "\n</tool_response>\n")
                if not (i + 1 < len(turns) and turns[i + 1]["role"] == "tool"):
                    out.append(END + "\n")
            else:
                out.append(START + message["role"] + "\n" + content + END + "\n")
        return "".join(out) + START + "assistant\n" + ("<think>\n" if thinking else "<think></think>")
    return render


FUNCTIONGEMMA_QUOTE = "<escape>"
FUNCTIONGEMMA_SYSTEM = "You can do function calling with the following functions:"


def _functiongemma_value(value: Any) -> str:
    return _gemma4_value(value, quote=FUNCTIONGEMMA_QUOTE, null="<nil>")


def _functiongemma_declaration(tool: dict[str, Any]) -> str:
    function = _function(tool)
    parameters = function.get("parameters") or {}
    q = FUNCTIONGEMMA_QUOTE
    out = ("<start_function_declaration>declaration:" + str(function.get("name", "")) + "{description:" + q
           + str(function.get("description", "")) + q)
    properties, kind = parameters.get("properties"), parameters.get("type") or ""
    if properties is not None or kind:
        parts = []
        if properties:
            written = []
            for name in sorted(properties):
                prop = properties[name] if isinstance(properties[name], dict) else {}
                types = _go_type_list(prop.get("type"))
                written.append(name + ":{description:" + q + str(prop.get("description", "")) + q
                               + (",type:" + q + types[0].upper() + q if types else "") + "}")
            parts.append("properties:{" + ",".join(written) + "}")
        if parameters.get("required"):
            parts.append("required:[" + ",".join(q + r + q for r in parameters["required"]) + "]")
        if kind:
            parts.append("type:" + q + kind.upper() + q)
        out += ",parameters:{" + ",".join(parts) + "}"
    return out + "}<end_function_declaration>"


def _functiongemma(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """FunctionGemma: Gemma 3 turns, tools declared in a developer turn, results inside the model's turn."""
    has_system = bool(messages) and messages[0]["role"] in ("system", "developer")
    system = messages[0].get("content", "") if has_system else ""
    turns = messages[1:] if has_system else messages
    out = ["<bos>"]
    if system or tools:
        out.append("<start_of_turn>developer\n" + system.strip())
        if tools:
            preamble = "" if system.strip() == FUNCTIONGEMMA_SYSTEM else FUNCTIONGEMMA_SYSTEM
            out.append(("\n" if system else "") + preamble)
        out.append("".join(_functiongemma_declaration(tool) for tool in tools) + "<end_of_turn>\n")
    previous = ""
    for i, message in enumerate(turns):
        content = message.get("content", "")
        if message["role"] == "tool":
            caller = next((j for j in range(i - 1, -1, -1)
                           if turns[j]["role"] == "assistant" and turns[j].get("tool_calls")), None)
            name = ""
            if caller is not None:
                index = sum(1 for m in turns[caller + 1:i] if m["role"] == "tool")
                calls = _calls(turns[caller])
                name = calls[index][0] if index < len(calls) else ""
            out.append(("" if previous == "tool_call" else "<start_function_response>") + "response:" + name + "{"
                       + _functiongemma_value(content) + "}<end_function_response>")
            previous = "tool_response"
            continue
        role = "model" if message["role"] == "assistant" else message["role"]
        if previous != "tool_response" or role not in ("model", "user"):
            out.append("<start_of_turn>" + role + "\n")
        if role in ("model", "user"):
            previous = ""
        out.append(content.strip())
        calls = _calls(message) if role == "model" else []
        out.extend("<start_function_call>call:" + name + "{" + ",".join(
            key + ":" + _functiongemma_value(arguments[key]) for key in sorted(arguments)) + "}<end_function_call>"
            for name, arguments in calls)
        if calls and i + 1 < len(turns) and turns[i + 1]["role"] == "tool":
            out.append("<start_function_response>")
            previous = "tool_call"
        else:
            out.append("<end_of_turn>\n")
    if previous != "tool_response":
        out.append("<start_of_turn>model\n")
    return "".join(out)


LAGUNA_BOS = "〈|EOS|〉"
LAGUNA_SYSTEM = ("You are a helpful, conversationally-fluent assistant made by Poolside. You are here to be helpful to "
                 "users through natural language conversations.")
LAGUNA_TOOLS = ("### Tools\n\nYou may call functions to assist with the user query.\n"
                "All available function signatures are listed below:\n<available_tools>\n")
LAGUNA_CALL_FORMAT = ("For each function call, return an unescaped XML-like object with function name and arguments "
                      "within '<tool_call>' and '</tool_call>' tags, like here:\n")


def _laguna_value(value: Any) -> str:
    """A call argument as Laguna's template writes it: strings raw, everything else spaced JSON."""
    return value if isinstance(value, str) else _compact(value, spaced=True)


def _laguna_tools(tools: list[dict[str, Any]]) -> str:
    return LAGUNA_TOOLS + "".join(_compact(_go_tool(tool), spaced=True) + "\n" for tool in tools) + "</available_tools>"


def _laguna_turn(content: str, reasoning: str) -> tuple[str, str]:
    """An assistant turn's answer and reasoning: a ``<think>…</think>`` in its content gives the reasoning when
    the message has none, and is taken out of the answer."""
    parts = content.split("</think>")
    if len(parts) == 1:
        return content, reasoning
    if not reasoning:
        before = parts[0].rstrip("\n")
        if (opening := before.rfind("<think>")) >= 0:
            before = before[opening + len("<think>"):]
        reasoning = before.lstrip("\n")
    return parts[-1].lstrip("\n"), reasoning


def _laguna(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """Poolside's Laguna: ``<system>``/``<user>``/``<assistant>`` blocks, GLM-style ``<arg_key>`` calls, and
    thinking only when asked (the answer opens with ``<think>``, else with ``</think>``)."""
    thinking = bool(think)
    has_system = bool(messages) and messages[0]["role"] == "system"
    system = messages[0].get("content", "") if has_system else LAGUNA_SYSTEM
    out = [LAGUNA_BOS]
    if system.strip() or tools:
        out.append("<system>\n" + ("\n" + system.rstrip() if system.strip() else ""))
        if tools:
            out.append("\n\n" + _laguna_tools(tools) + "\n\n")
            out.append("Wrap your thinking in '<think>', '</think>' tags, followed by a function call. " + LAGUNA_CALL_FORMAT
                       + "<think> your thoughts here </think>\n" if thinking else LAGUNA_CALL_FORMAT)
            out.append("<tool_call>function-name\n<arg_key>argument-key</arg_key>\n"
                       "<arg_value>value-of-argument-key</arg_value>\n</tool_call>")
        out.append("\n</system>\n")
    for i, message in enumerate(messages[1:] if has_system else messages, start=int(has_system)):
        role, content = message["role"], message.get("content", "")
        if role == "assistant":
            content, reasoning = _laguna_turn(content, message.get("thinking") or "")
            prefill = i == len(messages) - 1 and bool(content.strip() or reasoning.strip() or message.get("tool_calls"))
            out.append("<assistant>\n" + ("<think>\n" + reasoning.strip() + "\n</think>\n" if reasoning.strip()
                                          else "</think>\n") + (content.strip() + "\n" if content.strip() else ""))
            out.extend("<tool_call>" + name + "\n" + "".join(
                f"<arg_key>{key}</arg_key>\n<arg_value>{_laguna_value(value)}</arg_value>\n"
                for key, value in arguments.items()) + "</tool_call>\n" for name, arguments in _calls(message))
            out.append("" if prefill else "</assistant>\n")
        else:
            tag = "tool_response" if role == "tool" else role
            out.append(f"<{tag}>\n{content}\n</{tag}>\n")
    if not messages or messages[-1]["role"] != "assistant":
        out.append("<assistant>\n" + ("<think>" if thinking else "</think>"))
    return "".join(out)


def _poolside_v1(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """Laguna's later template (Ollama's ``poolside-v1``): the same blocks without newlines, every assistant turn
    opening with its reasoning in ``<think>…</think>`` when thinking, else with ``</think>``."""
    thinking = bool(think)
    has_system = bool(messages) and messages[0]["role"] == "system"
    system = messages[0].get("content", "") if has_system else LAGUNA_SYSTEM
    out = [LAGUNA_BOS]
    if system.strip() or tools or thinking:
        out.append("<system>" + (system.rstrip() + ("\n\n" if tools else "") if system.strip() else "")
                   + (_laguna_tools(tools) if tools else "") + "</system>\n")
    for message in messages[1:] if has_system else messages:
        role, content = message["role"], message.get("content", "")
        if role == "assistant":
            out.append("<assistant>" + ("<think>" + (message.get("thinking") or "") + "</think>" if thinking
                                        else "</think>") + content)
            out.extend("<tool_call>" + name + "".join(
                f"<arg_key>{key}</arg_key><arg_value>{_laguna_value(value)}</arg_value>"
                for key, value in arguments.items()) + "</tool_call>" for name, arguments in _calls(message))
            out.append("</assistant>\n")
        else:
            tag = "tool_response" if role == "tool" else role
            out.append(f"<{tag}>{content}</{tag}>\n")
    return "".join(out) + "<assistant>" + ("<think>" if thinking else "</think>")


COHERE_TURN = "<|START_OF_TURN_TOKEN|>"
COHERE_END = "<|END_OF_TURN_TOKEN|>"


def _cohere_tools(tools: list[dict[str, Any]]) -> str:
    """The "Available Tools" JSON list, with the whitespace Cohere's template leaves (also when empty)."""
    entries = []
    for tool in tools:
        function = _go_tool(tool)["function"]
        entries.append('\n    {"name": ' + _compact(function["name"]) + ', "description": '
                       + _compact(function.get("description", "")) + ', "parameters": '
                       + _compact(function["parameters"], spaced=True) + ', "responses": null}')
    return "# Available Tools\n```json\n[\n" + (",\n\n".join(entries) + "\n\n" if entries else "\n\n") + "\n]\n```"


def _cohere(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """Cohere North / Command A (2026): a system turn with the tools, ``<|START_TEXT|>`` bodies,
    ``<|START_THINKING|>`` reasoning, ``<|START_ACTION|>`` JSON calls whose ids are renumbered across the
    conversation, and results in ``<|START_TOOL_RESULT|>``; reasoning is on unless ``think`` is false."""
    reasoning = think is None or bool(think)
    has_system = bool(messages) and messages[0]["role"] == "system"
    rest = messages[1:] if has_system else messages
    out = [COHERE_TURN + "<|SYSTEM_TOKEN|><|START_TEXT|>"]
    if has_system and messages[0].get("content"):
        out.append(messages[0]["content"] + "\n\n\n\n")
    out.append(_cohere_tools(tools) + "<|END_TEXT|>" + COHERE_END)
    numbers: dict[str, str] = {}  # a call's id -> its number in the prompt
    calls_written = 0
    prefill = False
    i = 0
    while i < len(rest):
        message = rest[i]
        role, content = message["role"], message.get("content", "")
        if role in ("system", "user"):
            out.append(COHERE_TURN + ("<|SYSTEM_TOKEN|>" if role == "system" else "<|USER_TOKEN|>") + "<|START_TEXT|>"
                       + content + "<|END_TEXT|>" + COHERE_END)
        elif role == "assistant":
            thought = ("<|START_THINKING|>" + message["thinking"] + "<|END_THINKING|>") if message.get("thinking") else ""
            out.append(COHERE_TURN + "<|CHATBOT_TOKEN|>")
            if message.get("tool_calls"):
                written = []
                for call in message["tool_calls"]:
                    number = str(calls_written)
                    calls_written += 1
                    if call.get("id"):
                        numbers.setdefault(call["id"], number)
                    function = call.get("function", {})
                    arguments = function.get("arguments") if isinstance(function.get("arguments"), dict) else {}
                    written.append('\n\n    {"tool_call_id": "' + number + '", "tool_name": "' + str(function.get("name", ""))
                                   + '", "parameters": ' + _compact(arguments, spaced=True) + "}")
                out.append("\n            \n                " + thought + "<|START_ACTION|>[" + ",".join(written)
                           + "\n\n]<|END_ACTION|>" + COHERE_END)
            else:
                out.append(thought + "<|START_TEXT|>" + content)
                prefill = i == len(rest) - 1  # the answer goes on in place
                out.append("" if prefill else "<|END_TEXT|>" + COHERE_END)
        elif role == "tool":  # consecutive results share one turn
            results = [message]
            while i + 1 < len(rest) and rest[i + 1]["role"] == "tool":
                i += 1
                results.append(rest[i])
            out.append(COHERE_TURN + "<|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[" + ",".join(
                '\n    {\n        "tool_call_id": "' + numbers.get(r.get("tool_call_id") or "", r.get("tool_call_id") or "")
                + '",\n        "results": {\n\n            \n            "0": '
                + _compact({"content": r.get("content", "")}, spaced=True)
                + '\n\n        },\n        "is_error": null\n    }' for r in results)
                + "\n\n]<|END_TOOL_RESULT|>" + COHERE_END)
        i += 1
    if not prefill:
        out.append(COHERE_TURN + "<|CHATBOT_TOKEN|><|START_THINKING|>" + ("" if reasoning else "<|END_THINKING|>"))
    return "".join(out)


GLIMMER_BOS = "<|begin_of_text|>"
GLIMMER_SYSTEM = "You are a helpful AI assistant."
GLIMMER_CUTOFF = "2026-01-04"
GLIMMER_TOOLS = """In this environment you have access to a set of tools you can use to answer the user's question.

You can invoke a function by writing a "<atem:function_calls>" block like the following:
<atem:function_calls>
<atem:invoke name="$FUNCTION_NAME">
<atem:parameter name="$PARAMETER_NAME">$PARAMETER_VALUE</atem:parameter>
...
</atem:invoke>
</atem:function_calls>

String and scalar parameters should be specified as is, while lists and objects should use JSON format. Note that \
spaces for string values are not stripped. The output is not expected to be valid XML and is parsed with regular \
expressions.
Here are the functions available in JSONSchema format:
// Tool metadata
"""
GLIMMER_TOOLS_EXAMPLE = """

Here's an example of how to call a function in the tool set:
(If the tool namespace is not specified, invoke the function directly as `example_function_name` rather than \
`example_tool_name.example_function_name`)

to=example_tool_name.example_function_name

<atem:function_calls>
<atem:invoke name="example_tool_name.example_function_name">
<atem:parameter name="example_parameter_1">value_1</atem:parameter>
<atem:parameter name="example_parameter_2">This is the value for the second parameter
that can span
"multiple" lines
</atem:parameter>
</atem:invoke>
</atem:function_calls>"""


def _glimmer_json(value: Any) -> str:
    """Transformers' ``tojson``: spaced, nothing escaped but what JSON must."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _glimmer_value(value: Any) -> str:
    """A call argument as Glimmer's template writes it: lists and objects as JSON, the rest as Go prints it."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (dict, list)):
        return _glimmer_json(value)
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _glimmer_namespaces(tools: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(str(_function(tool).get("name", "")).split(".")[0] for tool in tools))


def _glimmer_system(content: str, tools: list[dict[str, Any]], strength: str, default: bool) -> str:
    """A system turn: its text (the default one with the knowledge cutoff and today's date), the reasoning
    strength unless the text states one, the tools, and the valid recipients."""
    if not default:
        for old, new in (("Reasoning effort", "Reasoning strength"), ("Reasoning Effort", "Reasoning Strength"),
                         ("reasoning effort", "reasoning strength"), ("REASONING EFFORT", "REASONING STRENGTH")):
            content = content.replace(old, new)
    out = ["<|start|>system<|message|>" + content]
    if default:
        out.append(f"\nKnowledge cutoff: {GLIMMER_CUTOFF}.\nCurrent date: {datetime.date.today().isoformat()}.")
    if default or "reasoning strength" not in content.lower():
        out.append(f"\n\nReasoning strength: {strength}.")
    if tools:
        out.append("\n\n" + GLIMMER_TOOLS + "".join('{"name": ' + _glimmer_json(ns) + ', "description": ""}\n'
                                                     for ns in _glimmer_namespaces(tools)) + "// Function schemas")
        for tool in tools:
            function = _go_tool(tool)["function"]
            out.append('\n{"name": ' + _glimmer_json(function["name"]) + ', "description": '
                       + _glimmer_json(function.get("description", "")) + ', "parameters": '
                       + _glimmer_json(function["parameters"]) + "}")
        out.append(GLIMMER_TOOLS_EXAMPLE)
    out.append('\n\n# Valid recipients: "self"' + "".join(f', "{ns}.*"' for ns in _glimmer_namespaces(tools))
               + ', "user".<|eot|>')
    return "".join(out)


def _glimmer_call(name: str, arguments: dict[str, Any]) -> str:
    return ('<atem:function_calls>\n<atem:invoke name="' + name + '">\n' + "".join(
        f'<atem:parameter name="{key}">{_glimmer_value(value)}</atem:parameter>\n' for key, value in arguments.items())
        + "</atem:invoke>\n</atem:function_calls>")


def _glimmer(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """Glimmer: Harmony-like messages addressed by recipient (``to=self`` thinking, ``to=user`` answers,
    ``to=TOOL`` calls as ``<atem:function_calls>`` XML); ``think`` sets the system turn's reasoning strength."""
    strength = "high" if think is None or think is True else think if think else "none"
    out = [GLIMMER_BOS]
    if not any(m["role"] == "system" for m in messages):
        out.append(_glimmer_system(GLIMMER_SYSTEM, tools, strength, default=True))
    names = {call["id"]: call.get("function", {}).get("name", "") for m in messages
             for call in m.get("tool_calls") or [] if call.get("id")}
    for i, message in enumerate(messages):
        role, content = message["role"], message.get("content", "")
        same_role_next = i + 1 < len(messages) and messages[i + 1]["role"] == role
        if role == "system":
            out.append(_glimmer_system(content, tools, strength, default=False))
        elif role == "user":
            out.append("<|start|>user<|message|>" + content + "<|eot|>")
        elif role == "tool":
            name = message.get("tool_name") or names.get(message.get("tool_call_id") or "",
                                                         message.get("tool_call_id") or "")
            out.append(f'<|start|>tool {name}<|message|><tool_output name="{name}">\n{content}\n</tool_output><|eot|>')
        elif role == "assistant":
            if message.get("thinking"):
                out.append("<|start|>assistant to=self<|message|>" + message["thinking"] + "<|eom|>")
            calls = _calls(message)
            for j, (name, arguments) in enumerate(calls):
                last_call = j == len(calls) - 1
                out.append(f"<|start|>assistant to={name}<|message|>" + _glimmer_call(name, arguments)
                           + ("<|eom|>" if not last_call or same_role_next else "<|eot|>"))
            if not calls and (content or not message.get("thinking")):
                out.append("<|start|>assistant to=user<|message|>" + content + "<|eot|>")
    return "".join(out) + "<|start|>assistant"


#: Ollama's renderer names that we render built in.
BUILT_IN: dict[str, Renderer] = {
    "qwen3-coder": _qwen3_coder, "qwen3.5": _qwen35(), "ornith": _qwen35(always_think_block=True),
    "qwen3.8": _qwen35(always_think_block=True, qwen38=True),
    "gemma4": _gemma4(False), "gemma4-small": _gemma4(False), "gemma4-large": _gemma4(True),
    "qwen3-vl-instruct": _qwen3_vl(thinks=False), "qwen3-vl-thinking": _qwen3_vl(thinks=True),
    "deepseek3.1": _deepseek31, "cogito": _cogito, "glm-4.7": _glm47, "glm-ocr": _glm_ocr,
    "olmo3": _olmo3(OLMO3_SYSTEM), "olmo3.1": _olmo3(OLMO31_SYSTEM),
    "functiongemma": _functiongemma, "nemotron-3-nano": _nemotron(v35=False), "nemotron-3.5-nano": _nemotron(v35=True),
    "lfm2": _lfm2(thinks=False), "lfm2-thinking": _lfm2(thinks=True),
    "olmo3-think": _olmo3_think(OLMO31_SYSTEM.rstrip()),
    "olmo3-32b-think": _olmo3_think("You are a helpful AI assistant."),
    "laguna": _laguna, "poolside-v1": _poolside_v1, "cohere": _cohere, "glimmer": _glimmer,
}


def built_in_renderer(name: str | None) -> Renderer | None:
    """The renderer a Modelfile's ``RENDERER`` names, when it is one we write prompts with."""
    return BUILT_IN.get(name or "")
