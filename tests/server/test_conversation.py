"""The conversation core end to end: thinking and tool calls split while the answer
streams, through the real daemon, the real model and every dialect's client.

SmolLM2 does not think, so the tests give it a template that opens a thinking
block when asked to think, and a grammar that makes it close the block before
answering: the parser, the renderers and the clients then see real streamed
thinking from a real model.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import ollama
import openai
import pytest
from support.thinking import AFTER_OPENED_BLOCK, THINKING_TEMPLATE, WHOLE_BLOCK

EXAMPLES = Path(__file__).resolve().parents[2] / "modelfiles"

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def models(daemon):
    modelfile = f'FROM smollm2:135m\nTEMPLATE """{THINKING_TEMPLATE}"""\nPARAMETER temperature 0\n'
    daemon.create("thinker", modelfile)
    daemon.create("toolsmodel", (EXAMPLES / "tools.Modelfile").read_text())
    return daemon


def chat_lines(url: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{url}/api/chat", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line) for line in response.iter_lines() if line]


def test_thinking_streams_apart_from_the_answer_in_ollama_chat(models):
    body = {"model": "thinker", "messages": [{"role": "user", "content": "Say hi."}], "think": True,
            "grammar": AFTER_OPENED_BLOCK, "options": {"num_predict": 64}}
    lines = chat_lines(models.url, body)
    thinking = "".join(line["message"].get("thinking", "") for line in lines)
    content = "".join(line["message"]["content"] for line in lines)
    assert len(thinking.split()) == 3 and "<" not in thinking
    assert content[0].isupper() and content.endswith(".") and "think" not in content
    # thinking arrives in several pieces, before the first piece of the answer
    thinking_at = [i for i, line in enumerate(lines) if line["message"].get("thinking")]
    content_at = [i for i, line in enumerate(lines) if line["message"]["content"]]
    assert len(thinking_at) > 1 and max(thinking_at) < min(content_at)
    whole = httpx.post(f"{models.url}/api/chat", json=dict(body, stream=False), timeout=120).json()
    assert whole["message"]["thinking"] == thinking and whole["message"]["content"] == content


def test_thinking_with_the_ollama_client_and_generate(models):
    client = ollama.Client(host=models.url)
    response = httpx.post(f"{models.url}/api/generate", json={
        "model": "thinker", "prompt": "Say hi.", "think": True, "grammar": AFTER_OPENED_BLOCK,
        "stream": False, "options": {"num_predict": 64}}, timeout=120).json()
    assert len(response["thinking"].split()) == 3 and response["response"][0].isupper()
    answer = client.chat(model="thinker", messages=[{"role": "user", "content": "Say hi."}], think=True,
                         options={"num_predict": 64, "grammar": AFTER_OPENED_BLOCK})
    assert answer.message.thinking and answer.message.content and "</think>" not in answer.message.content


def test_think_false_drops_the_block_of_a_model_that_always_thinks(models):
    body = {"model": "thinker", "messages": [{"role": "user", "content": "Say hi."}], "think": False,
            "grammar": WHOLE_BLOCK, "stream": False, "options": {"num_predict": 64}}
    message = httpx.post(f"{models.url}/api/chat", json=body, timeout=120).json()["message"]
    assert "thinking" not in message
    assert message["content"][0].isupper() and "think" not in message["content"]
    # left unset, the block is still split out rather than mixed into the answer
    message = httpx.post(f"{models.url}/api/chat", json=dict(body, think=None), timeout=120).json()["message"]
    assert len(message["thinking"].split()) == 2 and "think" not in message["content"]


def test_openai_reasoning_content(models):
    client = openai.OpenAI(base_url=f"{models.url}/v1", api_key="unused", max_retries=0)
    request = dict(model="thinker", messages=[{"role": "user", "content": "Say hi."}], reasoning_effort="low",
                   max_tokens=64, temperature=0, extra_body={"grammar": AFTER_OPENED_BLOCK})
    whole = client.chat.completions.create(**request)
    reasoning = whole.choices[0].message.model_extra["reasoning_content"]
    assert len(reasoning.split()) == 3 and "think" not in whole.choices[0].message.content
    chunks = list(client.chat.completions.create(**request, stream=True))
    streamed = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices)
    assert streamed == reasoning
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content


def test_show_lists_thinking_only_for_models_that_can(models):
    assert "thinking" in httpx.post(f"{models.url}/api/show", json={"model": "thinker"}).json()["capabilities"]
    assert "thinking" not in httpx.post(f"{models.url}/api/show", json={"model": "smollm2:135m"}).json()["capabilities"]


@pytest.mark.parametrize("path,body,needle", [
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "think": True}, "does not support thinking"),
    ("/api/generate", {"prompt": "hi", "think": "high"}, "does not support thinking"),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "think": "extreme"}, "unknown value"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "high"},
     "does not support thinking"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "extreme"},
     "reasoning_effort"),
])
def test_think_refusals(models, path, body, needle):
    response = httpx.post(f"{models.url}{path}", json=dict(body, model="smollm2:135m"), timeout=60)
    assert response.status_code == 400
    error = response.json()["error"]
    assert needle in (error["message"] if isinstance(error, dict) else error)


def test_content_streams_before_the_end_of_a_tool_offering_request(models):
    """Offering tools does not make the answer wait: prose arrives token by token."""
    body = {"model": "toolsmodel", "messages": [{"role": "user", "content": "Write a sentence about rain."}],
            "tools": [WEATHER_TOOL], "grammar": 'root ::= [A-Z] [a-z ]{30,60} "."', "options": {"num_predict": 80}}
    lines = chat_lines(models.url, body)
    pieces = [line["message"]["content"] for line in lines[:-1] if line["message"]["content"]]
    assert lines[-1]["done"] and len(pieces) > 5
    client = openai.OpenAI(base_url=f"{models.url}/v1", api_key="unused", max_retries=0)
    chunks = list(client.chat.completions.create(
        model="toolsmodel", messages=body["messages"], tools=[WEATHER_TOOL], stream=True, max_tokens=80,
        extra_body={"grammar": body["grammar"]}))
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(contents) > 5


def test_streamed_tool_call_carries_an_id_the_client_sends_back(models):
    client = openai.OpenAI(base_url=f"{models.url}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    chunks = list(client.chat.completions.create(model="toolsmodel", messages=messages, tools=[WEATHER_TOOL],
                                                 tool_choice="required", stream=True, max_tokens=60,
                                                 temperature=0))
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert len(calls) == 1 and calls[0].function.name == "get_weather" and calls[0].id
    assert json.loads(calls[0].function.arguments)["city"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    messages += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0].id, "type": "function", "function": {"name": "get_weather",
                                                              "arguments": calls[0].function.arguments}}]},
                 {"role": "tool", "tool_call_id": calls[0].id, "content": "Sunny, 21 C"}]
    answer = client.chat.completions.create(model="toolsmodel", messages=messages, tools=[WEATHER_TOOL],
                                            max_tokens=30, temperature=0)
    assert answer.choices[0].message.content or answer.choices[0].message.tool_calls
    with pytest.raises(openai.BadRequestError, match="unknown tool call id"):
        client.chat.completions.create(model="toolsmodel", max_tokens=5, tools=[WEATHER_TOOL], messages=[
            messages[0], {"role": "tool", "tool_call_id": "call_nope", "content": "x"}])


def test_images_for_a_model_without_vision_are_refused(models):
    tiny_png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    response = httpx.post(f"{models.url}/api/chat", json={"model": "smollm2:135m", "messages": [
        {"role": "user", "content": "what is this?", "images": [tiny_png]}]}, timeout=60)
    assert response.status_code == 400 and "does not support images" in response.json()["error"]
    client = openai.OpenAI(base_url=f"{models.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="does not support images"):
        client.chat.completions.create(model="smollm2:135m", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{tiny_png}"}}]}])


@pytest.mark.parametrize("tools,choice,needle", [
    ([WEATHER_TOOL], {"type": "function", "function": {"name": "send_email"}}, "not among the tools"),
    (None, "required", "needs tools"),
])
def test_tool_choice_refusals(models, tools, choice, needle):
    client = openai.OpenAI(base_url=f"{models.url}/v1", api_key="unused", max_retries=0)
    extra = {"tools": tools} if tools else {}
    with pytest.raises(openai.BadRequestError, match=needle):
        client.chat.completions.create(model="toolsmodel", messages=[{"role": "user", "content": "hi"}],
                                       tool_choice=choice, max_tokens=5, **extra)


def test_logprobs_cover_the_answer_not_the_thinking(models):
    body = {"model": "thinker", "messages": [{"role": "user", "content": "Say hi."}], "think": True,
            "grammar": AFTER_OPENED_BLOCK, "stream": False, "logprobs": True, "options": {"num_predict": 64}}
    answer = httpx.post(f"{models.url}/api/chat", json=body, timeout=120).json()
    tokens = "".join(entry["token"] for entry in answer["logprobs"])
    assert answer["message"]["content"] in tokens
    assert answer["message"]["thinking"] not in tokens
