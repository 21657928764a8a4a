"""The compute devices llama.cpp's build can use, from ggml's own backend device list.

Asking ggml (the library llama.cpp runs on) rather than a vendor tool means
every backend it was built with (CUDA, ROCm, Vulkan, Metal, SYCL) reports its
devices and their memory the same way. llama-cpp-python binds llama.h only,
so the few ggml-backend.h functions needed are bound here from its libggml.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

# enum ggml_backend_dev_type (ggml-backend.h)
DEVICE_TYPES = ("cpu", "gpu", "igpu", "accel")
_CPU_DEVICE = 0


@dataclass(frozen=True)
class BackendDevice:
    """One ggml device: ``kind`` is cpu, gpu, igpu (integrated, sharing host memory) or accel."""

    name: str
    description: str
    kind: str
    free_bytes: int
    total_bytes: int


@functools.cache
def _libggml() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library_dir() / "libggml.so"))  # importing llama_cpp loaded it into this process
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for text in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, text).argtypes = [ctypes.c_void_p]
        getattr(lib, text).restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                            ctypes.POINTER(ctypes.c_size_t)]
    lib.ggml_backend_dev_memory.restype = None
    lib.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_register.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_register.restype = None
    lib.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    lib.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    lib.ggml_backend_dev_buffer_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_buffer_type.restype = ctypes.c_void_p
    return lib


def library_dir() -> Path:
    """Where llama-cpp-python keeps its shared libraries (libllama, libggml, libggml-rpc, ...)."""
    import llama_cpp

    return Path(llama_cpp.__file__).parent / "lib"


def describe(device: int) -> BackendDevice:
    """What ggml says of one device handle (``ggml_backend_dev_t``)."""
    lib = _libggml()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
    kind = lib.ggml_backend_dev_type(device)
    return BackendDevice(
        name=lib.ggml_backend_dev_name(device).decode("utf-8", "replace"),
        description=lib.ggml_backend_dev_description(device).decode("utf-8", "replace"),
        kind=DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else f"type {kind}",
        free_bytes=free.value,
        total_bytes=total.value,
    )


def device_handles() -> list[int]:
    """Every device ggml registered (``ggml_backend_dev_t``), in its order (the order llama.cpp splits layers in)."""
    lib = _libggml()
    return [lib.ggml_backend_dev_get(index) for index in range(lib.ggml_backend_dev_count())]


def backend_devices() -> list[BackendDevice]:
    """Every device ggml registered, described, in its order."""
    return [describe(device) for device in device_handles()]


def cpu_buffer_type() -> int:
    """The CPU device's buffer type (``ggml_backend_buffer_type_t``; ``ggml_backend_cpu_buffer_type()``): tensors
    llama.cpp is told to put there stay in host memory, and may use the CPU's repacked layouts."""
    lib = _libggml()
    return lib.ggml_backend_dev_buffer_type(lib.ggml_backend_dev_by_type(_CPU_DEVICE))


def register(registry: int) -> list[int]:
    """Add a backend registry (a remote worker's) to ggml's list; the device handles it brings."""
    lib = _libggml()
    lib.ggml_backend_register(registry)
    return [lib.ggml_backend_reg_dev_get(registry, index) for index in range(lib.ggml_backend_reg_dev_count(registry))]


def free_bytes(names: list[str] | tuple[str, ...]) -> dict[str, int]:
    """Free memory of the named local devices now (those ggml has), to measure what a load takes of them."""
    return {d.name: d.free_bytes for d in backend_devices() if d.name in names}
