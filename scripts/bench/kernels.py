"""Native engine and kernels against llama.cpp's bare decode loop, in one run.

    python scripts/bench/kernels.py [--threads 2] [--tokens 64] [--rounds 5] [--json]

llama.cpp's side is a plain ``llama_decode`` loop over the low-level API with
greedy sampling in C (what llama-bench's tg test measures).  The native side
decodes the same prompt with the same thread count.  Figures:

- ``native_decode_ratio_smollm2`` / ``_gemma3``: decode tokens/s, native over llama.cpp
- ``native_prefill_ratio_smollm2``: tokens/s of a 512-token prompt, native over llama.cpp
- ``bandwidth_fraction_smollm2``: weight bytes streamed per second by native decode over the
  single-pass memory read bandwidth measured here with the same number of threads (512 MiB, far
  beyond the caches). Where the last-level cache can hold the whole model (a 96 MB model, a 260 MB
  L3 on the machine these figures were taken on) ``..._model_footprint`` is the fairer figure: it
  divides by the read bandwidth over a buffer of the model's size, read again and again as decode does
- ``dot_gbps``: per format, GB/s of weights through one thread's matvec, SIMD and scalar
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp as ll
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support import fixtures  # noqa: E402
from support.native import Side  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from common import alternating  # noqa: E402

from localllm.backends.native import kernels  # noqa: E402
from localllm.backends.native.lib import Tensor, library  # noqa: E402

PROMPT = "Once upon a time, in a small village by the sea, there lived"
FORMATS = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12,
           "Q5_K": 13, "Q6_K": 14, "F16": 1, "BF16": 30, "F32": 0}  # fmt: skip


def llama_decode_rate(side: Side, prompt: list[int], n: int) -> float:
    """Tokens/s of llama.cpp's bare loop: one llama_decode and one C greedy pick per token."""
    params = ll.llama_sampler_chain_default_params()
    chain = ll.llama_sampler_chain_init(params)
    ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
    side.reset()
    side.eval(prompt, 0)
    batch = ll.llama_batch_init(1, 0, 1)
    token = ll.llama_sampler_sample(chain, side.ctx.ptr, -1)
    start = time.perf_counter()
    for i in range(n):
        batch.n_tokens = 1
        batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = token, len(prompt) + i, 1, 1
        batch.seq_id[0][0] = 0
        if ll.llama_decode(side.ctx.ptr, batch) != 0:
            raise RuntimeError("llama_decode failed")
        token = ll.llama_sampler_sample(chain, side.ctx.ptr, -1)
    elapsed = time.perf_counter() - start
    ll.llama_batch_free(batch)
    ll.llama_sampler_free(chain)
    return n / elapsed


def native_decode_rate(side: Side, prompt: list[int], n: int) -> float:
    side.reset()
    logits = side.eval(prompt, 0)
    start = time.perf_counter()
    for i in range(n):
        logits = side.eval([int(np.argmax(logits))], len(prompt) + i)
    return n / (time.perf_counter() - start)


def prefill_rate(side: Side, tokens: list[int]) -> float:
    side.reset()
    start = time.perf_counter()
    side.eval(tokens, 0)
    return len(tokens) / (time.perf_counter() - start)


def read_bandwidth(threads: int, nbytes: int = 512 << 20) -> float:
    """Best of three passes over ``nbytes`` (by default 512 MiB, far beyond the caches) by ``threads`` threads."""
    buf = np.ones(nbytes // 8, dtype=np.uint64)  # touched: pages are resident
    lib = library()
    return max(lib.llk_read_bandwidth(ctypes.c_void_p(buf.ctypes.data), nbytes, threads) for _ in range(3))


def dot_gbps(ctx_side: Side, rows: int = 4096, cols: int = 4096) -> dict[str, dict[str, float]]:
    """Weights GB/s of a single-threaded matvec per format, best ISA and scalar reference."""
    lib = library()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(cols).astype(np.float32)
    y = np.empty(rows, dtype=np.float32)
    out: dict[str, dict[str, float]] = {}
    best = kernels.isa()
    for name, t in FORMATS.items():
        size = kernels.row_size(t, cols) * rows
        raw = rng.integers(0, 256, size, dtype=np.uint8)
        if t in (0, 1, 30):  # keep float formats finite
            raw = (rng.standard_normal(size // 4).astype(np.float32).view(np.uint8) if t == 0 else
                   rng.standard_normal(size // 2).astype(np.float16).view(np.uint8))  # fmt: skip
        tensor = Tensor(raw.ctypes.data, t, cols, rows)
        figures = {}
        for isa in (best, "scalar"):
            kernels.set_isa(isa)
            reps = 3 if isa == "scalar" else 10
            start = time.perf_counter()
            for _ in range(reps):
                lib.llk_matvec(ctx_side.ctx._ctx, ctypes.byref(tensor), x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                               y.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))  # fmt: skip
            figures["simd" if isa == best else "scalar"] = size * reps / (time.perf_counter() - start) / 1e9
        out[name] = figures
    kernels.set_isa(best)
    return out


def medians(rounds: int, theirs: Callable[[], float], ours: Callable[[], float]) -> tuple[float, float]:
    """Medians of ``rounds`` alternating measurements of both sides (the machine's noise hits both)."""
    samples = alternating(rounds, {"theirs": theirs, "ours": ours})
    return statistics.median(samples["theirs"]), statistics.median(samples["ours"])


def run(threads: int, tokens: int, rounds: int) -> dict:
    result: dict = {"threads": threads, "tokens": tokens, "rounds": rounds, "isa": kernels.isa()}
    for label, path in (("smollm2", fixtures.smollm2_gguf()), ("gemma3", fixtures.gemma3_gguf())):
        native, reference = Side("native", path, threads=threads), Side("llama.cpp", path, threads=threads)
        prompt = reference.model.vocab.tokenize_prompt(PROMPT)
        theirs, ours = medians(rounds, lambda: llama_decode_rate(reference, prompt, tokens),
                                   lambda: native_decode_rate(native, prompt, tokens))
        result[f"llama_decode_tps_{label}"] = theirs
        result[f"native_decode_tps_{label}"] = ours
        result[f"native_decode_ratio_{label}"] = ours / theirs
        if label == "smollm2":
            long_prompt = (prompt * (512 // len(prompt) + 1))[:512]
            result["llama_prefill_tps_smollm2"], result["native_prefill_tps_smollm2"] = medians(
                rounds, lambda: prefill_rate(reference, long_prompt), lambda: prefill_rate(native, long_prompt))
            result["native_prefill_ratio_smollm2"] = result["native_prefill_tps_smollm2"] / result["llama_prefill_tps_smollm2"]
            streamed = ours * native.model.weights.nbytes
            bandwidth = read_bandwidth(threads)
            result["read_bandwidth_gbps"] = bandwidth / 1e9
            result["bandwidth_fraction_smollm2"] = streamed / bandwidth
            footprint = read_bandwidth(threads, native.model.weights.nbytes)
            result["read_bandwidth_model_footprint_gbps"] = footprint / 1e9
            result["bandwidth_fraction_model_footprint_smollm2"] = streamed / footprint
            single = Side("native", path, threads=1)
            result["dot_gbps"] = dot_gbps(single)
            single.close()
        native.close()
        reference.close()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5, help="alternating measurements per figure (medians)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    result = run(args.threads, args.tokens, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    width = max(map(len, result))
    for key, value in result.items():
        if key == "dot_gbps":
            print(f"{'format':<8} {'simd GB/s':>10} {'scalar GB/s':>12}")
            for name, f in value.items():
                print(f"{name:<8} {f['simd']:>10.2f} {f['scalar']:>12.2f}")
        else:
            print(f"{key:<{width}} {value:.3f}" if isinstance(value, float) else f"{key:<{width}} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
