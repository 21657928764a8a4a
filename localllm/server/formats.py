"""Structured output: the request's ``format`` turned into a GBNF grammar for the runner."""

from __future__ import annotations

import json
from typing import Any

from .errors import bad_request

# Any JSON object, as llama.cpp's grammars/json.gbnf (Ollama's format "json" asks for an object).
JSON_OBJECT_GBNF = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
'''


def grammar_for_format(fmt: str | dict[str, Any] | None) -> str | None:
    """GBNF for Ollama's ``format``: ``"json"``, a JSON schema object, or nothing."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return JSON_OBJECT_GBNF
    if isinstance(fmt, dict):
        return schema_grammar(fmt)
    raise bad_request(f"invalid format {fmt!r}: use \"json\" or a JSON schema object")


def schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF enforcing a JSON schema (llama.cpp's converter, as shipped by llama-cpp-python)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises plain exceptions for what it cannot express
        raise bad_request(f"unsupported JSON schema: {exc}") from None
