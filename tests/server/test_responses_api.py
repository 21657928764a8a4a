"""OpenAI's Responses API (``/v1/responses``): the translator and the renderer on their own,
then the official ``openai`` client against the real daemon."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from localllm.server.conversation import Answer, Content, Failure, Final, Message, Thinking, ToolCallDelta
from localllm.server.dialects.responses import (
    ResponseRenderer,
    ResponsesRequest,
    response_object,
    responses_turn,
)
from localllm.server.errors import ApiError
from localllm.server.response_store import ResponseStore
from localllm.server.tools import ToolCall

MODEL = "smollm2:135m"
TOOLS_MODEL = "example-tools"
WEATHER_TOOL = {
    "type": "function", "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
EVENT = TypeAdapter(ResponseStreamEvent)


def turn_of(**body):
    return responses_turn(ResponsesRequest(model=MODEL, **body))


def refused(needle: str, **body) -> None:
    with pytest.raises(ApiError) as info:
        turn_of(**body)
    assert info.value.status == 400
    assert needle in info.value.message, info.value.message


# --- translator ------------------------------------------------------------------------


def test_string_input_and_instructions():
    turn = turn_of(input="Hi there", instructions="Be brief.", max_output_tokens=7, temperature=0.2)
    assert [(m.role, m.content) for m in turn.messages] == [("system", "Be brief."), ("user", "Hi there")]
    assert turn.options["num_predict"] == 7 and turn.options["temperature"] == 0.2


def test_items_of_one_assistant_turn_become_one_message():
    turn = turn_of(input=[
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                          {"type": "input_text", "text": "in Oslo?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need the tool."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temp": 3}'},
    ])
    system, user, assistant, tool = turn.messages
    assert (system.role, system.content) == ("system", "Use tools.")
    assert (user.role, user.content) == ("user", "Weather in Oslo?")
    assert (assistant.thinking, assistant.content) == ("Need the tool.", "Checking.")
    assert assistant.tool_calls == [ToolCall("get_weather", {"city": "Oslo"}, "call_1")]
    assert (tool.role, tool.content, tool.tool_call_id, tool.tool_name) == ("tool", '{"temp": 3}', "call_1",
                                                                           "get_weather")


def test_image_parts_and_refusals():
    turn = turn_of(input=[
        {"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot say."}]},
    ])
    assert turn.messages[0].images == ["AAAA"]
    assert turn.messages[1].content == "I cannot say."


def test_history_comes_after_instructions_and_before_input():
    history = [Message("user", "first"), Message("assistant", "answer", tool_calls=[ToolCall("f", {}, "call_9")])]
    turn = responses_turn(ResponsesRequest(model=MODEL, instructions="New rules.", input=[
        {"type": "function_call_output", "call_id": "call_9", "output": [{"type": "input_text", "text": "42"}]}]),
        history)
    assert [m.role for m in turn.messages] == ["system", "user", "assistant", "tool"]
    assert (turn.messages[-1].tool_name, turn.messages[-1].content) == ("f", "42")


def test_tools_choice_format_and_reasoning():
    turn = turn_of(input="hi", tools=[WEATHER_TOOL], tool_choice={"type": "function", "name": "get_weather"},
                   text={"format": {"type": "json_schema", "name": "p", "schema": PERSON, "strict": True}},
                   reasoning={"effort": "low"}, parallel_tool_calls=False)
    assert turn.tools == [{"type": "function", "function": {
        "name": "get_weather", "description": WEATHER_TOOL["description"], "parameters": WEATHER_TOOL["parameters"]}}]
    assert turn.tool_choice == "get_weather" and turn.parallel_tool_calls is False
    assert turn.constraint.json_schema == PERSON
    assert turn.think == "low"
    assert turn_of(input="hi", text={"format": {"type": "json_object"}}).constraint.grammar
    assert turn_of(input="hi", reasoning={"effort": "none"}).think is False


@pytest.mark.parametrize(("body", "needle"), [
    ({"input": [{"type": "computer_call_output", "call_id": "c"}]}, "item type 'computer_call_output'"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].content[0]: content part type 'input_file'"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input[0].content[0].image_url"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role 'tool'"),
    ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]},
     "input[0].call_id: function_call_output for unknown call id 'call_x'"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id is required"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{oops"}]}, "not valid JSON"),
    ({"input": [{"type": "reasoning", "summary": [{"type": "text", "text": "x"}]}]}, "input[0].summary"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]: tool type 'web_search'"),
    ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"input": "hi", "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort 'extreme'"),
    ({"input": "hi", "reasoning": {"summary": "everything"}}, "reasoning.summary"),
    ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format.type 'yaml'"),
    ({"input": "hi", "text": {"verbosity": "low"}}, "text.verbosity"),
    ({"input": "hi", "include": ["file_search_call.results"]}, "include[0]"),
    ({"input": "hi", "truncation": "middle"}, "truncation 'middle'"),
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "max_tool_calls": 2}, "max_tool_calls"),
    ({"input": []}, "input is required"),
])
def test_bad_requests_name_the_field(body, needle):
    refused(needle, **body)


# --- renderer --------------------------------------------------------------------------


def renderer(**body) -> ResponseRenderer:
    request = ResponsesRequest(model=MODEL, input="hi", **body)
    return ResponseRenderer(response_object(request, "resp_test", 1700000000))


FINAL = Final("tool_calls", metrics={"prompt_eval_count": 5, "cached_tokens": 3, "eval_count": 9})
DELTAS = [Thinking("Let me "), Thinking("think."), Content("Hello"), Content(" there."),
          ToolCallDelta(ToolCall("get_weather", {"city": "Oslo"}, "call_1"), 0), FINAL]


def streamed_events(r: ResponseRenderer, deltas) -> list[dict]:
    return r.opening() + [event for delta in deltas for event in r.process(delta)]


def test_stream_event_sequence():
    r = renderer(tools=[WEATHER_TOOL])
    events = streamed_events(r, DELTAS)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for event in events:  # every event parses as the SDK's type of it
        assert EVENT.validate_python(event).type == event["type"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["type"]) for e in added] == [(0, "reasoning"), (1, "message"),
                                                                       (2, "function_call")]
    assert added[2]["item"]["arguments"] == "" and added[2]["item"]["status"] == "in_progress"
    text_done = next(e for e in events if e["type"] == "response.output_text.done")
    assert text_done["text"] == "Hello there." == "".join(
        e["delta"] for e in events if e["type"] == "response.output_text.delta")

    response = Response.model_validate(events[-1]["response"])
    assert response.status == "completed" and response.output_text == "Hello there."
    reasoning, message, call = response.output
    assert reasoning.summary[0].text == "Let me think." and reasoning.encrypted_content is None
    assert message.status == "completed"
    assert (call.call_id, call.name, json.loads(call.arguments), call.status) == (
        "call_1", "get_weather", {"city": "Oslo"}, "completed")
    assert call.id.startswith("fc_") and message.id.startswith("msg_") and reasoning.id.startswith("rs_")
    assert response.usage.input_tokens == 8 and response.usage.input_tokens_details.cached_tokens == 3
    assert response.usage.output_tokens == 9 and response.usage.total_tokens == 17
    assert response.tools[0].name == "get_weather"


def test_length_limit_is_incomplete():
    r = renderer(max_output_tokens=2)
    events = streamed_events(r, [Content("Hel"), Content("lo"), Final("length")])
    assert events[-1]["type"] == "response.incomplete"
    response = Response.model_validate(events[-1]["response"])
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete" and response.max_output_tokens == 2


def test_failure_mid_stream_ends_with_response_failed():
    r = renderer()
    events = streamed_events(r, [Content("Hel"), Failure("model runner died")])
    assert events[-1]["type"] == "response.failed"
    failed = EVENT.validate_python(events[-1])
    assert failed.response.status == "failed" and failed.response.error.message == "model runner died"


def test_logprobs_go_on_deltas_and_the_text_part():
    entry = {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []}
    r = renderer(include=["message.output_text.logprobs"])
    events = streamed_events(r, [Content("Hi", [entry]), Content("", []), Final("stop")])
    delta = next(e for e in events if e["type"] == "response.output_text.delta")
    assert delta["logprobs"][0]["token"] == "Hi"
    response = Response.model_validate(events[-1]["response"])
    assert response.output[0].content[0].logprobs[0].logprob == -0.5


def test_reasoning_handed_back_as_encrypted_content_is_read_back():
    request = ResponsesRequest(model=MODEL, input="hi", include=["reasoning.encrypted_content"])
    r = ResponseRenderer(response_object(request, "resp_test", 0), reasoning_handed_back=True)
    streamed_events(r, [Thinking("hmm"), Content("ok"), Final("stop")])
    item = r.response["output"][0]
    assert item["encrypted_content"] == "hmm"
    turn = turn_of(input=[{"role": "user", "content": "hi"},
                          {"type": "reasoning", "summary": [], "encrypted_content": item["encrypted_content"]},
                          {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}])
    assert (turn.messages[1].thinking, turn.messages[1].content) == ("hmm", "ok")


def test_whole_answer_matches_the_stream_and_continues_as_a_message():
    streamed = renderer()
    streamed_events(streamed, DELTAS)
    whole = renderer().whole(Answer("Hello there.", "Let me think.",
                                    [ToolCall("get_weather", {"city": "Oslo"}, "call_1")], FINAL))

    def without_ids(response):
        return [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]

    assert without_ids(whole) == without_ids(streamed.response)
    message = streamed.output_message()
    assert (message.role, message.thinking, message.content) == ("assistant", "Let me think.", "Hello there.")
    assert message.tool_calls == [ToolCall("get_weather", {"city": "Oslo"}, "call_1")]


def test_store_keeps_the_most_recent():
    store = ResponseStore(capacity=2)
    for name in ("a", "b", "c"):
        store.save(name, [], {"id": name})
    store.get("b")  # now the most recent: c goes before b
    store.save("d", [], {"id": "d"})
    assert store.get("b").response == {"id": "b"}
    for gone in ("a", "c"):
        with pytest.raises(ApiError) as info:
            store.get(gone, "previous_response_id")
        assert info.value.status == 404 and f"previous_response_id {gone!r}" in info.value.message


# --- through the daemon with the openai client -------------------------------------------


@pytest.fixture(scope="module")
def client(daemon) -> openai.OpenAI:
    daemon.create(TOOLS_MODEL, (Path(__file__).resolve().parents[2] / "modelfiles" / "tools.Modelfile").read_text())
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)


def test_create(client):
    response = client.responses.create(model=MODEL, input="Say hello.", instructions="Answer briefly.",
                                       temperature=0, max_output_tokens=24, metadata={"run": "1"})
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status in ("completed", "incomplete")
    message = response.output[0]
    assert message.type == "message" and message.role == "assistant"
    assert response.output_text and response.output_text == message.content[0].text
    usage = response.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert response.instructions == "Answer briefly." and response.metadata == {"run": "1"}
    assert response.temperature == 0 and response.max_output_tokens == 24


def test_stream_deltas_join_to_the_final_text(client):
    request = dict(model=MODEL, input=[{"role": "user", "content": "Name a fruit."}], temperature=0,
                   max_output_tokens=16, store=False)
    whole = client.responses.create(**request)
    events = list(client.responses.create(**request, stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[-1] == ("response.incomplete" if whole.status == "incomplete" else "response.completed")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert deltas == done.text == events[-1].response.output_text == whole.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens


def test_max_output_tokens_is_incomplete(client):
    response = client.responses.create(model=MODEL, input="Tell me a long story.", temperature=0,
                                       max_output_tokens=3)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3


def test_json_schema_text_format(client):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    response = client.responses.create(model=MODEL, input="Invent a person with a name and an age.",
                                       temperature=0, max_output_tokens=64, text={"format": fmt})
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), PERSON)


def test_streamed_json_schema_through_the_sdk_stream_helper(client):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    with client.responses.stream(model=MODEL, input="Invent a person.", temperature=0, max_output_tokens=64,
                                 text={"format": fmt}) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()  # the helper checks the events add up to the response
    jsonschema.validate(json.loads(final.output_text), PERSON)


def test_repeated_prompt_reports_cached_tokens(client):
    request = dict(model=MODEL, input="Repeat after me: the quick brown fox jumps over the lazy dog.",
                   temperature=0, max_output_tokens=4, store=False)
    client.responses.create(**request)
    again = client.responses.create(**request)
    assert 0 < again.usage.input_tokens_details.cached_tokens < again.usage.input_tokens


def test_function_call_round_trip(client):
    question = {"role": "user", "content": "What is the weather in Paris?"}
    first = client.responses.create(model=TOOLS_MODEL, input=[question], tools=[WEATHER_TOOL],
                                    tool_choice="required", temperature=0, max_output_tokens=80, store=False)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1, first.output
    call = calls[0]
    assert call.name == "get_weather" and call.status == "completed" and call.call_id
    jsonschema.validate(json.loads(call.arguments), WEATHER_TOOL["parameters"])
    answer = client.responses.create(
        model=TOOLS_MODEL, tools=[WEATHER_TOOL], temperature=0, max_output_tokens=30, store=False,
        input=[question, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 21}'}])
    assert answer.status in ("completed", "incomplete")
    assert answer.output_text or any(item.type == "function_call" for item in answer.output)
    assert answer.usage.input_tokens > first.usage.input_tokens


def test_streamed_function_call(client):
    events = list(client.responses.create(
        model=TOOLS_MODEL, input="Weather in Oslo?", tools=[WEATHER_TOOL], stream=True, store=False,
        tool_choice={"type": "function", "name": "get_weather"}, temperature=0, max_output_tokens=80))
    types = [e.type for e in events]
    start = types.index("response.function_call_arguments.delta")
    assert types[start - 1:start + 3] == ["response.output_item.added", "response.function_call_arguments.delta",
                                          "response.function_call_arguments.done", "response.output_item.done"]
    arguments = events[start + 1].arguments
    assert json.loads(arguments)["city"]
    assert types[-1] == "response.completed"
    assert events[-1].response.output[-1].arguments == arguments


def test_text_streams_while_tools_are_offered(client):
    client.responses.create(model=TOOLS_MODEL, input="Hi", max_output_tokens=1, store=False)  # loaded
    arrivals = []
    start = time.monotonic()
    for event in client.responses.create(model=TOOLS_MODEL, input="Write a short poem about the sea.",
                                         tools=[WEATHER_TOOL], parallel_tool_calls=False, temperature=0,
                                         max_output_tokens=64, stream=True, store=False):
        arrivals.append((time.monotonic(), event))
    deltas = [at for at, event in arrivals if event.type == "response.output_text.delta"]
    assert len(deltas) > 1
    # the first words came well before the last, not all at once at the end: measured against the
    # request's own duration, so a fast machine passes as a slow one does
    assert deltas[-1] - deltas[0] > 0.2 * (deltas[-1] - start)


def test_previous_response_id_continues_the_conversation(client):
    first = client.responses.create(model=MODEL, input="My name is Ada.", temperature=0, max_output_tokens=8)
    assert client.responses.retrieve(first.id).output_text == first.output_text
    events = list(client.responses.create(model=MODEL, previous_response_id=first.id, input="What is my name?",
                                          temperature=0, max_output_tokens=8, stream=True))
    second = events[-1].response
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(second.id).output_text == second.output_text  # streamed ones are kept too
    alone = client.responses.create(model=MODEL, input="What is my name?", temperature=0, max_output_tokens=8,
                                    store=False)
    # the first exchange came before the question: more input, and the prompt it shares is cached
    assert second.usage.input_tokens >= alone.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 2
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError, match="previous_response_id"):
        client.responses.create(model=MODEL, previous_response_id=first.id, input="Again?", max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(alone.id)  # store false: never kept


@pytest.mark.parametrize(("body", "needle"), [
    ({"input": [{"type": "computer_call_output", "call_id": "c", "output": {}}]}, "computer_call_output"),
    ({"input": "hi", "tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "name": "get_time"}}, "get_time"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"input": [{"type": "function_call_output", "call_id": "call_nope", "output": "1"}]}, "call_nope"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "web_search"),
    ({"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"input": "hi", "temperature": 3}, "temperature"),
    ({"input": "hi", "tools": [WEATHER_TOOL], "parallel_tool_calls": False,
      "text": {"format": {"type": "json_object"}}}, "parallel_tool_calls"),
])
def test_bad_input_is_a_400_in_openai_shape(client, body, needle):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=TOOLS_MODEL, **body)
    error = info.value.response.json()["error"]
    assert needle in error["message"] and error["type"] == "invalid_request_error"
