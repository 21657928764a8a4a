"""Tool-call decoders: Hermes/Qwen, Llama 3.x JSON and Mistral, read from one call's text."""

from __future__ import annotations

import pytest

from localllm.server.errors import ApiError
from localllm.server.tools import MAX_CALL_TEXT, decode_calls, validate_tools
from localllm.templates.families import FORMATS

TOOLS = {"get_weather": {"type": "object"}, "add": {"type": "object"}}


def decode(fmt: str, text: str):
    return decode_calls(FORMATS[fmt].calls, text, TOOLS)


def test_hermes_call():
    calls = decode("hermes", '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n')
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_llama3_json_with_parameters_key():
    [call] = decode("llama3", '{"name": "add", "parameters": {"a": 1, "b": 2}}')
    assert call.name == "add" and call.arguments == {"a": 1, "b": 2}


def test_mistral_list_of_calls_with_arguments_as_json_text():
    text = '[{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}]'
    calls = decode("mistral", text)
    assert [c.name for c in calls] == ["add", "get_weather"]
    assert calls[1].arguments == {"city": "Oslo"}


@pytest.mark.parametrize("text", [
    "The weather is nice.",
    '{"name": "rm_rf", "arguments": {}}',  # a tool that was not offered
    '{"name": "add", "arguments": [1, 2]}',  # arguments that are no object
    '{"name": "add", "arguments": {"a": 1}',  # cut off
    '{"name": "add", "arguments": {}} and then some',  # more than calls
    '[{"name": "add", "arguments": {}}, {"name": "rm_rf", "arguments": {}}]',  # one of them not offered
])
def test_text_that_is_not_wholly_valid_calls_is_no_call(text):
    assert decode("hermes", text) is None


@pytest.mark.parametrize("tools", [[{"type": "function"}], [{"function": {"name": "f", "parameters": []}}],
                                   [{"function": {"name": "f", "parameters": {"type": "array"}}}]])
def test_bad_tool_definitions_are_400(tools):
    with pytest.raises(ApiError) as info:
        validate_tools(tools)
    assert info.value.status == 400


@pytest.mark.parametrize("fmt,text", [
    ("lfm2", "[add(a=" + "1+" * 3000 + "1)]"),  # ast: recursion too deep
    ("lfm2", "-" * 10000),  # ast: parser stack overflow (MemoryError)
    ("lfm2", "[add(a=" + "-" * 10000 + "1)]"),
    ("hermes", '{"name": "add", "arguments": {"a": ' + "[" * 1000 + "]" * 1000 + "}}"),  # json: recursion
    ("mistral", "[" * 100000),
    ("deepseek3", "add<｜tool▁sep｜>" + '{"a":' * 5000 + "1" + "}" * 5000),
])
def test_call_text_nested_too_deep_is_no_call(fmt, text):
    assert decode(fmt, text) is None


def test_call_text_over_the_size_bound_is_no_call():
    padding = " " * MAX_CALL_TEXT
    assert decode("hermes", '{"name": "add", "arguments": {}}' + padding[:100]) is not None
    assert decode("hermes", '{"name": "add", "arguments": {}}' + padding) is None
