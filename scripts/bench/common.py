"""What the benchmarks share: a real daemon with SmolLM2, and the table / JSON output."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # fixtures (cached model files), daemon_helpers (a real daemon)

import fixtures  # noqa: E402
from daemon_helpers import Daemon  # noqa: E402

MODEL = "smollm2:135m"

T = TypeVar("T")


def alternating(rounds: int, sides: dict[str, Callable[[], T]]) -> dict[str, list[T]]:
    """``rounds`` measurements of each side, taken in turn: the machine's noise of the moment hits all sides."""
    samples: dict[str, list[T]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, measure in sides.items():
            samples[name].append(measure())
    return samples


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
