"""OpenAI's Responses API (``/v1/responses``): request translator and stream renderer over
the conversation core.

A request's ``input`` items (messages, ``function_call`` and
``function_call_output`` items, ``reasoning`` items) become core messages;
the answer becomes output items: a ``reasoning`` item for thinking, a
``message`` item for text, one ``function_call`` item a call. Streams are
server-sent events named by their ``type``, numbered by ``sequence_number``,
from ``response.created`` to ``response.completed`` (``response.incomplete``
at the length limit, ``response.failed`` when the answer breaks off).
Responses created with ``store: true`` are kept in memory
(:mod:`~localllm.server.response_store`) for ``previous_response_id``.
"""

from __future__ import annotations

import copy
import json
import secrets
import time
from typing import Any

from pydantic import Field

from ..api_types import RequestBody
from ..conversation import (
    Answer, ChatTurn, Content, Delta, Failure, Final, Message, Thinking, ToolCallDelta, shaped_logprobs
)
from ..errors import bad_request
from ..inference import parse_name
from ..tools import ToolCall
from .openai_family import (
    audio_data, image_data, openai_tool_call, reasoning_think, response_format_constraint, sampling_options,
    tool_choice_of,
)

#: ``include`` values we honour: token log-probabilities, and reasoning handed back to be
#: sent again (we do not encrypt it: ``encrypted_content`` holds the thinking text).
LOGPROBS_INCLUDE = "message.output_text.logprobs"
REASONING_INCLUDE = "reasoning.encrypted_content"
MESSAGE_ROLES = ("user", "assistant", "system", "developer")


class TextConfig(RequestBody):
    format: dict[str, Any] | None = None
    verbosity: str | None = None


class ReasoningConfig(RequestBody):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(RequestBody):
    model: str
    input: str | list[dict[str, Any]] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[str] | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    user: str | None = None
    truncation: str | None = None  # "disabled" (the default): an input over the context is a 400; "auto" fits it
    grammar: str | None = None  # extension: GBNF rules, as on /v1/chat/completions and /v1/messages
    # Fields we cannot honour: a request setting one is refused (see refuse_unsupported).
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    max_tool_calls: int | None = None


# --- translator -----------------------------------------------------------------------


def refuse_unsupported(body: ResponsesRequest) -> None:
    """400 naming the first field set to something we cannot do."""
    if body.truncation not in (None, "disabled", "auto"):
        raise bad_request(f"invalid truncation {body.truncation!r}: use \"disabled\" or \"auto\"")
    if body.background:
        raise bad_request("background responses are not supported: send the request with background false")
    for name in ("conversation", "prompt", "max_tool_calls"):
        if getattr(body, name) is not None:
            raise bad_request(f"{name} is not supported by this server's /v1/responses")
    for index, value in enumerate(body.include or []):
        if value not in (LOGPROBS_INCLUDE, REASONING_INCLUDE):
            raise bad_request(f"include[{index}]: {value!r} is not supported; use {LOGPROBS_INCLUDE!r} "
                              f"or {REASONING_INCLUDE!r}")
    if body.text and body.text.verbosity not in (None, "medium"):
        raise bad_request(f"text.verbosity {body.text.verbosity!r} is not supported: only \"medium\"")
    if body.reasoning and body.reasoning.summary not in (None, "auto", "concise", "detailed"):
        raise bad_request(f"invalid reasoning.summary {body.reasoning.summary!r}: use auto, concise or detailed")


def content_of(content: Any, field: str) -> tuple[str, list[str]]:
    """Text and media (images and audio clips, in order) of a message's (or a function output's) content:
    a string or a list of parts."""
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise bad_request(f"{field} must be a string or a list of content parts")
    texts, images = [], []
    for index, part in enumerate(content):
        where = f"{field}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            texts.append(str(part.get("text") or ""))
        elif kind == "refusal":
            texts.append(str(part.get("refusal") or ""))
        elif kind == "input_image":
            if part.get("file_id"):
                raise bad_request(f"{where}.file_id: files are not supported; send the image as a data URL")
            images.append(image_data(str(part.get("image_url") or ""), f"{where}.image_url"))
        elif kind == "input_audio":
            images.append(audio_data(part.get("input_audio"), f"{where}.input_audio"))
        else:
            raise bad_request(f"{where}: content part type {kind!r} is not supported; "
                              "use input_text, output_text, input_image, input_audio or refusal")
    return "".join(texts), images


def reasoning_text(item: dict[str, Any], field: str) -> str:
    """A reasoning item's text: its summary, else its reasoning content, else what we handed out as
    ``encrypted_content`` (the thinking itself)."""
    for key, kind in (("summary", "summary_text"), ("content", "reasoning_text")):
        parts = item.get(key) or []
        if not isinstance(parts, list) or any(not isinstance(p, dict) or p.get("type") != kind for p in parts):
            raise bad_request(f"{field}.{key} must be a list of {kind} parts")
        if parts:
            return "".join(str(p.get("text") or "") for p in parts)
    return str(item.get("encrypted_content") or "")


class _InputReader:
    """Turns ``input`` items into messages, joining the items of one assistant turn
    (reasoning, message, function calls) into one assistant message."""

    def __init__(self, history: list[Message]) -> None:
        self.history = history
        self.messages: list[Message] = []

    def _assistant(self, fresh: bool) -> Message:
        """The assistant message this item belongs to: the last message when it is the assistant's
        (and, for a ``fresh`` message item, holds no text or calls yet), else a new one."""
        last = self.messages[-1] if self.messages else None
        if last is None or last.role != "assistant" or (fresh and (last.content or last.tool_calls)):
            last = Message("assistant")
            self.messages.append(last)
        return last

    def _call_name(self, call_id: str) -> str | None:
        for message in reversed(self.history + self.messages):
            for call in message.tool_calls:
                if call.id == call_id:
                    return call.name
        return None

    def read(self, index: int, item: Any) -> None:
        field = f"input[{index}]"
        if not isinstance(item, dict):
            raise bad_request(f"{field} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in MESSAGE_ROLES:
                raise bad_request(f"{field}.role {role!r} is not valid; use user, assistant, system or developer")
            text, images = content_of(item.get("content"), f"{field}.content")
            if role == "assistant":
                message = self._assistant(fresh=True)
                message.content, message.images = text, images
            else:
                self.messages.append(Message("system" if role == "developer" else role, text, images))
        elif kind == "function_call":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise bad_request(f"{field}.call_id is required")
            call = openai_tool_call({"id": call_id, "function": {"name": item.get("name"),
                                                                 "arguments": item.get("arguments", "{}")}}, field)
            if not call.name:
                raise bad_request(f"{field}.name is required")
            self._assistant(fresh=False).tool_calls.append(call)
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            name = self._call_name(call_id) if isinstance(call_id, str) and call_id else None
            if name is None:
                raise bad_request(f"{field}.call_id: function_call_output for unknown call id {call_id!r}; it "
                                  "must answer a function_call earlier in the conversation")
            text, images = content_of(item.get("output", ""), f"{field}.output")
            self.messages.append(Message("tool", text, images, tool_call_id=call_id, tool_name=name))
        elif kind == "reasoning":
            message = self._assistant(fresh=False)
            message.thinking += reasoning_text(item, field)
        else:
            raise bad_request(f"{field}: item type {kind!r} is not supported; use message, function_call, "
                              "function_call_output or reasoning")


def input_messages(items: str | list[dict[str, Any]], history: list[Message] = ()) -> list[Message]:
    """The ``input`` as core messages (after the ``history`` of a previous response)."""
    if isinstance(items, str):
        return [Message("user", items)]
    reader = _InputReader(list(history))
    for index, item in enumerate(items):
        reader.read(index, item)
    return reader.messages


def function_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses' flat function tools in the core's (OpenAI chat's) function shape."""
    converted = []
    for index, tool in enumerate(tools or []):
        kind = tool.get("type")
        if kind != "function":
            raise bad_request(f"tools[{index}]: tool type {kind!r} is not supported; only function tools "
                              "({\"type\": \"function\", \"name\": …, \"parameters\": …})")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"tools[{index}].name is required")
        function = {"name": name, "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        if tool.get("description"):
            function["description"] = tool["description"]
        converted.append({"type": "function", "function": function})
    return converted or None


def wants_logprobs(body: ResponsesRequest) -> bool:
    return LOGPROBS_INCLUDE in (body.include or []) or bool(body.top_logprobs)


def responses_turn(body: ResponsesRequest, history: list[Message] = ()) -> ChatTurn:
    """A Responses request as a core turn: instructions first, then the ``history`` of the
    previous response, then the input."""
    parse_name(body.model)
    refuse_unsupported(body)
    messages = [Message("system", body.instructions)] if body.instructions else []
    messages += [*history, *input_messages(body.input, list(history))]
    if not any(m.role != "system" for m in messages):
        raise bad_request("input is required: a string or a list of input items")
    text_format = body.text.format if body.text else None
    logprobs = wants_logprobs(body)
    return ChatTurn(
        model=body.model, messages=messages, tools=function_tools(body.tools),
        tool_choice=tool_choice_of(body.tool_choice),
        think=reasoning_think(body.reasoning.effort if body.reasoning else None, "reasoning.effort"),
        options=sampling_options(body.temperature, body.top_p, body.max_output_tokens),
        constraint=response_format_constraint(text_format, "text.format"),
        logprobs=logprobs, top_logprobs=body.top_logprobs if logprobs else None,
        parallel_tool_calls=body.parallel_tool_calls, truncate=body.truncation == "auto", grammar=body.grammar,
    )


# --- renderer -------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def response_object(body: ResponsesRequest, response_id: str, created_at: int) -> dict[str, Any]:
    """The response as it starts (``in_progress``, no output), echoing the request's settings."""
    tool_defaults = {"description": None, "parameters": None, "strict": True}
    echoed_tools = [dict(tool_defaults, **tool) for tool in body.tools or []]
    reasoning = body.reasoning or ReasoningConfig()
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": "in_progress",
        "completed_at": None, "error": None, "incomplete_details": None, "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens, "max_tool_calls": None, "model": body.model, "output": [],
        "parallel_tool_calls": body.parallel_tool_calls, "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": reasoning.effort, "summary": reasoning.summary}, "store": body.store,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "text": {"format": (body.text.format if body.text else None) or {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.tool_choice or "auto", "tools": echoed_tools, "top_logprobs": body.top_logprobs or 0,
        "top_p": 1.0 if body.top_p is None else body.top_p, "truncation": body.truncation or "disabled",
        "usage": None,
        "user": body.user, "metadata": body.metadata or {}, "background": False, "service_tier": "default",
    }


def response_usage(final: Final) -> dict[str, Any]:
    """Responses' usage. Thinking tokens are not counted apart from the answer's, so
    ``reasoning_tokens`` is 0; they are part of ``output_tokens``."""
    return {"input_tokens": final.prompt_tokens,
            "input_tokens_details": {"cached_tokens": final.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": final.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": final.prompt_tokens + final.completion_tokens}


def _text_part(text: str = "") -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class ResponseRenderer:
    """Core deltas as the Responses API's stream events; :attr:`response` is the response
    object they build (the whole answer, for clients that did not ask to stream)."""

    def __init__(self, response: dict[str, Any], reasoning_handed_back: bool = False) -> None:
        self.response = response
        self.reasoning_handed_back = reasoning_handed_back  # include reasoning.encrypted_content
        self._sequence = 0
        self._open: dict[str, Any] | None = None  # the reasoning or message item being streamed

    @property
    def output(self) -> list[dict[str, Any]]:
        return self.response["output"]

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **copy.deepcopy(fields)}
        self._sequence += 1
        return event

    def _item_event(self, kind: str, item: dict[str, Any], **fields: Any) -> dict[str, Any]:
        """An event about ``item``: its output index and id go with it."""
        return self._event(kind, item_id=item["id"], output_index=self.output.index(item), **fields)

    def opening(self) -> list[dict[str, Any]]:
        return [self._event("response.created", response=self.response),
                self._event("response.in_progress", response=self.response)]

    # -- items ---------------------------------------------------------------------------

    def _add(self, item: dict[str, Any]) -> dict[str, Any]:
        self.output.append(item)
        return self._event("response.output_item.added", output_index=len(self.output) - 1, item=item)

    def _open_item(self, kind: str) -> list[dict[str, Any]]:
        """Events that leave a ``kind`` item ("reasoning" or "message") open, closing another."""
        if self._open is not None and self._open["type"] == kind:
            return []
        events = self._close("completed")
        if kind == "reasoning":
            item: dict[str, Any] = {"id": new_id("rs"), "type": "reasoning", "summary": []}
            events.append(self._add(item))
            events.append(self._item_event("response.reasoning_summary_part.added", item, summary_index=0,
                                           part={"type": "summary_text", "text": ""}))
            item["summary"].append({"type": "summary_text", "text": ""})
        else:
            item = {"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
                    "content": []}
            events.append(self._add(item))
            events.append(self._item_event("response.content_part.added", item, content_index=0, part=_text_part()))
            item["content"].append(_text_part())
        self._open = item
        return events

    def _close(self, status: str) -> list[dict[str, Any]]:
        """Events that finish the open item, if any."""
        item, self._open = self._open, None
        if item is None:
            return []
        if item["type"] == "reasoning":
            part = item["summary"][0]
            if self.reasoning_handed_back:
                item["encrypted_content"] = part["text"]
            events = [self._item_event("response.reasoning_summary_text.done", item, summary_index=0,
                                       text=part["text"]),
                      self._item_event("response.reasoning_summary_part.done", item, summary_index=0, part=part)]
        else:
            item["status"] = status
            part = item["content"][0]
            events = [self._item_event("response.output_text.done", item, content_index=0, text=part["text"],
                                       logprobs=part["logprobs"]),
                      self._item_event("response.content_part.done", item, content_index=0, part=part)]
        events.append(self._event("response.output_item.done", output_index=self.output.index(item), item=item))
        return events

    def _function_call(self, call: ToolCall) -> list[dict[str, Any]]:
        shaped = call.openai()
        arguments = shaped["function"]["arguments"]
        item = {"id": new_id("fc"), "type": "function_call", "status": "in_progress", "call_id": shaped["id"],
                "name": call.name, "arguments": ""}
        events = self._close("completed") + [self._add(item)]
        events.append(self._item_event("response.function_call_arguments.delta", item, delta=arguments))
        events.append(self._item_event("response.function_call_arguments.done", item, arguments=arguments))
        item.update(arguments=arguments, status="completed")
        events.append(self._event("response.output_item.done", output_index=self.output.index(item), item=item))
        return events

    # -- deltas --------------------------------------------------------------------------

    def process(self, delta: Delta) -> list[dict[str, Any]]:
        """The stream events one delta becomes."""
        if isinstance(delta, Thinking):
            events = self._open_item("reasoning")
            self._open["summary"][0]["text"] += delta.text
            return events + [self._item_event("response.reasoning_summary_text.delta", self._open,
                                              summary_index=0, delta=delta.text)]
        if isinstance(delta, Content):
            if not delta.text and (self._open is None or self._open["type"] != "message"):
                return []  # log-probabilities of held-back text that became no answer text
            events = self._open_item("message")
            part = self._open["content"][0]
            logprobs = shaped_logprobs(delta.logprobs)
            part["text"] += delta.text
            part["logprobs"] += logprobs
            return events + [self._item_event("response.output_text.delta", self._open, content_index=0,
                                              delta=delta.text, logprobs=logprobs)]
        if isinstance(delta, ToolCallDelta):
            return self._function_call(delta.call)
        if isinstance(delta, Final):
            return self._finish(delta)
        if isinstance(delta, Failure):
            self.response.update(status="failed", error={"code": "server_error", "message": delta.message})
            return [self._event("response.failed", response=self.response)]
        return []

    def _finish(self, final: Final) -> list[dict[str, Any]]:
        incomplete = final.reason == "length"
        events = self._close("incomplete" if incomplete else "completed")
        self.response.update(status="incomplete" if incomplete else "completed", completed_at=int(time.time()),
                             usage=response_usage(final))
        if incomplete:
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        return events + [self._event("response.incomplete" if incomplete else "response.completed",
                                     response=self.response)]

    def whole(self, answer: Answer) -> dict[str, Any]:
        """The response object of a whole answer."""
        deltas: list[Delta] = [Thinking(answer.thinking)] if answer.thinking else []
        if answer.content:
            deltas.append(Content(answer.content, answer.final.logprobs))
        deltas += [ToolCallDelta(call, index) for index, call in enumerate(answer.tool_calls)]
        for delta in [*deltas, answer.final]:
            self.process(delta)
        return self.response

    def output_message(self) -> Message:
        """The output as one assistant message, to continue the conversation from."""
        message = Message("assistant")
        for item in self.output:
            if item["type"] == "reasoning":
                message.thinking += "".join(part["text"] for part in item["summary"])
            elif item["type"] == "message":
                message.content += "".join(part["text"] for part in item["content"])
            else:
                message.tool_calls.append(ToolCall(item["name"], json.loads(item["arguments"]), item["call_id"]))
        return message
