"""OpenAI's chat and text completions (``/v1/chat/completions``, ``/v1/completions``):
request translator and stream renderer over the conversation core.

Streams are server-sent events ending in ``data: [DONE]``; thinking goes out as
``reasoning_content`` (llama-server's and vLLM's field), calls as ``tool_calls``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import Field

from ..api_types import RequestBody
from ..conversation import (
    Answer, ChatTurn, Content, Delta, Failure, Final, Message, Thinking, ToolCallDelta, shaped_logprobs
)
from ..errors import bad_request, openai_error
from ..handler import ChatHandler, DeltaStream, PreparedTurn
from ..inference import parse_name
from ..streaming import sse, streamed
from .render import truncation_headers
from .openai_family import (
    audio_data, image_data, openai_tool_call, reasoning_think, response_format_constraint, sampling_options,
    tool_choice_of,
)

MAX_CHOICES = 8
MAX_TOP_LOGPROBS = 20


class ContentPart(RequestBody):
    type: str
    text: str | None = None
    image_url: dict[str, Any] | str | None = None
    input_audio: dict[str, Any] | None = None


class ChatMessage(RequestBody):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class StreamOptions(RequestBody):
    include_usage: bool = False


class SamplingBody(RequestBody):
    """Fields every OpenAI generation request shares."""

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    user: str | None = None
    grammar: str | None = None  # extension: GBNF rules, as llama.cpp's server takes them


class ChatCompletionRequest(SamplingBody):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    reasoning_effort: str | None = None


class CompletionRequest(SamplingBody):
    prompt: str | list[str]
    suffix: str | None = None
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=5)


# --- translator -----------------------------------------------------------------------


def completion_options(body: SamplingBody, max_tokens: int | None) -> dict[str, Any]:
    """A chat or text completion's sampling fields as Ollama options."""
    options = sampling_options(body.temperature, body.top_p, max_tokens, body.stop, body.seed)
    options["frequency_penalty"] = body.frequency_penalty or 0.0
    options["presence_penalty"] = body.presence_penalty or 0.0
    if body.logit_bias:
        raise bad_request("logit_bias is not supported")
    return options


def _content_of(content: str | list[ContentPart] | None, field: str) -> tuple[str, list[str]]:
    """Text and media (images and audio clips, in order) of an OpenAI message's content."""
    if content is None or isinstance(content, str):
        return content or "", []
    texts, images = [], []
    for index, part in enumerate(content):
        if part.type == "text":
            texts.append(part.text or "")
        elif part.type == "image_url":
            url = part.image_url.get("url") if isinstance(part.image_url, dict) else part.image_url
            images.append(image_data(url or "", f"{field}.content[{index}].image_url"))
        elif part.type == "input_audio":
            images.append(audio_data(part.input_audio, f"{field}.content[{index}].input_audio"))
        else:
            raise bad_request(f"{field}.content[{index}]: content part type {part.type!r} is not supported; "
                              "use text, image_url or input_audio")
    return "".join(texts), images


def chat_messages(messages: list[ChatMessage]) -> list[Message]:
    converted = []
    for index, m in enumerate(messages):
        field = f"messages[{index}]"
        text, images = _content_of(m.content, field)
        converted.append(Message(
            role="system" if m.role == "developer" else m.role, content=text, images=images,
            thinking=m.reasoning_content or "",
            tool_calls=[openai_tool_call(c, f"{field}.tool_calls[{i}]") for i, c in enumerate(m.tool_calls or [])],
            tool_call_id=m.tool_call_id or "", tool_name=m.name if m.role == "tool" and m.name else "",
        ))
    return converted


def chat_turn(body: ChatCompletionRequest) -> ChatTurn:
    parse_name(body.model)
    return ChatTurn(
        model=body.model, messages=chat_messages(body.messages), tools=body.tools,
        tool_choice=tool_choice_of(body.tool_choice), parallel_tool_calls=body.parallel_tool_calls,
        think=reasoning_think(body.reasoning_effort),
        options=completion_options(body, body.max_completion_tokens or body.max_tokens),
        constraint=response_format_constraint(body.response_format), grammar=body.grammar,
        logprobs=body.logprobs, top_logprobs=body.top_logprobs if body.logprobs else None,
    )


# --- renderer -------------------------------------------------------------------------


def finish_reason(final: Final) -> str:
    return {"length": "length", "tool_calls": "tool_calls"}.get(final.reason, "stop")


def usage(finals: list[Final]) -> dict[str, Any]:
    """OpenAI's usage of one or more choices of the same prompt."""
    prompt = max((f.prompt_tokens for f in finals), default=0)
    completion = sum(f.completion_tokens for f in finals)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": max((f.cached_tokens for f in finals), default=0)}}


def chat_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A chat choice's ``logprobs`` object."""
    return {"content": shaped_logprobs(entries), "refusal": None} if entries else None


class ChatChoiceRenderer:
    """One choice's deltas as ``chat.completion.chunk`` choices, or its whole answer as a message."""

    def __init__(self, index: int) -> None:
        self.index = index

    def _chunk(self, delta: dict[str, Any], finish: str | None = None,
               logprobs: list[dict[str, Any]] = ()) -> dict[str, Any]:
        return {"index": self.index, "delta": delta, "logprobs": chat_logprobs(logprobs), "finish_reason": finish}

    def opening(self) -> dict[str, Any]:
        return self._chunk({"role": "assistant", "content": ""})

    def process(self, delta: Delta) -> list[dict[str, Any]]:
        if isinstance(delta, Content):
            return [self._chunk({"content": delta.text}, logprobs=delta.logprobs)]
        if isinstance(delta, Thinking):
            return [self._chunk({"reasoning_content": delta.text})]
        if isinstance(delta, ToolCallDelta):
            return [self._chunk({"tool_calls": [dict(delta.call.openai(), index=delta.index)]})]
        if isinstance(delta, Final):
            return [self._chunk({}, finish_reason(delta))]
        return []

    def whole(self, answer: Answer) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": answer.content or (None if answer.tool_calls else ""),
                                   "refusal": None}
        if answer.thinking:
            message["reasoning_content"] = answer.thinking
        if answer.tool_calls:
            message["tool_calls"] = [call.openai() for call in answer.tool_calls]
        return {"index": self.index, "message": message, "logprobs": chat_logprobs(answer.final.logprobs),
                "finish_reason": finish_reason(answer.final)}


class TextChoiceRenderer:
    """One choice of a text completion (``text_completion`` objects)."""

    def __init__(self, index: int, echo: str) -> None:
        self.index = index
        self.echo = echo
        self._offset = len(echo)

    def _logprobs(self, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
        """OpenAI's legacy logprobs: parallel lists, offsets into the returned text."""
        if not entries:
            return None
        offsets = []
        for e in entries:
            offsets.append(self._offset)
            self._offset += len(e["token"])
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
                "text_offset": offsets}

    def _choice(self, text: str, finish: str | None, logprobs: list[dict[str, Any]] = ()) -> dict[str, Any]:
        return {"index": self.index, "text": text, "logprobs": self._logprobs(list(logprobs)), "finish_reason": finish}

    def opening(self) -> dict[str, Any] | None:
        return self._choice(self.echo, None) if self.echo else None

    def process(self, delta: Delta) -> list[dict[str, Any]]:
        if isinstance(delta, Content):
            return [self._choice(delta.text, None, delta.logprobs)]
        if isinstance(delta, Final):
            return [self._choice("", finish_reason(delta))]
        return []

    def whole(self, answer: Answer) -> dict[str, Any]:
        return self._choice(self.echo + answer.content, finish_reason(answer.final), answer.final.logprobs)


async def _merge(streams: list[AsyncIterable[Delta]]) -> AsyncIterator[tuple[int, Delta]]:
    """Interleave the deltas of ``n`` concurrent answers as (choice index, delta)."""
    queue: asyncio.Queue[tuple[int, Delta | None]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterable[Delta]) -> None:
        try:
            async for delta in stream:
                await queue.put((index, delta))
        finally:
            await queue.put((index, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    remaining = len(tasks)
    try:
        while remaining:
            index, delta = await queue.get()
            if delta is None:
                remaining -= 1
            else:
                yield index, delta
    finally:
        for task in tasks:
            task.cancel()


class Completion:
    """``n`` choices of one chat or text completion, streamed or whole."""

    def __init__(self, handler: ChatHandler, turn: PreparedTurn, model_name: str, kind: str, *, n: int,
                 include_usage: bool, echo: str = "") -> None:
        self.handler = handler
        self.turns = [turn]
        for i in range(1, n):  # each extra choice gets its own seed so that choices differ
            options = dict(turn.job.options)
            if "seed" in options:
                options["seed"] = options["seed"] + i
            self.turns.append(dataclasses.replace(turn, job=dataclasses.replace(turn.job, options=options)))
        self.renderers = [ChatChoiceRenderer(i) if kind == "chat" else TextChoiceRenderer(i, echo) for i in range(n)]
        self.kind = kind
        self.model_name = model_name
        self.include_usage = include_usage
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())

    def _envelope(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        if self.kind == "chat":
            obj = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_name,
                "system_fingerprint": "fp_localllm", "choices": choices}

    async def respond(self, stream: bool):
        if not stream:
            tasks = [asyncio.ensure_future(self.handler.answer(t)) for t in self.turns]
            try:
                answers = await asyncio.gather(*tasks)
            except BaseException:  # one choice failed: the others stop too
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            answer = self._envelope([r.whole(a) for r, a in zip(self.renderers, answers)], False)
            answer["usage"] = usage([a.final for a in answers])
            return JSONResponse(answer, headers=truncation_headers(any(a.final.truncated for a in answers)))
        streams: list[DeltaStream] = []
        try:
            for turn in self.turns:
                streams.append(await self.handler.open(turn))
        except BaseException:  # a later choice could not start: close those that did
            for opened in streams:
                await opened.aclose()
            raise
        return streamed(self._events(streams), "text/event-stream",
                        truncation_headers(any(s.notes.truncated for s in streams)))

    async def _events(self, streams: list[AsyncIterable[Delta]]) -> AsyncIterator[bytes]:
        finals: list[Final] = []
        for renderer in self.renderers:
            if (opening := renderer.opening()) is not None:
                yield sse(self._envelope([opening], True))
        async for index, delta in _merge(streams):
            if isinstance(delta, Failure):
                yield sse(openai_error(500, delta.message))
                return
            if isinstance(delta, Final):
                finals.append(delta)
            for choice in self.renderers[index].process(delta):
                yield sse(self._envelope([choice], True))
        if self.include_usage:
            usage_chunk = self._envelope([], True)
            usage_chunk["usage"] = usage(finals)
            yield sse(usage_chunk)
        yield sse("[DONE]")
