"""What the benchmarks share: a real daemon with SmolLM2, and the table / JSON output."""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # support.fixtures (cached model files), support.daemon (a real daemon)

from support import fixtures  # noqa: E402
import httpx  # noqa: E402
from support.daemon import Daemon  # noqa: E402

MODEL = "smollm2:135m"

T = TypeVar("T")


def cpu_name() -> str:
    """The CPU as ``lscpu`` names it, with its family and model numbers (AMD's EPYC generations share one name)."""
    lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}
    name = fields.get("Model name") or platform.processor()
    labels = {"CPU family": "family", "Model": "model"}
    numbers = [f"{label} {fields[key]}" for key, label in labels.items() if key in fields]
    return f"{name} ({', '.join(numbers)})" if numbers else name


def alternating(rounds: int, sides: dict[str, Callable[[], T]]) -> dict[str, list[T]]:
    """``rounds`` measurements of each side, taken in turn: the machine's noise of the moment hits all sides."""
    samples: dict[str, list[T]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, measure in sides.items():
            samples[name].append(measure())
    return samples


class PeerServer:
    """A peer's server in a child process on a loopback port, its log in a temporary file (not a pipe: a
    chatty log would fill one and block it)."""

    def __init__(self, name: str, cmd: list[str], url: str, health_path: str) -> None:
        self.name, self.url, self.health_path = name, url, health_path
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n"
                                   f"{self.log.read().decode(errors='replace')[-2000:]}")
            try:
                if httpx.get(self.url + self.health_path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"{self.name} did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def start_daemon(**env: str) -> Daemon:
    """A daemon on a free port with its own store holding ``smollm2:135m``."""
    daemon = Daemon(Path(tempfile.mkdtemp(prefix="localllm-bench-")), **env).start()
    daemon.create(MODEL, f"FROM {fixtures.smollm2_gguf()}")
    return daemon


def report(title: str, rows: list[tuple[str, Any]], results: dict[str, Any], as_json: bool) -> None:
    """Print ``results`` as a JSON object, or ``rows`` as an aligned table."""
    if as_json:
        print(json.dumps(results, indent=2))
        return
    width = max(len(label) for label, _ in rows)
    print(title)
    print("-" * (width + 16))
    for label, value in rows:
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{label:<{width}}  {text:>12}")
