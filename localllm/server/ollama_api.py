"""Ollama's REST API (``/api/*``): same paths, field names, defaults and NDJSON streams."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from .. import __version__
from ..registry.create import CreateError, CreateSpec, check_spec, spec_from_modelfile
from ..registry.gguf import InvalidGGUF
from ..registry.names import InvalidName
from ..registry.pull import PullError, parse_pull_target
from ..registry.models import load_local_model
from ..registry.store import CorruptManifest, DigestMismatch, InvalidDigest, ModelNotFound, parse_digest
from ..templates import prompt as prompts
from . import show
from .api_types import (
    ChatRequest,
    CopyRequest,
    CreateRequest,
    DeleteRequest,
    EmbedRequest,
    GenerateRequest,
    LegacyEmbeddingsRequest,
    PullRequest,
    ShowRequest,
)
from .embeddings import shorten
from .errors import ApiError, bad_request, not_found
from .formats import format_constraint
from .inference import (
    CompletionJob,
    chat_prompt_builder,
    constrain_tool_calls,
    collect_completion,
    parse_name,
    template_errors_as_400,
)
from .limits import check_request
from .options import validate_options
from .state import DaemonState, details_at
from .streaming import streamed
from .tools import ToolCall, ToolUse

log = logging.getLogger("localllm.api")

router = APIRouter()

NDJSON = "application/x-ndjson"
CHAT_ROLES = {"system", "user", "assistant", "tool"}


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def state_of(request: Request) -> DaemonState:
    return request.app.state.daemon


async def ndjson(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for event in events:
        yield (json.dumps(event, ensure_ascii=False) + "\n").encode()


async def stream_or_last(events: AsyncIterator[dict[str, Any]], stream: bool) -> Response:
    """Stream status events as NDJSON, or answer only the last one (pull/create without stream).

    An error event carries its HTTP status under ``status_code``: it is sent in the
    status line of a whole answer and left out of streamed ones.
    """
    if stream:
        async def without_status() -> AsyncIterator[dict[str, Any]]:
            async for event in events:
                event.pop("status_code", None)
                yield event

        return streamed(ndjson(without_status()), NDJSON)
    final: dict[str, Any] = {}
    async for event in events:
        final = event
        if "error" in event:
            return JSONResponse({"error": event["error"]}, status_code=event.get("status_code", 500))
    return JSONResponse(final)


@router.get("/", include_in_schema=False)
@router.head("/", include_in_schema=False)
async def root() -> Response:
    return Response("localllm is running", media_type="text/plain")


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    state = state_of(request)
    generating = [m for m in list(state.scheduler.loaded.values()) if not m.runner.config.embedding]
    runners = [(m.name, m.engine, await m.runner.refresh_health()) for m in generating]
    text = state.metrics.render(state.scheduler.queue_depths(), runners)
    return Response(text, media_type="text/plain; version=0.0.4")


@router.get("/api/version")
async def version() -> dict[str, str]:
    return {"version": __version__}


@router.get("/api/tags")
async def tags(request: Request) -> dict[str, Any]:
    state = state_of(request)
    models = []
    for entry in state.store.list_models():
        try:
            details = state.details_of(entry.manifest)
        except Exception as exc:  # a broken model still lists, with what we know
            log.warning("cannot read %s: %s", entry.name.display, exc)
            details = {"format": "gguf"}
        models.append({
            "name": entry.name.display,
            "model": entry.name.display,
            "modified_at": entry.modified_at.isoformat(),
            "size": entry.size,
            "digest": entry.digest,
            "details": details,
        })
    return {"models": models}  # newest first, as the store lists them


@router.post("/api/show")
async def show_model(body: ShowRequest, request: Request) -> dict[str, Any]:
    model = state_of(request).inference.resolve(body.model)
    return show.show_response(model, verbose=body.verbose)


@router.post("/api/copy")
async def copy_model(body: CopyRequest, request: Request) -> Response:
    source = parse_name(body.source, "source")
    destination = parse_name(body.destination, "destination")
    try:
        state_of(request).store.copy(source, destination)
    except ModelNotFound as exc:
        raise not_found(str(exc)) from None
    return Response(status_code=200)


@router.delete("/api/delete")
async def delete_model(body: DeleteRequest, request: Request) -> Response:
    name = parse_name(body.model)
    state = state_of(request)
    try:
        model = load_local_model(state.store, name)
    except (ModelNotFound, CorruptManifest, InvalidGGUF):
        model = None  # not loadable as it is, so no runner to stop; deleting it still works (or 404s)
    try:
        state.store.delete(name)
    except ModelNotFound as exc:
        raise not_found(str(exc)) from None
    if model is not None:
        await state.scheduler.unload(model.model_path, tuple(model.adapters))
    return Response(status_code=200)


@router.post("/api/pull")
async def pull_model(body: PullRequest, request: Request) -> Response:
    if not body.model:
        raise bad_request("model is required")
    try:
        name, url = parse_pull_target(body.model)
    except (InvalidName, PullError) as exc:
        raise bad_request(str(exc)) from None
    puller = state_of(request).puller

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            async for status in puller.pull(name, url=url, insecure=body.insecure):
                yield status
        except PullError as exc:
            yield {"error": str(exc), "status_code": exc.status}

    return await stream_or_last(events(), body.stream)


def create_spec(body: CreateRequest, store) -> CreateSpec:
    """The request as a CreateSpec: raw Modelfile text, or Ollama's structured fields."""
    base_dir = Path(body.path).expanduser().parent if body.path else None
    if body.modelfile is not None:
        return spec_from_modelfile(body.modelfile, base_dir, body.quantize)
    source = body.from_
    if body.files:
        source = str(_uploaded_blob(store, next(iter(body.files.values())), "files"))
    if not source:
        raise CreateError("'from' (or a Modelfile with FROM) is required")
    licenses = [body.license] if isinstance(body.license, str) else body.license
    spec = CreateSpec(
        from_=source, base_dir=base_dir, template=body.template, system=body.system,
        parameters=validate_options(body.parameters), license=licenses, quantize=body.quantize,
        messages=[m.model_dump(exclude_none=True) for m in body.messages] if body.messages is not None else None,
        adapters=[str(_uploaded_blob(store, d, "adapters")) for d in (body.adapters or {}).values()],
    )
    check_spec(spec)
    return spec


def _uploaded_blob(store, digest: str, field: str) -> Path:
    """The path of a blob a client uploaded for create (``files``/``adapters``)."""
    try:
        path = store.blob_path(digest)
    except InvalidDigest as exc:
        raise CreateError(f"{field}: {exc}") from None
    if not path.is_file():
        raise CreateError(f"blob {digest} not found; upload it with POST /api/blobs/{digest} first")
    return path


@router.post("/api/create")
async def create_model(body: CreateRequest, request: Request) -> Response:
    name = parse_name(body.model)
    state = state_of(request)
    try:
        spec = create_spec(body, state.store)
    except CreateError as exc:
        raise bad_request(str(exc)) from None

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            async for status in state.creator.create(name, spec):
                yield status
        except (CreateError, InvalidGGUF) as exc:
            yield {"error": str(exc), "status_code": 400}

    return await stream_or_last(events(), body.stream)


@router.head("/api/blobs/{digest}")
async def blob_exists(digest: str, request: Request) -> Response:
    try:
        found = state_of(request).store.has_blob(digest)
    except InvalidDigest as exc:
        raise bad_request(str(exc)) from None
    return Response(status_code=200 if found else 404)


@router.post("/api/blobs/{digest}")
async def upload_blob(digest: str, request: Request) -> Response:
    store = state_of(request).store
    try:
        parse_digest(digest)
    except InvalidDigest as exc:
        raise bad_request(str(exc)) from None
    temp = store.temp_path("upload")
    try:
        with temp.open("wb") as out:
            async for chunk in request.stream():
                out.write(chunk)
        await asyncio.to_thread(store.add_blob_file, temp, digest)
    except DigestMismatch as exc:
        raise bad_request(f"uploaded content does not match {digest}: {exc}") from None
    finally:
        temp.unlink(missing_ok=True)
    return Response(status_code=201)


@router.get("/api/ps")
async def running(request: Request) -> dict[str, Any]:
    state = state_of(request)
    models = []
    for loaded in list(state.scheduler.loaded.values()):  # a snapshot: loads may finish while we await
        details = details_at(Path(loaded.runner.config.model_path))
        health = await loaded.runner.refresh_health()
        models.append({
            "name": loaded.name,
            "model": loaded.name,
            "size": loaded.size,
            "digest": loaded.digest,
            "details": details,
            "expires_at": loaded.expires_at_wall().isoformat(),
            "size_vram": loaded.size_vram,
            "processor": loaded.processor,
            "context_length": loaded.runner.config.n_ctx,
            "engine": loaded.engine,
            "engine_reason": loaded.engine_reason,
            "split": list(loaded.split),
            "cache_tokens": health.get("cache_tokens", 0),
            "cache_hit_rate": health.get("cache_hit_rate", 0.0),
            "kv_blocks": health.get("kv_blocks", {}),
        })
    return {"models": models}


# --- generation -----------------------------------------------------------------------


def _final_stats(event: dict[str, Any]) -> dict[str, Any]:
    keys = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration")
    return {key: event.get(key, 0) for key in keys}


def _load_or_unload_answer(job: CompletionJob, kind: str, model_name: str, load_ns: int) -> dict[str, Any]:
    reason = "unload" if job.keep_alive == 0 else "load"
    answer: dict[str, Any] = {"model": model_name, "created_at": now_iso(), "done": True, "done_reason": reason,
                              "total_duration": load_ns, "load_duration": load_ns}
    if kind == "chat":
        answer["message"] = {"role": "assistant", "content": ""}
    else:
        answer["response"] = ""
    return answer


async def _load_only(state: DaemonState, job: CompletionJob, kind: str, model_name: str) -> JSONResponse:
    """An empty prompt loads the model (or, with keep_alive 0, unloads it)."""
    if job.keep_alive == 0:
        await state.scheduler.unload(job.model.model_path, tuple(job.model.adapters))
        return JSONResponse(_load_or_unload_answer(job, kind, model_name, 0))
    _, load_ns = await state.inference.load(job)
    return JSONResponse(_load_or_unload_answer(job, kind, model_name, load_ns))


async def _run(state: DaemonState, job: CompletionJob, builder, *, model_name: str, kind: str, stream: bool,
               tool_use: ToolUse | None = None):
    """Relay a completion as Ollama's chat or generate objects, streamed or whole.

    With tools, the answer is collected first so that tool calls can be parsed
    out of it; it is then sent as one content chunk carrying ``tool_calls``.
    """
    events = state.inference.stream(job, builder)
    first = await _first_event(events)  # raises ApiError before any byte is sent

    def chunk(piece: str, calls: list[ToolCall] = (), logprobs: list | None = None) -> dict[str, Any]:
        base: dict[str, Any] = {"model": model_name, "created_at": now_iso()}
        if kind == "chat":
            base["message"] = {"role": "assistant", "content": piece}
            if calls:
                base["message"]["tool_calls"] = [call.ollama() for call in calls]
        else:
            base["response"] = piece
        base["done"] = False
        if logprobs:
            base["logprobs"] = ollama_logprobs(logprobs)
        return base

    def final(event: dict[str, Any], text: str, calls: list[ToolCall] = ()) -> dict[str, Any]:
        answer = chunk(text, calls, event.get("logprobs") if not stream or tool_use else None)
        answer["done"] = True
        answer["done_reason"] = event.get("done_reason", "stop")
        if kind == "generate":
            answer["context"] = event.get("context", [])
        answer.update(_final_stats(event))
        return answer

    async def relay() -> AsyncIterator[dict[str, Any]]:
        if tool_use is not None:
            try:
                text, done = await collect_completion(_prepend(first, events))
            except ApiError as exc:
                yield {"error": exc.message}
                return
            content, calls = tool_use.parse(text)
            if content or calls:
                yield chunk(content, calls)
            yield final(done, "")
            return
        async for event in _prepend(first, events):
            if "error" in event:
                yield {"error": event["error"]}
                return
            if event.get("done"):
                yield final(event, "")
                return
            yield chunk(event.get("content", ""), logprobs=event.get("logprobs"))

    if stream:
        return streamed(ndjson(relay()), NDJSON)
    text, done = await collect_completion(_prepend(first, events))
    content, calls = tool_use.parse(text) if tool_use else (text, [])
    return JSONResponse(final(done, content, calls))


async def _first_event(events: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    try:
        return await events.__anext__()
    except StopAsyncIteration:
        raise ApiError(500, "model runner returned nothing") from None


async def _prepend(first: dict[str, Any], rest: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    yield first
    async for event in rest:
        yield event


def ollama_logprobs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runner's token log-probabilities in Ollama's shape (no token ids)."""
    def one(entry: dict[str, Any]) -> dict[str, Any]:
        return {"token": entry["token"], "logprob": entry["logprob"], "bytes": entry["bytes"]}

    return [dict(one(e), top_logprobs=[one(t) for t in e.get("top_logprobs", [])]) for e in entries]


def _generation_job(state: DaemonState, body: GenerateRequest | ChatRequest) -> CompletionJob:
    """The job of a generate or chat body: model, options, constraint, log-probabilities."""
    if isinstance(body, ChatRequest):
        texts = [m.content or "" for m in body.messages]
        check_request(state.settings.limits, texts=texts, messages=len(body.messages), tools=body.tools,
                      constraint=body.format or body.grammar, options=body.options)
    else:
        check_request(state.settings.limits, texts=[body.prompt, body.system or "", body.suffix or "",
                                                     body.template or ""],
                      constraint=body.format or body.grammar, options=body.options)
    job = state.inference.job(body.model, body.options, body.keep_alive, format_constraint(body.format),
                              body.grammar)
    state.inference.want_logprobs(job, body.logprobs, body.top_logprobs)
    return job


@router.post("/api/generate")
async def generate(body: GenerateRequest, request: Request):
    state = state_of(request)
    job = _generation_job(state, body)
    job.context = body.context
    model = job.model
    if not body.prompt and not body.suffix and body.context is None:
        return await _load_only(state, job, "generate", body.model)

    def builder(health: dict[str, Any]) -> str:
        with template_errors_as_400(model):
            return prompts.build_generate_prompt(
                prompt=body.prompt, system=body.system if body.system is not None else model.system,
                suffix=body.suffix, template_override=body.template, model_template=model.template,
                gguf_chat_template=model.chat_template, bos=health.get("bos", ""), eos=health.get("eos", ""),
                raw=body.raw, history=model.messages,
            )

    return await _run(state, job, builder, model_name=body.model, kind="generate", stream=body.stream)


@router.post("/api/chat")
async def chat(body: ChatRequest, request: Request):
    state = state_of(request)
    job = _generation_job(state, body)
    for index, message in enumerate(body.messages):
        if message.role not in CHAT_ROLES:
            raise bad_request(f"messages[{index}]: invalid role {message.role!r}; use system, user, assistant or tool")
    if not body.messages:
        return await _load_only(state, job, "chat", body.model)
    tool_use = ToolUse.for_model(job.model, body.tools)
    if tool_use is not None:
        constrain_tool_calls(job, tool_use)
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    builder = chat_prompt_builder(job.model, messages, tool_use.tools if tool_use else None)
    return await _run(state, job, builder, model_name=body.model, kind="chat", stream=body.stream,
                      tool_use=tool_use)


@router.post("/api/embed")
async def embed(body: EmbedRequest, request: Request) -> dict[str, Any]:
    inputs = [body.input] if isinstance(body.input, str) else body.input
    if not inputs or any(not text for text in inputs):
        raise bad_request("input must be a non-empty string or a list of non-empty strings")
    state = state_of(request)
    check_request(state.settings.limits, texts=inputs, messages=len(inputs))
    job = state.inference.job(body.model, body.options, body.keep_alive)
    answer = await state.inference.embed(job, inputs, body.truncate)
    return {
        "model": body.model,
        "embeddings": [shorten(vector, body.dimensions) for vector in answer["embeddings"]],
        "total_duration": answer["total_duration"],
        "load_duration": answer["load_duration"],
        "prompt_eval_count": answer["prompt_eval_count"],
    }


@router.post("/api/embeddings")
async def legacy_embeddings(body: LegacyEmbeddingsRequest, request: Request) -> dict[str, Any]:
    """The older single-prompt endpoint, kept for clients written against it."""
    if not body.prompt:
        return {"embedding": []}
    state = state_of(request)
    job = state.inference.job(body.model, body.options, body.keep_alive)
    answer = await state.inference.embed(job, [body.prompt], True)
    return {"embedding": answer["embeddings"][0]}
