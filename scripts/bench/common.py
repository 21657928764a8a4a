"""What the benchmarks share: a real daemon with SmolLM2, alternating rounds, and the table / JSON output.

A figure a benchmark could not measure is null in its output with the reason
beside it (:func:`not_measured`), never a number; :func:`report` prints it so
and exits non-zero when it was one the run had to measure.
"""

from __future__ import annotations

import itertools
import json
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # support.fixtures (cached model files), support.daemon (a real daemon)

from support import fixtures  # noqa: E402
import httpx  # noqa: E402
from support.daemon import Daemon  # noqa: E402

MODEL = "smollm2:135m"
_FIRST_WORDS = itertools.count(1)  # a new first token each call: no prompt cache hit on either side

T = TypeVar("T")


def cpu_name() -> str:
    """The CPU as ``lscpu`` names it, with its family and model numbers (AMD's EPYC generations share one name)."""
    lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}
    name = fields.get("Model name") or platform.processor()
    labels = {"CPU family": "family", "Model": "model"}
    numbers = [f"{label} {fields[key]}" for key, label in labels.items() if key in fields]
    return f"{name} ({', '.join(numbers)})" if numbers else name


class Rounds(dict[str, list[T]], Generic[T]):
    """Each side's measurements in round order (side -> list, as a dict), and the order each round ran them."""

    def __init__(self, samples: dict[str, list[T]], orders: list[tuple[str, ...]]) -> None:
        super().__init__(samples)
        self.orders = orders

    def pairs(self, figure: Callable[[T], Any] = lambda value: value) -> list[dict[str, Any]]:
        """Each round's figures, for the output: ``{"order": [first, ..., last], side: figure(measurement)...}``."""
        return [{"order": list(order), **{side: figure(values[i]) for side, values in self.items()}}
                for i, order in enumerate(self.orders)]

    def medians(self, index: int) -> dict[str, float]:
        """Each side's median of figure ``index`` of its measurements (tuples, e.g. 0 prefill and 1 decode)."""
        return {side: statistics.median(value[index] for value in values) for side, values in self.items()}


def alternating(rounds: int, sides: dict[str, Callable[[], T]]) -> Rounds[T]:
    """Measurements of each side, taken in turn, the order reversed every other round (A B, B A, ...): the
    machine's noise of the moment hits all sides, and going first or last (a warm cache, a CPU that has just sped
    up or slowed down) favours no side. That holds over an even number of rounds, so ``rounds`` above 1 is rounded
    up to even (3 runs 4); a single round is a smoke run, its order A B."""
    names = list(sides)
    samples: dict[str, list[T]] = {name: [] for name in names}
    orders: list[tuple[str, ...]] = []
    for index in range(rounds + rounds % 2 if rounds > 1 else rounds):
        order = tuple(names if index % 2 == 0 else reversed(names))
        for name in order:
            samples[name].append(sides[name]())
        orders.append(order)
    return Rounds(samples, orders)


def round_rows(label: str, pairs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Table rows of :meth:`Rounds.pairs`: one a round, its sides in the order they ran."""
    return [(f"{label} round {i + 1}", ", ".join(f"{side} {_text(pair[side])}" for side in pair["order"]))
            for i, pair in enumerate(pairs)]


def not_measured(results: dict[str, Any], key: str, reason: str) -> None:
    """``key`` was not measured: null in the output, and ``reason`` under ``results["not_measured"]``."""
    results[key] = None
    results.setdefault("not_measured", {})[key] = reason


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


def prompt(tokens: int) -> str:
    """About ``tokens`` tokens of SmolLM2's vocabulary (eight words are about ten tokens), a new start each call."""
    words = "the keeper of the lighthouse wrote the weather in his book".split()
    return f"{next(_FIRST_WORDS)}. " + " ".join(itertools.islice(itertools.cycle(words), tokens * 8 // 10))


def generate_rates(url: str, model: str, n_prompt: int, tokens: int, num_ctx: int) -> tuple[float, float]:
    """(prefill, decode) tokens/s of one greedy completion of a new ``n_prompt``-token prompt through the daemon, as
    it times them. Plain decoding: speculation off (prompt lookup on a random model's looping output would count
    several tokens a forward pass, more than the weights' bytes allow; llama-server drafts nothing either)."""
    body = {"model": model, "prompt": prompt(n_prompt), "raw": True, "stream": False, "keep_alive": -1,
            "options": {"temperature": 0, "num_predict": tokens, "num_ctx": num_ctx, "speculative": "off"}}
    answer = httpx.post(f"{url}/api/generate", json=body, timeout=3600)
    answer.raise_for_status()
    a = answer.json()
    return a["prompt_eval_count"] / a["prompt_eval_duration"] * 1e9, a["eval_count"] / a["eval_duration"] * 1e9


def _text(value: Any) -> str:
    if value is None:
        return "not measured"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def report(title: str, rows: list[tuple[str, Any]], results: dict[str, Any], as_json: bool,
           required: Sequence[str] = ()) -> None:
    """Print ``results`` as a JSON object, or ``rows`` as an aligned table (a figure that is None reads "not
    measured", its reason below the table). Then exit with status 1, saying why, if a ``required`` figure
    was not measured."""
    reasons: dict[str, str] = results.get("not_measured", {})
    if as_json:
        print(json.dumps(results, indent=2))
    else:
        width = max(len(label) for label, _ in rows)
        print(title)
        print("-" * (width + 16))
        for label, value in rows:
            print(f"{label:<{width}}  {_text(value):>12}")
        for key, reason in reasons.items():
            print(f"{key}: not measured: {reason}")
    missing = [key for key in required if results.get(key) is None]
    if missing:
        why = "; ".join(f"{key} ({reasons.get(key, 'no figure')})" for key in missing)
        print(f"benchmark failed: not measured: {why}", file=sys.stderr)
        sys.exit(1)
