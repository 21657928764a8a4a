"""``/api/ps`` against what a native runner really holds: models of three architectures, loaded through the real
daemon, answer a prompt longer than a batch, and the runner's resident memory (VmRSS of its process) is compared
with the plan.

What is compared: a runner holds, beside the model, a fixed part that no plan of the model's can count (the
Python interpreter and its modules, the kernels and llama.cpp libraries, the vocabulary): it is measured on a
runner of the tiny qwen3moe fixture, as its resident memory less its planned size, and taken off every other
runner's resident memory. What is left, the model-dependent part, must be within 1.2x of the plan either way.
The plan's snapshot budget (host RAM for copies of a hybrid's or a trimmed window's states, which fills only as
prefixes are cached) is left out of that comparison: it is no part of what a fresh runner holds.

Each runner serves two sequences (LOCALLLM_NUM_PARALLEL=2): a sequence's own state (a hybrid's recurrent layers,
a trimmed window's ring) is allocated for every sequence the runner may serve and held once the sequence is
used, while the KV pool is held in full from the start, so with two sequences, one of them used, the plan and
the runner hold the same.

The models are moderately sized (150-300 MB, built once into the test cache) so that the model outweighs the
fixed part: a MoE (qwen3moe, Q4_K_M mix), a Gemma 4 E-style model (sliding and global layers of different head
sizes, shared-KV layers, per-layer embeddings) and a Qwen 3.5 MoE hybrid (Gated DeltaNet layers and a shared
expert).
"""

from __future__ import annotations

import inspect
import re
import sys
import time
from pathlib import Path

import httpx
import pytest

from support import moe_models, shaped_models
from support.daemon import Daemon
from support.fixtures import builds_dir, written_atomically
from support.moe_models import MoeShape

from localllm.backends.native.backend import Context
from localllm.runner.engine import CHORES_AFTER_IDLE_S

pytestmark = pytest.mark.slow

MODERATE = {
    "qwen3moe": lambda path, vocab: moe_models.qwen3moe_model(
        path, vocab, MoeShape(n_layer=8, n_expert=32, n_expert_used=4, n_embd=1024, n_ff_exp=512, n_head=8,
                              n_head_kv=2, head_dim=128), quantized=True, k_quants=True),
    "gemma4": lambda path, vocab: shaped_models.gemma4(
        path, vocab, shaped_models.Gemma4Shape(n_layer=8, n_embd=1024, n_head=8, n_kv=2, n_kv_global=2, head=128,
                                               head_global=256, n_ff=4096, window=128, per_layer=256, shared_kv=2), 8),
    "qwen35moe": lambda path, vocab: shaped_models.qwen35moe(
        path, vocab, shaped_models.Qwen35MoeShape(n_layer=8, n_embd=1024, n_head=8, n_kv=2, head=128, k_head=64,
                                                  n_k=4, v_head=64, n_v=8, n_expert=32, n_expert_used=4,
                                                  n_ff_exp=512, n_ff_shared=512), 8),
}
# about 700 tokens: more than a batch of 512, so that the scratch of a full batch is written
PROMPT = " ".join(f"item {i} of the list;" for i in range(140))


def _moderate(name: str, vocab: Path) -> Path:
    folder = builds_dir("resident", sys.modules[__name__], moe_models, shaped_models)
    path = folder / f"{name}.gguf"
    return path if path.exists() else written_atomically(path, lambda partial: MODERATE[name](partial, vocab))


def _resident(pid: int) -> int:
    """The process's resident memory once it has settled: an idle runner faults its KV pool in, a slice at a time,
    from CHORES_AFTER_IDLE_S after its last request."""
    time.sleep(CHORES_AFTER_IDLE_S + 0.5)
    last = -1
    for _ in range(60):
        status = Path(f"/proc/{pid}/status").read_text()
        rss = int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1)) * 1024
        if abs(rss - last) < 1 << 20:
            return rss
        last = rss
        time.sleep(1.0)
    return last


def _load_and_measure(daemon: Daemon, name: str) -> tuple[dict, int]:
    """``name`` loaded (alone) and answering the prompt: its ``/api/ps`` entry and its runner's resident memory."""
    answered = httpx.post(f"{daemon.url}/api/generate", json={
        "model": name, "prompt": PROMPT, "stream": False, "options": {"num_predict": 4, "temperature": 0}},
        timeout=600)
    assert answered.status_code == 200, answered.text
    assert answered.json()["prompt_eval_count"] > 512
    loaded = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
    [entry] = [m for m in loaded if m["name"] in (name, f"{name}:latest")]
    [pid] = daemon.runner_pids()
    return entry, _resident(pid)


@pytest.fixture(scope="module")
def measured(tmp_path_factory, smollm2_path, qwen3moe_path) -> dict[str, tuple[dict, int]]:
    paths = {"tiny": qwen3moe_path} | {name: _moderate(name, smollm2_path) for name in MODERATE}
    daemon = Daemon(tmp_path_factory.mktemp("resident"), LOCALLLM_ENGINE="native", LOCALLLM_MAX_LOADED_MODELS="1",
                    LOCALLLM_NUM_PARALLEL="2", LOCALLLM_NUM_THREADS="2", LOCALLLM_KV_DISK="0").start()
    try:
        results = {}
        for name, path in paths.items():
            daemon.create(name, f"FROM {path}")
            results[name] = _load_and_measure(daemon, name)
        return results
    finally:
        daemon.stop()


@pytest.mark.parametrize("name", list(MODERATE))
def test_ps_size_is_within_1_2x_of_what_the_runner_holds(measured, name):
    if name == "gemma4" and "window_kv" not in inspect.signature(Context).parameters:
        pytest.skip("the plan counts Gemma 4's sliding layers as window rings, which this tree's native context does "
                    "not keep yet (the swa branch's window_kv)")
    tiny, tiny_rss = measured["tiny"]
    fixed = tiny_rss - (tiny["size"] - tiny["memory"]["snapshots"])
    entry, rss = measured[name]
    assert entry["engine"] == "native" and sum(entry["memory"].values()) == entry["size"]
    planned = entry["size"] - entry["memory"]["snapshots"]
    held = rss - fixed
    print(f"{name}: planned {planned >> 20} MiB ({entry['memory']}), resident {rss >> 20} MiB, fixed {fixed >> 20} "
          f"MiB, model-dependent {held >> 20} MiB, ratio {planned / held:.3f}")
    assert planned > 100 << 20 and fixed < planned
    assert planned / 1.2 <= held <= planned * 1.2
