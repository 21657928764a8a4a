"""ggml's RPC backend, bound by ctypes from llama-cpp-python's libggml-rpc.

llama-cpp-python builds it only with ``CMAKE_ARGS="-DGGML_RPC=on"``;
:class:`RpcUnavailable` says how to rebuild when it is missing. The client
side aborts the whole process when a worker cannot be reached or answers
wrongly (``GGML_ABORT``), so the daemon never calls it itself: probes and
runners, which may die, do (``GGML_NO_BACKTRACE`` keeps that death quiet).
"""

from __future__ import annotations

import ctypes
import functools
import re

from localllm.backends.ggml_devices import library_dir, register

REBUILD = ('CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir --no-deps '
           "llama-cpp-python=={version}")


class RpcUnavailable(RuntimeError):
    """This llama-cpp-python was built without ggml's RPC backend."""


@functools.cache
def _librpc() -> ctypes.CDLL:
    import llama_cpp

    path = library_dir() / "libggml-rpc.so"
    if not path.is_file() or not llama_cpp.llama_supports_rpc():
        raise RpcUnavailable(
            f"this llama-cpp-python {llama_cpp.__version__} was built without ggml's RPC backend ({path.name} "
            f"is missing); rebuild it with the backend on:\n  {REBUILD.format(version=llama_cpp.__version__)}"
        )
    lib = ctypes.CDLL(str(path))
    lib.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                                  ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    lib.ggml_backend_rpc_start_server.restype = None
    lib.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
    return lib


def check_available() -> None:
    """Raise :class:`RpcUnavailable` (with the rebuild command) unless the RPC backend is built in."""
    _librpc()


def serve_forever(endpoint: str, devices: list[int], threads: int) -> None:
    """Run ggml's RPC server on ``endpoint`` for these device handles; returns only if it cannot start.

    ggml serves one client at a time: a worker holds the layers of one model of one daemon.
    """
    handles = (ctypes.c_void_p * len(devices))(*devices)
    _librpc().ggml_backend_rpc_start_server(endpoint.encode(), None, threads, len(devices), handles)


def connect(endpoint: str) -> list[int]:
    """Connect to a worker and register its devices with ggml; their handles, in the worker's order.

    Aborts the process if the worker cannot be reached or speaks another protocol version.
    """
    registry = _librpc().ggml_backend_rpc_add_server(endpoint.encode())
    return register(registry) if registry else []


def protocol_version() -> str | None:
    """This build's RPC protocol version (``RPC_PROTO_*_VERSION`` from the installed ggml-rpc.h), if shipped."""
    header = library_dir().parent.parent / "include" / "ggml-rpc.h"
    try:
        text = header.read_text(encoding="utf-8")
    except OSError:
        return None
    parts = [re.search(rf"RPC_PROTO_{part}_VERSION\s+(\d+)", text) for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None
