"""OpenAI's API end to end: the official ``openai`` client against the real daemon."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

MODEL = "smollm2:135m"


@pytest.fixture(scope="module")
def client(daemon) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)


def test_chat_completion(client):
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], temperature=0, max_tokens=16)
    assert answer.object == "chat.completion"
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content
    assert answer.choices[0].finish_reason in ("stop", "length")
    usage = answer.usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_completion_stream_with_usage(client):
    messages = [{"role": "user", "content": [{"type": "text", "text": "Name a fruit."}]}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=12)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=messages, temperature=0, max_tokens=12, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_n_choices(client):
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Pick a number."}], n=3, seed=1, max_tokens=8)
    assert [c.index for c in answer.choices] == [0, 1, 2]


def test_text_completion_with_echo(client):
    answer = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=5, temperature=0, echo=True)
    assert answer.object == "text_completion"
    assert answer.choices[0].text.startswith("The sky is")
    assert answer.choices[0].finish_reason == "length"


def test_models(client):
    ids = [m.id for m in client.models.list().data]
    assert MODEL in ids
    assert client.models.retrieve(MODEL).id == MODEL


def test_json_schema_response_format(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Invent a person with a name and an age."}],
        temperature=0, max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}})
    assert answer.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answer.choices[0].message.content), schema)


# --- bad input -------------------------------------------------------------------------


def test_unknown_model_is_404_in_openai_shape(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert "nope" in info.value.body["message"]


def test_n_above_maximum_is_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], n=50)
    assert "n" in info.value.body["message"]


def test_empty_messages_is_400(daemon):
    response = httpx.post(f"{daemon.url}/v1/chat/completions", json={"model": MODEL, "messages": []})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_bad_response_format_is_400(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                       response_format={"type": "xml"})
