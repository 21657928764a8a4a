"""A real localllm daemon on a free loopback port, for end-to-end tests.

Network-facing sources (Hugging Face, the package index, the model registry)
are pointed at closed loopback ports so that no test reaches the internet;
models enter the store through the daemon's own create.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """``python -m localllm serve`` in a child process with its own store."""

    def __init__(self, root: Path, **env: str) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        dead = f"http://127.0.0.1:{free_port()}"
        self.env = {
            **os.environ,
            "LOCALLLM_HOST": f"127.0.0.1:{self.port}",
            "LOCALLLM_MODELS": str(root / "models"),
            "LOCALLLM_STATE_DIR": str(root / "state"),
            "HF_ENDPOINT": dead,
            "LOCALLLM_PYPI_INDEX": dead + "/simple",
            "LOCALLLM_REGISTRY": dead.replace("http://", "https://"),
            **env,
        }
        self.process: subprocess.Popen | None = None
        self.log_path = root / "daemon.log"

    def start(self, timeout: float = 120) -> "Daemon":
        self.root.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "localllm", "serve"], env=self.env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.log()}")
            try:
                if httpx.get(self.url, timeout=1).text == "localllm is running":
                    return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError(f"daemon did not start: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def runner_pids(self) -> list[int]:
        """PIDs of this daemon's runner processes."""
        assert self.process is not None
        out = subprocess.run(["pgrep", "-P", str(self.process.pid), "-f", "localllm.runner"],
                             capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split()]

    def pull(self, name: str) -> None:
        """Pull a model through the daemon's API (raises on failure)."""
        response = httpx.post(f"{self.url}/api/pull", json={"model": name, "stream": False}, timeout=300)
        if response.status_code != 200:
            raise RuntimeError(f"pull {name} failed: {response.status_code} {response.text}")

    def create(self, name: str, modelfile: str) -> None:
        """Create a model through the daemon's API (raises on failure)."""
        response = httpx.post(f"{self.url}/api/create", json={"model": name, "modelfile": modelfile, "stream": False},
                              timeout=120)
        if response.status_code != 200:
            raise RuntimeError(f"create {name} failed: {response.status_code} {response.text}")


@contextmanager
def native_daemon(root: Path, model: Path, name: str, **env: str) -> Iterator[Daemon]:
    """A daemon on the native engine (two threads at most, as the runners of the tests) with ``model`` created
    as ``name``, stopped when the block ends (a test may stop and start it meanwhile)."""
    from support.runner import runner_threads

    daemon = Daemon(root, LOCALLLM_ENGINE="native", LOCALLLM_NUM_THREADS=runner_threads(), **env)
    try:
        daemon.start()
        daemon.create(name, f"FROM {model}")
        yield daemon
    finally:
        daemon.stop()
