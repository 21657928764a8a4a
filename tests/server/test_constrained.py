"""Grammar-constrained sampling: JSON schemas and GBNF through every API, and their bad input."""

from __future__ import annotations

import json

import httpx
import jsonschema
import ollama
import openai
import pytest

MODEL = "smollm2:135m"
SCHEMAS = [
    {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]},
    {"type": "object", "properties": {"colours": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                                  "maxItems": 3}}, "required": ["colours"],
     "additionalProperties": False},  # else a sampled answer may go on with keys of its own past max_tokens
    {"type": "object", "properties": {"size": {"enum": ["small", "medium", "large"]},
                                      "count": {"type": "integer", "minimum": 0}},
     "required": ["size", "count"], "additionalProperties": False},
    {"type": "object", "properties": {"person": {"$ref": "#/$defs/person"}}, "required": ["person"],
     "$defs": {"person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}},
                          "required": ["name"]}}},
]


@pytest.fixture(scope="module")
def oai(daemon) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize("schema", SCHEMAS, ids=["boolean", "array", "enum", "ref"])
def test_output_validates_against_schema(oai, schema):
    answer = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Answer in JSON."}], max_tokens=120, temperature=0.7,
        seed=3, response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}})
    assert answer.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answer.choices[0].message.content), schema)


def test_truncated_json_says_length(oai):
    answer = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "List many colours."}], max_tokens=5,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMAS[1]}})
    assert answer.choices[0].finish_reason == "length"


def test_json_object_mode(oai):
    answer = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Describe a cat in JSON."}], max_tokens=100,
        temperature=0, response_format={"type": "json_object"})
    if answer.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(answer.choices[0].message.content), dict)


GBNF = 'root ::= ("yes" | "no") "."'


@pytest.mark.parametrize("where", ["body", "options"])
def test_gbnf_grammar_on_ollama_api(daemon, where):
    body = {"model": MODEL, "prompt": "Is water wet?", "stream": False, "options": {"num_predict": 8}}
    if where == "body":
        body["grammar"] = GBNF
    else:
        body["options"]["grammar"] = GBNF
    answer = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=120).json()
    assert answer["response"] in ("yes.", "no.")


def test_gbnf_grammar_on_openai_api(oai):
    answer = oai.completions.create(model=MODEL, prompt="Is fire hot?", max_tokens=8, extra_body={"grammar": GBNF})
    assert answer.choices[0].text in ("yes.", "no.")


# --- bad input -------------------------------------------------------------------------


def test_invalid_gbnf_is_400(daemon):
    response = httpx.post(f"{daemon.url}/api/generate", json={
        "model": MODEL, "prompt": "hi", "grammar": 'root ::= "unterminated', "stream": False}, timeout=120)
    assert response.status_code == 400
    assert "grammar" in response.json()["error"].lower()


def test_malformed_schema_is_400(oai):
    with pytest.raises(openai.BadRequestError, match="invalid JSON schema"):
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], response_format={
            "type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object", "required": "name"}}})


@pytest.mark.parametrize(("schema", "keyword"), [
    ({"type": "object", "properties": {"n": {"type": "integer", "not": {"const": 3}}}}, "not"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "propertyNames"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
])
def test_unsupported_keyword_is_400_naming_it(daemon, schema, keyword):
    response = httpx.post(f"{daemon.url}/api/chat", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "format": schema})
    assert response.status_code == 400
    assert keyword in response.json()["error"]


def test_integer_beyond_64_bits_in_a_schema_is_400(daemon):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": -37650204449140162519743070208}}}
    response = httpx.post(f"{daemon.url}/api/chat", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "format": schema})
    assert response.status_code == 400
    assert "unsupported JSON schema" in response.json()["error"]


def test_invalid_pattern_is_400_naming_it(daemon):
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^a(b"}}}
    response = httpx.post(f"{daemon.url}/api/chat", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "format": schema})
    assert response.status_code == 400
    assert "properties/code/pattern" in response.json()["error"]


def test_schema_keywords_beyond_llama_cpp_are_enforced(daemon):
    """multipleOf, minProperties and string patterns: llama.cpp's converter cannot express them, llguidance can."""
    schema = {"type": "object", "minProperties": 2,
              "properties": {"dozen": {"type": "integer", "multipleOf": 12, "minimum": 12, "maximum": 144},
                             "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
              "required": ["dozen", "code"], "additionalProperties": False}
    for seed in (1, 2, 3):
        answer = ollama.Client(host=daemon.url).chat(
            MODEL, messages=[{"role": "user", "content": "Give a number of eggs and a product code as JSON."}],
            format=schema, options={"temperature": 1.0, "seed": seed, "num_predict": 60})
        assert answer.done_reason == "stop", answer.message.content
        jsonschema.validate(json.loads(answer.message.content), schema)


def test_format_and_grammar_together_is_400(daemon):
    response = httpx.post(f"{daemon.url}/api/generate", json={
        "model": MODEL, "prompt": "hi", "format": "json", "grammar": GBNF})
    assert response.status_code == 400
    assert "format" in response.json()["error"] and "grammar" in response.json()["error"]


def test_bad_format_value_is_400(daemon):
    response = httpx.post(f"{daemon.url}/api/generate", json={"model": MODEL, "prompt": "hi", "format": "yaml"})
    assert response.status_code == 400
    assert "format" in response.json()["error"]
