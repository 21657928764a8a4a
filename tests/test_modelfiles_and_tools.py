"""The example Modelfiles in modelfiles/, and tool calling through both APIs."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import ollama
import openai
import pytest

EXAMPLES = Path(__file__).parent.parent / "modelfiles"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def examples(daemon):
    for name in ("assistant", "fewshot", "tools"):
        daemon.create(f"example-{name}", (EXAMPLES / f"{name}.Modelfile").read_text())
    return daemon


@pytest.fixture(scope="module")
def oai(examples) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{examples.url}/v1", api_key="x", max_retries=0)


def test_assistant_persona(examples):
    client = ollama.Client(host=examples.url)
    shown = client.show("example-assistant")
    assert "Pip" in shown.modelfile
    assert "temperature" in shown.parameters and "num_ctx" in shown.parameters
    answer = client.chat("example-assistant", messages=[{"role": "user", "content": "Who are you?"}],
                         options={"num_predict": 40})
    assert answer.message.content.strip()


def test_fewshot_messages_are_stored_and_used(examples):
    client = ollama.Client(host=examples.url)
    shown = client.show("example-fewshot")
    assert "MESSAGE user France" in shown.modelfile
    answer = client.chat("example-fewshot", messages=[{"role": "user", "content": "Germany"}])
    assert answer.message.content.strip()
    assert answer.eval_count <= 16


def test_custom_template_is_used(examples):
    shown = ollama.Client(host=examples.url).show("example-tools")
    assert "<tool_call>" in shown.template
    assert "tools" in shown.capabilities


def test_openai_forced_tool_call(oai):
    answer = oai.chat.completions.create(
        model="example-tools", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL], tool_choice="required", max_tokens=80)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])


def test_openai_tool_result_round_trip(oai):
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21, "unit": "celsius"}'},
    ]
    answer = oai.chat.completions.create(model="example-tools", messages=messages, tools=[WEATHER_TOOL],
                                         tool_choice="none", max_tokens=40)
    assert answer.choices[0].message.content


def test_openai_streamed_tool_call(oai):
    chunks = list(oai.chat.completions.create(
        model="example-tools", messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=80, stream=True))
    calls = [c for chunk in chunks if chunk.choices for c in (chunk.choices[0].delta.tool_calls or [])]
    assert calls and calls[0].function.name == "get_weather"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_ollama_client_with_tools(examples):
    client = ollama.Client(host=examples.url)
    answer = client.chat("example-tools", messages=[{"role": "user", "content": "What is the weather in Rome?"}],
                         tools=[WEATHER_TOOL], options={"num_predict": 80})
    assert answer.done
    for call in answer.message.tool_calls or []:
        assert call.function.name == "get_weather"
        assert isinstance(call.function.arguments, dict)


def test_ollama_format_schema(examples):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
              "required": ["city", "population"]}
    answer = ollama.Client(host=examples.url).chat(
        "smollm2:135m", messages=[{"role": "user", "content": "Describe Paris as JSON."}], format=schema,
        options={"temperature": 0, "num_predict": 80})
    assert answer.done_reason == "stop"
    jsonschema.validate(json.loads(answer.message.content), schema)


# --- bad input -------------------------------------------------------------------------


def test_tools_on_a_model_without_tool_support(oai):
    with pytest.raises(openai.BadRequestError, match="does not support tools"):
        oai.chat.completions.create(model="smollm2:135m", messages=[{"role": "user", "content": "hi"}],
                                    tools=[WEATHER_TOOL])


def test_tool_schema_must_be_an_object(examples):
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}
    response = httpx.post(f"{examples.url}/api/chat", json={
        "model": "example-tools", "messages": [{"role": "user", "content": "hi"}], "tools": [bad]})
    assert response.status_code == 400
    assert "object" in response.json()["error"]


def test_modelfile_errors_name_the_line(examples):
    response = httpx.post(f"{examples.url}/api/create", json={
        "model": "broken", "modelfile": "FROM smollm2:135m\nFLY away\n"})
    assert response.status_code == 400
    assert "line 2" in response.json()["error"]
    response = httpx.post(f"{examples.url}/api/create", json={"model": "broken", "modelfile": "SYSTEM hi\n"})
    assert response.status_code == 400
    assert "FROM" in response.json()["error"]


def test_template_that_cannot_render_is_refused_at_create(examples):
    response = httpx.post(f"{examples.url}/api/create", json={
        "model": "broken", "modelfile": 'FROM smollm2:135m\nTEMPLATE "{{ if .Prompt }}unclosed"\n'})
    assert response.status_code == 400
    assert "TEMPLATE" in response.json()["error"]
    assert "broken" not in [m["name"] for m in httpx.get(f"{examples.url}/api/tags").json()["models"]]
