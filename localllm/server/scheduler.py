"""Which models are loaded: runner processes, keep_alive expiry, load limits.

Requests lease a runner for their duration. A model being loaded is loaded
once however many requests wait for it; an idle model unloads when its
keep_alive runs out; a runner that died is replaced on the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ..config import Settings
from ..registry.models import read_model_summary
from .memory import (
    Device,
    DoesNotFit,
    GpuPlan,
    ModelFootprint,
    available_ram,
    check_fits_in_ram,
    footprint,
    gpu_devices,
    plan_gpu_layers,
)
from ..runner.engines import CAPABILITIES, LLAMA_CPP, NATIVE, POOL_CONTEXTS, native_parallel
from .engine_choice import EngineChoice, choose_engine
from .runner_client import RunnerConfig, RunnerError, RunnerProcess, start_runner

log = logging.getLogger("localllm.scheduler")

DEFAULT_NUM_CTX = 4096
DEFAULT_NUM_PARALLEL = 4


@dataclass
class LoadedModel:
    """A model with a live runner, as ``/api/ps`` shows it."""

    key: tuple
    name: str
    digest: str
    runner: RunnerProcess
    size: int  # estimated bytes: weights, KV cache, compute buffer
    processor: str  # "100% CPU", "100% GPU" or the split
    size_vram: int
    engine: str = "llama.cpp"
    engine_reason: str = ""
    keep_alive: float | None = None  # seconds; None keeps it forever
    active: int = 0
    expires_at: float | None = None  # time.monotonic(); None while in use or forever

    def expires_at_wall(self) -> datetime:
        """Wall-clock expiry for display; far future when kept forever."""
        if self.keep_alive is None:
            return datetime(2318, 1, 1, tzinfo=timezone.utc)
        remaining = self.keep_alive if self.expires_at is None else max(0.0, self.expires_at - time.monotonic())
        return datetime.now(timezone.utc).astimezone() + timedelta(seconds=remaining)


@dataclass(frozen=True)
class LoadRequest:
    """What a request needs loaded: one model file with its adapters and context."""

    name: str
    digest: str
    model_path: os.PathLike
    adapters: tuple = ()
    num_ctx: int | None = None
    num_thread: int | None = None
    num_batch: int | None = None
    num_gpu: int | None = None
    embedding: bool = False  # embedding runners are separate from generating ones
    engine: str | None = None  # forced by a setting or PARAMETER; None: chosen per load


class Scheduler:
    """Owns every runner process of the daemon."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loaded: dict[tuple, LoadedModel] = {}
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._changed = asyncio.Condition()
        self._reaper: asyncio.Task | None = None
        self._gpus: list[Device] | None = None

    def _devices(self) -> list[Device]:
        if self._gpus is None:
            self._gpus = gpu_devices()
        return self._gpus

    @property
    def max_loaded(self) -> int:
        return self.settings.max_loaded_models or 3

    def num_parallel(self, engine: str = LLAMA_CPP, n_ctx: int = DEFAULT_NUM_CTX) -> int:
        """Sequences a runner serves at once: llama.cpp's fixed streams, or as many as the native pool serves."""
        if self.settings.num_parallel:
            return self.settings.num_parallel
        return native_parallel(POOL_CONTEXTS * n_ctx) if engine == NATIVE else DEFAULT_NUM_PARALLEL

    def capacity(self, name: str) -> int:
        """Requests the runners of model ``name`` serve at once (before it is loaded: llama.cpp's default)."""
        return sum(m.runner.config.n_parallel for m in self.loaded.values() if m.name == name) or self.num_parallel()

    def active_requests(self, name: str) -> int:
        """Requests holding or waiting for a runner of the model ``name``."""
        return sum(m.active for m in self.loaded.values() if m.name == name)

    def queue_depths(self) -> dict[str, int]:
        return {m.name: max(0, m.active - m.runner.config.n_parallel) for m in self.loaded.values()}

    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def close(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        for model in list(self.loaded.values()):
            await self._unload(model)

    @contextlib.asynccontextmanager
    async def lease(self, request: LoadRequest, keep_alive: float | None) -> AsyncIterator[LoadedModel]:
        """Hold a loaded runner for ``request`` while the body runs."""
        model = await self._acquire(request)
        model.active += 1
        model.expires_at = None
        model.keep_alive = keep_alive
        try:
            yield model
        finally:
            model.active -= 1
            if model.active == 0:
                self._set_idle(model)

    async def ensure_loaded(self, request: LoadRequest, keep_alive: float | None) -> LoadedModel:
        """Load a model without running anything (empty prompt requests)."""
        async with self.lease(request, keep_alive) as model:
            return model

    async def unload(self, name: str) -> bool:
        """Unload every runner of the model ``name`` as soon as it is idle."""
        found = False
        for model in [m for m in self.loaded.values() if m.name == name]:
            found = True
            model.keep_alive = 0
            if model.active == 0:
                await self._unload(model)
        return found

    def _set_idle(self, model: LoadedModel) -> None:
        if model.keep_alive is None:
            model.expires_at = None
        else:
            model.expires_at = time.monotonic() + model.keep_alive
        if model.keep_alive == 0:
            asyncio.get_running_loop().create_task(self._unload(model))

    def _key(self, request: LoadRequest) -> tuple:
        """Models that share weights and adapters share a runner; templates and options are per request."""
        return (str(request.model_path), tuple(str(a) for a in request.adapters), request.engine, request.embedding)

    def _choose_engine(self, request: LoadRequest, need: ModelFootprint) -> tuple[EngineChoice, GpuPlan]:
        """The engine for this load and the GPU plan it gets (none for an engine without GPU layers)."""
        llama_plan = plan_gpu_layers(need, self._devices(), request.num_gpu)
        choice = choose_engine(
            Path(request.model_path), request.engine, bool(request.adapters), request.embedding,
            llama_plan.n_gpu_layers,
        )  # fmt: skip
        if CAPABILITIES[choice.engine].gpu_layers:
            return choice, llama_plan
        return choice, plan_gpu_layers(need, [], 0)

    async def _acquire(self, request: LoadRequest) -> LoadedModel:
        key = self._key(request)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            model = self.loaded.get(key)
            if model is not None and not model.runner.alive:
                log.warning("runner of %s died: %s; loading it again", model.name, model.runner.exit_description())
                await self._unload(model)
                model = None
            wanted_ctx = request.num_ctx or DEFAULT_NUM_CTX
            if model is not None and model.runner.config.n_ctx < wanted_ctx:
                await self._wait_idle(model)
                await self._unload(model)
                model = None
            if model is None:
                await self._make_room()
                model = await self._load(key, request, wanted_ctx)
            return model

    async def _wait_idle(self, model: LoadedModel) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: model.active == 0)

    async def _make_room(self) -> None:
        """Evict idle models (soonest to expire first) until one more fits."""
        while len(self.loaded) >= self.max_loaded:
            idle = [m for m in self.loaded.values() if m.active == 0]
            if idle:
                victim = min(idle, key=lambda m: m.expires_at if m.expires_at is not None else float("inf"))
                await self._unload(victim)
                continue
            async with self._changed:
                await self._changed.wait()

    async def _load(self, key: tuple, request: LoadRequest, n_ctx: int) -> LoadedModel:
        summary = read_model_summary(Path(request.model_path))
        n_batch = request.num_batch or 512
        need = footprint(summary, n_ctx, self.num_parallel(LLAMA_CPP), n_batch)  # a stream of n_ctx per sequence
        choice, plan = self._choose_engine(request, need)
        if choice.engine == NATIVE:  # one pool of POOL_CONTEXTS contexts, however many sequences share it
            need = footprint(summary, n_ctx, POOL_CONTEXTS, n_batch)
        try:
            check_fits_in_ram(need, request.name, available_ram(), plan.gpu_bytes)
        except DoesNotFit as exc:
            raise RunnerError(str(exc)) from None
        config = RunnerConfig(
            model_path=request.model_path,
            n_ctx=n_ctx,
            n_parallel=self.num_parallel(choice.engine, n_ctx),
            n_threads=request.num_thread or self.settings.num_threads or None,  # None: the runner's physical cores
            n_batch=n_batch,
            n_gpu_layers=plan.n_gpu_layers,
            embedding=request.embedding,
            adapters=tuple(request.adapters),
            engine=choice.engine,
            kv_tokens=POOL_CONTEXTS * n_ctx if choice.engine == NATIVE else None,
        )
        log.info("loading %s on %s (%s), ctx %d, %d sequences", request.name, choice.engine, choice.reason, n_ctx,
                 config.n_parallel)
        runner = await start_runner(config, request.name)
        model = LoadedModel(
            key=key, name=request.name, digest=request.digest, runner=runner, size=need.total,
            processor=plan.processor, size_vram=plan.gpu_bytes, engine=choice.engine, engine_reason=choice.reason,
        )
        self.loaded[key] = model
        return model

    async def _unload(self, model: LoadedModel) -> None:
        if self.loaded.get(model.key) is model:
            del self.loaded[model.key]
        log.info("unloading %s", model.name)
        await model.runner.stop()
        async with self._changed:
            self._changed.notify_all()

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for model in list(self.loaded.values()):
                expired = model.active == 0 and model.expires_at is not None and model.expires_at <= now
                if expired or (model.active == 0 and not model.runner.alive):
                    await self._unload(model)
            async with self._changed:
                self._changed.notify_all()


__all__ = ["DEFAULT_NUM_CTX", "LoadRequest", "LoadedModel", "RunnerError", "Scheduler"]
