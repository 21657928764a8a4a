"""Mixture-of-experts and dense speed on the CPU: our daemon (native engine) against llama.cpp's llama-server.

Both run the same files: synthetic models of the real shapes (random quantized blocks, SmolLM2's tokenizer, written
once into the benchmark cache outside the repository, as many layers as ``--<model>-layers`` asks):

- ``qwen3``: Qwen3-30B-A3B (2,048 wide, 128 experts of 768 of which 8 a token; llama.cpp's Q4_K_M mix), 8 of its
  48 layers by default (3.1 GB; all 48 are 17 GB, twice that resident does not fit 24 GB);
- ``gptoss``: gpt-oss-20b (2,880 wide, 32 experts of 2,880 of which 4 a token, MXFP4 experts and Q8_0 matrices,
  biases, sinks, every other layer sliding), 12 of its 24 layers by default (5.7 GB; all 24 are 11.1 GB);
- ``3b``: Llama 3.2 3B (Q4_K_M mix, tied output head), all 28 layers by default (1.8 GB);
- ``8b``: Qwen3 8B (Q4_K_M mix), all 36 layers by default (4.5 GB).

The vocabulary is SmolLM2's 49,152 tokens, not the real models' (128,256, 201,088, 151,936): the output head is a
smaller share of a step than in the real files, more so the fewer the layers.

Our engine repacks weights into memory of its own while llama-server maps the file: a model is measured only
where twice its file fits the memory available then (else its figures are not measured, saying so).

One model at a time, one stream, the same threads, alternating rounds (the order reversed every other round),
medians: a greedy completion of a ``--prompt``-token prompt (a new one each round: no prompt cache on either side)
and ``--tokens`` tokens, each side timed by its own report (``prompt_eval_*`` / ``eval_*``, llama-server's
``timings``), plain decoding on both (our speculation off). Between them, a read pass: ``--threads`` threads each
streaming its half of a 512 MiB buffer with the kernels' loads and prefetches (the best of three passes a round).

    python scripts/bench/moe.py [--models qwen3,gptoss,3b,8b] [--qwen3-layers 8] [--gptoss-layers 12]
                                [--3b-layers 28] [--8b-layers 36] [--threads 2] [--rounds 4] [--tokens 64]
                                [--prompt 512] [--json]

``--json``: one object. Top-level keys: ``moe_decode_ratio_{qwen3,gptoss}``, ``moe_prefill_ratio_{qwen3,gptoss}``,
``dense_decode_ratio_{3b,8b}``, ``dense_prefill_ratio_{3b,8b}`` (ours ÷ llama-server, median tokens/s) and
``bandwidth_fraction_{qwen3,gptoss,3b,8b}``: the bytes of weights one decode step of our engine reads (its repacked
sizes: every dense matrix, the output head once, expert_used_count of expert_count of each expert tensor; not the
token embeddings' table, of which a step reads one row, nor the KV cache) times our median decode tokens/s, over
the median read pass. Beside them the ``cpu`` with its family and model, and under ``models`` each model's file,
layers, engine, the peer's flags, median figures, each round's figures and ratios. A figure that could not be
measured (a model not selected, no llama-server build, not enough memory, a model our native engine does not run)
is null, ``not_measured`` saying why; the run exits 1 when one of the selected models' figures is.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
from common import alternating, cpu_name, generate_rates, not_measured, report
from kernels import bandwidth_reader
from llama_server import Pair, cached_model, side_by_side
from support import fixtures
from support.moe_models import QWEN3_30B_A3B, qwen3moe_model
from support.shaped_models import GPT_OSS_20B, LLAMA32_3B, QWEN3_8B, dense, gpt_oss

from localllm.backends.native.model import NativeWeights, available_memory

CTX = 4096


@dataclass(frozen=True)
class Shape:
    """A model the benchmark measures: its figures' suffix, its cache file, the real model's layer count and the
    default here, the writer of a copy of ``n`` layers, and llama-server's flags for it."""

    label: str
    kind: str  # "moe" or "dense": the ratio keys' prefix
    title: str
    file: str  # the cache file's name, {n} its layer count
    of: int
    layers: int
    write: Callable[[Path, int], object]
    server_args: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, str, str]:
        return (f"{self.kind}_decode_ratio_{self.label}", f"{self.kind}_prefill_ratio_{self.label}",
                f"bandwidth_fraction_{self.label}")


# The peer runs each model at its best setting: llama.cpp's repacked expert path (CPU_REPACK, its default) decoded
# the qwen3moe shape at a tenth of its plain path on an AVX2 Zen 3 (2.4-2.9 against 24-25 tok/s), so --no-repack
# there; the gpt-oss shape (MXFP4 experts) prefilled faster repacked in 4 of 4 alternating rounds on a busy Zen 3
# (2 layers, 128 tokens: 16-23 against 12-16 tok/s; decode alike), and dense Q4_K_M is its repacked default's case
SHAPES = {s.label: s for s in (
    Shape("qwen3", "moe", "Qwen3-30B-A3B", "qwen3moe-30b-a3b-shaped-{n}l-q4_k_m.gguf", QWEN3_30B_A3B.n_layer, 8,
          lambda path, n: qwen3moe_model(path, fixtures.smollm2_gguf(), replace(QWEN3_30B_A3B, n_layer=n),
                                         quantized=True, k_quants=True), ("--no-repack",)),
    Shape("gptoss", "moe", "gpt-oss-20b", "gpt-oss-20b-shaped-{n}l-mxfp4.gguf", GPT_OSS_20B.n_layer, 12,
          lambda path, n: gpt_oss(path, fixtures.smollm2_gguf(), GPT_OSS_20B, n)),
    Shape("3b", "dense", "Llama 3.2 3B", "llama32-3b-shaped-{n}l-q4_k_m.gguf", LLAMA32_3B.n_layer, 28,
          lambda path, n: dense(path, fixtures.smollm2_gguf(), LLAMA32_3B, n)),
    Shape("8b", "dense", "Qwen3 8B", "qwen3-8b-shaped-{n}l-q4_k_m.gguf", QWEN3_8B.n_layer, 36,
          lambda path, n: dense(path, fixtures.smollm2_gguf(), QWEN3_8B, n)),
)}
KEYS = tuple(key for shape in SHAPES.values() for key in shape.keys)


def decode_bytes(path: Path) -> int:
    """Bytes of weights one decode step of our engine reads, as it lays the model out on this CPU (repacked)."""
    weights = NativeWeights(path)
    try:
        return weights.decode_bytes
    finally:
        weights.close()


def measure(pair: Pair, args: argparse.Namespace) -> dict:
    """Alternating rounds of our decode, llama-server's and the read pass; medians and each round's figures."""
    sides = {"ours": lambda: generate_rates(pair.daemon.url, pair.model, args.prompt, args.tokens, CTX)}
    if pair.server is not None:
        sides["llama_server"] = lambda: pair.server.rates(args.prompt, args.tokens)
    read = bandwidth_reader(args.threads)
    sides["read_pass"] = lambda: (0.0, read())  # (no prefill, bytes/s)
    samples = alternating(args.rounds, sides)
    prefill, decode = samples.medians(0), samples.medians(1)
    info: dict = {"ours_prefill_tokens_per_s": prefill["ours"], "ours_decode_tokens_per_s": decode["ours"],
                  "read_bandwidth_gbps": decode["read_pass"] / 1e9, "rounds": []}
    if pair.server is not None:
        info["llama_server_prefill_tokens_per_s"] = prefill["llama_server"]
        info["llama_server_decode_tokens_per_s"] = decode["llama_server"]
    for pair_round in samples.pairs():
        row: dict = {"order": pair_round["order"], "read_gbps": pair_round["read_pass"][1] / 1e9}
        for side in ("ours", "llama_server"):
            if side in pair_round:
                row[side] = {"prefill_tokens_per_s": pair_round[side][0], "decode_tokens_per_s": pair_round[side][1]}
        if "llama_server" in row:
            row["decode_ratio"] = row["ours"]["decode_tokens_per_s"] / row["llama_server"]["decode_tokens_per_s"]
            row["prefill_ratio"] = row["ours"]["prefill_tokens_per_s"] / row["llama_server"]["prefill_tokens_per_s"]
        info["rounds"].append(row)
    return info


def bench(shape: Shape, layers: int, args: argparse.Namespace, results: dict) -> list[tuple[str, object]]:
    """One model's figures into ``results`` (its keys, and ``results["models"][label]``); its table rows."""
    path = cached_model(shape.file.format(n=layers), lambda partial: shape.write(partial, layers))
    info: dict = {"path": str(path), "layers": layers, "of": shape.of, "file_gb": path.stat().st_size / 1e9,
                  "llama_server_args": list(shape.server_args)}
    results["models"][shape.label] = info
    decode_key, prefill_key, fraction_key = shape.keys
    need, free = 2 * path.stat().st_size, available_memory()
    if need > 0.9 * free:  # our repacked copy beside llama-server's mapped file, and room for the rest
        for key in shape.keys:
            not_measured(results, key, f"{path.name} needs about {need / 2**30:.1f} GiB resident (our copy and "
                                       f"llama-server's mapping), {free / 2**30:.1f} GiB is available: fewer layers")
        return [(f"{shape.label} layers", f"{layers} of {shape.of}: not measured, too little memory")]
    try:
        with side_by_side(path, shape.label, args.threads, CTX, shape.server_args) as pair:
            info["engine"], info["engine_reason"] = pair.engine, pair.engine_reason
            if pair.server_error:
                info["llama_server_error"] = pair.server_error
            info.update(measure(pair, args))
    except (RuntimeError, httpx.HTTPStatusError) as exc:  # our daemon refused or failed the model: its words
        info["error"] = (exc.response.text if isinstance(exc, httpx.HTTPStatusError) else str(exc))[:1000]
        for key in shape.keys:
            not_measured(results, key, f"our daemon failed on {path.name}: {info['error']}")
        return [(f"{shape.label} layers", f"{layers} of {shape.of}: not measured, our daemon failed")]
    if pair.engine != "native":
        for key in shape.keys:
            not_measured(results, key, f"{shape.label} ran on the {pair.engine} engine ({pair.engine_reason})")
    else:
        info["decode_bytes"] = decode_bytes(path)
        results[fraction_key] = info["decode_bytes"] * info["ours_decode_tokens_per_s"] / (
            info["read_bandwidth_gbps"] * 1e9)
        if pair.server is None:
            for key in (decode_key, prefill_key):
                not_measured(results, key, f"llama-server did not run: {pair.server_error}")
        else:
            results[decode_key] = info["ours_decode_tokens_per_s"] / info["llama_server_decode_tokens_per_s"]
            results[prefill_key] = info["ours_prefill_tokens_per_s"] / info["llama_server_prefill_tokens_per_s"]
    ratios = [f"{r['decode_ratio']:.2f}/{r['prefill_ratio']:.2f}" for r in info["rounds"] if "decode_ratio" in r]
    return [(f"{shape.label} layers", f"{layers} of {shape.of}"), (f"{shape.label} engine", info["engine"]),
            *[(key, results[key]) for key in shape.keys],
            (f"{shape.label} ours decode tokens/s", info["ours_decode_tokens_per_s"]),
            (f"{shape.label} ours prefill tokens/s", info["ours_prefill_tokens_per_s"]),
            (f"{shape.label} read pass GB/s", info["read_bandwidth_gbps"]),
            (f"{shape.label} ratios a round (decode/prefill)", " ".join(ratios) or "none")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(SHAPES), help=f"some of {','.join(SHAPES)}")
    for shape in SHAPES.values():
        p.add_argument(f"--{shape.label}-layers", type=int, default=shape.layers, dest=f"layers_{shape.label}",
                       help=f"of {shape.title}'s {shape.of} (default {shape.layers})")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens (about)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    chosen = [name.strip() for name in args.models.split(",") if name.strip()]
    if unknown := [name for name in chosen if name not in SHAPES]:
        p.error(f"--models: no model {', '.join(unknown)} (choose from {','.join(SHAPES)})")
    for shape in SHAPES.values():
        if not 1 <= getattr(args, f"layers_{shape.label}") <= shape.of:
            p.error(f"--{shape.label}-layers: 1 to {shape.of}")
    results: dict = {"cpu": cpu_name(), "threads": args.threads, "rounds": args.rounds, "tokens": args.tokens,
                     "prompt_tokens": args.prompt, **dict.fromkeys(KEYS), "models": {}}
    rows: list[tuple[str, object]] = [("cpu", results["cpu"])]
    for label, shape in SHAPES.items():
        if label in chosen:
            rows += bench(shape, getattr(args, f"layers_{label}"), args, results)
        else:
            for key in shape.keys:
                not_measured(results, key, f"{label} not selected (--models {args.models})")
    report(f"MoE and dense shapes, ours vs llama-server, {args.threads} threads", rows, results, args.json,
           required=[key for label in chosen for key in SHAPES[label].keys])


if __name__ == "__main__":
    main()
