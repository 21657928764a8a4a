"""A real ``localllm worker`` (ggml's RPC server) on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from support.daemon import free_port


class Worker:
    """``python -m localllm worker`` on a free loopback port, its output in a log file."""

    def __init__(self, root: Path, threads: int = 1) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = root / f"worker-{self.port}.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "localllm", "worker", "--port", str(self.port), "--threads", str(threads)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while "listening on" not in self.log() or not self._accepts():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {self.log()}")
            time.sleep(0.1)

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss(self) -> int:
        """Resident memory of the worker process: the layers it holds live there."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
