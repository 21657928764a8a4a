"""Which models are loaded: runner processes, keep_alive expiry, load limits.

Requests lease a runner for their duration. A model being loaded is loaded
once however many requests wait for it; an idle model unloads when its
keep_alive runs out; a runner that died is replaced on the next request.

Admission: a load takes a model slot and its memory (a :class:`Reservation`) the moment it is
admitted, before its runner starts, so loads of different models at once never pass the limits
together; loads that fit beside each other proceed side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import ALL_DEVICES, NATIVE_KV_CACHE_TYPES, Settings
from ..gguf import GGUFFile
from ..registry.models import read_model_summary
from .memory import (
    MIN_DEFAULT_CTX,
    NO_WORKERS,
    SAFETY_MARGIN_BYTES,
    ContextChoice,
    Device,
    DoesNotFit,
    GpuPlan,
    ModelFootprint,
    WorkerPlan,
    asked_context,
    available_ram,
    check_fits_in_ram,
    default_context,
    describe_devices,
    footprint,
    gpu_devices,
    gpu_offload,
    least_context,
    plan_gpu_layers,
    plan_worker_layers,
    shortfall,
    worker_offload,
)
from ..backends.capabilities import (
    CAPABILITIES, HOST_CACHE_MB, LLAMA_CPP, NATIVE, native_parallel, native_pool_tokens,
)
from ..runner import kv_disk
from .engine_choice import EngineChoice, choose_engine
from .runner_client import RunnerConfig, RunnerError, RunnerProcess, start_runner
from .worker_pool import WorkerPool

if TYPE_CHECKING:
    from ..backends.native.model import NativeMemory

log = logging.getLogger("localllm.scheduler")

DEFAULT_NUM_CTX = MIN_DEFAULT_CTX  # the least a load gets unless num_ctx asks (the default: see _plan_load)
DEFAULT_NUM_PARALLEL = 4
MODELS_PER_GPU = 3  # LOCALLLM_MAX_LOADED_MODELS unset: Ollama's default, 3 a GPU (3 on a machine without one)


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
    context_reason: str = ""  # why its context is what it is ("the model's trained length", ...)
    split: tuple[dict, ...] = ()  # where the layers are: {"host": "local" or a worker, "device", "layers", "size"}
    memory: dict[str, int] = field(default_factory=dict)  # the plan's bytes by what holds them (ModelFootprint.parts)
    placement: str = ""  # a MoE model's attention and experts by processor, in words (GpuPlan.placement)
    workers: tuple[str, ...] = ()  # the workers holding its layers (host:port)
    size_workers: int = 0  # bytes of ``size`` on workers, not on this machine
    num_gpu: int | None = None  # the num_gpu it was loaded for (None: as many layers as fit)
    n_cpu_moe: int | None = None  # the n_cpu_moe it was loaded for (None: the experts that do not fit the GPUs)
    keep_alive: float | None = None  # seconds; None keeps it forever
    forget_kv: bool = False  # its KV blocks are deleted from the disk tier once its runner has stopped
    active: int = 0
    expires_at: float | None = None  # time.monotonic(); None while in use or forever

    @property
    def serves(self) -> str:
        """What its runner is for, as ``ps`` tells a model's runners apart: "embed" (embeddings and rerank
        scores: a runner of its own) or "generate" (completions)."""
        return "embed" if self.runner.config.embedding else "generate"

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
    projector: os.PathLike | None = None  # a vision projector (images in): loaded with the model on llama.cpp
    num_ctx: int | None = None
    num_thread: int | None = None
    num_batch: int | None = None
    num_gpu: int | None = None
    n_cpu_moe: int | None = None  # the first layers whose experts stay on the CPU; None or negative: planned
    num_worker_layers: int | None = None  # layers to put on workers; None or negative: only what does not fit here
    embedding: bool = False  # embedding runners are separate from generating ones
    engine: str | None = None  # forced by a setting or PARAMETER; None: chosen per load
    kv_cache_type: str | None = None  # option or PARAMETER kv_cache_type; None: LOCALLLM_KV_CACHE_TYPE


@dataclass(frozen=True)
class Reservation:
    """What a load holds from its admission until its runner is up (a :class:`LoadedModel` then) or has failed:
    a model slot, ``local_bytes`` of this machine, and its layers on each device (``split``, as
    :attr:`LoadedModel.split`)."""

    local_bytes: int
    split: tuple[dict, ...]


@dataclass(frozen=True)
class LoadPlan:
    """How a model will be loaded: on which engine, its GPU and worker layers, and the memory it takes."""

    choice: EngineChoice
    gpu: GpuPlan
    need: ModelFootprint
    workers: WorkerPlan = NO_WORKERS
    context: ContextChoice = ContextChoice(MIN_DEFAULT_CTX, "the default")

    @property
    def local_bytes(self) -> int:
        """What it takes of this machine (its RAM and GPUs): all but the layers on workers."""
        return self.need.total - self.workers.moved_bytes

    @property
    def worker_addresses(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(device.endpoint for device in self.workers.devices))


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


class NoRoom(RunnerError):
    """A load that memory (or the model slots) cannot take: ``status`` 503 when the machine is why, 400 when
    the request's own context is (the model would fit at the default context). ``room``: the bytes that
    were free for it, when memory was the limit."""

    def __init__(self, message: str, room: int | None = None, status: int = 503) -> None:
        super().__init__(message)
        self.room = room
        self.status = status


class BeyondTrainedContext(ValueError):
    """A ``num_ctx`` over the model's trained context: the request's fault, whatever memory there is."""


class Scheduler:
    """Owns every runner process of the daemon."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loaded: dict[tuple, LoadedModel] = {}
        self._loading: dict[tuple, Reservation] = {}  # loads admitted whose runners are not up yet
        self._waiting: dict[tuple, int] = {}  # requests on their way to a runner (waiting for its load), by key
        self._stopping: dict[asyncio.Task, LoadedModel] = {}  # runners on their way out (writing their KV to disk)
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._changed = asyncio.Condition()
        self._reaper: asyncio.Task | None = None
        self._gpus: list[Device] | None = None  # as last listed
        self._cost_scale: dict[str, float] = {}  # device -> measured / estimated bytes of its last load
        self._first_look: asyncio.Task | None = None  # ggml's devices, looked at (off the loop) when the daemon starts
        self.workers = WorkerPool(settings.workers)

    async def _refresh_devices(self) -> list[Device]:
        """The GPUs now (free memory changes as models load): listing them loads ggml the first time, off the loop."""
        loaded = _gpu_bytes(model.split for model in self.loaded.values())
        loading = _gpu_bytes(reservation.split for reservation in self._loading.values())
        return await asyncio.to_thread(self._list_devices, loaded, loading)

    def _list_devices(self, loaded: dict[str, int] | None = None,
                      loading: dict[str, int] | None = None) -> list[Device]:
        """The GPUs, each within its LOCALLLM_GPU_MEMORY cap less what our models hold of it (``loaded``, and
        ``loading``: admitted loads, which ggml's free memory does not show yet), with the planner's correction
        from the last measured load."""
        caps = self.settings.gpu_memory
        loaded, loading = loaded or {}, loading or {}
        devices = []
        for device in gpu_devices(caps=caps):
            cap = caps.get(device.name, caps.get(ALL_DEVICES))
            free = device.free_bytes - loading.get(device.name, 0)
            if cap is not None:
                free = min(free, cap - loaded.get(device.name, 0) - loading.get(device.name, 0))
            devices.append(replace(device, free_bytes=max(0, free), cost_scale=self._cost_scale.get(device.name, 1.0)))
        self._gpus = devices
        return devices

    def _devices(self) -> list[Device]:
        return self._list_devices() if self._gpus is None else self._gpus

    @property
    def max_loaded(self) -> int:
        """LOCALLLM_MAX_LOADED_MODELS, or 3 per GPU (3 without one), counting the GPUs listed for the load
        being planned (software devices, used only when asked for, do not count)."""
        if self.settings.max_loaded_models:
            return self.settings.max_loaded_models
        gpus = [device for device in self._gpus or () if not device.on_request_only]
        return MODELS_PER_GPU * max(1, len(gpus))

    def num_parallel(self, engine: str = LLAMA_CPP, n_ctx: int = DEFAULT_NUM_CTX) -> int:
        """Sequences a runner serves at once: llama.cpp's fixed streams, or as many as the native pool serves."""
        if self.settings.num_parallel:
            return self.settings.num_parallel
        return native_parallel(self.pool_tokens(n_ctx)) if engine == NATIVE else DEFAULT_NUM_PARALLEL

    def pool_tokens(self, n_ctx: int) -> int:
        """Positions in a native runner's KV block pool: LOCALLLM_KV_TOKENS, else the engine's default."""
        return self.settings.kv_tokens or native_pool_tokens(n_ctx)

    def capacity(self, request: LoadRequest) -> int:
        """Requests the runner ``request`` would use serves at once (before it is loaded: llama.cpp's default)."""
        model = self.loaded.get(self._key(request))
        return model.runner.config.n_parallel if model is not None else self.num_parallel()

    def active_requests(self, request: LoadRequest) -> int:
        """Requests holding or waiting for the runner ``request`` would use, under whatever name, counting
        those waiting for it to load."""
        key = self._key(request)
        model = self.loaded.get(key)
        return (model.active if model is not None else 0) + self._waiting.get(key, 0)

    def queue_depths(self) -> dict[str, int]:
        return {m.name: max(0, m.active - m.runner.config.n_parallel) for m in self.loaded.values()}

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._reaper = loop.create_task(self._reap_forever())
        self._first_look = loop.create_task(self._look_around())

    async def _look_around(self) -> None:
        """What every load needs first, ready before the first request: ggml's devices (logged: which GPUs this
        build of llama.cpp sees), and the native kernels library (loaded, or built once for minutes); a library
        that cannot load says so at the load that needs it."""
        try:
            devices = await self._refresh_devices()
        except (ImportError, OSError, AttributeError) as exc:  # no llama-cpp-python, or one without ggml's device API
            log.warning("cannot list ggml's devices: %s", exc)
        else:
            log.info("devices: %s", describe_devices(devices))
        await asyncio.to_thread(_load_native_library)

    async def close(self) -> None:
        for task in (self._reaper, self._first_look):
            if task:
                task.cancel()
        for model in list(self.loaded.values()):
            await self._unload(model, wait=False)
        await self._wait_stopped()

    @contextlib.asynccontextmanager
    async def lease(self, request: LoadRequest, keep_alive: float | None) -> AsyncIterator[LoadedModel]:
        """Hold a loaded runner for ``request`` while the body runs."""
        key = self._key(request)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            model = await self._acquire(key, request)
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]
        # A copy of a model shares its runner: ps shows it by the name (and manifest) last asked for.
        model.name, model.digest = request.name, request.digest
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

    async def unload(self, model_path: os.PathLike, adapters: tuple = ()) -> bool:
        """Unload every runner of these weights as soon as it is idle.

        By weights, not by name: a copy of a model shares its runners, so
        stopping either name stops them (generating and embedding, any engine).
        """
        found = False
        weights = self._weights(model_path, adapters)
        for model in [m for m in self.loaded.values() if m.key[:2] == weights]:
            found = True
            model.keep_alive = 0
            if model.active == 0:
                await self._unload(model)
        return found

    async def clear_kv_cache(self, model_path: os.PathLike | None = None) -> int:
        """Delete the prefix cache's disk blocks of one model's weights (None: of every model); the bytes freed.

        A loaded (or stopping) runner of those weights writes its blocks when it stops: they are deleted then too.
        """
        for model in [*self.loaded.values(), *self._stopping.values()]:
            if model_path is None or model.key[0] == str(model_path):
                model.forget_kv = True
        return await asyncio.to_thread(self._clear_kv, model_path)  # thousands of files: off the event loop

    def _clear_kv(self, model_path: os.PathLike | None) -> int:
        root = self.settings.kv_cache_dir
        if model_path is None:
            return kv_disk.clear(root)
        try:
            return kv_disk.clear(root, kv_disk.weights_id(model_path))
        except OSError:  # a linked file that is gone: nothing of it can be found again
            return 0

    def _set_idle(self, model: LoadedModel) -> None:
        if model.keep_alive is None:
            model.expires_at = None
        else:
            model.expires_at = time.monotonic() + model.keep_alive
        if model.keep_alive == 0:
            asyncio.get_running_loop().create_task(self._unload(model))

    @staticmethod
    def _weights(model_path: os.PathLike, adapters: tuple) -> tuple:
        """What identifies a loaded model: its weights file and adapters, never the name it was asked by."""
        return (str(model_path), tuple(str(a) for a in adapters))

    def _key(self, request: LoadRequest) -> tuple:
        """Models that share weights and adapters share a runner; templates and options are per request."""
        return (*self._weights(request.model_path, request.adapters), request.engine, request.embedding,
                str(request.projector or "") if not request.embedding else "")

    def _kv_cache_type(self, request: LoadRequest) -> str:
        """The KV type a load of ``request`` keeps: its option (or PARAMETER), else LOCALLLM_KV_CACHE_TYPE."""
        return request.kv_cache_type or self.settings.kv_cache_type

    def _llama_cpp_settings(self, kv_cache_type: str) -> str | None:
        """Settings only the llama.cpp engine honours, if any are set (the native engine never ignores them)."""
        if kv_cache_type not in NATIVE_KV_CACHE_TYPES or self.settings.flash_attention:
            return (f"KV cache type {kv_cache_type} / LOCALLLM_FLASH_ATTENTION={int(self.settings.flash_attention)} "
                    "apply to llama.cpp only")
        return None

    async def _choose_engine(self, request: LoadRequest, need: ModelFootprint) -> tuple[EngineChoice, GpuPlan,
                                                                                         WorkerPlan]:
        """The engine for this load and the GPU and worker plans it gets (none for an engine without them)."""
        if self._first_look is not None:  # begun when the daemon started: what it loads, this load needs
            await self._first_look
        devices = await self._refresh_devices()
        llama_plan = plan_gpu_layers(need, devices, request.num_gpu, request.n_cpu_moe)
        llama_plan, workers = await self._plan_workers(request, need, llama_plan, devices)
        try:  # off the loop: it reads the model's tensors and may load (or build, for minutes) the kernels library
            choice = await asyncio.to_thread(
                choose_engine, Path(request.model_path), request.engine, bool(request.adapters), request.embedding,
                llama_plan.n_gpu_layers, self._llama_cpp_settings(self._kv_cache_type(request)),
                _describe_workers(workers),
                images=request.projector is not None,
            )  # fmt: skip
        except BaseException:
            self.workers.release(device.endpoint for device in workers.devices)
            raise
        gpu = llama_plan if CAPABILITIES[choice.engine].gpu_layers else plan_gpu_layers(need, [], 0)
        why = "; ".join(filter(None, (_gpu_note(llama_plan, devices, request.num_gpu), _experts_note(gpu, request))))
        if why:
            choice = replace(choice, reason=f"{choice.reason}; {why}")
        return choice, gpu, workers if CAPABILITIES[choice.engine].workers else NO_WORKERS

    async def _plan_workers(self, request: LoadRequest, need: ModelFootprint, gpu: GpuPlan,
                            devices: list[Device]) -> tuple[GpuPlan, WorkerPlan]:
        """Worker layers for this load: asked for (``num_worker_layers``), or what does not fit here (in free
        RAM, or in LOCALLLM_MEMORY_LIMIT); and the GPU plan that goes with them.

        Workers take whole layers, so a MoE model that needs them has its GPUs planned by whole layers too
        (its experts with their layers). The workers that answer are reserved for this model while it loads;
        those the plan leaves out are free again at once.
        """
        asked = request.num_worker_layers is not None and request.num_worker_layers >= 0
        if not self.settings.workers or request.num_worker_layers == 0 or request.engine == NATIVE:
            return gpu, NO_WORKERS
        free_ram = available_ram()
        if self.settings.memory_limit:  # this machine's budget too: what is over it may go to workers
            free_ram = min(free_ram, self.settings.memory_limit + SAFETY_MARGIN_BYTES)
        if not asked and shortfall(need, gpu, free_ram) <= 0:
            return gpu, NO_WORKERS  # it fits this machine: no network in the way
        expert_split = gpu
        if gpu.cpu_expert_layers:
            gpu = plan_gpu_layers(need, devices, request.num_gpu, split_experts=False)
            gpu = replace(gpu, note="; ".join(filter(None, (gpu.note, "the experts stay with their layers: the model "
                                                                        "needs workers, which take whole layers"))))
        offered = await self.workers.claim(request.name)
        plan = plan_worker_layers(need, gpu, offered, free_ram, request.num_worker_layers if asked else None)
        used = {device.endpoint for device in plan.devices}
        self.workers.release(device.endpoint for device in offered if device.endpoint not in used)
        if not plan.n_layers and offered and not asked:
            log.warning("%s does not fit here and the workers that answered (%s) have too little free memory for "
                        "the rest", request.name, ", ".join(sorted({d.endpoint for d in offered})))
        return (gpu, plan) if plan.n_layers else (expert_split, plan)

    async def _acquire(self, key: tuple, request: LoadRequest) -> LoadedModel:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            model = self.loaded.get(key)
            if model is not None and not model.runner.alive:
                log.warning("runner of %s died: %s; loading it again", model.name, model.runner.exit_description())
                await self._unload(model)
                model = None
            wanted_ctx = request.num_ctx or _least_default_ctx(model)
            if request.num_ctx:
                await self._check_trained_ctx(request, model)
            reload = (self._reload_reason(model, wanted_ctx, self._kv_cache_type(request), request.num_gpu,
                                          request.n_cpu_moe) if model is not None else None)
            if reload:
                log.info("loading %s again: %s", request.name, reload)
                await self._wait_idle(model)
                await self._unload(model)
                model = None
            if model is None:
                await self._wait_stopped(key)  # its last runner's KV blocks, on their way to disk, are this one's
                model = await self._plan_and_load(key, request, request.num_ctx or 0)
            return model

    async def _plan_and_load(self, key: tuple, request: LoadRequest, asked_ctx: int) -> LoadedModel:
        """Plan a load (of context ``asked_ctx``, 0: the default) and run it; a load with GPU layers that fails
        (a device gone, or refusing the memory) is loaded again on the CPU, saying why in the log and in
        ``engine_reason``."""
        load = await self._plan_load(request, asked_ctx)
        n_ctx = load.context.n_ctx
        try:
            await self._admit(key, request.name, load)
            try:
                model = await self._load(key, request, n_ctx, load)
            finally:
                del self._loading[key]  # a LoadedModel now (counted as such), or failed
                await self._notify()
        except BaseException as exc:
            self.workers.release(load.worker_addresses)
            if (isinstance(exc, NoRoom) and exc.room is not None and asked_ctx
                    and self._context_is_why(load, n_ctx, exc.room)):
                raise NoRoom(f"num_ctx {n_ctx} asks for more memory than there is: {exc}; the model "
                             f"would fit with num_ctx {DEFAULT_NUM_CTX}", exc.room, 400) from None
            if isinstance(exc, NoRoom) or not isinstance(exc, RunnerError) or not load.gpu.n_gpu_layers:
                raise
            log.warning("loading %s with %d layers on %s failed: %s; loading it on the CPU instead", request.name,
                        load.gpu.n_gpu_layers, ", ".join(gpu_offload(load.gpu, self._devices()).devices), exc)
            model = await self._plan_and_load(key, replace(request, num_gpu=0), asked_ctx)
            model.engine_reason += f"; the GPU load failed ({exc})"
            model.num_gpu = _as_many_as_fit(request.num_gpu)  # asked again: no reason to try the device again
            model.n_cpu_moe = _as_many_as_fit(request.n_cpu_moe)
            return model
        self._check_estimate(request.name, load.gpu, model.runner.health.device_bytes)
        return model

    def _check_estimate(self, name: str, gpu: GpuPlan, measured: dict[str, int]) -> None:
        """Compare what a load took of each device (as the runner measured it: ggml's free memory before and after,
        or llama.cpp's account of its buffers) with the plan's estimate; the next plan for that device scales its
        estimates by the ratio."""
        for device, estimate in zip(self._devices(), gpu.device_bytes):
            took = measured.get(device.name, 0)
            if not estimate:
                continue
            if took <= 0:
                log.info("%s on %s: the runner measured nothing there, the estimate of %s stays unchecked",
                         name, device.name, _mib(estimate))
                continue
            self._cost_scale[device.name] = took / estimate
            log.info("%s on %s took %s, estimated %s: the next plans for %s scale their estimates by %.2f",
                     name, device.name, _mib(took), _mib(estimate), device.name, took / estimate)

    @staticmethod
    async def _check_trained_ctx(request: LoadRequest, model: LoadedModel | None) -> None:
        """A ``num_ctx`` over the model's trained context is the request's fault, naming both."""
        if model is not None and model.runner.health.n_ctx_train:
            trained = model.runner.health.n_ctx_train
        else:
            try:
                summary = await asyncio.to_thread(read_model_summary, Path(request.model_path))
                trained = summary.arch_value("context_length", 0)
            except (OSError, ValueError):  # the load says what is wrong with the file
                return
        if isinstance(trained, int) and 0 < trained < request.num_ctx:
            raise BeyondTrainedContext(f"num_ctx {request.num_ctx} is more than the model's trained context of "
                                       f"{trained} tokens")

    def _reload_reason(self, model: LoadedModel, n_ctx: int, kv_cache_type: str, num_gpu: int | None,
                       n_cpu_moe: int | None = None) -> str | None:
        """Why the loaded runner cannot serve a request of context ``n_ctx``, KV type ``kv_cache_type``,
        ``num_gpu`` and ``n_cpu_moe`` (None: it can, without a reload).

        A native runner serves any context its KV pool holds; llama.cpp's sequences have the size they were
        loaded with. A request that names no ``num_gpu`` (``n_cpu_moe``) takes the layers (experts) as they are.
        """
        if num_gpu is not None and _as_many_as_fit(num_gpu) != _as_many_as_fit(model.num_gpu):
            return f"num_gpu {num_gpu} differs from the {model.num_gpu} it was loaded with"
        if n_cpu_moe is not None and _as_many_as_fit(n_cpu_moe) != model.n_cpu_moe:
            return f"n_cpu_moe {n_cpu_moe} differs from the {model.n_cpu_moe} it was loaded with"
        config = model.runner.config
        if config.kv_cache_type != kv_cache_type and not config.embedding:
            return f"kv_cache_type {kv_cache_type} is not the {config.kv_cache_type} it was loaded with"
        if config.n_ctx >= n_ctx:
            return None
        if config.engine != NATIVE or config.embedding:
            return f"num_ctx {n_ctx} is more than the context of {config.n_ctx} it was loaded with"
        pool = config.kv_tokens or native_pool_tokens(config.n_ctx)
        if n_ctx <= pool or self.pool_tokens(n_ctx) <= pool:  # a reload would not give it a larger pool
            return None
        return f"num_ctx {n_ctx} is more than its KV pool holds ({pool} positions)"

    @staticmethod
    def _context_is_why(load: LoadPlan, n_ctx: int, room: int) -> bool:
        """Whether a load that does not fit ``room`` bytes would fit at the default context (KV scales with it)."""
        if n_ctx <= DEFAULT_NUM_CTX:
            return False
        kv = load.need.kv_bytes
        return load.local_bytes - kv + kv * DEFAULT_NUM_CTX // n_ctx <= room

    async def _wait_idle(self, model: LoadedModel) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: model.active == 0)

    async def _plan_load(self, request: LoadRequest, asked_ctx: int) -> LoadPlan:
        """The engine a load gets, its context (``asked_ctx``, else the default), its GPU and worker plans and
        its memory (the native pool, or llama.cpp's streams).

        The default context is the model's trained length where it fits (:func:`default_context`): the
        engine and the layers are planned at the least default, then the context grows while the memory
        plan still fits free RAM and LOCALLLM_MEMORY_LIMIT and keeps as many GPU layers. Embedding runners,
        whose batch is a whole context, and loads with layers on workers keep the least default.
        """
        summary = await asyncio.to_thread(read_model_summary, Path(request.model_path))
        n_batch = request.num_batch or 512
        kv_cache_type = self._kv_cache_type(request)
        trained = summary.arch_value("context_length", 0)
        trained = trained if isinstance(trained, int) and trained > 0 else 0
        n_ctx = asked_ctx or least_context(trained, "").n_ctx  # the engine and the layers are planned at it
        if request.embedding:  # one context's cells on either engine, reused by every pass (runner/embed.py)
            need = footprint(summary, n_ctx, 1, n_batch, kv_cache_type)
            choice, gpu, workers = await self._choose_engine(request, need)
            context = least_context(trained, f"the default of embedding models ({trained} trained)")
            return LoadPlan(choice, gpu, need, workers, asked_context(asked_ctx) if asked_ctx else context)
        streams = footprint(summary, n_ctx, self.num_parallel(LLAMA_CPP), n_batch, kv_cache_type)
        choice, gpu, workers = await self._choose_engine(request, streams)
        native = await asyncio.to_thread(_native_memory, request.model_path) if choice.engine == NATIVE else None
        if asked_ctx:
            context = asked_context(asked_ctx)
        elif workers.n_layers:
            context = least_context(trained, f"the default while layers are on workers ({trained} trained)")
        else:
            context = default_context(trained, self._fits_context(summary, choice.engine, gpu, request, native))
        plan = self._context_plan(summary, choice.engine, context.n_ctx, request, native)
        if CAPABILITIES[choice.engine].gpu_layers and context.n_ctx != n_ctx:
            gpu = plan_gpu_layers(plan, self._devices(), request.num_gpu)
        return LoadPlan(choice, gpu, plan, workers, context)

    def _context_plan(self, summary: GGUFFile, engine: str, n_ctx: int, request: LoadRequest,
                      native: NativeMemory | None = None) -> ModelFootprint:
        """The memory a generating runner of ``n_ctx`` takes: the native engine's one pool, however many
        sequences share it (``native``: what its loader reads of the model), or llama.cpp's streams of ``n_ctx``
        each."""
        from ..backends.native.lib import NativeError

        n_batch, kv_cache_type = request.num_batch or 512, self._kv_cache_type(request)
        if engine == NATIVE:  # every sequence's state, and its snapshots in the host-RAM tier
            plan = functools.partial(footprint, summary, n_ctx, self.num_parallel(NATIVE, n_ctx), n_batch,
                                     kv_cache_type, kv_tokens=self.pool_tokens(n_ctx),
                                     snapshot_budget=HOST_CACHE_MB << 20)
            try:
                return plan(native=native)
            except NativeError as exc:  # a context the runner refuses too, saying why
                log.warning("planning the native load without its native layout: %s", exc)
                return plan()
        return footprint(summary, n_ctx, self.num_parallel(LLAMA_CPP), n_batch, kv_cache_type)

    def _fits_context(self, summary: GGUFFile, engine: str, gpu: GpuPlan, request: LoadRequest,
                      native: NativeMemory | None = None) -> Callable[[int], bool]:
        """Whether a load of context n fits: its CPU share in free RAM, all of it within what
        LOCALLLM_MEMORY_LIMIT leaves, and as many layers on the GPUs as ``gpu`` puts there."""
        free, limit = available_ram(), self.settings.memory_limit
        devices = self._devices() if CAPABILITIES[engine].gpu_layers else []

        def fits(n_ctx: int) -> bool:
            need = self._context_plan(summary, engine, n_ctx, request, native)
            plan = plan_gpu_layers(need, devices, request.num_gpu if devices else 0)
            return (plan.n_gpu_layers >= gpu.n_gpu_layers
                    and need.total - plan.gpu_bytes + SAFETY_MARGIN_BYTES <= free
                    and (not limit or self._held() + need.total <= limit))

        return fits

    def _fits(self, need: int) -> bool:
        """Whether one more model of ``need`` bytes fits the model count and LOCALLLM_MEMORY_LIMIT, loads in
        progress counted as loaded."""
        if len(self.loaded) + len(self._loading) >= self.max_loaded:
            return False
        limit = self.settings.memory_limit
        return not limit or self._held() + need <= limit

    async def _admit(self, key: tuple, name: str, load: LoadPlan) -> None:
        """Reserve a model slot and ``load``'s memory for ``key``: evict idle models (soonest to expire first)
        until it fits, then wait for those stopping (their memory), for busy ones and for loads in progress, up
        to LOCALLLM_LOAD_TIMEOUT; refuse, saying what was needed and what was free.

        The last check and the reservation happen in one step of the event loop, so two loads never both
        take the last room. A model with requests on their way to it is not idle: it serves them first.
        """
        need, limit = load.local_bytes, self.settings.memory_limit
        if limit and need > limit:  # more than all of it: nothing to evict or wait for
            raise NoRoom(self._no_room_message(name, need), limit)
        deadline: float | None = None
        while not self._fits(need):
            idle = [m for m in self.loaded.values() if m.active == 0 and not self._waiting.get(m.key)]
            if idle:
                victim = min(idle, key=lambda m: m.expires_at if m.expires_at is not None else float("inf"))
                await self._unload(victim, wait=False)
                continue
            if self._stopping:  # bounded by their stop timeout
                await self._wait_stopped()
                continue
            if deadline is None:
                deadline = time.monotonic() + self.settings.load_timeout
            remaining = deadline - time.monotonic()
            if not (self.loaded or self._loading) or remaining <= 0:
                held = self._held()
                raise NoRoom(self._no_room_message(name, need), limit - held if limit and held + need > limit else None)
            await self._wait_change(remaining)
        self._loading[key] = Reservation(need, self._split(load.need, load.gpu, load.workers))

    async def _wait_change(self, timeout: float | None = None) -> None:
        """Until a runner stops, a load ends, or the reaper's next round (models go idle), at most ``timeout``."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _held(self) -> int:
        """Bytes of this machine the loaded models take, and those of loads in progress and of runners still
        stopping."""
        models = [*self.loaded.values(), *self._stopping.values()]
        return (sum(m.size - m.size_workers for m in models)
                + sum(reservation.local_bytes for reservation in self._loading.values()))

    def _no_room_message(self, name: str, need: int) -> str:
        held = self._held()
        limit = self.settings.memory_limit
        busy = len(self.loaded) + len(self._loading)
        if limit and need > limit:
            why = (f"model {name} needs about {_mib(need)} of memory, more than all of "
                   f"LOCALLLM_MEMORY_LIMIT={_mib(limit)}")
            busy = 0  # nothing to wait for
        elif limit and held + need > limit:
            why = (f"model {name} needs about {_mib(need)} of memory but only {_mib(max(0, limit - held))} "
                   f"of LOCALLLM_MEMORY_LIMIT={_mib(limit)} is free")
        else:
            why = f"model {name} needs one of the {self.max_loaded} model slots (LOCALLLM_MAX_LOADED_MODELS)"
        if busy:
            why += f"; the {busy} other models (loaded or loading) stayed busy for LOCALLLM_LOAD_TIMEOUT"
        return why + "; retry later, unload models (localllm stop), or lower num_ctx / LOCALLLM_NUM_PARALLEL"

    def _ram_of_earlier_loads(self, key: tuple) -> int:
        """Bytes of RAM the loads admitted before ``key``'s (and not up yet) will take: what is free does not
        show them in full yet."""
        earlier = list(self._loading)[:list(self._loading).index(key)]
        return sum(entry["size"] for k in earlier for entry in self._loading[k].split
                   if entry["host"] == "local" and entry["device"] == "CPU")

    async def _load(self, key: tuple, request: LoadRequest, n_ctx: int, load: LoadPlan) -> LoadedModel:
        choice, plan, need, workers = load.choice, load.gpu, load.need, load.workers
        n_batch = request.num_batch or 512
        while True:
            earlier = self._ram_of_earlier_loads(key)
            free = available_ram() - earlier
            try:
                check_fits_in_ram(need, request.name, free, plan.gpu_bytes + workers.moved_bytes,
                                  self._workers_note(workers))
                break
            except DoesNotFit as exc:
                if not self._stopping and not earlier:
                    raise NoRoom(str(exc), free - SAFETY_MARGIN_BYTES + plan.gpu_bytes) from None
            if self._stopping:
                await self._wait_stopped()  # their memory comes back when they exit
            else:
                await self._wait_change()  # an earlier load ends: what it took shows in what is free
        if workers.n_layers:
            offload = worker_offload(plan, self._devices(), workers)
        else:  # local GPUs by name: never one the plan left out (a software device)
            offload = gpu_offload(plan, self._devices()) if plan.n_gpu_layers else None
        config = RunnerConfig(
            model_path=request.model_path,
            n_ctx=n_ctx,
            n_parallel=self.num_parallel(choice.engine, n_ctx),
            n_threads=request.num_thread or self.settings.num_threads or None,  # None: the runner's physical cores
            n_batch=n_batch,
            n_gpu_layers=offload.n_gpu_layers if offload else plan.n_gpu_layers,
            devices=offload.devices if offload else (),
            tensor_split=offload.split if offload else (),
            cpu_expert_layers=plan.cpu_expert_layers,
            no_gpu=offload is None and bool(self._devices()),  # no op offload to a GPU that takes no layers
            embedding=request.embedding,
            adapters=tuple(request.adapters),
            projector=Path(request.projector) if request.projector and not request.embedding else None,
            engine=choice.engine,
            kv_tokens=self.pool_tokens(n_ctx) if choice.engine == NATIVE else None,
            kv_disk=self.settings.kv_cache_dir if choice.engine == NATIVE else None,
            kv_disk_bytes=self.settings.kv_disk,
            kv_cache_type=self._kv_cache_type(request),
            flash_attention=self.settings.flash_attention,
            worker_timeout=self.settings.worker_timeout,
            stream_interval=self.settings.stream_interval,
        )
        log.info("loading %s on %s (%s), %s, %d sequences", request.name, choice.engine, choice.reason, load.context,
                 config.n_parallel)
        runner = await start_runner(config, request.name)
        model = LoadedModel(
            key=key, name=request.name, digest=request.digest, runner=runner,
            size=load.local_bytes + workers.total_bytes,
            processor=plan.processor, size_vram=plan.gpu_bytes, engine=choice.engine, engine_reason=choice.reason,
            split=self._split(need, plan, workers), memory=need.parts, placement=plan.placement,
            workers=load.worker_addresses,
            size_workers=workers.total_bytes, num_gpu=_as_many_as_fit(request.num_gpu),
            n_cpu_moe=_as_many_as_fit(request.n_cpu_moe), context_reason=load.context.reason,
        )
        self.loaded[key] = model
        return model

    def _workers_note(self, workers: WorkerPlan) -> str:
        """For a load that does not fit: what the workers took, or why they could not help."""
        if not self.settings.workers:
            return ""
        if workers.n_layers:
            return f" even with {_describe_workers(workers)}"
        return " and no worker could take the rest (see the daemon log)"

    def _split(self, need: ModelFootprint, gpu: GpuPlan, workers: WorkerPlan) -> tuple[dict, ...]:
        """Where a loaded model's repeating layers are, machine by machine, for ``ps``."""
        gpu_layers = sum(gpu.layers_per_device)
        entries = [{"host": "local", "device": "CPU", "layers": need.n_layers - gpu_layers - workers.n_layers,
                    "size": need.total - gpu.gpu_bytes - workers.moved_bytes}]
        for device, layers, size in zip(self._devices(), gpu.layers_per_device, gpu.device_bytes):
            if layers:
                entries.append({"host": "local", "device": device.name, "layers": layers, "size": size})
        for device, layers, size in zip(workers.devices, workers.layers, workers.layer_bytes):
            entries.append({"host": device.endpoint, "device": device.spec, "layers": layers,
                            "size": size + workers.compute_bytes})
        return tuple(entries)

    async def _unload(self, model: LoadedModel, wait: bool = True) -> None:
        """Take ``model`` out of service and stop its runner.

        A stopping runner writes its KV blocks to the disk tier before it exits (seconds for a full pool):
        with ``wait=False`` that goes on in the background while other models load, its memory counted as
        held (:meth:`_held`) until the process is gone. Waiting is for callers that need it gone: a reload
        of the same model (which reads those blocks), ``stop``, ``rm``.
        """
        if self.loaded.get(model.key) is model:
            del self.loaded[model.key]
        log.info("unloading %s", model.name)
        stop = asyncio.get_running_loop().create_task(self._stop(model))
        self._stopping[stop] = model
        if wait:
            await asyncio.shield(stop)  # a caller that goes away does not cut the stop short

    async def _stop(self, model: LoadedModel) -> None:
        try:
            await model.runner.stop()
            if model.forget_kv:
                await asyncio.to_thread(self._clear_kv, model.key[0])
            self.workers.release(model.workers)
        finally:
            del self._stopping[asyncio.current_task()]
            await self._notify()

    async def _wait_stopped(self, key: tuple | None = None) -> None:
        """Until every runner stopping now (of ``key``, if given) has exited."""
        stops = [task for task, model in self._stopping.items() if key is None or model.key == key]
        if stops:
            await asyncio.wait(stops)

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for model in list(self.loaded.values()):
                expired = model.active == 0 and model.expires_at is not None and model.expires_at <= now
                if expired or (model.active == 0 and not model.runner.alive):
                    await self._unload(model, wait=False)
            await self._notify()


def _gpu_bytes(splits: Iterable[tuple[dict, ...]]) -> dict[str, int]:
    """Bytes on each local GPU, summed over models' (or loads') splits."""
    held: dict[str, int] = {}
    for split in splits:
        for entry in split:
            if entry["host"] == "local" and entry["device"] != "CPU":
                held[entry["device"]] = held.get(entry["device"], 0) + entry["size"]
    return held


def _least_default_ctx(model: LoadedModel | None) -> int:
    """The least context a request naming no ``num_ctx`` takes of a loaded runner (its trained length if
    shorter); a runner loaded with less is loaded again at the default."""
    trained = model.runner.health.n_ctx_train if model is not None else 0
    return min(DEFAULT_NUM_CTX, trained) if trained > 0 else DEFAULT_NUM_CTX


def _as_many_as_fit(num_gpu: int | None) -> int | None:
    """``num_gpu`` with Ollama's -1 (any negative) as None: as many layers as fit."""
    return None if num_gpu is None or num_gpu < 0 else num_gpu


def _gpu_note(plan: GpuPlan, devices: list[Device], num_gpu: int | None) -> str:
    """Why a plan has no GPU layers though this build has GPUs, or what it could not do as asked ("": nothing)."""
    if plan.note or plan.n_gpu_layers or not devices:
        return plan.note
    if num_gpu == 0:
        return "num_gpu 0 keeps every layer on the CPU"
    software = [d.name for d in devices if d.on_request_only]
    if len(software) == len(devices):
        return (f"{', '.join(software)} is a software device, slower than the CPU: used only when asked for "
                "(num_gpu, or naming it in LOCALLLM_GPU_MEMORY)")
    return f"no layer fits in the GPUs' free memory ({describe_devices(devices)})"


def _experts_note(plan: GpuPlan, request: LoadRequest) -> str:
    """Where a MoE model's experts went and why, for ``engine_reason`` ("": a dense model, or all on the CPU)."""
    if not plan.placement:
        return ""
    if plan.cpu_expert_layers and request.n_cpu_moe is not None and request.n_cpu_moe >= 0:
        return f"{plan.placement} (n_cpu_moe {request.n_cpu_moe})"
    if plan.cpu_expert_layers:
        return (f"{plan.placement} (a mixture of experts too large for the GPU memory: every layer's tensors but "
                "its experts, the KV cache and the output head go first, then the experts that still fit)")
    return plan.placement


def _load_native_library() -> None:
    from ..backends.native.lib import NativeError, library

    with contextlib.suppress(NativeError):
        library()


def _native_memory(path: os.PathLike) -> NativeMemory | None:
    """What the native loader reads of the model at ``path`` for the memory plan; None where it cannot (the
    kernels library or the file: the load then says why), and the plan counts the model as llama.cpp would."""
    from ..backends.native.lib import NativeError
    from ..backends.native.model import native_memory

    try:
        return native_memory(path)
    except (NativeError, OSError) as exc:
        log.warning("planning the native load of %s without its native layout: %s", path, exc)
        return None


def _describe_workers(workers: WorkerPlan) -> str | None:
    """``N layers on workers a, b`` for logs and ``engine_reason``; None when there are none."""
    if not workers.n_layers:
        return None
    where = ", ".join(f"{device.spec} {layers}" for device, layers in zip(workers.devices, workers.layers))
    return f"{workers.n_layers} layers on workers ({where})"


__all__ = ["DEFAULT_NUM_CTX", "BeyondTrainedContext", "LoadRequest", "LoadedModel", "NoRoom", "RunnerError",
           "Scheduler"]
