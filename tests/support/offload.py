"""What the GPU offload tests share, whatever the GPU backend (Vulkan's software device, CUDA): a daemon with
SmolLM2 as ``smol``, a greedy completion with its top logprobs, and what ``ps``, the runner and the log say."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import httpx
from support.daemon import Daemon

PROMPT = "The capital of France is"


def start_daemon(root: Path, model: Path, **env: str) -> Daemon:
    """A daemon (one model loaded at a time, so ``ps`` shows the last load) with ``model`` as ``smol``."""
    daemon = Daemon(root, LOCALLLM_KEEP_ALIVE="10m", LOCALLLM_MAX_LOADED_MODELS="1", **env).start()
    try:
        daemon.create("smol", f"FROM {model}")
    except BaseException:
        daemon.stop()
        raise
    return daemon


def generate(daemon: Daemon, model: str = "smol", **options) -> dict:
    body = {"model": model, "prompt": PROMPT, "raw": True, "stream": False, "logprobs": True, "top_logprobs": 10,
            "options": {"temperature": 0, "num_predict": 8, **options}}
    response = httpx.post(f"{daemon.url}/api/generate", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return response.json()


def loaded_model(daemon: Daemon) -> dict:
    (model,) = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
    return model


def layers_by_device(model: dict) -> dict[str, int]:
    return {entry["device"]: entry["layers"] for entry in model["split"] if entry["layers"]}


def runner_command(daemon: Daemon) -> list[str]:
    """The command line of the daemon's one runner."""
    (pid,) = daemon.runner_pids()
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def wait_for_log(daemon: Daemon, pattern: str) -> re.Match:
    deadline = time.monotonic() + 60
    while not (match := re.search(pattern, daemon.log_path.read_text(errors="replace"))):
        assert time.monotonic() < deadline, daemon.log()
        time.sleep(0.2)
    return match


def top_cosine(a: dict, b: dict) -> float:
    """Cosine of two top-logprob lists as probability vectors over the tokens either names."""
    p = {alt["token"]: math.exp(alt["logprob"]) for alt in a["top_logprobs"]}
    q = {alt["token"]: math.exp(alt["logprob"]) for alt in b["top_logprobs"]}
    tokens = set(p) | set(q)
    dot = sum(p.get(t, 0.0) * q.get(t, 0.0) for t in tokens)
    return dot / math.sqrt(sum(v * v for v in p.values()) * sum(v * v for v in q.values()))

