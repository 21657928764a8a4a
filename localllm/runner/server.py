"""The runner's HTTP API, served on a unix socket to the daemon.

Endpoints (JSON in, JSON out; errors are ``{"error": "..."}`` with 400 for
bad input):

``GET /health``
    ``{"status": "ok", "n_ctx", "n_ctx_train", "n_parallel", "n_vocab",
    "bos", "eos", "model_size", "kv_used_cells", "queue_depth", "embedding",
    "cache_tokens", "cache_hit_rate", "cache_mode", "cache_reused_tokens", "cache_ram_bytes", "kv_blocks", "kv_disk",
    "device_bytes"}``. ``n_ctx`` is the
    context of ONE sequence. ``kv_used_cells`` counts every token held in KV,
    ``cache_tokens`` those of idle sequences kept for reuse (so with nothing
    running the two are equal); ``cache_hit_rate`` is the share of all prompt
    tokens served from the cache, ``cache_reused_tokens`` their number; ``cache_mode`` how prompts reuse the
    cache: ``"kv prefix"`` (any shared prefix), ``"recurrent state checkpoints"`` (a recurrent or hybrid
    model: only where a copy of its state was kept) or ``"sliding window checkpoints"`` (gpt-oss, Gemma 4 on the native
    engine: only where a copy of the sliding layers' window was kept), ``"none"`` for embeddings; ``cache_ram_bytes``
    the host RAM holding spilled prefixes; ``kv_blocks`` the native engine's block counts
    (``total``, ``in_use``, ``shared``, ``cached``, ``spilled``, ``block_size``, ``snapshots``, and
    ``window_blocks`` the sliding layers' rings where they keep only their window),
    empty on llama.cpp; ``kv_disk`` what the prefix cache's disk tier did (``reads``, ``writes``,
    ``dropped`` unusable files, ``writing`` false once a write failed), empty without one.
``POST /tokenize``
    ``{"content": str, "add_special": true, "parse_special": true}`` →
    ``{"tokens": [int]}``. With ``"prompt": true`` the content is tokenized exactly as
    ``/completion`` tokenizes a prompt string (specials parsed, one BOS at most), images too
    (``"images"``: each image is a run of negative placeholder tokens, one per position it takes).
``POST /detokenize``
    ``{"tokens": [int]}`` → ``{"content": str}``.
``POST /completion``
    ``{"prompt": str | [int], "context": [int] | null, "options": {Ollama
    options}, "grammar": GBNF | null, "grammar_triggers": [str], "json_schema": {} | null,
    "preserved_tokens": [str],
    "stream": true, "truncate": true, "shift": true}`` → NDJSON lines ``{"content": piece}``, then
    ``{"done": true, "done_reason": "stop" | "length", "prompt_eval_count",
    "prompt_eval_duration", "eval_count", "eval_duration", "cached_tokens",
    "preemptions", "context": [int]}`` (and ``"truncated": true`` when the prompt was cut);
    ``prompt_eval_count`` counts evaluated prompt tokens only, ``cached_tokens`` those reused from
    the prefix cache, ``preemptions`` the times the request gave its KV back to a full pool; a
    failure mid-stream is a line ``{"error": msg}``. A prompt the whole KV pool could never hold is
    refused with 400 before it queues. A prompt longer than the context is cut as Ollama does (the
    first ``num_keep`` tokens and the most recent ones), or refused with 400 when ``truncate`` is
    false. When generation fills the context it slides (``shift``, at most ten contexts of output in
    all), or with ``"shift": false`` the answer ends there with ``"done_reason": "length"``. With
    ``preserved_tokens`` (strings) that are each one control token of the vocabulary are passed on as
    their text (llama-server's field: a chat format's markers, e.g. gpt-oss's ``<|channel|>``). With
    ``grammar_triggers`` the grammar is lazy: output is free until one of those words appears, and
    the grammar holds from that word on
    (a tool call's start marker). ``images`` (base64 PNG, JPEG, WebP or GIF, or WAV, MP3 or FLAC audio
    for a projector that hears; runners started with ``--projector`` only) go at the image markers (``<__media__>``) of a string prompt, in order; a
    prompt with images is never cut: over the context it is a 400. ``json_schema`` holds the output to a JSON
    schema with llguidance. ``context`` (tokens of an earlier exchange, Ollama's ``/api/generate``
    ``context``) goes before the prompt. Pieces never split a UTF-8
    character and never contain any part of a stop string. Closing the connection cancels the generation. With
    ``"stream": false`` one object: the done fields plus ``"content"``.
``POST /audio`` (a projector that hears)
    The body is a WAV, MP3 or FLAC file; the answer (``audio/wav``) is that audio as the projector hears
    it: decoded by libmtmd's helper, mono, at the projector's rate, as 16-bit PCM. 400 for a file that
    cannot be decoded, or is longer than the limit on audio a request.
``POST /embedding`` (runner started with ``--embedding`` only)
    ``{"content": [str], "truncate": true}`` → ``{"embeddings": [[float]],
    "prompt_eval_count": int}``; L2-normalised; 400 for an over-long input
    when ``truncate`` is false, and from a reranker.
``POST /rerank`` (a reranker's runner, pooling ``rank``, started with ``--embedding``)
    ``{"query": str, "documents": [str]}`` → ``{"results": [{"score", "tokens", "truncated"}],
    "prompt_eval_count": int}``, one result per document in order; a document too long for the
    context is cut to fit (``truncated``); 400 from a model that does not rank.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from localllm.audio import check_audio, wav_bytes
from localllm.backends.llama_cpp import Model
from localllm.backends.projector import ImagePrompt, Projector, is_placeholder
from localllm.media import MediaError, decode_base64_media
from localllm.options import CompletionOptions, OptionError
from localllm.runner.draft_model import DraftModel, DraftModels, DraftRefused
from localllm.runner.embed import Embedder, InputTooLong
from localllm.runner.engine import CompletionRequest, Engine
from localllm.runner.relay import EventRelay
from localllm.runner.sampling import GrammarError, Sampler

log = logging.getLogger("localllm.runner")


NO_KV = {"kv_used_cells": 0, "cache_tokens": 0, "cache_hit_rate": 0.0, "cache_mode": "none", "cache_reused_tokens": 0,
         "cache_ram_bytes": 0, "kv_blocks": {}, "kv_disk": {}}


class BadRequest(ValueError):
    """The request body is not what the endpoint accepts."""


@dataclass
class Runtime:
    """What the endpoints serve: a model and either a generation engine or an embedder."""

    model: Model
    n_ctx: int  # per sequence
    n_parallel: int
    stream_interval: float  # seconds between hand-overs of streamed pieces (LOCALLLM_STREAM_INTERVAL; relay.py)
    engine: Engine | None = None
    embedder: Embedder | None = None
    drafts: DraftModels | None = None  # draft models for speculation (native engine only)
    projector: Projector | None = None  # images in (llama.cpp engine, --projector)
    device_bytes: dict[str, int] = field(default_factory=dict)  # local offload device -> bytes the load took on it


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def _shown_tokens(model: Any, texts: Any) -> frozenset[int]:
    """The tokens of ``preserved_tokens`` that the vocabulary has as one token each."""
    if texts is None:
        return frozenset()
    if not isinstance(texts, list) or not all(isinstance(t, str) and t for t in texts):
        raise BadRequest("'preserved_tokens' must be a list of non-empty strings")
    found = (model.vocab.tokenize(text, add_special=False, parse_special=True) for text in texts)
    return frozenset(tokens[0] for tokens in found if len(tokens) == 1)


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise BadRequest(f"{name!r} must be true or false")
    return value


def _token_list(value: Any, name: str, n_vocab: int) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise BadRequest(f"{name!r} must be a list of token ids")
    bad = next((t for t in value if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise BadRequest(f"{name!r} holds token id {bad}, outside the vocabulary (0..{n_vocab - 1})")
    return value


def _prompt_tokens(model: Model, prompt: Any, context: Any) -> list[int]:
    """The tokens to evaluate: an earlier exchange's ``context`` (if any), then the prompt."""
    earlier = [] if context is None else _token_list(context, "context", model.vocab.n_vocab)
    if isinstance(prompt, str):
        if earlier:  # a continuation: no second BOS in the middle
            tokens = model.vocab.tokenize(prompt, add_special=False, parse_special=True)
        else:
            tokens = model.vocab.tokenize_prompt(prompt)
    else:
        tokens = _token_list(prompt, "prompt", model.vocab.n_vocab)
    tokens = earlier + tokens
    if not tokens:
        raise BadRequest("the prompt is empty")
    return tokens


def _image_prompt(rt: Runtime, prompt: Any, context: Any, images: Any) -> ImagePrompt:
    """A string prompt with its base64 ``images`` (images and audio clips) at its markers, tokenized by libmtmd."""
    if rt.projector is None:
        raise BadRequest("this model does not support images or audio (it was loaded without a projector)")
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise BadRequest("'images' must be a list of base64 strings")
    if not isinstance(prompt, str):
        raise BadRequest("images need a string prompt (with an image marker for each)")
    if context:
        raise BadRequest("'context' cannot be combined with images; send the whole conversation")
    try:
        decoded = [decode_base64_media(data, f"images[{i}]") for i, data in enumerate(images)]
        parsed = rt.projector.tokenize(prompt, decoded)
    except (*MediaError, ValueError) as exc:
        raise BadRequest(str(exc)) from None
    if not parsed.tokens:
        raise BadRequest("the prompt is empty")
    return parsed


def _check_images_fit(parsed: ImagePrompt, n_ctx: int) -> None:
    """A prompt with images is never cut (a cut could split an image); nor may it end in one."""
    tokens = parsed.tokens
    if len(tokens) > n_ctx:
        image_tokens = sum(1 for t in tokens if is_placeholder(t))
        raise BadRequest(f"the prompt and its images take {len(tokens)} tokens ({image_tokens} of them for "
                         f"images), more than the context length of {n_ctx} tokens; send fewer or smaller images, "
                         "or raise num_ctx")
    if is_placeholder(tokens[-1]):
        raise BadRequest("the prompt ends with an image; put some text after it")


def create_app(rt: Runtime) -> Starlette:
    """The Starlette application serving ``rt``."""
    model = rt.model

    async def health(_: Request) -> Response:
        if rt.engine is not None and not rt.engine.alive:
            return _error("the engine thread has stopped", 503)
        return JSONResponse(
            {
                "status": "ok",
                "n_ctx": rt.n_ctx,
                "n_ctx_train": model.n_ctx_train,
                "n_parallel": rt.n_parallel,
                "n_vocab": model.vocab.n_vocab,
                "bos": model.vocab.bos_text,
                "eos": model.vocab.eos_text,
                "model_size": model.size,
                **(rt.engine.kv_state if rt.engine else NO_KV),
                "queue_depth": rt.engine.queue_depth if rt.engine else 0,
                "embedding": rt.embedder is not None,
                "device_bytes": rt.device_bytes,
            }
        )

    async def tokenize(request: Request) -> Response:
        body = await _body(request)
        content = body.get("content")
        if not isinstance(content, str):
            raise BadRequest("'content' must be a string")
        if body.get("images"):
            parsed = await asyncio.to_thread(_image_prompt, rt, content, None, body["images"])
            parsed.close()
            return JSONResponse({"tokens": parsed.tokens})
        if _flag(body, "prompt", False):
            return JSONResponse({"tokens": model.vocab.tokenize_prompt(content)})
        add_special = _flag(body, "add_special", True)
        parse_special = _flag(body, "parse_special", True)
        return JSONResponse({"tokens": model.vocab.tokenize(content, add_special, parse_special)})

    async def detokenize(request: Request) -> Response:
        body = await _body(request)
        tokens = _token_list(body.get("tokens"), "tokens", model.vocab.n_vocab)
        return JSONResponse({"content": model.vocab.detokenize(tokens)})

    async def completion(request: Request) -> Response:
        if rt.engine is None:
            raise BadRequest("this runner was started with --embedding and only serves /embedding")
        body = await _body(request)
        parsed = None
        if body.get("images"):
            parsed = await asyncio.to_thread(_image_prompt, rt, body.get("prompt"), body.get("context"),
                                             body["images"])
        try:
            return await _complete(body, parsed)
        except BaseException:
            if parsed is not None:
                parsed.close()
            raise

    async def _complete(body: dict[str, Any], parsed: ImagePrompt | None) -> Response:
        if parsed is not None:
            tokens = parsed.tokens
        else:
            tokens = _prompt_tokens(model, body.get("prompt"), body.get("context"))
        options = CompletionOptions.from_dict(body.get("options"))
        grammar = body.get("grammar")
        if grammar is not None and not isinstance(grammar, str):
            raise BadRequest("'grammar' must be a string (GBNF)")
        triggers = body.get("grammar_triggers") or []
        if not isinstance(triggers, list) or not all(isinstance(t, str) and t for t in triggers):
            raise BadRequest("'grammar_triggers' must be a list of non-empty strings")
        if triggers and not grammar:
            raise BadRequest("'grammar_triggers' needs a 'grammar' to apply")
        schema = body.get("json_schema")
        if schema is not None and not isinstance(schema, dict):
            raise BadRequest("'json_schema' must be a JSON schema object")
        if schema is not None and grammar:
            raise BadRequest("send either a 'grammar' or a 'json_schema', not both")
        shown = _shown_tokens(model, body.get("preserved_tokens"))
        stream = _flag(body, "stream", True)
        shift = _flag(body, "shift", True)
        n_ctx = options.num_ctx or rt.n_ctx
        if n_ctx > model.n_ctx_train > 0:
            raise BadRequest(f"num_ctx {n_ctx} is more than the model's trained context of {model.n_ctx_train} tokens")
        if parsed is not None:
            _check_images_fit(parsed, n_ctx)
        if not _flag(body, "truncate", True) and len(tokens) > n_ctx:
            raise BadRequest(
                f"the prompt is {len(tokens)} tokens, more than the context length of {n_ctx} tokens; "
                "shorten it, raise num_ctx, or allow truncation"
            )
        refusal = rt.engine.refusal(tokens, n_ctx)
        if refusal:
            raise BadRequest(refusal)
        draft = await _draft_model(rt, options)
        sampler = Sampler(model, options, n_ctx, grammar, triggers, schema)
        relay = EventRelay(asyncio.get_running_loop(), rt.stream_interval if stream else float("inf"))
        job = CompletionRequest(tokens, options, sampler, relay.emit, shift=shift, draft=draft, n_ctx=n_ctx,
                                images=parsed.take_images() if parsed is not None else {}, shown=shown)
        rt.engine.submit(job)
        if stream:
            return StreamingResponse(_ndjson(job, relay), media_type="application/x-ndjson")
        return await _collect(job, relay)

    async def audio(request: Request) -> Response:
        if rt.projector is None or not rt.projector.audio:
            raise BadRequest("this model does not hear (it was loaded without a projector that takes audio)")
        projector = rt.projector

        def decode(raw: bytes) -> bytes:
            try:
                return wav_bytes(projector.audio_samples(check_audio(raw, "the file")), projector.sample_rate)
            except ValueError as exc:  # an AudioError, or what libmtmd could not decode
                raise BadRequest(str(exc)) from None

        return Response(await asyncio.to_thread(decode, await request.body()), media_type="audio/wav")

    async def embedding(request: Request) -> Response:
        if rt.embedder is None:
            raise BadRequest("this runner was not started with --embedding")
        body = await _body(request)
        content = body.get("content")
        if isinstance(content, str):
            content = [content]
        if not isinstance(content, list) or not content or not all(isinstance(c, str) for c in content):
            raise BadRequest("'content' must be a non-empty list of strings")
        if rt.embedder.ranks:
            raise BadRequest("this model is a reranker (pooling type rank): it scores query/document pairs "
                             "and gives no embeddings")
        truncate = _flag(body, "truncate", True)
        inputs = await asyncio.to_thread(rt.embedder.tokenize, content, truncate)
        vectors = await asyncio.wrap_future(rt.embedder.submit(inputs))  # passes shared with other requests
        return JSONResponse({"embeddings": vectors, "prompt_eval_count": sum(len(tokens) for tokens in inputs)})

    async def rerank(request: Request) -> Response:
        if rt.embedder is None or not rt.embedder.ranks:
            raise BadRequest("this model cannot rerank: its GGUF names no rank pooling (a reranker's "
                             "classification head)")
        body = await _body(request)
        query, documents = body.get("query"), body.get("documents")
        if not isinstance(query, str):
            raise BadRequest("'query' must be a string")
        if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
            raise BadRequest("'documents' must be a list of strings")
        ranked = await asyncio.to_thread(rt.embedder.rank, query, documents)
        return JSONResponse({
            "results": [{"score": r.score, "tokens": r.tokens, "truncated": r.truncated} for r in ranked],
            "prompt_eval_count": sum(r.tokens for r in ranked),
        })

    async def bad_request(_: Request, exc: Exception) -> Response:
        return _error(str(exc))

    async def internal_error(_: Request, exc: Exception) -> Response:
        log.exception("request failed", exc_info=exc)
        return _error(f"internal error: {exc}", 500)

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/detokenize", detokenize, methods=["POST"]),
            Route("/completion", completion, methods=["POST"]),
            Route("/audio", audio, methods=["POST"]),
            Route("/embedding", embedding, methods=["POST"]),
            Route("/rerank", rerank, methods=["POST"]),
        ],
        exception_handlers={
            BadRequest: bad_request,
            OptionError: bad_request,
            GrammarError: bad_request,
            InputTooLong: bad_request,
            Exception: internal_error,
        },
    )


async def _draft_model(rt: Runtime, options: CompletionOptions) -> DraftModel | None:
    """The request's draft model (loaded on first use), after checking the engine can speculate at all."""
    if not rt.engine.speculates and (options.speculative == "on" or options.draft):
        asked = "option 'draft'" if options.draft else "option 'speculative' = 'on'"
        raise BadRequest(f"{asked} needs the native engine (speculative decoding relies on its batch-invariant "
                         "logits); use PARAMETER engine native or leave speculative on 'auto'")
    if not options.draft or options.speculative == "off":
        return None
    try:
        return await asyncio.to_thread(rt.drafts.get, options.draft)
    except DraftRefused as exc:
        raise BadRequest(f"option 'draft' names a model that cannot draft for this one: {exc}") from None


async def _ndjson(job: CompletionRequest, relay: EventRelay):
    """Stream the engine's events as NDJSON; leaving early (disconnect) cancels the job."""
    try:
        while True:
            batch = await relay.batch()
            yield "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in batch)
            if any("done" in item or "error" in item for item in batch):
                return
    finally:
        job.cancelled = True


async def _collect(job: CompletionRequest, relay: EventRelay) -> Response:
    """The whole completion as one object (``"stream": false``)."""
    pieces: list[str] = []
    try:
        while True:
            for item in await relay.batch():
                if "error" in item:
                    return _error(item["error"], 500)
                if "done" in item:
                    return JSONResponse({"content": "".join(pieces), **item})
                pieces.append(item["content"])
    finally:
        job.cancelled = True
