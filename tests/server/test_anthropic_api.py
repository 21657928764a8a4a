"""Anthropic's Messages API: the translator and renderer on hand-built input, then the
official ``anthropic`` client against the real daemon."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import anthropic
import httpx
import jsonschema
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from support.daemon import Daemon

from localllm.server.conversation import Answer, Content, Failure, Final, Thinking, ToolCallDelta
from localllm.server.dialects.anthropic import MessagesRenderer, MessagesRequest, messages_turn
from localllm.server.errors import ApiError
from localllm.server.tools import ToolCall

MODEL = "smollm2:135m"
GREEDY = {"temperature": 0, "top_k": 1}  # sampling fields the SDK no longer has arguments for
TOOLS_MODEL = "example-tools"
MODELFILES = Path(__file__).resolve().parents[2] / "modelfiles"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"],
    },
}


def request(**fields) -> MessagesRequest:
    return MessagesRequest(**{"model": MODEL, "max_tokens": 16, **fields})


# --- translator -------------------------------------------------------------------------


def test_translator_maps_blocks_to_core_messages():
    turn = messages_turn(request(
        system=[{"type": "text", "text": "Be brief. "}, {"type": "text", "text": "Use metric units."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Weather "}, {"type": "text", "text": "in Oslo?"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "aGVsbG8="}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants weather.", "signature": ""},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "-3 C, "}, {"type": "text", "text": "snow"}]},
                {"type": "text", "text": "And tomorrow?"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "get_weather",
                                               "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "timeout",
                                          "is_error": True}]},
        ],
        tools=[WEATHER_TOOL], tool_choice={"type": "tool", "name": "get_weather"},
        thinking={"type": "enabled", "budget_tokens": 1024}, stop_sequences=["###"], temperature=0.5, top_k=40,
        metadata={"user_id": "u-1"}))
    roles = [m.role for m in turn.messages]
    assert roles == ["system", "user", "assistant", "tool", "user", "assistant", "tool"]
    system, user, assistant, result, follow_up, _, failed = turn.messages
    assert system.content == "Be brief. Use metric units."
    assert user.content == "Weather in Oslo?" and user.images == ["aGVsbG8="]
    assert assistant.thinking == "The user wants weather." and assistant.content == "Let me look."
    assert assistant.tool_calls == [ToolCall("get_weather", {"city": "Oslo"}, "toolu_1")]
    assert (result.content, result.tool_call_id, result.tool_name) == ("-3 C, snow", "toolu_1", "get_weather")
    assert follow_up.content == "And tomorrow?"
    assert failed.content == "Error: timeout"
    assert turn.tools == [{"type": "function", "function": {"name": "get_weather", "description": WEATHER_TOOL[
        "description"], "parameters": WEATHER_TOOL["input_schema"]}}]
    assert turn.tool_choice == "get_weather" and turn.think is True
    assert turn.options == {"temperature": 0.5, "top_p": 1.0, "num_predict": 16, "top_k": 40, "stop": ["###"]}


@pytest.mark.parametrize(("choice", "expected", "parallel"), [
    (None, "auto", True), ({"type": "auto"}, "auto", True), ({"type": "any"}, "required", True),
    ({"type": "none"}, "none", True), ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
    ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
])
def test_tool_choice(choice, expected, parallel):
    turn = messages_turn(request(messages=[{"role": "user", "content": "hi"}], tools=[WEATHER_TOOL],
                                 tool_choice=choice))
    assert turn.tool_choice == expected and turn.parallel_tool_calls is parallel


@pytest.mark.parametrize(("config", "effort", "think"), [
    (None, None, None), ({"type": "disabled"}, None, False), ({"type": "enabled", "budget_tokens": 2048}, None, True),
    ({"type": "adaptive"}, None, None), (None, "low", "low"), ({"type": "adaptive"}, "max", "high"),
    ({"type": "enabled", "budget_tokens": 2048, "display": "summarized"}, "medium", "medium"),
    ({"type": "disabled"}, "high", False),
])
def test_thinking_config_and_effort(config, effort, think):
    turn = messages_turn(request(messages=[{"role": "user", "content": "hi"}], thinking=config,
                                 output_config={"effort": effort}))
    assert turn.think == think and type(turn.think) is type(think)


def test_output_format_is_a_json_schema_constraint():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    turn = messages_turn(request(messages=[{"role": "user", "content": "hi"}],
                                 output_config={"format": {"type": "json_schema", "schema": schema}}))
    assert turn.constraint.json_schema == schema


@pytest.mark.parametrize(("fields", "named"), [
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages[0].content[0]: block type 'document'"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]}]},
     "messages[0].content[0]: block type 'tool_use' is not supported in a user message"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]}]},
     "messages[0].content[0].tool_use_id: no earlier tool_use block has id 'toolu_9'"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]: tool type 'web_search_20250305'"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema is required"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "tool", "name": "get_time"}},
     "tool_choice.name 'get_time' is not among the tools"),
    ({"tool_choice": {"type": "any"}}, "tool_choice.type 'any' needs tools"),
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "sometimes"}}, "thinking.type 'sometimes'"),
    ({"thinking": {"type": "adaptive", "display": "omitted"}}, "thinking.display 'omitted'"),
    ({"output_config": {"format": {"type": "xml"}}}, "output_config.format.type 'xml'"),
    ({"system": [{"type": "image", "source": {}}]}, "system[0]: block type 'image'"),
    ({"mcp_servers": [{"type": "url", "url": "https://example.org"}]}, "mcp_servers:"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.org/cat.png"}}]}]},
     "messages[0].content[0].source: image source type 'url' is not supported"),
])
def test_translator_refuses_what_it_cannot_honour(fields, named):
    fields = {"messages": [{"role": "user", "content": "hi"}], **fields}
    with pytest.raises(ApiError) as refused:
        messages_turn(request(**fields))
    assert refused.value.status == 400 and named in refused.value.message


# --- renderer ---------------------------------------------------------------------------

CALL = ToolCall("get_weather", {"city": "Oslo"}, "call_1")


def test_stream_renderer_blocks_in_order():
    renderer = MessagesRenderer(MODEL)
    deltas = [Thinking("Cold "), Thinking("there."), Content("It is "), Content("snowing."), ToolCallDelta(CALL, 0),
              Content(""), Final("tool_calls", metrics={"prompt_eval_count": 7, "cached_tokens": 5, "eval_count": 9})]
    events = renderer.opening() + [e for d in deltas for e in renderer.process(d)]
    shape = [(e["type"], e.get("index"), (e.get("delta") or e.get("content_block") or {}).get("type")) for e in events]
    assert shape == [
        ("message_start", None, None), ("ping", None, None),
        ("content_block_start", 0, "thinking"), ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"), ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"), ("content_block_delta", 1, "text_delta"),
        ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"), ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
        ("message_delta", None, None), ("message_stop", None, None),
    ]
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"] == {"input_tokens": 7, "output_tokens": 9, "cache_read_input_tokens": 5,
                                   "cache_creation_input_tokens": 0}
    # The SDK's own accumulator builds from the events the message a whole answer renders as.
    snapshot = None
    for event in events:
        if event["type"] != "ping":
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs={})
    whole = renderer.whole(Answer("It is snowing.", "Cold there.", [CALL], deltas[-1]))
    assert {k: v for k, v in snapshot.to_dict().items() if k != "stop_details"} == whole  # refusals only


def test_stream_renderer_stop_sequence_and_failure():
    renderer = MessagesRenderer(MODEL)
    final = renderer.process(Final("stop", stop_sequence="###"))
    assert final[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "###"}
    renderer = MessagesRenderer(MODEL)
    events = renderer.process(Content("Hal")) + renderer.process(Failure("model runner was killed"))
    assert events[-1] == {"type": "error", "error": {"type": "api_error", "message": "model runner was killed"}}


@pytest.mark.parametrize(("final", "reason"), [(Final("stop"), "end_turn"), (Final("length"), "max_tokens"),
                                               (Final("tool_calls"), "tool_use")])
def test_whole_answer_stop_reason(final, reason):
    assert MessagesRenderer(MODEL).whole(Answer("x", final=final))["stop_reason"] == reason


# --- through the daemon -----------------------------------------------------------------


@pytest.fixture(scope="module")
def client(daemon) -> anthropic.Anthropic:
    daemon.create(TOOLS_MODEL, (MODELFILES / "tools.Modelfile").read_text())
    return anthropic.Anthropic(base_url=daemon.url, api_key="unused", max_retries=0)


def test_messages_create(client):
    message = client.messages.create(model=MODEL, max_tokens=16, system="You are terse.",
                                     messages=[{"role": "user", "content": "Say hello."}],
                                     metadata={"user_id": "tester"})
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == MODEL
    assert [block.type for block in message.content] == ["text"] and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens > 0
    assert 0 < message.usage.output_tokens <= 16


def test_messages_stream_joins_to_the_whole_answer(client):
    ask = dict(model=MODEL, max_tokens=24, extra_body=GREEDY, messages=[{"role": "user", "content": "Name a fruit."}])
    whole = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_message()
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == whole.content[0].text == final.content[0].text
    types = [e.type for e in events if e.type in ("message_start", "content_block_start", "content_block_stop",
                                                   "message_delta", "message_stop")]
    assert types == ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"]
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stream_wire_format(daemon):
    body = {"model": MODEL, "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.stream("POST", f"{daemon.url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"},
                      timeout=120) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = response.read().decode().strip().split("\n\n")
    names = []
    for frame in frames:
        event_line, data_line = frame.split("\n")
        name = event_line.removeprefix("event: ")
        assert json.loads(data_line.removeprefix("data: "))["type"] == name
        names.append(name)
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]


def test_structured_output(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "sunny": {"type": "boolean"}},
              "required": ["city", "sunny"], "additionalProperties": False}
    message = client.messages.create(model=MODEL, max_tokens=60, messages=[{"role": "user", "content": "Rome?"}],
                                     output_config={"format": {"type": "json_schema", "schema": schema}})
    assert message.stop_reason == "end_turn"
    jsonschema.validate(json.loads(message.content[0].text), schema)


def test_killed_runner_ends_the_stream_with_an_error_event(client, daemon):
    essay = [{"role": "user", "content": "Write a very long essay about the sea."}]
    with client.messages.stream(model=MODEL, max_tokens=400, extra_body=GREEDY, messages=essay) as stream:
        events = iter(stream)
        assert next(events).type == "message_start"
        for pid in daemon.runner_pids():
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(anthropic.APIStatusError) as failed:
            for _ in events:
                pass
    assert failed.value.body["type"] == "error" and failed.value.body["error"]["type"] == "api_error"
    assert "runner" in failed.value.body["error"]["message"]


THINKING_MODELFILE = """FROM smollm2:135m
TEMPLATE \"\"\"{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ if .Think }}<think>
{{ end }}\"\"\"
"""


def test_streamed_thinking_on_a_model_whose_template_opens_the_block(client, daemon):
    daemon.create("thinking-smollm2", THINKING_MODELFILE)
    ask = dict(model="thinking-smollm2", max_tokens=24, thinking={"type": "enabled", "budget_tokens": 1024},
               extra_body=GREEDY, messages=[{"role": "user", "content": "Why is the sky blue?"}])
    with client.messages.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_message()
    thought = "".join(e.delta.thinking for e in events if e.type == "content_block_delta"
                      and e.delta.type == "thinking_delta")
    assert final.content[0].type == "thinking" and final.content[0].thinking == thought and thought.strip()
    assert client.messages.create(**ask).content[0].thinking == thought
    hidden = client.messages.create(**{**ask, "thinking": {"type": "disabled"}})
    assert all(block.type != "thinking" for block in hidden.content)


def test_tool_use_round_trip(client):
    question = {"role": "user", "content": "What is the weather in Paris?"}
    called = client.messages.create(model=TOOLS_MODEL, max_tokens=80, messages=[question], tools=[WEATHER_TOOL],
                                    tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
    assert called.stop_reason == "tool_use"
    use = next(block for block in called.content if block.type == "tool_use")
    assert use.name == "get_weather" and use.id
    jsonschema.validate(use.input, WEATHER_TOOL["input_schema"])
    answered = client.messages.create(
        model=TOOLS_MODEL, max_tokens=40, tools=[WEATHER_TOOL], tool_choice={"type": "none"},
        messages=[question, {"role": "assistant", "content": [block.model_dump() for block in called.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                "content": '{"temperature": 21, "unit": "celsius"}'}]}])
    assert answered.stop_reason in ("end_turn", "max_tokens")
    assert [block.type for block in answered.content] == ["text"] and answered.content[0].text


def test_streamed_tool_use(client):
    with client.messages.stream(model=TOOLS_MODEL, max_tokens=80, tools=[WEATHER_TOOL], tool_choice={"type": "any"},
                                extra_body=GREEDY, messages=[{"role": "user", "content": "Weather in Oslo?"}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    use = final.content[-1]
    assert use.type == "tool_use" and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER_TOOL["input_schema"])


def test_stop_sequence(client):
    ask = dict(model=MODEL, max_tokens=40, extra_body=GREEDY,
               messages=[{"role": "user", "content": "Tell me about the sea."}])
    full = client.messages.create(**ask).content[0].text
    words = full.split()
    assert len(words) > 3, full
    stop = words[3]
    cut = client.messages.create(**ask, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == full[:full.index(stop)]


def test_max_tokens(client):
    message = client.messages.create(model=MODEL, max_tokens=3, extra_body=GREEDY,
                                     messages=[{"role": "user", "content": "Write a long story."}])
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.output_tokens == 3


def test_count_tokens_matches_the_prompt_sent(client):
    ask = dict(model=TOOLS_MODEL, system=[{"type": "text", "text": "You report weather."}], tools=[WEATHER_TOOL],
               messages=[{"role": "user", "content": "Is it raining in Lima today, and how cold is it?"}])
    counted = client.messages.count_tokens(**ask)
    used = client.messages.create(**ask, max_tokens=4).usage
    assert counted.input_tokens == used.input_tokens + used.cache_read_input_tokens
    without_tools = client.messages.count_tokens(**ask, tool_choice={"type": "none"})
    assert without_tools.input_tokens < counted.input_tokens  # tool_choice none leaves the tools out of the prompt


@pytest.mark.parametrize(("body", "named"), [
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "block type 'document'"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "tool", "name": "get_time"}},
     "tool_choice.name 'get_time'"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]},
     "tool_use_id: no earlier tool_use block has id 'toolu_9'"),
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tool type 'bash_20250124'"),
    ({"max_tokens": None}, "max_tokens"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url",
                                                                             "url": "https://example.org/a.png"}}]}]},
     "nothing is downloaded"),
    ({"temperature": 1.5}, "temperature"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "does not support thinking"),
])
def test_bad_input_is_400_in_anthropic_shape(daemon, body, named):
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **body}
    body = {key: value for key, value in body.items() if value is not None}
    response = httpx.post(f"{daemon.url}/v1/messages", json=body, timeout=60)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert named in error["error"]["message"]


def test_sdk_raises_typed_errors(client):
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="nosuch:1b", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": [{"type": "video"}]}])
    assert "block type 'video'" in bad.value.body["error"]["message"]


@pytest.fixture(scope="module")
def keyed_daemon(tmp_path_factory):
    instance = Daemon(tmp_path_factory.mktemp("anthropic-keyed"), LOCALLLM_API_KEY="s3cret").start()
    yield instance
    instance.stop()


def test_x_api_key(keyed_daemon):
    ask = dict(model="absent:1b", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.AuthenticationError) as refused:
        anthropic.Anthropic(base_url=keyed_daemon.url, api_key="nope", max_retries=0).messages.count_tokens(**ask)
    assert refused.value.body["error"]["type"] == "authentication_error"
    assert "x-api-key" in refused.value.body["error"]["message"]
    # the right key gets past the guard: the answer is about the model, not the key
    with pytest.raises(anthropic.NotFoundError):
        anthropic.Anthropic(base_url=keyed_daemon.url, api_key="s3cret", max_retries=0).messages.count_tokens(**ask)
