"""Tool calling: the tools of a request, and reading the calls out of a model's output, in
each family's own syntax (the syntaxes themselves are data, in
:mod:`localllm.templates.families`; the grammars that keep calls well-formed are
:mod:`localllm.server.tool_grammar`).

A call's text (between its opening and closing markers) is read by the
syntax's decoder: JSON objects ``{"name", "arguments"}`` (Hermes, Llama 3,
Granite, Mistral's old lists), ``NAME[ARGS]{…}`` (Ministral), Qwen's XML
``<function=NAME><parameter=P>…``, GLM's ``<arg_key>``/``<arg_value>`` pairs,
Gemma 4's ``call:NAME{key:<|"|>text<|"|>}`` (FunctionGemma's with ``<escape>``), DeepSeek's ``NAME<｜tool▁sep｜>{…}``,
LFM2's Python-style ``[f(a=1)]`` (Olmo 3's one call a line), Harmony's ``functions.NAME … <|message|>{…}``
and Glimmer's ``NAME<|message|><atem:function_calls><atem:invoke name="NAME">…``.
A text that does not decode whole into calls to offered tools, with object
arguments, is no call: the caller passes it on as text.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..templates.families import CallSyntax
from .errors import bad_request


def new_call_id() -> str:
    """An id for a call the model made, which clients send back with its result."""
    return f"call_{secrets.token_hex(8)}"


def call_arguments(value: Any, field: str, name: str = "") -> dict[str, Any]:
    """A call's arguments sent back by a client, as an object or its JSON text; 400 naming ``field`` otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value or "{}")
        except json.JSONDecodeError:
            raise bad_request(f"{field}: arguments of {name!r} are not valid JSON") from None
    if not isinstance(value, dict):
        raise bad_request(f"{field}: arguments of {name!r} must be a JSON object")
    return value


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""

    def ollama(self) -> dict[str, Any]:
        return {"function": {"name": self.name, "arguments": self.arguments}}

    def openai(self) -> dict[str, Any]:
        return {"id": self.id or new_call_id(), "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}}


def validate_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Check the ``tools`` list: each a function whose parameters schema is an object."""
    checked = []
    for index, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise bad_request(f"tools[{index}]: expected {{'type': 'function', 'function': {{'name': …}}}}")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise bad_request(f"tools[{index}] ({function['name']}): parameters must be a JSON schema of type object")
        if not isinstance(parameters.get("properties", {}), (dict, type(None))):
            raise bad_request(f"tools[{index}] ({function['name']}): parameters.properties must be an object")
        checked.append(tool)
    return checked


#: A tool's parameters schema by the tool's name: the offered tools, as the decoders see them.
Schemas = Mapping[str, dict[str, Any]]


def tool_schemas(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in tools}


# ----------------------------------------------------------------------------- decoders


_SPACES = re.compile(r"\s*")


def _json_values(text: str) -> list[Any] | None:
    """The JSON values ``text`` holds one after another (spaces between), or None if it holds anything else."""
    decoder, values, index = json.JSONDecoder(), [], 0
    while (index := _SPACES.match(text, index).end()) < len(text):
        try:
            value, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            return None
        values.append(value)
    return values


def _call(name: Any, arguments: Any, tools: Schemas) -> ToolCall | None:
    if isinstance(arguments, str):  # some models write the arguments as JSON text
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or name not in tools or not isinstance(arguments, dict):
        return None
    return ToolCall(name, arguments)


def _json_calls(text: str, tools: Schemas) -> list[ToolCall] | None:
    """``{"name", "arguments"|"parameters"}`` objects (or ``{"function": {…}}``, or Cohere's ``{"tool_name",
    "parameters"}``), alone or in lists."""
    values = _json_values(text)
    if not values:
        return None
    calls = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and isinstance(item.get("function"), dict):
                item = item["function"]
            if not isinstance(item, dict):
                return None
            call = _call(item.get("name", item.get("tool_name")), item.get("arguments", item.get("parameters", {})),
                         tools)
            if call is None:
                return None
            calls.append(call)
    return calls


def _named_json_call(name: str, arguments: str, tools: Schemas) -> list[ToolCall] | None:
    values = _json_values(arguments)
    call = _call(name.strip(), values[0], tools) if values and len(values) == 1 else None
    return [call] if call else None


def _mistral_calls(text: str, tools: Schemas) -> list[ToolCall] | None:
    """``NAME[ARGS]{…}`` (Ministral, Magistral, Mistral Small 3.2+), or the older ``[{…}, …]`` list."""
    if text.lstrip().startswith(("[", "{")):
        return _json_calls(text, tools)
    name, found, arguments = text.partition("[ARGS]")
    name = name.split("[CALL_ID]")[0]
    return _named_json_call(name, arguments, tools) if found else None


def _typed_value(raw: str, schema: dict[str, Any] | None) -> tuple[bool, Any]:
    """An XML-style parameter value: raw text for a string parameter, JSON for the others
    (``(False, None)`` when it is not); a parameter without a type reads as JSON when it can."""
    kinds = (schema or {}).get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds} if kinds else set()
    if "string" in kinds and len(kinds) == 1:
        return True, raw
    try:
        return True, json.loads(raw)
    except json.JSONDecodeError:
        return (True, raw) if not kinds or "string" in kinds else (False, None)


def _typed_arguments(name: str, pairs: list[tuple[str, str]], tools: Schemas) -> list[ToolCall] | None:
    if name not in tools:
        return None
    properties = tools[name].get("properties") or {}
    arguments = {}
    for key, raw in pairs:
        ok, value = _typed_value(raw, properties.get(key))
        if not ok:
            return None
        arguments[key] = value
    return [ToolCall(name, arguments)]


def _whole(pattern: re.Pattern[str], text: str) -> list[re.Match[str]] | None:
    """The matches of ``pattern`` that cover ``text`` end to end (spaces between), or None."""
    matches, index = [], 0
    for match in pattern.finditer(text):
        if text[index:match.start()].strip():
            return None
        matches.append(match)
        index = match.end()
    return matches if not text[index:].strip() else None


_QWEN_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.DOTALL)
_QWEN_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


def _qwen_xml_calls(text: str, tools: Schemas) -> list[ToolCall] | None:
    """``<function=NAME><parameter=P>value</parameter></function>`` (Qwen3-Coder, Qwen 3.5/3.6)."""
    functions = _whole(_QWEN_FUNCTION, text)
    if not functions:
        return None
    calls = []
    for function in functions:
        parameters = _whole(_QWEN_PARAMETER, function.group(2))
        found = parameters is not None and _typed_arguments(
            function.group(1).strip(), [(p.group(1).strip(), p.group(2)) for p in parameters], tools)
        if not found:
            return None
        calls += found
    return calls


_GLM_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _glm_calls(text: str, tools: Schemas) -> list[ToolCall] | None:
    """``NAME<arg_key>k</arg_key><arg_value>v</arg_value>…`` (GLM 4.5 and later)."""
    name, _, _ = text.partition("<arg_key>")
    pairs = _whole(_GLM_ARGUMENT, text[len(name):])
    if pairs is None:
        return None
    return _typed_arguments(name.strip(), [(p.group(1).strip(), p.group(2)) for p in pairs], tools)


_GEMMA_KEY = re.compile(r'([{,]\s*)([A-Za-z_][\w.-]*)\s*:')


def _gemma_calls(quote: str) -> Callable[[str, Schemas], list[ToolCall] | None]:
    """The decoder of ``call:NAME{key:QUOTEtextQUOTE,n:3}``: bare keys, strings between ``quote``
    (Gemma 4's ``<|"|>``, FunctionGemma's ``<escape>``)."""
    strings_pattern = re.compile(re.escape(quote) + "(.*?)" + re.escape(quote), re.DOTALL)

    def decode(text: str, tools: Schemas) -> list[ToolCall] | None:
        match = re.fullmatch(r'\s*call:([\w.-]+)(\{.*\})\s*', text, re.DOTALL)
        if not match:
            return None
        strings: list[str] = []

        def hold(m: re.Match[str]) -> str:
            strings.append(m.group(1))
            return f'"\x00{len(strings) - 1}"'

        body = _GEMMA_KEY.sub(r'\1"\2":', strings_pattern.sub(hold, match.group(2)))
        body = re.sub(r'"\x00(\d+)"', lambda m: json.dumps(strings[int(m.group(1))]), body)
        return _named_json_call(match.group(1), body, tools)

    return decode


_PYTHON_NAMES = {"true": True, "false": False, "null": None, "none": None}


def _python_value(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id.lower() in _PYTHON_NAMES:
        return _PYTHON_NAMES[node.id.lower()]
    return ast.literal_eval(node)


def _pythonic_calls(text: str, tools: Schemas) -> list[ToolCall] | None:
    """``[f(a=1, b="x"), g()]`` (LFM2), or calls one a line (Olmo 3): calls with keyword arguments of
    literal values."""
    try:
        lines = ast.parse(text.strip(), mode="exec").body
    except (SyntaxError, ValueError):
        return None
    if not all(isinstance(line, ast.Expr) for line in lines):
        return None
    expressions = [line.value for line in lines]
    nodes = expressions[0].elts if len(expressions) == 1 and isinstance(expressions[0], ast.List) else expressions
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            return None
        try:
            arguments = {kw.arg: _python_value(kw.value) for kw in node.keywords if kw.arg}
        except (ValueError, TypeError, SyntaxError):
            return None
        if not (call := _call(node.func.id, arguments, tools)):
            return None
        calls.append(call)
    return calls or None


_DEEPSEEK_SEP = "<｜tool▁sep｜>"


def _deepseek_calls(text: str, tools: Schemas) -> list[ToolCall] | None:
    """``NAME<｜tool▁sep｜>{…}`` (DeepSeek V3.1), or R1's ``function<｜tool▁sep｜>NAME`` and a fenced JSON block."""
    head, found, tail = text.partition(_DEEPSEEK_SEP)
    if not found:
        return None
    if head.strip() == "function" and "```" in tail:
        name, _, rest = tail.partition("\n")
        fenced = re.fullmatch(r"\s*```(?:json)?\s*(.*?)\s*```\s*", rest, re.DOTALL)
        return _named_json_call(name, fenced.group(1), tools) if fenced else None
    return _named_json_call(head, tail, tools)


def _harmony_calls(text: str, tools: Schemas) -> list[ToolCall] | None:
    """``functions.NAME <|constrain|>json<|message|>{…}``: the recipient, the rest of the header, the arguments."""
    header, found, arguments = text.partition("<|message|>")
    recipient = re.match(r"functions\.([^\s<]+)", header)
    return _named_json_call(recipient.group(1), arguments, tools) if found and recipient else None


_ATEM_CALLS = re.compile(r"\s*<atem:function_calls>\s*(.*?)\s*\Z", re.DOTALL)
_ATEM_INVOKE = re.compile(r'<atem:invoke name="([^"]*)">\n?(.*?)</atem:invoke>', re.DOTALL)
_ATEM_PARAMETER = re.compile(r'<atem:parameter name="([^"]*)">(.*?)</atem:parameter>\n?', re.DOTALL)


def _atem_calls(text: str, tools: Schemas) -> list[ToolCall] | None:
    """``NAME<|message|><atem:function_calls><atem:invoke name="NAME"><atem:parameter name="P">value…`` (Glimmer):
    the message's recipient, which its one invoke names (a ``namespace.`` before it allowed), values typed as
    Qwen's XML is; or a bare block's invoke (its opening marker already read), in a message to the user."""
    recipient, found, body = text.partition("<|message|>")
    calls = _ATEM_CALLS.fullmatch(body) if found else None
    invokes = _whole(_ATEM_INVOKE, calls.group(1) if calls else text if not found else "")
    if not invokes or len(invokes) != 1:
        return None
    name = _glimmer_tool((recipient if found else invokes[0].group(1)).strip(), tools)
    parameters = _whole(_ATEM_PARAMETER, invokes[0].group(2))
    if name is None or _glimmer_tool(invokes[0].group(1), tools) != name or parameters is None:
        return None
    return _typed_arguments(name, [(p.group(1), p.group(2)) for p in parameters], tools)


def _glimmer_tool(name: str, tools: Schemas) -> str | None:
    """An offered tool by the name a Glimmer message gives it: its own, or under its namespace."""
    if name in tools:
        return name
    namespace, _, function = name.partition(".")
    return function if function in tools and function.split(".")[0] == namespace else None


_DECODERS = {
    "json": _json_calls, "mistral": _mistral_calls, "qwen-xml": _qwen_xml_calls, "glm": _glm_calls,
    "gemma4": _gemma_calls('<|"|>'), "functiongemma": _gemma_calls("<escape>"), "pythonic": _pythonic_calls, "deepseek": _deepseek_calls, "harmony": _harmony_calls,
    "atem": _atem_calls,
}


#: The longest call text (its markers left out) read as a call, in characters: 1 MiB holds any real
#: call's arguments (a whole source file included); a longer text is no call, passed on as text.
MAX_CALL_TEXT = 1 << 20


def decode_calls(syntax: CallSyntax, text: str, tools: Schemas) -> list[ToolCall] | None:
    """The calls in one call's text (its markers left out), or None when it is no valid call to offered tools.

    The model writes this text, so it may be anything: one too long, or nested too deep for
    Python's parsers (``ast`` and ``json`` then raise RecursionError or MemoryError), is no call."""
    if len(text) > MAX_CALL_TEXT:
        return None
    try:
        return _DECODERS[syntax.body](text, tools)
    except (RecursionError, MemoryError):
        return None
