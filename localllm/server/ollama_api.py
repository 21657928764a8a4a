"""Ollama's REST API (``/api/*``): same paths, field names, defaults and NDJSON streams."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from .. import __version__
from ..images import MARKER
from ..templates import prompt as prompts
from ..registry.create import CreateError, CreateSpec, check_spec, local_files, spec_from_modelfile
from ..gguf import InvalidGGUF
from ..registry.names import InvalidName
from ..registry.pull import PullError, parse_pull_target
from ..registry.remote import RegistryError
from ..registry.models import load_local_model
from ..registry.projector import is_projector
from ..registry.requires import normalize_requires
from ..registry.store import CorruptManifest, DigestMismatch, InvalidDigest, ModelNotFound, parse_digest
from . import show
from .api_types import (
    CacheClearRequest,
    ChatRequest,
    CopyRequest,
    CreateRequest,
    DeleteRequest,
    EmbedRequest,
    GenerateRequest,
    LegacyEmbeddingsRequest,
    PullRequest,
    PushRequest,
    ShowRequest,
)
from .conversation import check_think
from .dialects.ollama import OllamaRenderer, chat_turn
from .dialects.render import rendered
from .embeddings import shorten
from .errors import ApiError, bad_request, not_found
from .formats import format_constraint
from .handler import ChatHandler, PreparedTurn
from .inference import CompletionJob, parse_name, template_errors_as_400
from .limits import check_request
from .memory import ContextChoice
from .security import is_trusted_client
from .request_options import validate_options
from .runner_client import Health
from .state import DaemonState, details_at, state_of
from .streaming import NDJSON, ndjson, streamed
from .vision import check_images

log = logging.getLogger("localllm.api")

router = APIRouter()

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
    state = state_of(request)
    model = state.inference.resolve(body.model)
    runner = next((m for m in state.scheduler.loaded.values()
                   if m.key[0] == str(model.run_path) and not m.runner.config.embedding), None)
    loaded = ContextChoice(runner.runner.config.n_ctx, runner.context_reason) if runner is not None else None
    return show.show_response(model, verbose=body.verbose, loaded=loaded)


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
        model = load_local_model(state.store, name, verify_links=False)  # its runner is stopped even so
    except (ModelNotFound, CorruptManifest, InvalidGGUF):
        model = None  # not loadable as it is, so no runner to stop; deleting it still works (or 404s)
    try:
        state.store.delete(name)
    except ModelNotFound as exc:
        raise not_found(str(exc)) from None
    if model is not None:
        await state.scheduler.unload(model.run_path, tuple(model.adapters))
        await state.scheduler.clear_kv_cache(model.run_path)  # KV reveals the prompts: it goes with the model
    return Response(status_code=200)


@router.delete("/api/cache")
async def clear_cache(request: Request, body: CacheClearRequest | None = None) -> JSONResponse:
    """localllm's own: delete the prefix cache's blocks on disk, of one model or of all (``localllm cache clear``)."""
    state = state_of(request)
    path = None
    if body is not None and body.model:
        try:
            path = load_local_model(state.store, parse_name(body.model), verify_links=False).run_path
        except ModelNotFound as exc:
            raise not_found(str(exc)) from None
    return JSONResponse({"freed_bytes": await state.scheduler.clear_kv_cache(path)})


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


@router.post("/api/push")
async def push_model(body: PushRequest, request: Request) -> Response:
    name = parse_name(body.model)
    pusher = state_of(request).pusher

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            async for status in pusher.push(name, insecure=body.insecure):
                yield status
        except RegistryError as exc:
            yield {"error": str(exc), "status_code": exc.status}

    return await stream_or_last(events(), body.stream)


def create_spec(body: CreateRequest, store, may_read_files: bool) -> CreateSpec:
    """The request as a CreateSpec: raw Modelfile text, or Ollama's structured fields.

    A FROM or ADAPTER naming a file on this machine is refused (403) unless
    ``may_read_files``: only a trusted client may make the daemon read its files.
    """
    base_dir = Path(body.path).expanduser().parent if body.path else None
    if body.modelfile is not None:
        spec = spec_from_modelfile(body.modelfile, base_dir, body.quantize)
    else:
        spec = _structured_spec(body, base_dir)
    if not may_read_files and (paths := local_files(spec)):
        raise ApiError(403, f"{paths[0]}: a model can be created from a file on the daemon's machine only by a "
                            "client on that machine or one holding LOCALLLM_API_KEY; upload the file with "
                            "POST /api/blobs/<digest> and name it in 'files' instead")
    if body.modelfile is None and body.files:  # a projector among them (clip architecture) is one, as in Ollama
        blobs = [str(_uploaded_blob(store, digest, "files")) for digest in body.files.values()]
        spec.projectors = [blob for blob in blobs if is_projector(Path(blob))]
        spec.from_ = next((blob for blob in blobs if blob not in spec.projectors), "")
    if body.modelfile is None and body.adapters:
        spec.adapters = [str(_uploaded_blob(store, d, "adapters")) for d in body.adapters.values()]
    if not spec.from_:
        raise CreateError("'from' (or a Modelfile with FROM) is required")
    return spec


def _structured_spec(body: CreateRequest, base_dir: Path | None) -> CreateSpec:
    """Ollama's structured create fields (without the uploaded blobs ``files`` and ``adapters`` name)."""
    licenses = [body.license] if isinstance(body.license, str) else body.license
    try:
        requires = normalize_requires(body.requires) if body.requires else None
    except ValueError as exc:
        raise CreateError(f"requires: {exc}") from None
    spec = CreateSpec(
        from_=body.from_ or "", base_dir=base_dir, template=body.template, system=body.system,
        parameters=validate_options(body.parameters), license=licenses, quantize=body.quantize,
        messages=[m.model_dump(exclude_none=True) for m in body.messages] if body.messages is not None else None,
        requires=requires, parser=body.parser or None, renderer=body.renderer or None,
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
    try:  # in a thread: checking a TEMPLATE renders it, which may take up to its time limit
        spec = await asyncio.to_thread(create_spec, body, state.store, is_trusted_client(request.scope))
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
            "context_reason": loaded.context_reason,
            "engine": loaded.engine,
            "engine_reason": loaded.engine_reason,
            "runner": loaded.serves,
            "split": list(loaded.split),
            "memory": loaded.memory,
            "cache": health.cache_mode,
            "placement": loaded.placement,
            "cache_tokens": health.cache_tokens,
            "cache_hit_rate": health.cache_hit_rate,
            "cache_reused_tokens": health.cache_reused_tokens,
            "kv_blocks": health.kv_blocks,
        })
    return {"models": models}


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


# --- generation: chat and generate (converted by dialects.ollama) -----------------------


async def _respond(handler: ChatHandler, turn: PreparedTurn, renderer: OllamaRenderer, stream: bool):
    if not stream:
        return JSONResponse(renderer.whole(await handler.answer(turn)))
    deltas = await handler.open(turn)  # a failure before the first event is still a plain error status
    return streamed(ndjson(rendered(renderer, deltas)), NDJSON)


# --- loading without a prompt -------------------------------------------------------


async def _load_only(state: DaemonState, job: CompletionJob, renderer: OllamaRenderer) -> JSONResponse:
    """An empty prompt loads the model (or, with keep_alive 0, unloads it)."""
    if job.keep_alive == 0:
        await state.scheduler.unload(job.model.run_path, tuple(job.model.adapters))
        load_ns = 0
    else:
        _, load_ns = await state.inference.load(job)
    answer = renderer.message_object()
    answer.update(done=True, done_reason="unload" if job.keep_alive == 0 else "load",
                  total_duration=load_ns, load_duration=load_ns)
    return JSONResponse(answer)


# --- routes ---------------------------------------------------------------------------


@router.post("/api/generate")
async def generate(body: GenerateRequest, request: Request):
    state = state_of(request)
    check_request(state.settings.limits, texts=[body.prompt, body.system or "", body.suffix or "",
                                                 body.template or ""],
                  constraint=body.format or body.grammar)
    think = check_think(body.think)
    job = state.inference.job(body.model, body.options, body.keep_alive, format_constraint(body.format),
                              body.grammar)
    state.inference.want_logprobs(job, body.logprobs, body.top_logprobs)
    job.context = body.context
    job.shift, job.truncate = body.shift is not False, body.truncate is not False
    model = job.model
    renderer = OllamaRenderer(body.model, "generate")
    check_images(model, ((f"images[{i}]", data) for i, data in enumerate(body.images or [])))
    job.images = list(body.images or [])
    prompt = MARKER * len(job.images) + body.prompt if job.images else body.prompt  # Ollama: images first
    if not body.prompt and not body.suffix and body.context is None:
        return await _load_only(state, job, renderer)

    system = body.system if body.system is not None else model.system

    def render(health: Health) -> str:
        with template_errors_as_400(model):
            return prompts.build_generate_prompt(
                prompt=prompt, system=system, suffix=body.suffix, template_override=body.template,
                model_template=model.template, gguf_chat_template=model.chat_template, bos=health.bos,
                eos=health.eos, raw=body.raw, history=model.messages, think=think,
            )

    def render_system(health: Health) -> str:  # as a chat's system part is counted
        with template_errors_as_400(model):
            return prompts.build_prompt(
                messages=[{"role": "system", "content": system}], system=None,
                model_template=body.template or model.template, gguf_chat_template=model.chat_template,
                bos_token=health.bos, eos_token=health.eos, think=think,
            )

    with_system = system and not body.raw and not body.suffix
    turn = state.chat.prepare_generate(job, render, None if body.raw else think,
                                       render_system if with_system else None)
    return await _respond(state.chat, turn, renderer, body.stream)


@router.post("/api/chat")
async def chat(body: ChatRequest, request: Request):
    state = state_of(request)
    turn = chat_turn(body)
    renderer = OllamaRenderer(body.model, "chat")
    if not turn.messages:
        job = state.inference.job(body.model, body.options, body.keep_alive)
        return await _load_only(state, job, renderer)
    return await _respond(state.chat, state.chat.prepare(turn), renderer, body.stream)
