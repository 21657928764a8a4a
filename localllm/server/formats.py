"""Structured output: what the runner holds a request's output to.

Two engines, chosen on measurements (``scripts/bench/grammar_engines.py``):
JSON schemas (Ollama ``format`` objects, OpenAI ``json_schema``) go to
llguidance, which masks the whole vocabulary in ~0.2 ms per token and
enforces more of JSON Schema; GBNF (``format: "json"``, ``json_object``, the
``grammar`` field, tool-call grammars) goes to llama.cpp's grammar sampler,
which also wakes lazily at a tool call's start marker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Constraint:
    """GBNF for llama.cpp's grammar sampler, or a JSON schema for llguidance (never both)."""

    grammar: str | None = None
    json_schema: dict[str, Any] | None = None


NO_CONSTRAINT = Constraint()


def format_constraint(fmt: str | dict[str, Any] | None) -> Constraint:
    """Ollama's ``format``: ``"json"``, a JSON schema object, or nothing."""
    if fmt is None or fmt == "":
        return NO_CONSTRAINT
    if fmt == "json":
        return Constraint(grammar=JSON_OBJECT_GBNF)
    if isinstance(fmt, dict):
        return Constraint(json_schema=checked_schema(fmt))
    raise bad_request(f"invalid format {fmt!r}: use \"json\" or a JSON schema object")


def _check_schema_syntax(schema: dict[str, Any]) -> None:
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise bad_request(f"invalid JSON schema at {where}: {exc.message}") from None


def checked_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``, once it is valid JSON Schema that llguidance can enforce in full; else a 400 naming why.

    (The runner compiles it again, with its tokenizer and JSON layout options.)
    """
    import llguidance

    _check_schema_syntax(schema)
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    except ValueError as exc:  # e.g. an integer beyond 64 bits somewhere in the schema
        raise bad_request(f"unsupported JSON schema: {exc}") from None
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem.startswith("Unimplemented keys: "):
        keys = ", ".join(json.loads(problem.removeprefix("Unimplemented keys: ")))
        raise bad_request(f"JSON schema keywords not supported by constrained sampling: {keys}")
    if problem:
        raise bad_request(f"unsupported JSON schema: {problem.strip()}")
    return schema


#: Keywords the grammar converter cannot enforce; a schema using one is refused, never loosened.
UNSUPPORTED_KEYWORDS = frozenset({
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
    "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "uniqueItems", "multipleOf", "$dynamicRef", "$recursiveRef", "minProperties", "maxProperties",
})
#: Keywords whose value is a map of names to subschemas (the names are not keywords).
_SCHEMA_MAPS = ("properties", "$defs", "definitions")


def unsupported_keyword(schema: Any, path: str = "#") -> str | None:
    """The JSON pointer of the first keyword we cannot enforce, or None."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            if found := unsupported_keyword(item, f"{path}/{index}"):
                return found
        return None
    if not isinstance(schema, dict):
        return None
    for key, value in schema.items():
        if key in UNSUPPORTED_KEYWORDS:
            return f"{path}/{key}"
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                if found := unsupported_keyword(sub, f"{path}/{key}/{name}"):
                    return found
        elif key not in ("enum", "const", "default", "examples") and isinstance(value, (dict, list)):
            if found := unsupported_keyword(value, f"{path}/{key}"):
                return found
    return None


def schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF enforcing a JSON schema (llama.cpp's converter, as shipped by llama-cpp-python),
    for grammars that embed one (tool calls).

    The schema must be valid JSON Schema and use only keywords the converter
    enforces; anything else is a 400 naming the problem, so output is never
    silently less constrained than asked.
    """
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    _check_schema_syntax(schema)
    if found := unsupported_keyword(schema):
        raise bad_request(f"JSON schema keyword {found.rsplit('/', 1)[-1]!r} at {found} is not supported "
                          "by constrained sampling")
    try:
        grammar = json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises plain exceptions for what it cannot express
        raise bad_request(f"unsupported JSON schema: {exc}") from None
    # The converter's string characters admit raw control characters, which JSON forbids.
    return grammar.replace('char ::= [^"\\\\]', 'char ::= [^"\\\\\\x7F\\x00-\\x1F]')
