"""One completion from request to runner and back, shared by every dialect.

Resolves the model in the store, merges its parameters with the request's
options (a :class:`CompletionJob`), then leases a runner from the scheduler
(a :class:`Lease`): the caller renders its prompt against the runner's
:class:`~localllm.server.runner_client.Health` (chat templates need its BOS and
EOS tokens) and completes it on the lease, which relays the runner's events,
adds ``load_duration`` and ``total_duration``, and gives the runner back at
the end. :func:`runner_errors` turns runner failures into API errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends.capabilities import LLAMA_CPP
from ..config import KV_CACHE_TYPES, NATIVE_KV_CACHE_TYPES, Settings
from ..options import LoadOptions
from ..registry.links import LinkedFileError
from ..gguf import InvalidGGUF
from ..registry.models import LocalModel, load_local_model, translate_model
from ..registry.ollama_compat import IncompatibleModel
from ..registry.names import InvalidName, ModelName
from ..registry.requires import ModelTooNew
from ..registry.store import ModelNotFound, Store
from ..templates.gotemplate import TemplateError
from ..templates.prompt import PromptError
from .errors import ApiError, bad_request, not_found
from .formats import NO_CONSTRAINT, Constraint
from .limits import check_request
from .metrics import Metrics
from .request_options import keep_alive_seconds, merge_options, validate_options
from .engine_choice import EngineRefused
from .history import ChatHistory, FittedPrompt, check_generate_system, fit_history
from .runner_client import Health, RunnerBadRequest, RunnerError, RunnerProcess
from .scheduler import BeyondTrainedContext, LoadedModel, LoadRequest, NoRoom, Scheduler
from .tool_grammar import ToolUse

log = logging.getLogger("localllm.inference")

#: Renders a prompt once the runner is up, from its ``/health`` answer (BOS and EOS tokens).
PromptRenderer = Callable[[Health], str]


@contextlib.contextmanager
def runner_errors() -> Iterator[None]:
    """The runner's (and the engine choice's) failures as API errors: refused input, an engine refused for
    the model, a context over the model's trained one or too large for the memory there is, is the request's
    400; memory or model slots the machine lacks now is a 503 with the figures (:class:`NoRoom`); a runner that
    failed is a 500."""
    try:
        yield
    except (EngineRefused, RunnerBadRequest, BeyondTrainedContext) as exc:
        raise bad_request(str(exc)) from None
    except NoRoom as exc:
        raise ApiError(exc.status, str(exc)) from None
    except RunnerError as exc:
        raise ApiError(500, str(exc)) from None


@dataclass
class CompletionJob:
    """Everything a completion needs, resolved before the runner is touched."""

    model: LocalModel
    options: dict[str, Any]
    keep_alive: float | None
    grammar: str | None = None  # GBNF, for llama.cpp's grammar sampler
    grammar_triggers: tuple[str, ...] = ()  # the grammar is lazy: it applies from the first of these words on
    json_schema: dict[str, Any] | None = None  # for llguidance (never together with a grammar)
    context: list[int] | None = None  # tokens of an earlier /api/generate exchange, put before the prompt
    shift: bool = False  # slide the context when the answer fills it (Ollama's dialect), else end with "length"
    truncate: bool = True  # cut a prompt over the context (Ollama's way), else the runner answers 400
    images: list[str] = field(default_factory=list)  # base64, one per image marker of the prompt, in order
    preserved_tokens: tuple[str, ...] = ()  # markers of the chat format: control tokens the runner spells out


def constrain_tool_calls(job: CompletionJob, tool_use: ToolUse, parallel: bool = True) -> bool:
    """Hold the calls the model chooses to write to the tools' schemas (a lazy grammar, which
    allows one call only unless ``parallel``), unless a format or grammar already constrains
    the whole answer. True when the calls are held.

    A tool schema the grammar cannot express (``uniqueItems``, say) does not
    refuse the request: the model may call tools without being asked to, so
    its calls are parsed unconstrained, as Ollama does. A forced call
    (``tool_choice``) is refused instead, since it promises a valid call.
    """
    if job.grammar is not None or job.json_schema is not None:
        return False
    try:
        job.grammar, job.grammar_triggers = tool_use.lazy_grammar(parallel)
    except ApiError as exc:
        log.warning("tool calls of this request are not constrained: %s", exc.message)
        return False
    return True


def parse_name(text: str, field: str = "model") -> ModelName:
    """A model name from a request field; 400 naming the field when missing or invalid."""
    if not text:
        raise bad_request(f"{field} is required")
    try:
        return ModelName.parse(text)
    except InvalidName as exc:
        raise bad_request(str(exc)) from None


class Inference:
    """Runs completions for the API routes."""

    def __init__(self, store: Store, scheduler: Scheduler, settings: Settings, metrics: Metrics) -> None:
        self.store = store
        self.scheduler = scheduler
        self.settings = settings
        self.metrics = metrics

    def resolve(self, name: str) -> LocalModel:
        """The local model called ``name``; 400 for a bad name, 404 when absent,
        409 when its linked file vanished or changed (links.py)."""
        parsed = parse_name(name)
        try:
            return load_local_model(self.store, parsed)
        except ModelNotFound as exc:
            raise not_found(str(exc)) from None
        except LinkedFileError as exc:
            raise ApiError(409, str(exc)) from None

    def job(self, name: str, options: dict[str, Any] | None, keep_alive: Any,
            constraint: Constraint = NO_CONSTRAINT, raw_grammar: str | None = None) -> CompletionJob:
        """Resolve a request: model, merged options, keep_alive and the output constraint. The options are
        checked against the request limits first, the same way on every endpoint.

        ``constraint`` comes from ``format``/``response_format``; ``raw_grammar`` is a
        GBNF text from a ``grammar`` field (top level or in ``options``).
        """
        options = dict(options or {})
        raw_grammar = raw_grammar or options.pop("grammar", None)
        options = validate_options(options)
        check_request(self.settings.limits, options=options)
        if raw_grammar is not None and not isinstance(raw_grammar, str):
            raise bad_request("grammar must be a string of GBNF rules")
        if raw_grammar and constraint != NO_CONSTRAINT:
            raise bad_request("use either a format/response_format or a grammar, not both")
        model = self.resolve(name)
        try:
            model.check_runnable()
        except ModelTooNew as exc:
            raise ApiError(412, str(exc)) from None  # Ollama's status for a model that needs a newer version
        merged = merge_options(model.parameters, options)
        if merged.get("draft"):
            merged["draft"] = self._draft_path(merged["draft"])
        return CompletionJob(
            model=model,
            options=merged,
            keep_alive=keep_alive_seconds(keep_alive, self.settings.keep_alive),
            grammar=constraint.grammar or raw_grammar or None,
            json_schema=constraint.json_schema,
        )

    def _draft_path(self, name: str) -> str:
        """The file of the draft model called ``name``; the runner checks it fits (400 from it otherwise)."""
        try:
            return str(self.resolve(name).model_path)
        except ApiError as exc:
            raise bad_request(f"option 'draft': {exc.message}") from None

    @staticmethod
    def want_logprobs(job: CompletionJob, logprobs: bool, top_logprobs: int | None) -> None:
        """Ask the runner for log-probabilities (0-20 alternatives per token)."""
        if top_logprobs is not None and not 0 <= top_logprobs <= 20:
            raise bad_request(f"top_logprobs must be between 0 and 20, got {top_logprobs}")
        if logprobs or top_logprobs:
            job.options["logprobs"] = True
            job.options["top_logprobs"] = top_logprobs or 0

    def load_request(self, job: CompletionJob, embedding: bool = False) -> LoadRequest:
        model = job.model
        load = LoadOptions.of(job.options)
        layers = load.num_worker_layers
        if layers and layers > 0 and not self.settings.workers:
            raise bad_request(f"option 'num_worker_layers' asks for {layers} layers on workers, but this daemon has "
                              "none (set LOCALLLM_WORKERS=host:port,... or start it with localllm serve --worker)")
        kv_cache_type = load.kv_cache_type
        if kv_cache_type is not None:
            self._check_kv_cache_type(kv_cache_type, load.engine or self.settings.engine)
        return LoadRequest(
            embedding=embedding,
            name=model.name.display,
            digest=model.digest,
            model_path=model.run_path,
            adapters=tuple(model.adapters),
            projector=model.run_projector,
            num_ctx=load.num_ctx,
            num_thread=load.num_thread,
            num_batch=load.num_batch,
            num_gpu=load.num_gpu,
            n_cpu_moe=load.n_cpu_moe,
            num_worker_layers=layers,
            engine=load.engine or self.settings.engine,
            kv_cache_type=kv_cache_type,
        )

    def _check_kv_cache_type(self, kv_cache_type: str, engine: str | None) -> None:
        """A KV type no engine here can keep for this load is the request's 400 (the native engine keeps f16 and
        q8_0; llama.cpp quantizes its V cache only with flash attention)."""
        if kv_cache_type not in KV_CACHE_TYPES:
            raise bad_request(f"option 'kv_cache_type' must be one of {', '.join(KV_CACHE_TYPES)}, "
                              f"got {kv_cache_type!r}")
        native_keeps = kv_cache_type in NATIVE_KV_CACHE_TYPES and engine != LLAMA_CPP
        if not native_keeps and kv_cache_type != "f16" and not self.settings.flash_attention:
            raise bad_request(f"option 'kv_cache_type' {kv_cache_type} needs LOCALLLM_FLASH_ATTENTION=1 on the "
                              f"llama.cpp engine (the native engine keeps {' or '.join(NATIVE_KV_CACHE_TYPES)})")

    async def translate(self, model: LocalModel) -> None:
        """An Ollama-format model file translated for llama.cpp (ollama_compat.py): once, off the event loop.
        A file that cannot be translated is the request's 400, naming the architecture and what is missing."""
        if model.ollama_format is None or model.translated is not None:
            return
        try:
            await asyncio.to_thread(translate_model, self.store, model)
        except (IncompatibleModel, InvalidGGUF) as exc:
            raise bad_request(f"model '{model.name.display}' cannot be loaded: {exc}") from None
        except OSError as exc:
            raise ApiError(500, f"model '{model.name.display}': its file could not be translated for llama.cpp: "
                                f"{exc.strerror or exc}") from None

    async def load(self, job: CompletionJob) -> tuple[LoadedModel, int]:
        """Load the model (or refresh its keep_alive); returns it and the load time in ns."""
        started = time.perf_counter_ns()
        await self.translate(job.model)
        with runner_errors():
            loaded = await self.scheduler.ensure_loaded(self.load_request(job), job.keep_alive)
        return loaded, time.perf_counter_ns() - started

    async def lease(self, job: CompletionJob, metered: bool = True) -> Lease:
        """A runner for ``job``, loaded and held until the lease's completion ends (or :meth:`Lease.release`).

        Failures to load are raised here as :class:`ApiError`; ``metered`` leases count in the metrics.
        """
        started = time.perf_counter_ns()
        await self.translate(job.model)
        request = self.load_request(job)
        self.check_capacity(request)
        hold = contextlib.AsyncExitStack()
        name = job.model.name.display
        if metered:
            self.metrics.started(name)
        lease = Lease(job, self.metrics if metered else None, hold, started)
        try:
            with runner_errors():
                lease.loaded = await hold.enter_async_context(self.scheduler.lease(request, job.keep_alive))
        except BaseException as exc:
            await lease.release("error" if isinstance(exc, ApiError) else "cancelled")
            raise
        lease.load_duration = time.perf_counter_ns() - started
        return lease

    async def decode_audio(self, job: CompletionJob, data: bytes) -> bytes:
        """``data`` (WAV, MP3 or FLAC) decoded by the runner ``job`` runs on, as its projector hears it (a mono
        WAV at the projector's rate): the samples a long recording is cut from."""
        await self.translate(job.model)
        request = self.load_request(job)
        self.check_capacity(request)
        with runner_errors():
            async with self.scheduler.lease(request, job.keep_alive) as loaded:
                return await loaded.runner.decode_audio(data)

    async def embed(self, job: CompletionJob, inputs: list[str | list[int]], truncate: bool) -> dict[str, Any]:
        """Embeddings of ``inputs`` (texts or token lists) from the model's embedding runner."""

        async def embed(runner: RunnerProcess) -> dict[str, Any]:
            texts = [await runner.detokenize(item) if isinstance(item, list) else item for item in inputs]
            return await runner.embed(texts, truncate)

        return await self._on_embedding_runner(job, embed)

    async def rerank(self, job: CompletionJob, query: str, documents: list[str]) -> dict[str, Any]:
        """Scores of ``documents`` for ``query`` (in their order) from a reranker's runner (pooling rank)."""
        if "rerank" not in job.model.capabilities:
            raise bad_request(f"model '{job.model.name.display}' cannot rerank: it is not a reranker (its GGUF names "
                              f"no rank pooling; capabilities: {', '.join(job.model.capabilities)})")
        return await self._on_embedding_runner(job, lambda runner: runner.rerank(query, documents))

    async def _on_embedding_runner(self, job: CompletionJob,
                                   call: Callable[[RunnerProcess], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """``call``'s answer from the model's embedding runner (loaded, or held while it runs), with
        ``load_duration`` and ``total_duration`` added."""
        started = time.perf_counter_ns()
        await self.translate(job.model)
        request = self.load_request(job, embedding=True)
        self.check_capacity(request)
        with runner_errors():
            async with self.scheduler.lease(request, job.keep_alive) as loaded:
                load_duration = time.perf_counter_ns() - started
                answer = await call(loaded.runner)
        answer["load_duration"] = load_duration
        answer["total_duration"] = time.perf_counter_ns() - started
        return answer

    async def count_prompt_tokens(self, job: CompletionJob, render: PromptRenderer,
                                  images: Sequence[str] = ()) -> int:
        """How many tokens the prompt takes, tokenized by the model's runner as a completion would
        tokenize it (before any cut to the context length), with the positions its ``images`` take."""
        lease = await self.lease(job, metered=False)
        prompt = await lease.render(render)
        try:
            with runner_errors():
                return len(await lease.loaded.runner.tokenize(prompt, prompt=True, images=images))
        finally:
            await lease.release()

    def check_capacity(self, request: LoadRequest) -> None:
        """503 with Retry-After when the model's queue is full (LOCALLLM_MAX_QUEUE).

        Counted on the runner, so requests under every copy of a model share one queue.
        """
        waiting = self.scheduler.active_requests(request) - self.scheduler.capacity(request)
        if waiting >= self.settings.max_queue:
            raise ApiError(503, f"server busy: {waiting} requests are waiting for {request.name} "
                                f"(LOCALLLM_MAX_QUEUE={self.settings.max_queue}); retry shortly",
                           headers={"Retry-After": "1"})


class Lease:
    """A runner held for one completion: render a prompt against its :attr:`health`, then
    :meth:`complete` it; the completion's end gives the runner back and records the metrics."""

    def __init__(self, job: CompletionJob, metrics: Metrics | None, hold: contextlib.AsyncExitStack,
                 started: int) -> None:
        self.job = job
        self.loaded: LoadedModel | None = None
        self.load_duration = 0
        self._metrics = metrics
        self._hold = hold
        self._started = started
        self._first_token_at: int | None = None
        self._done: dict[str, Any] | None = None

    async def render(self, renderer: PromptRenderer) -> str:
        """The prompt, rendered against the runner's health in a thread (a template is a stranger's
        code and may render for seconds: the loop keeps answering); a failure gives the runner back."""
        async with self._given_back_on_failure():
            return await asyncio.to_thread(renderer, self.loaded.runner.health)

    async def fit(self, history: ChatHistory) -> FittedPrompt:
        """A chat's prompt fitted into the runner's context (:func:`~localllm.server.history.fit_history`,
        with room for ``num_predict`` and the job's ``truncate``); a failure gives the runner back."""
        async with self._given_back_on_failure():
            with runner_errors():
                return await fit_history(history, self.loaded.runner, self.job.options.get("num_predict"),
                                         self.job.truncate, self.job.options.get("num_ctx"))

    async def check_system(self, render_system: PromptRenderer, prompt: str) -> None:
        """A plain prompt's system part within the request's context
        (:func:`~localllm.server.history.check_generate_system`); a failure gives the runner back."""
        async with self._given_back_on_failure():
            with runner_errors():
                await check_generate_system(render_system, prompt, self.loaded.runner,
                                            self.job.options.get("num_ctx"))

    @contextlib.asynccontextmanager
    async def _given_back_on_failure(self) -> AsyncIterator[None]:
        try:
            yield
        except BaseException as exc:
            await self.release("error" if isinstance(exc, ApiError) else "cancelled")
            raise

    async def complete(self, prompt: str | list[int]) -> AsyncIterator[dict[str, Any]]:
        """The runner's events: ``{"content": …}`` pieces, then one ``{"done": True, …}``.

        Errors before the first event raise :class:`ApiError`; errors after it
        are yielded as ``{"error": …}`` so a stream can end with an error object.
        The runner is given back when this ends (iterated to the end, or closed).
        """
        job = self.job
        body = {"prompt": prompt, "options": job.options, "grammar": job.grammar, "context": job.context,
                "shift": job.shift, "truncate": job.truncate}
        if job.grammar_triggers:
            body["grammar_triggers"] = list(job.grammar_triggers)
        if job.json_schema is not None:
            body["json_schema"] = job.json_schema
        if job.images:
            body["images"] = job.images
        if job.preserved_tokens:
            body["preserved_tokens"] = list(job.preserved_tokens)
        events = self.loaded.runner.complete(body)
        outcome = "cancelled"
        try:
            with runner_errors():
                event = await anext(events, None)
            if event is None:
                raise ApiError(500, "model runner returned nothing")
            self._first_token_at = time.perf_counter_ns()
            while event is not None:
                if event.get("done"):
                    event["load_duration"] = self.load_duration
                    event["total_duration"] = time.perf_counter_ns() - self._started
                    self._done, outcome = event, "ok"
                elif "error" in event:
                    outcome = "error"
                yield event
                try:
                    event = await anext(events, None)
                except (RunnerBadRequest, RunnerError) as exc:  # after the first event: the stream ends with it
                    event = {"error": str(exc)}
        except ApiError:
            outcome = "error"
            raise
        finally:
            await events.aclose()
            await self.release(outcome)

    async def release(self, outcome: str = "cancelled") -> None:
        """Give the runner back (once) and, for a metered lease, record how the completion went."""
        await self._hold.aclose()
        if self._metrics is not None:
            ttft = (self._first_token_at - self._started) / 1e9 if self._first_token_at else None
            self._metrics.finished(self.job.model.name.display, outcome, self._done, ttft)
            self._metrics = None


@contextlib.contextmanager
def template_errors_as_400(model: LocalModel):
    """A prompt that cannot be rendered is the request's (or the model's) fault: 400 naming it."""
    try:
        yield
    except TemplateError as exc:
        raise bad_request(f"template of model {model.name.display!r} failed to render: {exc}") from None
    except PromptError as exc:
        raise bad_request(str(exc)) from None
