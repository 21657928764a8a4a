"""OpenAI's API (``/v1/*``): chat and text completions, models; shapes as OpenAI's.

Streams are server-sent events ending in ``data: [DONE]``; errors are OpenAI's
error object (see ``app.error_response``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from .embeddings import encode_base64, shorten
from .errors import ApiError, bad_request, not_found
from .formats import JSON_OBJECT_GBNF, NO_CONSTRAINT, Constraint, checked_schema
from .inference import (
    CompletionJob,
    chat_prompt_builder,
    constrain_tool_calls,
    collect_completion,
    parse_name,
)
from .limits import check_request
from .ollama_api import state_of
from .streaming import streamed
from .tools import ToolCall, ToolUse

router = APIRouter(prefix="/v1")

MAX_CHOICES = 8
MAX_TOP_LOGPROBS = 20


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class _SamplingBody(_Body):
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


class ChatCompletionRequest(_SamplingBody):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None


class EmbeddingRequest(_Body):
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


class CompletionRequest(_SamplingBody):
    prompt: str | list[str]
    suffix: str | None = None
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=5)


def _options(body: _SamplingBody, max_tokens: int | None) -> dict[str, Any]:
    """OpenAI sampling fields as Ollama options (temperature and top_p default to 1, as OpenAI's)."""
    options: dict[str, Any] = {
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "frequency_penalty": body.frequency_penalty or 0.0,
        "presence_penalty": body.presence_penalty or 0.0,
    }
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    if body.seed is not None:
        options["seed"] = body.seed
    if body.stop:
        options["stop"] = [body.stop] if isinstance(body.stop, str) else body.stop
    return options


def _response_constraint(response_format: dict[str, Any] | None) -> Constraint:
    if not response_format:
        return NO_CONSTRAINT
    kind = response_format.get("type")
    if kind in (None, "text"):
        return NO_CONSTRAINT
    if kind == "json_object":
        return Constraint(grammar=JSON_OBJECT_GBNF)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise bad_request("response_format.json_schema must be an object with a 'schema' object")
        return Constraint(json_schema=checked_schema(spec.get("schema") or {}))
    raise bad_request(f"response_format.type {kind!r} is not supported: use text, json_object or json_schema")


def _text_of(content: str | list[ContentPart] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        if part.type != "text":
            raise bad_request(f"content part type {part.type!r} is not supported by this model; send text parts")
        parts.append(part.text or "")
    return "".join(parts)


def _usage(done: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = max((d.get("prompt_eval_count", 0) + d.get("cached_tokens", 0) for d in done), default=0)
    cached = max((d.get("cached_tokens", 0) for d in done), default=0)
    completion = sum(d.get("eval_count", 0) for d in done)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _finish_reason(done: dict[str, Any]) -> str:
    return "length" if done.get("done_reason") == "length" else "stop"


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


async def _merge(streams: list[AsyncIterator[dict[str, Any]]]) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """Interleave the events of ``n`` concurrent completions as (choice index, event)."""
    queue: asyncio.Queue[tuple[int, dict[str, Any] | None]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[dict[str, Any]]) -> None:
        try:
            async for event in stream:
                await queue.put((index, event))
        except ApiError as exc:
            await queue.put((index, {"error": exc.message}))
        finally:
            await queue.put((index, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    remaining = len(tasks)
    try:
        while remaining:
            index, event = await queue.get()
            if event is None:
                remaining -= 1
            else:
                yield index, event
    finally:
        for task in tasks:
            task.cancel()


class _Completion:
    """Shared flow of chat and text completions: n choices, streamed or whole."""

    def __init__(self, request: Request, job: CompletionJob, model_name: str, kind: str, *, n: int,
                 stream: bool, include_usage: bool, echo: str = "", tool_use: ToolUse | None = None) -> None:
        self.state = state_of(request)
        self.tool_use = tool_use
        self.stream = stream
        self.echo = echo
        self.job = job
        self.model_name = model_name
        self.kind = kind
        self.n = n
        self.include_usage = include_usage
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())

    def _streams(self, builder) -> list[AsyncIterator[dict[str, Any]]]:
        jobs = [self.job]
        for i in range(1, self.n):  # each extra choice gets its own seed so choices differ
            options = dict(self.job.options)
            if "seed" in options:
                options["seed"] = options["seed"] + i
            jobs.append(dataclasses.replace(self.job, options=options))
        return [self.state.inference.stream(job, builder) for job in jobs]

    def _envelope(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        if self.kind == "chat":
            obj = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_name,
                "system_fingerprint": "fp_localllm", "choices": choices}

    def _choice(self, index: int, text: str | None, finish: str | None, chunk: bool,
                calls: list[ToolCall] = (), logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        shaped = self._logprobs(logprobs)
        if self.kind == "chat":
            tool_calls = [call.openai() for call in calls]
            if calls:
                finish = finish and "tool_calls"
            if chunk:
                delta: dict[str, Any] = {} if text is None else {"content": text}
                if tool_calls:
                    delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(tool_calls)]
                return {"index": index, "delta": delta, "logprobs": shaped, "finish_reason": finish}
            message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else ""),
                                       "refusal": None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            return {"index": index, "message": message, "logprobs": shaped, "finish_reason": finish}
        return {"index": index, "text": text or "", "logprobs": shaped, "finish_reason": finish}

    def _logprobs(self, entries: list[dict[str, Any]] | None) -> dict[str, Any] | None:
        """OpenAI's logprobs object: ``content`` entries for chat, parallel lists for completions."""
        if not entries:
            return None
        if self.kind == "chat":
            def one(e: dict[str, Any]) -> dict[str, Any]:
                return {"token": e["token"], "logprob": e["logprob"], "bytes": e["bytes"]}

            return {"content": [dict(one(e), top_logprobs=[one(t) for t in e["top_logprobs"]]) for e in entries],
                    "refusal": None}
        offsets, position = [], len(self.echo)
        for e in entries:
            offsets.append(position)
            position += len(e["token"])
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
                "text_offset": offsets}

    def _finished(self, text: str, done: dict[str, Any]) -> tuple[str, str, list[ToolCall]]:
        """Content, finish reason and tool calls of one finished choice."""
        content, calls = self.tool_use.parse(self.echo + text) if self.tool_use else (self.echo + text, [])
        return content, _finish_reason(done), calls

    async def respond(self, builder):
        streams = self._streams(builder)
        if not self.stream:
            results = await asyncio.gather(*(collect_completion(s) for s in streams))
            choices = []
            for index, (text, done) in enumerate(results):
                content, finish, calls = self._finished(text, done)
                choices.append(self._choice(index, content, finish, False, calls, done.get("logprobs")))
            answer = self._envelope(choices, False)
            answer["usage"] = _usage([done for _, done in results])
            return JSONResponse(answer)
        return streamed(self._sse(streams), "text/event-stream")

    async def _sse(self, streams: list[AsyncIterator[dict[str, Any]]]) -> AsyncIterator[bytes]:
        finals: list[dict[str, Any]] = []
        if self.kind == "chat":
            for index in range(self.n):
                first = self._choice(index, "", None, True)
                first["delta"] = {"role": "assistant", "content": ""}
                yield _sse(self._envelope([first], True))
        elif self.echo:
            for index in range(self.n):
                yield _sse(self._envelope([self._choice(index, self.echo, None, True)], True))
        buffered: dict[int, list[str]] = {index: [] for index in range(self.n)}
        async for index, event in _merge(streams):
            if "error" in event:
                yield _sse({"error": {"message": event["error"], "type": "api_error", "param": None, "code": None}})
                return
            if self.tool_use is not None:  # calls can only be parsed from the whole answer
                if event.get("done"):
                    finals.append(event)
                    content, finish, calls = self._finished("".join(buffered[index]), event)
                    if content:
                        yield _sse(self._envelope([self._choice(index, content, None, True)], True))
                    yield _sse(self._envelope([self._choice(index, None, finish, True, calls)], True))
                else:
                    buffered[index].append(event.get("content", ""))
                continue
            if event.get("done"):
                finals.append(event)
                yield _sse(self._envelope([self._choice(index, None if self.kind == "chat" else "",
                                                        _finish_reason(event), True)], True))
            else:
                yield _sse(self._envelope([self._choice(index, event.get("content", ""), None, True,
                                                        logprobs=event.get("logprobs"))], True))
        if self.include_usage:
            usage_chunk = self._envelope([], True)
            usage_chunk["usage"] = _usage(finals)
            yield _sse(usage_chunk)
        yield _sse("[DONE]")


def _texts_of(body: _SamplingBody | EmbeddingRequest) -> list[str]:
    """The text a request brings, for the prompt-length limit."""
    if isinstance(body, ChatCompletionRequest):
        return [m.content if isinstance(m.content, str) else "".join(p.text or "" for p in m.content or [])
                for m in body.messages]
    raw = getattr(body, "prompt", None) or getattr(body, "input", None)
    if isinstance(raw, str):
        return [raw]
    return [item for item in raw or [] if isinstance(item, str)]


def _job(request: Request, body: _SamplingBody | EmbeddingRequest, max_tokens: int | None,
         constraint: Constraint = NO_CONSTRAINT) -> CompletionJob:
    state = state_of(request)
    parse_name(body.model)
    options = _options(body, max_tokens) if isinstance(body, _SamplingBody) else {}
    check_request(state.settings.limits, texts=_texts_of(body), messages=len(getattr(body, "messages", ()) or ()),
                  tools=getattr(body, "tools", None), options=options,
                  constraint=getattr(body, "response_format", None) or getattr(body, "grammar", None))
    try:
        return state.inference.job(body.model, options, None, constraint, getattr(body, "grammar", None))
    except ApiError as exc:
        if exc.status == 404:
            raise not_found(f"model '{body.model}' not found") from None
        raise


def _chat_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """OpenAI messages as the chat templates expect them (Ollama's shape)."""
    converted = []
    for m in messages:
        message: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": _text_of(m.content)}
        if m.tool_calls:
            message["tool_calls"] = [_template_tool_call(call) for call in m.tool_calls]
        if m.role == "tool" and m.name:
            message["tool_name"] = m.name
        converted.append(message)
    return converted


def _template_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments", "{}")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            raise bad_request(f"tool call {function.get('name')!r}: arguments are not valid JSON") from None
    return {"function": {"name": function.get("name", ""), "arguments": arguments}}


def _apply_tool_choice(job: CompletionJob, tool_use: ToolUse | None,
                       choice: str | dict[str, Any] | None) -> ToolUse | None:
    """Apply ``tool_choice``: none drops the tools; required or a named function forces a
    call; auto (the default) constrains the calls the model chooses to write."""
    if tool_use is None or choice == "none":
        return None
    if choice in (None, "auto"):
        constrain_tool_calls(job, tool_use)
    elif choice == "required":
        job.grammar, job.json_schema = tool_use.forced_grammar(), None
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        job.grammar, job.json_schema = tool_use.forced_grammar(choice["function"].get("name")), None
    else:
        raise bad_request(f"invalid tool_choice {choice!r}: use none, auto, required or a function")
    return tool_use


@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    job = _job(request, body, body.max_completion_tokens or body.max_tokens, _response_constraint(body.response_format))
    state_of(request).inference.want_logprobs(job, body.logprobs, body.top_logprobs if body.logprobs else None)
    tool_use = _apply_tool_choice(job, ToolUse.for_model(job.model, body.tools), body.tool_choice)
    builder = chat_prompt_builder(job.model, _chat_messages(body.messages), tool_use.tools if tool_use else None)
    completion = _Completion(request, job, body.model, "chat", n=body.n, stream=body.stream,
                             include_usage=bool(body.stream_options and body.stream_options.include_usage),
                             tool_use=tool_use)
    return await completion.respond(builder)


@router.post("/completions")
async def completions(body: CompletionRequest, request: Request):
    if isinstance(body.prompt, list):
        if len(body.prompt) != 1:
            raise bad_request("prompt: send one prompt string per request")
        prompt = body.prompt[0]
    else:
        prompt = body.prompt
    job = _job(request, body, body.max_tokens if body.max_tokens is not None else 16)
    state_of(request).inference.want_logprobs(job, body.logprobs is not None, body.logprobs)

    def builder(health: dict[str, Any]) -> str:
        return prompt

    completion = _Completion(request, job, body.model, "text", n=body.n, stream=body.stream,
                             include_usage=bool(body.stream_options and body.stream_options.include_usage),
                             echo=prompt if body.echo else "")
    return await completion.respond(builder)


def _model_object(name: str, modified: float) -> dict[str, Any]:
    owner = name.split("/")[0] if "/" in name else "library"
    return {"id": name, "object": "model", "created": int(modified), "owned_by": owner}


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    entries = state_of(request).store.list_models()
    return {"object": "list", "data": [_model_object(e.name.display, e.modified_at.timestamp()) for e in entries]}


@router.get("/models/{model:path}")
async def get_model(model: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    local = state.inference.resolve(model)
    return _model_object(local.name.display, local.model_path.stat().st_mtime)


@router.post("/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request) -> dict[str, Any]:
    raw = body.input
    if isinstance(raw, str):
        inputs: list[str | list[int]] = [raw]
    elif raw and all(isinstance(item, int) for item in raw):
        inputs = [raw]  # one token array
    else:
        inputs = list(raw)
    if not inputs or any(len(item) == 0 for item in inputs):
        raise bad_request("input must not be empty")
    job = _job(request, body, None)
    answer = await state_of(request).inference.embed(job, inputs, True)
    data = []
    for index, vector in enumerate(answer["embeddings"]):
        vector = shorten(vector, body.dimensions)
        encoded = encode_base64(vector) if body.encoding_format == "base64" else vector
        data.append({"object": "embedding", "embedding": encoded, "index": index})
    tokens = answer["prompt_eval_count"]
    return {"object": "list", "data": data, "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
