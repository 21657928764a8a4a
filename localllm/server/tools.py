"""Tool calling: which call syntax a model's template uses, parsing calls out of its
output, and the grammars that keep calls well-formed: one that forces a call when
one is required, and a lazy one that lets the model answer in prose but, from the
moment it writes its template's call-start marker, holds the call to the tools'
parameter schemas.

Three families cover the common templates: Hermes/Qwen ``<tool_call>{json}</tool_call>``,
Llama 3.x bare JSON ``{"name": …, "parameters": …}`` (optionally after
``<|python_tag|>``), and Mistral ``[TOOL_CALLS][{…}]``.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from .errors import bad_request
from .formats import schema_grammar

HERMES, LLAMA3, MISTRAL = "hermes", "llama3", "mistral"


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


def call_syntax(template: str) -> str:
    """The call syntax a chat template teaches its model."""
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<|python_tag|>" in template or "ipython" in template or "<|eom_id|>" in template:
        return LLAMA3
    return HERMES


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
        checked.append(tool)
    return checked


_HERMES_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def _decode_call(obj: Any, names: set[str]) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # {"function": {"name", "arguments"}}
        obj = obj["function"]
    name = obj.get("name")
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or (names and name not in names) or not isinstance(arguments, dict):
        return None
    return ToolCall(name, arguments)


def _json_values(text: str) -> list[Any]:
    """Every top-level JSON value in ``text``, in order (a model may emit several)."""
    decoder = json.JSONDecoder()
    values, index = [], 0
    while index < len(text):
        start = min((i for i in (text.find("{", index), text.find("[", index)) if i != -1), default=-1)
        if start == -1:
            break
        try:
            value, index = decoder.raw_decode(text, start)
            values.append(value)
        except json.JSONDecodeError:
            index = start + 1
    return values


def parse_tool_calls(text: str, syntax: str, tool_names: set[str]) -> tuple[str, list[ToolCall]]:
    """Split a model's output into its plain content and its tool calls."""
    calls: list[ToolCall] = []
    if syntax == HERMES and "<tool_call>" in text:
        for match in _HERMES_RE.finditer(text):  # one call, or a list of calls (SmolLM2's form)
            calls += [c for v in _json_values(match.group(1)) for item in (v if isinstance(v, list) else [v])
                      if (c := _decode_call(item, tool_names))]
        content = _HERMES_RE.sub("", text).strip() if calls else text
        return content, calls
    if syntax == MISTRAL and "[TOOL_CALLS]" in text:
        head, _, tail = text.partition("[TOOL_CALLS]")
        for value in _json_values(tail):
            for item in value if isinstance(value, list) else [value]:
                if call := _decode_call(item, tool_names):
                    calls.append(call)
        return (head.strip() if calls else text), calls
    stripped = text.strip().removeprefix("<|python_tag|>").strip()
    if stripped.startswith(("{", "[")):
        values = _json_values(stripped)
        for value in values:
            for item in value if isinstance(value, list) else [value]:
                if call := _decode_call(item, tool_names):
                    calls.append(call)
        if calls:
            return "", calls
    return text, []


def forced_call_schema(tools: list[dict[str, Any]], only: str | None = None) -> dict[str, Any]:
    """JSON schema of one call to one of ``tools`` (or to ``only``), for the grammar."""
    options = []
    for tool in tools:
        function = tool["function"]
        if only and function["name"] != only:
            continue
        options.append({
            "type": "object",
            "properties": {
                "name": {"const": function["name"]},
                "arguments": function.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        })
    if not options:
        raise bad_request(f"tool_choice names {only!r}, which is not among the tools")
    return options[0] if len(options) == 1 else {"oneOf": options}


def _renamed_root(json_grammar: str) -> str:
    """The JSON grammar with its start rule renamed ``toolcall-json``, to be embedded."""
    return re.sub(r"^root\s*::=", "toolcall-json ::=", json_grammar, count=1, flags=re.MULTILINE)


def wrap_call_grammar(json_grammar: str, syntax: str) -> str:
    """Put a JSON grammar (whose start rule is ``root``) inside the syntax's call markers."""
    opening = {HERMES: r'"<tool_call>\n"', MISTRAL: '"[TOOL_CALLS]["', LLAMA3: '""'}[syntax]
    closing = {HERMES: r'"\n</tool_call>"', MISTRAL: '"]"', LLAMA3: '""'}[syntax]
    return f"root ::= {opening} toolcall-json {closing}\n{_renamed_root(json_grammar)}"


#: Where each syntax's calls start: the lazy grammar wakes up at these words.
CALL_MARKERS = {HERMES: ("<tool_call>",), MISTRAL: ("[TOOL_CALLS]",), LLAMA3: ("<|python_tag|>",)}

# From its marker on, one call, then (``{more}``) more when parallel calls are allowed; then
# the grammar is complete and only end-of-generation is left.
_LAZY_ROOTS = {
    HERMES: 'root ::= toolcall{more}\n'
            'toolcall ::= "<tool_call>" toolcall-ws toolcall-json toolcall-ws "</tool_call>"',
    MISTRAL: 'root ::= "[TOOL_CALLS]" toolcall-ws "[" toolcall-ws toolcall-json{more} toolcall-ws "]"',
    LLAMA3: 'root ::= "<|python_tag|>" toolcall-ws toolcall-json',
}
_LAZY_MORE = {HERMES: " (toolcall-ws toolcall)*", MISTRAL: ' (toolcall-ws "," toolcall-ws toolcall-json)*', LLAMA3: ""}


def lazy_call_grammar(json_grammar: str, syntax: str, parallel: bool = True) -> str:
    """GBNF for the calls that follow a :data:`CALL_MARKERS` word, for a lazy grammar sampler;
    one call only unless ``parallel``."""
    root = _LAZY_ROOTS[syntax].format(more=_LAZY_MORE[syntax] if parallel else "")
    return f"{root}\ntoolcall-ws ::= [ \\t\\n]{{0,4}}\n{_renamed_root(json_grammar)}"


@dataclass(frozen=True)
class ToolUse:
    """The tools of one request, and how this model writes calls to them."""

    tools: list[dict[str, Any]]
    syntax: str

    @classmethod
    def for_model(cls, model: Any, tools: list[dict[str, Any]] | None) -> "ToolUse | None":
        """None without tools; 400 when the model's template has no place for tools."""
        checked = validate_tools(tools)
        if not checked:
            return None
        template = model.template or model.chat_template or ""
        if "tools" not in template and ".Tools" not in template:
            raise bad_request(f"{model.name.display} does not support tools")
        return cls(checked, call_syntax(template))

    @property
    def names(self) -> set[str]:
        return {tool["function"]["name"] for tool in self.tools}

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        return parse_tool_calls(text, self.syntax, self.names)

    def forced_grammar(self, only: str | None = None) -> str:
        """GBNF that makes the model write one call (to ``only``, when given)."""
        return wrap_call_grammar(schema_grammar(forced_call_schema(self.tools, only)), self.syntax)

    def lazy_grammar(self, parallel: bool = True) -> tuple[str, tuple[str, ...]]:
        """GBNF for calls after the call-start marker (only one unless ``parallel``), and the
        marker words that trigger it.

        Nothing is constrained until the model writes a marker; it may answer in prose.
        """
        grammar = lazy_call_grammar(schema_grammar(forced_call_schema(self.tools)), self.syntax, parallel)
        return grammar, CALL_MARKERS[self.syntax]
