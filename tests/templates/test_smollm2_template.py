"""The catalog's TEMPLATE for SmolLM2: the GGUF's own prompt without tools, SmolLM2's
``<tool_call>`` format with them, and the pulled default model answering tool requests."""

from __future__ import annotations

from pathlib import Path

import httpx
import ollama
import openai
import pytest

from localllm.registry.catalog import SMOLLM2_TEMPLATE, lookup
from localllm.registry.names import ModelName
from localllm.templates.prompt import build_prompt, ollama_template
from localllm.templates.thinking import go_thinking_tags
from support.fixtures import metadata_string

ENTRY = lookup(ModelName.parse("smollm2:135m"))
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

SYSTEM = {"role": "system", "content": "You answer in one short sentence."}
USER1 = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT = {"role": "assistant", "content": "Paris."}
USER2 = {"role": "user", "content": "And of Japan? Ünïcödé, \"quotes\" and {{ braces }}."}
CONVERSATIONS = {
    "user only": [USER1],
    "system prompt": [SYSTEM, USER1],
    "multi-turn": [USER1, ASSISTANT, USER2],
    "system and multi-turn": [SYSTEM, USER1, ASSISTANT, USER2],
    "system later": [USER1, ASSISTANT, SYSTEM, USER2],
    "empty answer": [USER1, {"role": "assistant", "content": ""}, USER2],
}


@pytest.fixture(scope="module")
def gguf_template(smollm2_path: Path) -> str:
    return metadata_string(smollm2_path, "tokenizer.chat_template")


def catalog_prompt(messages: list[dict], tools: list[dict] | None = None) -> str:
    """The prompt of the pulled model: the catalog's TEMPLATE and SYSTEM."""
    return build_prompt(messages=messages, system=ENTRY.system, model_template=ENTRY.template,
                        gguf_chat_template=None, bos_token="", eos_token="", tools=tools)


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_without_tools_the_prompt_is_the_ggufs_own(name: str, gguf_template: str) -> None:
    messages = CONVERSATIONS[name]
    own = build_prompt(messages=messages, system=None, model_template=None, gguf_chat_template=gguf_template,
                       bos_token="", eos_token="")
    assert catalog_prompt(messages) == own


def test_tools_are_offered_and_calls_and_results_rendered_in_smollm2s_format() -> None:
    messages = [
        SYSTEM, USER1,
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"name": "get_weather", "arguments": {"city": "Lyon"}}}]},
        {"role": "tool", "content": '{"temperature": 21}'},
    ]
    prompt = catalog_prompt(messages, tools=[WEATHER_TOOL])
    system_turn, rest = prompt.split("<|im_end|>\n", 1)
    assert system_turn.startswith("<|im_start|>system\nYou answer in one short sentence.\n\n")
    assert '<tools>[{"type":"function","function":{"name":"get_weather"' in system_turn
    assert "<tool_call>[{" in system_turn  # the call format is shown
    assert rest == (
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>[{"name": "get_weather", "arguments": {"city":"Paris"}}, '
        '{"name": "get_weather", "arguments": {"city":"Lyon"}}]</tool_call><|im_end|>\n'
        '<|im_start|>user\n<tool_response>\n{"temperature": 21}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )


def test_smollm2_does_not_think() -> None:
    assert ENTRY.template == SMOLLM2_TEMPLATE
    assert go_thinking_tags(ollama_template(SMOLLM2_TEMPLATE)) is None


# --- the pulled default model, through the real daemon ---------------------------------------


def test_pulled_model_has_the_template_layer_and_lists_tools(daemon) -> None:
    shown = ollama.Client(host=daemon.url).show("smollm2:135m")
    assert shown.template == SMOLLM2_TEMPLATE
    assert "tools" in shown.capabilities and "thinking" not in shown.capabilities
    assert "TEMPLATE" in shown.modelfile


def test_chat_with_tools_on_the_default_model_is_answered(daemon) -> None:
    answer = ollama.Client(host=daemon.url).chat(
        "smollm2:135m", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL], options={"num_predict": 60, "temperature": 0})
    assert answer.done
    assert answer.message.content.strip() or answer.message.tool_calls


def test_openai_required_tool_call_on_the_default_model(daemon) -> None:
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)
    answer = client.chat.completions.create(
        model="smollm2:135m", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL], tool_choice="required", max_tokens=60, temperature=0)
    call = answer.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"


def test_openai_tool_result_round_trip_on_the_default_model(daemon) -> None:
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21, "unit": "celsius"}'},
    ]
    answer = client.chat.completions.create(model="smollm2:135m", messages=messages, tools=[WEATHER_TOOL],
                                            tool_choice="none", max_tokens=40)
    assert answer.choices[0].message.content


def test_a_model_whose_template_takes_no_tools_keeps_the_400(daemon, smollm2_path: Path) -> None:
    daemon.create("smollm2-gguf-template", f"FROM {smollm2_path}")
    response = httpx.post(f"{daemon.url}/api/chat", json={
        "model": "smollm2-gguf-template", "messages": [USER1], "tools": [WEATHER_TOOL], "stream": False}, timeout=60)
    assert response.status_code == 400
    assert "smollm2-gguf-template:latest does not support tools" in response.json()["error"]
