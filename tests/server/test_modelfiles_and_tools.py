"""The example Modelfiles in modelfiles/, and tool calling through both APIs."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import ollama
import openai
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "modelfiles"
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


FORECAST_TOOL = {
    "type": "function",
    "function": {
        "name": "get_forecast",
        "description": "Weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


def _history_with_wrong_calls() -> list[dict]:
    """Three earlier turns whose calls use an argument the schema does not have ("location").

    SmolLM2 copies them: without a grammar its next call is ``{"location": …}``,
    so a call that validates shows the grammar at work from the call marker on.
    """
    messages = []
    for i, city in enumerate(("Rome", "Madrid", "Paris")):
        messages += [
            {"role": "user", "content": f"What's the forecast for {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
                "name": "get_forecast", "arguments": json.dumps({"location": city})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": '{"forecast": "sunny"}'},
            {"role": "assistant", "content": f"It will be sunny in {city}."},
        ]
    return messages


def test_openai_auto_tool_call_is_held_to_the_schema(oai):
    messages = _history_with_wrong_calls() + [{"role": "user", "content": "And the forecast for Tokyo?"}]
    answer = oai.chat.completions.create(model="example-tools", messages=messages, tools=[FORECAST_TOOL],
                                         max_tokens=80, temperature=0)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_forecast"
    jsonschema.validate(json.loads(call.function.arguments), FORECAST_TOOL["function"]["parameters"])


def test_auto_tool_choice_still_lets_the_model_answer_in_prose(oai):
    messages = _history_with_wrong_calls() + [{"role": "user", "content": "Tell me a joke."}]
    answer = oai.chat.completions.create(model="example-tools", messages=messages, tools=[FORECAST_TOOL],
                                         max_tokens=40, temperature=0)
    assert answer.choices[0].message.content.strip()
    assert not answer.choices[0].message.tool_calls


def test_ollama_tool_call_is_held_to_the_schema(examples):
    history = []
    for m in _history_with_wrong_calls():  # the ollama client's shape: arguments as an object, no ids
        m = {k: v for k, v in m.items() if k != "tool_call_id" and v is not None}
        if m.get("tool_calls"):
            m["tool_calls"] = [{"function": {"name": c["function"]["name"],
                                             "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        history.append(m)
    answer = ollama.Client(host=examples.url).chat(
        "example-tools", messages=history + [{"role": "user", "content": "And the forecast for Tokyo?"}],
        tools=[FORECAST_TOOL], options={"num_predict": 80, "temperature": 0})
    assert answer.message.tool_calls, answer.message.content
    call = answer.message.tool_calls[0]
    assert call.function.name == "get_forecast"
    jsonschema.validate(dict(call.function.arguments), FORECAST_TOOL["function"]["parameters"])


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


def test_tools_on_a_model_without_tool_support(examples, oai, smollm2_path):
    examples.create("smollm2-own-template", f"FROM {smollm2_path}")  # the GGUF's template takes no tools
    with pytest.raises(openai.BadRequestError, match="does not support tools"):
        oai.chat.completions.create(model="smollm2-own-template", messages=[{"role": "user", "content": "hi"}],
                                    tools=[WEATHER_TOOL])


TAG_TOOL = {"type": "function", "function": {"name": "tag", "parameters": {
    "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}}}


def test_tool_schema_the_grammar_cannot_express_still_works_unforced(examples):
    # raw JSON: the ollama client's Tool model would drop uniqueItems on the way
    response = httpx.post(f"{examples.url}/api/chat", timeout=120, json={
        "model": "example-tools", "stream": False, "messages": [{"role": "user", "content": "Tag this: cats"}],
        "tools": [TAG_TOOL], "options": {"num_predict": 20}})
    assert response.status_code == 200, response.text
    assert response.json()["done"]


def test_forcing_a_call_to_a_tool_schema_the_grammar_cannot_express_is_400(oai):
    with pytest.raises(openai.BadRequestError, match="uniqueItems"):
        oai.chat.completions.create(model="example-tools", messages=[{"role": "user", "content": "Tag: cats"}],
                                    tools=[TAG_TOOL], tool_choice="required", max_tokens=20)


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
