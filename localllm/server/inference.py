"""One completion from request to runner and back, shared by the Ollama and OpenAI routes.

Resolves the model in the store, merges its parameters with the request's
options, leases a runner from the scheduler, renders the prompt (which needs
the runner's BOS/EOS tokens) and relays the runner's NDJSON events, adding
``load_duration`` and ``total_duration``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..options import LoadOptions
from ..registry.links import LinkedFileError
from ..registry.models import LocalModel, load_local_model
from ..registry.names import InvalidName, ModelName
from ..registry.requires import ModelTooNew
from ..registry.store import ModelNotFound, Store
from ..templates.gotemplate import TemplateError
from ..templates.prompt import PromptError
from .errors import ApiError, bad_request, not_found
from .formats import NO_CONSTRAINT, Constraint
from .metrics import Metrics
from .request_options import keep_alive_seconds, merge_options
from .engine_choice import EngineRefused
from .runner_client import RunnerBadRequest, RunnerError
from .scheduler import LoadedModel, LoadRequest, Scheduler
from .tools import ToolUse

log = logging.getLogger("localllm.inference")

#: Builds the prompt once the runner is up: receives the runner's /health answer.
PromptBuilder = Callable[[dict[str, Any]], "str | list[int]"]


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
        """Resolve a request: model, merged options, keep_alive and the output constraint.

        ``constraint`` comes from ``format``/``response_format``; ``raw_grammar`` is a
        GBNF text from a ``grammar`` field (top level or in ``options``).
        """
        options = dict(options or {})
        raw_grammar = raw_grammar or options.pop("grammar", None)
        if raw_grammar is not None and not isinstance(raw_grammar, str):
            raise bad_request("grammar must be a string of GBNF rules")
        if raw_grammar and constraint != NO_CONSTRAINT:
            raise bad_request("use either a format/response_format or a grammar, not both")
        model = self.resolve(name)
        try:
            model.check_runnable()
        except ModelTooNew as exc:
            raise ApiError(412, str(exc)) from None  # Ollama's status for a model that needs a newer version
        return CompletionJob(
            model=model,
            options=merge_options(model.parameters, options),
            keep_alive=keep_alive_seconds(keep_alive, self.settings.keep_alive),
            grammar=constraint.grammar or raw_grammar or None,
            json_schema=constraint.json_schema,
        )

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
        return LoadRequest(
            embedding=embedding,
            name=model.name.display,
            digest=model.digest,
            model_path=model.model_path,
            adapters=tuple(model.adapters),
            num_ctx=load.num_ctx,
            num_thread=load.num_thread,
            num_batch=load.num_batch,
            num_gpu=load.num_gpu,
            num_worker_layers=layers,
            engine=load.engine or self.settings.engine,
        )

    async def load(self, job: CompletionJob) -> tuple[LoadedModel, int]:
        """Load the model (or refresh its keep_alive); returns it and the load time in ns."""
        started = time.perf_counter_ns()
        try:
            loaded = await self.scheduler.ensure_loaded(self.load_request(job), job.keep_alive)
        except EngineRefused as exc:
            raise ApiError(400, str(exc)) from None
        except RunnerError as exc:
            raise ApiError(500, str(exc)) from None
        return loaded, time.perf_counter_ns() - started

    async def stream(self, job: CompletionJob, build_prompt: PromptBuilder) -> AsyncIterator[dict[str, Any]]:
        """Yield the runner's events: ``{"content": …}`` pieces, then one ``{"done": True, …}``.

        Errors before the first event raise :class:`ApiError`; errors after it
        are yielded as ``{"error": …}`` so a stream can end with an error object.
        """
        started = time.perf_counter_ns()
        name = job.model.name.display
        self.check_capacity(self.load_request(job))
        self.metrics.started(name)
        outcome, done, first_token_at = "cancelled", None, None
        try:
            async with self._leased(job) as loaded:
                load_duration = time.perf_counter_ns() - started
                # A template (a stranger's code) may render for seconds: in a thread, the loop keeps answering.
                prompt = await asyncio.to_thread(build_prompt, loaded.runner.health)
                body = {"prompt": prompt, "options": job.options, "grammar": job.grammar, "context": job.context}
                if job.grammar_triggers:
                    body["grammar_triggers"] = list(job.grammar_triggers)
                if job.json_schema is not None:
                    body["json_schema"] = job.json_schema
                async for event in self._relay(loaded, body, first=True):
                    if first_token_at is None:
                        first_token_at = time.perf_counter_ns()
                    if event.get("done"):
                        event["load_duration"] = load_duration
                        event["total_duration"] = time.perf_counter_ns() - started
                        done, outcome = event, "ok"
                    elif "error" in event:
                        outcome = "error"
                    yield event
        except ApiError:
            outcome = "error"
            raise
        finally:
            ttft = (first_token_at - started) / 1e9 if first_token_at else None
            self.metrics.finished(name, outcome, done, ttft)

    async def embed(self, job: CompletionJob, inputs: list[str | list[int]], truncate: bool) -> dict[str, Any]:
        """Embeddings of ``inputs`` (texts or token lists) from the model's embedding runner."""
        started = time.perf_counter_ns()
        request = self.load_request(job, embedding=True)
        self.check_capacity(request)
        try:
            async with self.scheduler.lease(request, job.keep_alive) as loaded:
                load_duration = time.perf_counter_ns() - started
                texts = []
                for item in inputs:
                    if isinstance(item, list):
                        item = (await loaded.runner.post_json("/detokenize", {"tokens": item}))["content"]
                    texts.append(item)
                answer = await loaded.runner.post_json("/embedding", {"content": texts, "truncate": truncate})
        except RunnerBadRequest as exc:
            raise bad_request(str(exc)) from None
        except RunnerError as exc:
            raise ApiError(500, str(exc)) from None
        answer["load_duration"] = load_duration
        answer["total_duration"] = time.perf_counter_ns() - started
        return answer

    async def count_prompt_tokens(self, job: CompletionJob, build_prompt: PromptBuilder) -> int:
        """How many tokens the prompt takes, tokenized by the model's runner as a completion would
        tokenize it (before any cut to the context length)."""
        self.check_capacity(self.load_request(job))
        async with self._leased(job) as loaded:
            prompt = await asyncio.to_thread(build_prompt, loaded.runner.health)
            try:
                answer = await loaded.runner.post_json("/tokenize", {"content": prompt, "prompt": True})
            except RunnerError as exc:
                raise ApiError(500, str(exc)) from None
        return len(answer["tokens"])

    def check_capacity(self, request: LoadRequest) -> None:
        """503 with Retry-After when the model's queue is full (LOCALLLM_MAX_QUEUE).

        Counted on the runner, so requests under every copy of a model share one queue.
        """
        waiting = self.scheduler.active_requests(request) - self.scheduler.capacity(request)
        if waiting >= self.settings.max_queue:
            raise ApiError(503, f"server busy: {waiting} requests are waiting for {request.name} "
                                f"(LOCALLLM_MAX_QUEUE={self.settings.max_queue}); retry shortly",
                           headers={"Retry-After": "1"})

    @contextlib.asynccontextmanager
    async def _leased(self, job: CompletionJob) -> AsyncIterator[LoadedModel]:
        lease = self.scheduler.lease(self.load_request(job), job.keep_alive)
        try:
            loaded = await lease.__aenter__()
        except EngineRefused as exc:
            raise ApiError(400, str(exc)) from None
        except RunnerError as exc:
            raise ApiError(500, str(exc)) from None
        try:
            yield loaded
        finally:
            await lease.__aexit__(None, None, None)

    @staticmethod
    async def _relay(loaded: LoadedModel, body: dict[str, Any], first: bool) -> AsyncIterator[dict[str, Any]]:
        """The runner's events; a failure before the first one raises, after it is an event."""
        events = loaded.runner.stream("/completion", body)
        try:
            async for event in events:
                yield event
                first = False
        except RunnerBadRequest as exc:
            if first:
                raise bad_request(str(exc)) from None
            yield {"error": str(exc)}
        except RunnerError as exc:
            if first:
                raise ApiError(500, str(exc)) from None
            yield {"error": str(exc)}
        finally:
            await events.aclose()


@contextlib.contextmanager
def template_errors_as_400(model: LocalModel):
    """A prompt that cannot be rendered is the request's (or the model's) fault: 400 naming it."""
    try:
        yield
    except TemplateError as exc:
        raise bad_request(f"template of model {model.name.display!r} failed to render: {exc}") from None
    except PromptError as exc:
        raise bad_request(str(exc)) from None
