"""Tool-call syntaxes: Hermes/Qwen, Llama 3.x JSON and Mistral, parsed from model output."""

from __future__ import annotations

import pytest

from localllm.server.errors import ApiError
from localllm.server.tools import HERMES, LLAMA3, MISTRAL, call_syntax, parse_tool_calls, validate_tools

NAMES = {"get_weather", "add"}


def test_hermes_calls_and_surrounding_text():
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    content, calls = parse_tool_calls(text, HERMES, NAMES)
    assert content == "Let me check."
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_llama3_json_with_python_tag_and_parameters_key():
    text = '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}'
    content, calls = parse_tool_calls(text, LLAMA3, NAMES)
    assert content == "" and calls[0].name == "add" and calls[0].arguments == {"a": 1, "b": 2}


def test_mistral_list_of_calls():
    text = '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}]'
    _, calls = parse_tool_calls(text, MISTRAL, NAMES)
    assert [c.name for c in calls] == ["add", "get_weather"]
    assert calls[1].arguments == {"city": "Oslo"}


def test_plain_text_and_unknown_tools_are_not_calls():
    assert parse_tool_calls("The weather is nice.", HERMES, NAMES) == ("The weather is nice.", [])
    text = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
    assert parse_tool_calls(text, HERMES, NAMES)[1] == []


def test_syntax_detection_from_templates():
    assert call_syntax("{{ '[TOOL_CALLS]' }}") == MISTRAL
    assert call_syntax("<|python_tag|>{{ x }}<|eom_id|>") == LLAMA3
    assert call_syntax("<tool_call>{{ .Tools }}</tool_call>") == HERMES


@pytest.mark.parametrize("tools", [[{"type": "function"}], [{"function": {"name": "f", "parameters": []}}],
                                   [{"function": {"name": "f", "parameters": {"type": "array"}}}]])
def test_bad_tool_definitions_are_400(tools):
    with pytest.raises(ApiError) as info:
        validate_tools(tools)
    assert info.value.status == 400
