"""Prefill and decode speed with layers on a GPU against the same engine on the CPU.

One daemon, llama.cpp engine on both sides, alternating rounds: ``num_gpu 0``
(every layer on the CPU) and ``num_gpu N`` (``--layers``, default all of
them); the medians of Ollama's own timings (``prompt_eval_*``, ``eval_*``)
are compared. ``--vulkan`` runs the daemon on the test suite's Vulkan build
with Mesa's software device (``tests/support/engine_builds.py``): the figure
that shows why such a device is never chosen by default. Without it, the
installed llama-cpp-python's GPU backend is measured (CUDA, Metal, Vulkan).

    python scripts/bench/gpu_offload.py [--vulkan] [--layers 31] [--rounds 3] [--tokens 64] [--json]

``--json`` prints ``prefill_ratio`` and ``decode_ratio`` (GPU ÷ CPU tokens/s)
and the ``device`` the layers went to.
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import httpx
from common import MODEL, alternating, report, round_rows, start_daemon
from support.engine_builds import vulkan_env, vulkan_site

PROMPT = "Write a long story about a dragon who learns to bake bread. " * 8
_FIRST_WORDS = itertools.count(1)  # a new first token each call: no prompt cache hit on either side


def measure(url: str, num_gpu: int, tokens: int) -> tuple[float, float]:
    """(prefill, decode) tokens/s of one greedy completion, after a short one on the same load.

    Each side's ``num_gpu`` reloads the model, and a fresh load's first pass pays one-time costs (a GPU
    backend's kernel loading and library handles, the weights' first touch): the warm-up takes them."""
    def generate(num_predict: int) -> dict:
        body = {"model": MODEL, "prompt": f"{next(_FIRST_WORDS)}. {PROMPT}", "raw": True, "stream": False,
                "options": {"temperature": 0, "num_predict": num_predict, "num_gpu": num_gpu, "engine": "llama.cpp"}}
        return httpx.post(f"{url}/api/generate", json=body, timeout=1800).json()

    generate(4)
    answer = generate(tokens)
    return (answer["prompt_eval_count"] / answer["prompt_eval_duration"] * 1e9,
            answer["eval_count"] / answer["eval_duration"] * 1e9)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vulkan", action="store_true", help="the Vulkan build on Mesa's software device")
    p.add_argument("--layers", type=int, default=31, help="num_gpu of the GPU side (default: every layer)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    daemon = start_daemon(LOCALLLM_MAX_LOADED_MODELS="1", **(vulkan_env(vulkan_site()) if args.vulkan else {}))
    try:
        samples = alternating(args.rounds, {
            "cpu": lambda: measure(daemon.url, 0, args.tokens),
            "gpu": lambda: measure(daemon.url, args.layers, args.tokens),
        })
        measure(daemon.url, args.layers, 1)  # the GPU side loaded, to read where its layers are
        (loaded,) = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
    finally:
        daemon.stop()
    median = {side: [statistics.median(s[i] for s in runs) for i in (0, 1)] for side, runs in samples.items()}
    device = ", ".join(f"{e['device']} {e['layers']}" for e in loaded["split"] if e["layers"])
    results = {
        "prefill_ratio": median["gpu"][0] / median["cpu"][0],
        "decode_ratio": median["gpu"][1] / median["cpu"][1],
        "device": device,
        "cpu_prefill_tok_s": median["cpu"][0], "gpu_prefill_tok_s": median["gpu"][0],
        "cpu_decode_tok_s": median["cpu"][1], "gpu_decode_tok_s": median["gpu"][1],
        "rounds": args.rounds, "tokens": args.tokens,
        "round_pairs_prefill_decode_tok_s": samples.pairs(lambda rates: [round(rate, 1) for rate in rates]),
    }
    rows = [(key, value) for key, value in results.items() if key != "round_pairs_prefill_decode_tok_s"]
    rows += round_rows("prefill, decode tok/s", results["round_pairs_prefill_decode_tok_s"])
    report(f"GPU offload ({device}) against the CPU, llama.cpp engine", rows, results, args.json)


if __name__ == "__main__":
    main()
