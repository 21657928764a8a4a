"""Mixture-of-experts speed on the CPU: our daemon (native engine) against llama.cpp's llama-server, same file.

A synthetic Qwen3-30B-A3B-shaped model (2,048 wide, 128 experts of 768 of which 8 a token, 32 query and 4 KV
heads; random blocks in llama.cpp's Q4_K_M mix, SmolLM2's tokenizer; ``--layers`` of its 48 layers, all by
default: about 17 GB, written once into the benchmark cache outside the repository). One stream, the same
threads, alternating rounds (the order reversed every other round), medians: a greedy completion of a
``--prompt``-token prompt (a new one each round: no prompt cache on either side) and ``--tokens`` tokens, each
side timed by its own report (``prompt_eval_*`` / ``eval_*``, llama-server's ``timings``). Between the rounds the
memory's read bandwidth is measured with ``--threads`` threads as the repacked kernels read weights.

    python scripts/bench/moe.py [--layers 48] [--threads 2] [--rounds 4] [--tokens 64] [--prompt 512] [--json]

``--json`` keys: ``moe_decode_ratio_qwen3`` and ``moe_prefill_ratio_qwen3`` (ours ÷ llama-server tokens/s),
``bandwidth_fraction_qwen3`` (the bytes one decode step reads, the dense weights and 8 of each layer's 128
experts, times our decode tokens/s, over the median read pass), the ``cpu`` with its family and model, and
each round's figures. A figure that could not be measured (no llama-server build) is null, ``not_measured``
saying why.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import replace
from pathlib import Path

import httpx
from common import alternating, cpu_name, not_measured, report, round_rows, start_daemon
from kernels import bandwidth_reader
from llama_server import CACHE, LlamaServer
from support import fixtures
from support.daemon import free_port
from support.moe_models import QWEN3_30B_A3B, qwen3moe_model

from localllm.gguf import read_gguf

KEYS = ("moe_decode_ratio_qwen3", "moe_prefill_ratio_qwen3", "bandwidth_fraction_qwen3")
CTX = 4096
_FIRST_WORDS = itertools.count(1)  # a new first token each call: no prompt cache hit on either side


def model(layers: int) -> Path:
    """The synthetic Qwen3-30B-A3B-shaped model of ``layers`` layers, written once into the cache."""
    path = CACHE / f"qwen3moe-30b-a3b-shaped-{layers}l-q4_k_m.gguf"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        qwen3moe_model(partial, fixtures.smollm2_gguf(), replace(QWEN3_30B_A3B, n_layer=layers), quantized=True,
                       k_quants=True)
        partial.replace(path)  # never a half-written model under the final name
    return path


def decode_bytes(path: Path) -> int:
    """Bytes of weights one decode step reads: every tensor but the experts (the tied embeddings as the output
    head), and expert_used_count of expert_count of each expert tensor."""
    header = read_gguf(path, skip_arrays_over=256)
    used, experts = header.arch_value("expert_used_count"), header.arch_value("expert_count")
    return sum(t.nbytes * used // experts if "_exps." in t.name else t.nbytes for t in header.tensors)


def prompt(tokens: int) -> str:
    """About ``tokens`` tokens of SmolLM2's vocabulary (eight words are about ten tokens), a new start each call."""
    words = "the keeper of the lighthouse wrote the weather in his book".split()
    return f"{next(_FIRST_WORDS)}. " + " ".join(itertools.islice(itertools.cycle(words), tokens * 8 // 10))


def ours(url: str, n_prompt: int, tokens: int, model: str = "moe") -> tuple[float, float]:
    """(prefill, decode) tokens/s of one greedy completion of ``model`` through the daemon, as it times them."""
    body = {"model": model, "prompt": prompt(n_prompt), "raw": True, "stream": False, "keep_alive": -1,
            "options": {"temperature": 0, "num_predict": tokens, "num_ctx": CTX}}
    answer = httpx.post(f"{url}/api/generate", json=body, timeout=3600)
    answer.raise_for_status()
    a = answer.json()
    return a["prompt_eval_count"] / a["prompt_eval_duration"] * 1e9, a["eval_count"] / a["eval_duration"] * 1e9


def theirs(server: LlamaServer, n_prompt: int, tokens: int) -> tuple[float, float]:
    body = {"prompt": prompt(n_prompt), "n_predict": tokens, "temperature": 0, "cache_prompt": False}
    timings = httpx.post(f"{server.url}/completion", json=body, timeout=3600).json()["timings"]
    return timings["prompt_per_second"], timings["predicted_per_second"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=QWEN3_30B_A3B.n_layer)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens (about)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    path = model(args.layers)
    results: dict = {"cpu": cpu_name(), "threads": args.threads, "model": str(path), "layers": args.layers}
    daemon = start_daemon(LOCALLLM_NUM_THREADS=str(args.threads), LOCALLLM_NUM_PARALLEL="1",
                          LOCALLLM_MAX_LOADED_MODELS="1")
    server = None
    try:
        daemon.create("moe", f"FROM {path}")
        ours(daemon.url, 16, 4)  # the load, and the weights' first touch
        engine = next(m for m in httpx.get(f"{daemon.url}/api/ps").json()["models"] if m["name"] == "moe:latest")
        results["engine"], results["engine_reason"] = engine["engine"], engine["engine_reason"]
        sides = {"ours": lambda: ours(daemon.url, args.prompt, args.tokens)}
        try:
            # llama.cpp's repacked expert path (CPU_REPACK, its default) decoded this shape at a tenth of its
            # plain path on an AVX2 Zen 3 (2.4-2.9 against 24-25 tok/s): the peer runs at its best setting
            server = LlamaServer(path, args.threads, 1, CTX, free_port(), extra=("--no-repack",))
            server.wait_ready(600)
            theirs(server, 16, 4)
            sides["llama_server"] = lambda: theirs(server, args.prompt, args.tokens)
        except Exception as exc:  # noqa: BLE001 - no build tools or no network for its sources: not measured
            results["llama_server_error"] = str(exc)[:500]
        read = bandwidth_reader(args.threads)
        sides["bandwidth"] = lambda: (0.0, read())
        samples = alternating(args.rounds, sides)
    finally:
        daemon.stop()
        if server is not None:
            server.stop()
    prefill = samples.medians(0)
    decode = samples.medians(1)
    results.update({"ours_prefill_tokens_per_s": prefill["ours"], "ours_decode_tokens_per_s": decode["ours"],
                    "read_bandwidth_gbps": decode["bandwidth"] / 1e9, "decode_bytes": decode_bytes(path),
                    "rounds": samples.pairs()})
    results["bandwidth_fraction_qwen3"] = results["decode_bytes"] * decode["ours"] / decode["bandwidth"]
    if "llama_server" in samples:
        results["moe_decode_ratio_qwen3"] = decode["ours"] / decode["llama_server"]
        results["moe_prefill_ratio_qwen3"] = prefill["ours"] / prefill["llama_server"]
    else:
        for key in KEYS[:2]:
            not_measured(results, key, f"llama-server did not run: {results['llama_server_error']}")
    rows = [("cpu", results["cpu"]), ("engine", results["engine"]), *[(k, results[k]) for k in KEYS],
            ("ours decode tokens/s", decode["ours"]), ("ours prefill tokens/s", prefill["ours"]),
            *round_rows("prefill, decode", samples.pairs())]
    report(f"qwen3moe (30B-A3B shape, {args.layers} layers), {args.threads} threads", rows, results, args.json,
           required=KEYS)


if __name__ == "__main__":
    main()
