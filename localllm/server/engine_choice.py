"""Which engine runs a model load, and why.

The native engine is the default CPU engine wherever it runs the model
exactly: every architecture key, hyperparameter and tensor type the model
uses is one its forward pass implements, no LoRA adapter or vision projector is set, no layer
goes to a GPU or to a worker, and the CPU has a SIMD level we measured faster than
llama.cpp (x86 AVX2 and up; NEON stays opt-in until it is timed on ARM).
Everything else runs on llama.cpp. ``LOCALLLM_ENGINE`` or ``PARAMETER
engine`` force either; forcing the native engine on a model it cannot run
is refused, never run as a different model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localllm.backends.capabilities import CAPABILITIES, LLAMA_CPP, NATIVE

MEASURED_ISAS = ("avx2", "avxvnni", "avx512")  # SIMD levels where the native engine was timed faster


@dataclass(frozen=True)
class EngineChoice:
    engine: str
    reason: str  # for the log and /api/ps: why this engine


class EngineRefused(ValueError):
    """The engine that was asked for cannot run this model (a 400: the request can change it)."""


def choose_engine(
    model_path: Path, forced: str | None, adapters: bool, embedding: bool, gpu_layers: int,
    llama_cpp_settings: str | None = None, workers: str | None = None, images: bool = False,
) -> EngineChoice:
    """The engine for one load; ``gpu_layers`` is what the memory plan would offload on llama.cpp,
    ``llama_cpp_settings`` names settings in force that only llama.cpp honours (a KV cache type),
    ``workers`` says which layers the plan puts on workers (None: none) and ``images`` that the model
    has a vision projector."""
    if embedding:  # a forced engine is for generation: embeddings go where their vectors are batch-invariant
        return _embedding_engine(model_path, adapters, gpu_layers, llama_cpp_settings, workers)
    if forced == LLAMA_CPP:
        return EngineChoice(LLAMA_CPP, "forced by the engine setting")
    if forced == NATIVE:
        blocker = (llama_cpp_settings or _workers_blocker(workers) or _images_blocker(images)
                   or _native_blocker(model_path, adapters, by_default=False))
        if blocker:
            raise EngineRefused(f"the native engine cannot run this model: {blocker}; use the llama.cpp engine")
        return EngineChoice(NATIVE, "forced by the engine setting")
    blocker = _images_blocker(images)
    if blocker:
        return EngineChoice(LLAMA_CPP, blocker)
    if workers:
        return EngineChoice(LLAMA_CPP, workers)
    if gpu_layers:
        return EngineChoice(LLAMA_CPP, f"{gpu_layers} layers offloaded to a GPU")
    if llama_cpp_settings:
        return EngineChoice(LLAMA_CPP, llama_cpp_settings)
    isa = _cpu_isa()
    if isa not in MEASURED_ISAS:
        return EngineChoice(LLAMA_CPP, f"the native engine is not measured faster on this CPU's SIMD level ({isa})")
    blocker = _native_blocker(model_path, adapters)
    if blocker:
        return EngineChoice(LLAMA_CPP, blocker)
    return EngineChoice(NATIVE, f"the native forward runs this model exactly ({isa})")


def _embedding_engine(model_path: Path, adapters: bool, gpu_layers: int, llama_cpp_settings: str | None,
                      workers: str | None) -> EngineChoice:
    """The native engine for the decoders it runs with a pooling it does (its passes are batch-invariant, so
    concurrent requests share them); llama.cpp, one sequence a pass, for the rest (runner/embed.py)."""
    blocker = (_workers_blocker(workers) or (f"{gpu_layers} layers offloaded to a GPU" if gpu_layers else None)
               or llama_cpp_settings or _native_blocker(model_path, adapters) or _pooling_blocker(model_path))
    if blocker:
        return EngineChoice(LLAMA_CPP, f"embeddings on llama.cpp: {blocker}")
    return EngineChoice(NATIVE, "embeddings on the native forward (batch-invariant passes shared by requests)")


def _pooling_blocker(model_path: Path) -> str | None:
    from localllm.backends.pooling import NATIVE_POOLINGS, model_pooling

    pooling = model_pooling(model_path)
    return None if pooling in NATIVE_POOLINGS else f"{pooling.name.lower()} pooling needs llama.cpp"


def _workers_blocker(workers: str | None) -> str | None:
    if workers and not CAPABILITIES[NATIVE].workers:
        return f"layers on workers need llama.cpp's RPC backend ({workers})"
    return None


def _images_blocker(images: bool) -> str | None:
    if images and not CAPABILITIES[NATIVE].images:
        return "the model has a vision projector, and the native engine takes no images"
    return None


def _native_blocker(model_path: Path, adapters: bool, by_default: bool = True) -> str | None:
    """Why the native engine does not get the model (``by_default``: unasked), or None."""
    if adapters and not CAPABILITIES[NATIVE].lora:
        return "LoRA adapters are not supported by the native engine"
    from localllm.backends.native.model import native_support

    return native_support(model_path, by_default=by_default)


def _cpu_isa() -> str:
    from localllm.backends.native import kernels
    from localllm.backends.native.lib import NativeError

    try:
        return kernels.isa()
    except NativeError as exc:  # no compiler and no built library: the native engine cannot run at all
        return f"unavailable: {exc}"
