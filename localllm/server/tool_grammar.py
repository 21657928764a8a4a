"""Tool-call grammars: GBNF that keeps a model's calls well-formed, in its family's own syntax
(:mod:`localllm.server.tools` reads the calls back).

Two kinds: one that forces a call (``tool_choice`` required or a name), and a lazy one
that lets the model answer in prose but, from the moment it writes its call-start
marker, holds the call to the tools' parameter schemas. :class:`ToolUse` holds a
request's tools with the model's call syntax and gives both.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..templates.families import CallSyntax, ChatFormat
from .errors import bad_request
from .formats import schema_grammar
from .tools import tool_schemas, validate_tools


def _gbnf_literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


_RULE_NAME = re.compile(r"^([A-Za-z0-9-]+)\s*::=", re.MULTILINE)
_GBNF_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[A-Za-z0-9-]+|.', re.DOTALL)


def _prefixed(grammar: str, prefix: str) -> str:
    """A GBNF grammar with every rule renamed ``prefix-NAME`` (literals and classes untouched), to embed it."""
    names = set(_RULE_NAME.findall(grammar))
    return "".join(f"{prefix}-{t}" if t in names else t for t in _GBNF_TOKEN.findall(grammar))


def _forced_call_schema(tools: list[dict[str, Any]], keys: tuple[str, str] = ("name", "arguments")) -> dict[str, Any]:
    """JSON schema of one ``{"name", "arguments"}`` call (``keys``: the syntax's names for the two) to one of ``tools``."""
    options = [{
        "type": "object",
        "properties": {keys[0]: {"const": t["function"]["name"]},
                       keys[1]: t["function"].get("parameters") or {"type": "object"}},
        "required": list(keys), "additionalProperties": False,
    } for t in tools]
    return options[0] if len(options) == 1 else {"oneOf": options}


#: How each call syntax writes one call to ``name``: text before its arguments, and after.
_NAMED_CALLS = {
    "mistral": ("[TOOL_CALLS]{name}[ARGS]", ""),
    "deepseek": ("<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>", "<｜tool▁call▁end｜>"),
    "harmony": ("<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>", ""),
}
#: Parameter lists, by call syntax name: a call's head and tail, one parameter ({key} and {value}), the separator, and
#: how a string value is written (None: as a JSON string).
_PARAMETER_CALLS = {
    "qwen-xml": ("<tool_call>\n<function={name}>\n", "</function>\n</tool_call>",
                 "<parameter={key}>\n{value}\n</parameter>\n", "", ("", "")),
    "glm": ("<tool_call>{name}", "</tool_call>", "<arg_key>{key}</arg_key><arg_value>{value}</arg_value>", "",
            ("", "")),
    "gemma4": ("<|tool_call>call:{name}{{", "}}<tool_call|>", "{key}:{value}", ",", ('<|"|>', '<|"|>')),
    "functiongemma": ("<start_function_call>call:{name}{{", "}}<end_function_call>", "{key}:{value}", ",",
                      ("<escape>", "<escape>")),
    "lfm2": ("<|tool_call_start|>[{name}(", ")]<|tool_call_end|>", "{key}={value}", ", ", None),
    "olmo3": ("<function_calls>{name}(", ")</function_calls>", "{key}={value}", ", ", None),
    "glimmer": ('<|start|>assistant to={name}<|message|><atem:function_calls>\n<atem:invoke name="{name}">\n',
                "</atem:invoke>\n</atem:function_calls>", '<atem:parameter name="{key}">{value}</atem:parameter>\n', "",
                ("", "")),
}


def _parameter_rules(syntax: str, name: str, schema: dict[str, Any], rule: str, header: str = "") -> list[str]:
    """Rules for one call to ``name`` in a parameter-list syntax, its start rule ``rule``: the
    required parameters in order, then the optional ones, each optional (when the schema requires
    none, the first written is the first listed). The call's head starts after ``header``, which the
    prompt already ends with."""
    head, tail, parameter, separator, quotes = _PARAMETER_CALLS[syntax]
    properties = schema.get("properties") or {}
    required = [k for k in properties if k in (schema.get("required") or [])]
    keys = required + [k for k in properties if k not in required]
    rules, pieces = [], []
    for index, key in enumerate(keys):
        value_rule = f"{rule}-v{index}"
        if properties[key].get("type") == "string" and quotes is not None and "enum" not in properties[key]:
            # a raw string: one line without markup, so that a forced call always comes to its end
            rules.append(f"{value_rule} ::= " + " ".join(p for p in (
                _gbnf_literal(quotes[0]) if quotes[0] else "", "[^<\\n]*",
                _gbnf_literal(quotes[1]) if quotes[1] else "") if p))
        else:
            rules.append(f"{value_rule} ::= {value_rule}-root\n"
                         + _prefixed(schema_grammar(properties[key] or {}), value_rule))
        written = parameter.format(key=key, value="\x00")
        piece = " ".join(_gbnf_literal(p) if p != "\x00" else value_rule for p in re.split("(\x00)", written) if p)
        if index and separator:
            piece = f"{_gbnf_literal(separator)} {piece}"
        pieces.append(f"({piece})" + ("" if key in required or not index else "?"))
    body = " ".join(pieces)
    if keys and not required:
        body = f"({body})?"
    rules.insert(0, f"{rule} ::= " + " ".join(p for p in (_gbnf_literal(head.format(name=name).removeprefix(header)), body,
                                                           _gbnf_literal(tail.format())) if p))
    return rules


#: The JSON-object syntaxes: GBNF before and after one ``{"name", "arguments"}`` call.
_JSON_CALLS = {
    "hermes": ('"<tool_call>" toolcall-ws', 'toolcall-ws "</tool_call>"'),
    "granite": ('"<|tool_call|>" toolcall-ws "[" toolcall-ws', 'toolcall-ws "]"'),
    "mistral": ('"[TOOL_CALLS]" toolcall-ws "[" toolcall-ws', 'toolcall-ws "]"'),
    "llama3": ("", ""),  # a bare call; the lazy grammar starts at <|python_tag|>
    "cohere": ('"<|START_ACTION|>[" toolcall-ws', 'toolcall-ws "]<|END_ACTION|>"'),
}
#: The JSON-object syntaxes whose calls name their two keys otherwise.
_JSON_KEYS = {"cohere": ("tool_name", "parameters")}


def call_grammar(syntax: CallSyntax, tools: list[dict[str, Any]], header: str = "") -> str:
    """GBNF whose rule ``toolcall`` is one call to one of ``tools``, written in ``syntax``; a call's head
    starts after ``header`` where it begins with it (the role header a prompt already ends with)."""
    spaces = "toolcall-ws ::= [ \\t\\n]{0,4}\n"
    if syntax.body == "json":
        opening, closing = _JSON_CALLS[syntax.name]
        inner = _prefixed(schema_grammar(_forced_call_schema(tools, _JSON_KEYS.get(syntax.name, ("name", "arguments")))),
                          "call")
        return f"toolcall ::= {opening} call-root {closing}\n{spaces}{inner}"
    alternatives, rules = [], []
    for index, tool in enumerate(tools):
        name, schema = tool["function"]["name"], tool["function"].get("parameters") or {"type": "object"}
        rule = f"call{index}"
        alternatives.append(rule)
        if syntax.body in _NAMED_CALLS:
            before, after = _NAMED_CALLS[syntax.body]
            parts = [_gbnf_literal(before.format(name=name).removeprefix(header)), f"{rule}-args-root"]
            parts += [_gbnf_literal(after)] if after else []
            rules.append(f"{rule} ::= {' '.join(parts)}\n" + _prefixed(schema_grammar(schema), f"{rule}-args"))
        else:
            rules += _parameter_rules(syntax.name, name, schema, rule, header)
    return f"toolcall ::= {' | '.join(alternatives)}\n{spaces}" + "\n".join(rules)


def forced_grammar(syntax: CallSyntax, tools: list[dict[str, Any]], only: str | None = None,
                   header: str = "") -> str:
    """GBNF that makes the model write one call (to ``only``, when given) in ``syntax``, after ``header``:
    the text the prompt ends with, which a call's head does not repeat."""
    chosen = [t for t in tools if not only or t["function"]["name"] == only]
    if not chosen:
        raise bad_request(f"tool_choice names {only!r}, which is not among the tools")
    around = [_gbnf_literal(w) for w in syntax.wrappers] or ["", ""]  # a group's markers (DeepSeek's)
    root = " ".join(p for p in (around[0], "toolcall", around[-1]) if p)
    return f"root ::= {root}\n{call_grammar(syntax, chosen, header)}"


def lazy_grammar(syntax: CallSyntax, tools: list[dict[str, Any]], parallel: bool = True) -> tuple[str, tuple[str, ...]]:
    """GBNF for the calls that follow the syntax's first opening marker (one call unless
    ``parallel``), and that marker, which wakes the grammar: nothing is constrained before it."""
    more = ' (toolcall-ws toolcall)*' if parallel else ""
    start = f'{_gbnf_literal(syntax.opening[0])} toolcall-ws ' if syntax.name == "llama3" else ""  # a bare call
    return f"root ::= {start}toolcall{more}\n{call_grammar(syntax, tools)}", (syntax.opening[0],)


@dataclass(frozen=True)
class ToolUse:
    """The tools of one request, and how this model writes calls to them."""

    tools: list[dict[str, Any]]
    syntax: CallSyntax

    @classmethod
    def for_model(cls, model: Any, tools: list[dict[str, Any]] | None) -> "ToolUse | None":
        """None without tools; 400 when the model cannot take tools (its template has no place for
        them, or its format has no call syntax)."""
        checked = validate_tools(tools)
        if not checked:
            return None
        chat_format: ChatFormat = model.chat_format
        if "tools" not in model.capabilities or chat_format.calls is None:
            raise bad_request(f"{model.name.display} does not support tools")
        return cls(checked, chat_format.calls)

    @property
    def schemas(self) -> dict[str, dict[str, Any]]:
        return tool_schemas(self.tools)

    def forced_grammar(self, only: str | None = None, header: str = "") -> str:
        """GBNF that makes the model write one call (to ``only``, when given) after ``header``, the text
        the prompt ends with."""
        return forced_grammar(self.syntax, self.tools, only, header)

    def lazy_grammar(self, parallel: bool = True) -> tuple[str, tuple[str, ...]]:
        """GBNF for calls after the call-start marker (only one unless ``parallel``), and the
        marker words that trigger it."""
        return lazy_grammar(self.syntax, self.tools, parallel)
