"""Prompts written by code, not by a template: Modelfile ``RENDERER`` names (Ollama's ``model/renderers``).

Ollama renders some families' prompts with built-in renderers, so that a GGUF
without a usable chat template still chats, calls tools and thinks. A
``RENDERER`` line naming one of these makes the prompt ours, from the
messages as templates receive them (system, user, assistant with its thinking
and tool calls, tool results) and the request's tools; the other renderer
names choose only the output format (``families.RENDERERS``), and the model's
template writes the prompt.

Built in (as Ollama writes them, checked against the cases of Ollama's own
``*_test.go``): ``qwen3-coder`` and ``qwen3.5`` (ChatML, calls as
``<tool_call><function=NAME><parameter=P>`` XML), ``qwen3-vl-instruct`` /
``qwen3-vl-thinking`` (ChatML, Hermes JSON calls), ``deepseek3.1`` and
``cogito`` (DeepSeek's full-width tokens), ``glm-4.7`` and ``glm-ocr`` (``<arg_key>`` pairs),
``lfm2`` / ``lfm2-thinking`` (Python-list calls), ``nemotron-3-nano``
(Qwen XML calls, ``/think`` switches), ``olmo3`` / ``olmo3.1`` /
``olmo3-think`` / ``olmo3-32b-think``, and ``gemma4`` / ``gemma4-small`` /
``gemma4-large`` (Gemma 4's ``<|"|>``-quoted notation), ``functiongemma`` (the same
with ``<escape>``). Tools are written as Go
marshals Ollama's tool structs: its key order, and ``<>&`` escaped where Go
escapes them. Images are not marked in these prompts.
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
    last_query = _last_query(messages, strip=True)
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


def _last_query(messages: list[dict[str, Any]], strip: bool) -> int:
    """The last user message that is not tool output (the turn whose reasoning Qwen keeps)."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content", "")
        content = content.strip() if strip else content
        if messages[i]["role"] == "user" and not (content.startswith("<tool_response>")
                                                  and content.endswith("</tool_response>")):
            return i
    return len(messages) - 1


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


def _nemotron3_nano(messages: list[dict[str, Any]], tools: list[dict[str, Any]], think: Think) -> str:
    """Nemotron 3 Nano: Qwen-style XML calls, an empty ``<think></think>`` marking turns without reasoning, and
    ``/think`` or ``/no_think`` in a user or system message overriding the request."""
    thinking = think is None or bool(think)
    for message in messages:
        if message["role"] in ("user", "system"):
            content = message.get("content", "")
            if "/think" in content.replace("</think>", ""):
                thinking = True
            elif "/no_think" in content:
                thinking = False
    has_system = bool(messages) and messages[0]["role"] == "system"
    system = _strip_think_toggles(messages[0].get("content", "")) if has_system else ""
    turns = messages[1:] if has_system else messages
    last_user = max((i for i, m in enumerate(turns) if m["role"] == "user"), default=-1)
    out = [START + "system\n" + system + ("\n\n" if system and tools else "")
           + (_nemotron_tools(tools) if tools else "") + END + "\n"]
    for i, message in enumerate(turns):
        content = message.get("content", "")
        if message["role"] == "assistant":
            if message.get("thinking"):
                content = "<think>\n" + message["thinking"] + "\n</think>\n" + content
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
            out.append(START + message["role"] + "\n" + _strip_think_toggles(content).strip() + END + "\n")
        elif message["role"] == "tool":
            if i > 0 and turns[i - 1]["role"] != "tool":
                out.append(START + "user\n")
            out.append("<tool_response>\n" + content + "\n</tool_response>\n")
            if not (i + 1 < len(turns) and turns[i + 1]["role"] == "tool"):
                out.append(END + "\n")
        else:
            out.append(START + message["role"] + "\n" + content + END + "\n")
    return "".join(out) + START + "assistant\n" + ("<think>\n" if thinking else "<think></think>")


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


#: Ollama's renderer names that we render built in.
BUILT_IN: dict[str, Renderer] = {
    "qwen3-coder": _qwen3_coder, "qwen3.5": _qwen35,
    "gemma4": _gemma4(False), "gemma4-small": _gemma4(False), "gemma4-large": _gemma4(True),
    "qwen3-vl-instruct": _qwen3_vl(thinks=False), "qwen3-vl-thinking": _qwen3_vl(thinks=True),
    "deepseek3.1": _deepseek31, "cogito": _cogito, "glm-4.7": _glm47, "glm-ocr": _glm_ocr,
    "olmo3": _olmo3(OLMO3_SYSTEM), "olmo3.1": _olmo3(OLMO31_SYSTEM),
    "functiongemma": _functiongemma, "nemotron-3-nano": _nemotron3_nano,
    "lfm2": _lfm2(thinks=False), "lfm2-thinking": _lfm2(thinks=True),
    "olmo3-think": _olmo3_think(OLMO31_SYSTEM.rstrip()),
    "olmo3-32b-think": _olmo3_think("You are a helpful AI assistant."),
}


def built_in_renderer(name: str | None) -> Renderer | None:
    """The renderer a Modelfile's ``RENDERER`` names, when it is one we write prompts with."""
    return BUILT_IN.get(name or "")
