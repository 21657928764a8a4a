"""Ask a worker which devices it offers and how much memory each has free, through ggml's RPC client.

ggml's client aborts its process when a worker is unreachable or speaks
another protocol version, and waits forever on a worker busy with another
client (a ggml RPC server serves one at a time). So the daemon asks from a
child process (``python -m localllm.workers.probe HOST:PORT``, which prints
JSON) under a time limit, and turns ggml's last words into a reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass

from ..config import CHILD_CWD

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class WorkerDevice:
    """One device a worker offers, as its RPC server reports it."""

    endpoint: str  # the worker's host:port
    index: int  # the device's number on that worker
    free_bytes: int
    total_bytes: int

    @property
    def spec(self) -> str:
        """How the runner names it: ``host:port#index``."""
        return f"{self.endpoint}#{self.index}"


class WorkerUnreachable(RuntimeError):
    """The worker did not answer usefully; the message says why, for a warning."""


async def probe(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> list[WorkerDevice]:
    """The worker's devices with their free memory, or :class:`WorkerUnreachable`."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "localllm.workers.probe", endpoint,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "GGML_NO_BACKTRACE": "1"}, cwd=CHILD_CWD,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        raise WorkerUnreachable(f"worker {endpoint} did not answer within {timeout:.0f} s "
                                "(busy serving another daemon, or a firewall drops the connection)") from None
    finally:  # timed out, or the load was cancelled: the probe child never outlives its question
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        raise WorkerUnreachable(_reason(endpoint, err.decode("utf-8", "replace")))
    return [WorkerDevice(endpoint, d["index"], d["free"], d["total"])
            for d in json.loads(out)["devices"]]


def _reason(endpoint: str, stderr: str) -> str:
    """ggml's abort message, made into a sentence about the worker."""
    mismatch = re.search(r"RPC server version mismatch: (\d+\.\d+\.\d+)", stderr)
    if mismatch:
        from localllm.backends.rpc import protocol_version

        ours = protocol_version() or "another"
        return (f"worker {endpoint} speaks ggml RPC protocol {mismatch.group(1)}, this llama.cpp build speaks "
                f"{ours}: run the same llama-cpp-python version on every machine")
    if "Failed to connect" in stderr:
        return f"worker {endpoint} is unreachable (no such host, or nothing listens on that port)"
    if "malformed response" in stderr:
        return f"worker {endpoint} did not answer in ggml's RPC protocol (is something else on that port?)"
    lines = [re.sub(r"^\S*ggml-rpc\.cpp:\d+: ", "", line) for line in stderr.splitlines() if line.strip()]
    return f"worker {endpoint} failed: {lines[-1] if lines else 'no answer'}"


def main(endpoint: str) -> None:
    from localllm.backends.ggml_devices import describe
    from localllm.backends.rpc import connect

    devices = []
    for index, handle in enumerate(connect(endpoint)):
        device = describe(handle)  # asks the worker: RPC_CMD_GET_DEVICE_MEMORY
        devices.append({"index": index, "free": device.free_bytes, "total": device.total_bytes})
    print(json.dumps({"devices": devices}))


if __name__ == "__main__":
    main(sys.argv[1])
