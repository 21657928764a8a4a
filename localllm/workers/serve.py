"""``localllm worker``: serve this machine's devices to other daemons through ggml's RPC server.

The server is the library's own (``ggml_backend_rpc_start_server`` in the
libggml-rpc that llama-cpp-python built), not the separate ``rpc-server``
tool: it is the same code, with no second build to keep in step with the
client's protocol version. It runs in this process until killed; ggml's
protocol has no authentication, so it binds loopback unless told otherwise.
"""

from __future__ import annotations

import ctypes
import signal
import sys

from localllm.backends.ggml_devices import BackendDevice, describe, device_handles
from localllm.backends import rpc
from localllm.config import is_loopback_host

_IOLBF = 1

SECURITY_WARNING = """\
WARNING: this worker listens on {host}, beyond this machine. ggml's RPC protocol has no
authentication and no encryption: anyone who can reach {host}:{port} can run computations
here and read or write this worker's memory buffers. Expose it only on a private network
you trust, or keep it on 127.0.0.1 and reach it through an SSH tunnel (see the README)."""


class WorkerError(ValueError):
    """The worker cannot start as asked (a bad option, a missing device or backend)."""


def choose_devices(names: list[str]) -> list[tuple[int, BackendDevice]]:
    """The devices named (ggml's names: CPU, CUDA0, Vulkan1, ...), or all GPUs, or else the CPU."""
    devices = [(handle, describe(handle)) for handle in device_handles()]
    if names:
        by_name = {device.name.lower(): (handle, device) for handle, device in devices}
        unknown = [name for name in names if name.lower() not in by_name]
        if unknown:
            known = ", ".join(f"{d.name} ({d.description})" for _, d in devices)
            raise WorkerError(f"no device named {', '.join(unknown)}; this machine has: {known}")
        return [by_name[name.lower()] for name in names]
    gpus = [(handle, device) for handle, device in devices if device.kind in ("gpu", "igpu")]
    return gpus or [(handle, device) for handle, device in devices if device.kind == "cpu"]


def run_worker(host: str, port: int, threads: int | None, device_names: list[str], allow_remote: bool) -> None:
    """Check the options, say what is served, then serve until killed."""
    if not 0 < port < 65536:
        raise WorkerError(f"--port must be 1-65535, got {port}")
    if threads is not None and threads < 1:
        raise WorkerError(f"--threads must be at least 1, got {threads}")
    if ":" in host:
        raise WorkerError(f"--host {host}: IPv6 addresses are not supported by ggml's RPC server")
    if not is_loopback_host(host) and not allow_remote:
        raise WorkerError(f"--host {host} would expose this machine to the network through a protocol without "
                          "authentication; add --allow-remote if that network is private, or use an SSH tunnel")
    rpc.check_available()
    chosen = choose_devices(device_names)
    if not is_loopback_host(host):
        print(SECURITY_WARNING.format(host=host, port=port), file=sys.stderr, flush=True)
    if threads is None:
        from localllm.backends.llama_cpp import physical_cores

        threads = physical_cores()
    for _, device in chosen:
        print(f"localllm worker: offering {device.name} ({device.description}, {device.free_bytes >> 20} MiB free)",
              flush=True)
    print(f"localllm worker: listening on {host}:{port} with {threads} threads (ggml RPC protocol "
          f"{rpc.protocol_version() or 'unknown'}); daemons use it with LOCALLLM_WORKERS={host}:{port}", flush=True)
    _line_buffer_c_stdout()  # ggml's server reports each client on stdout: show it as it happens
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the server never returns to Python: let signals end it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    rpc.serve_forever(f"{host}:{port}", [handle for handle, _ in chosen], threads)
    raise WorkerError(f"ggml's RPC server could not listen on {host}:{port} (port in use? see above)")


def _line_buffer_c_stdout() -> None:
    libc = ctypes.CDLL(None)
    libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, _IOLBF, 0)
