"""Native engine and kernels against llama.cpp's bare decode loop, in one run.

    python scripts/bench/kernels.py [--threads 2] [--tokens 64] [--rounds 5] [--json] [--no-1b]
                                    [--models smollm2,gemma3,1b] [--no-prefill] [--no-dot]

llama.cpp's side is a plain ``llama_decode`` loop over the low-level API with
greedy sampling in C (what llama-bench's tg test measures).  The native side
decodes the same prompt with the same thread count.  Both sides are measured in
turn, round after round, and each figure is the median.  Figures (top-level keys):

- ``cpu``: model name, family, model number and the instruction-set flags the kernels use; ``kernel_paths``: per
  format, the weight layout a matrix gets at load on this CPU (repacked or GGUF in place) and the level
- ``native_decode_ratio_smollm2`` / ``_gemma3`` / ``_1b``: decode tokens/s, native over llama.cpp (each
  ratio's ``rounds_...`` key: the ratio of each round, its spread)
- ``native_prefill_ratio_smollm2`` / ``_gemma3``: tokens/s of a 512-token prompt (``..._2048``: 2,048
  tokens, in batches of 512 on both sides), native over llama.cpp
- ``bandwidth_fraction_smollm2`` / ``_gemma3`` / ``_1b``: weight bytes streamed per second by native
  decode (the median round) over the single-pass memory read bandwidth measured here with the same number
  of threads (512 MiB, far beyond the caches, read with the kernels' loads and prefetches), the best pass
  of those taken at the start and between that model's decode rounds (``read_bandwidth_gbps_...``: the
  memory's load from other processes varies from minute to minute). The small models fit a large last-level cache, so
  ``..._model_footprint`` divides by the read bandwidth over a buffer of the model's size, read again
  and again as decode does. The ``1b`` model is a synthetic llama of about 1B parameters (random
  weights quantized to Q4_K_M by llama.cpp's own quantizer, cached in ``~/.cache/localllm-bench``),
  big enough that no cache helps
- ``repack_load_seconds``: seconds the native engine spends repacking the 1B model's weights at load
  (``_gemma3``: Gemma 3's)
- ``dot_gbps``: per format, GB/s of GGUF weight bytes through one thread's matrix-vector product
  (4096 x 4096): ``simd`` through the path the forward pass takes (the repacked layout where the format
  has one), ``in_place`` through the GGUF layout's per-row kernels, ``scalar`` the reference; and
  ``vs_q4_0``, ``simd`` over Q4_0's
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import re
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
from support.gguf_builders import F16, quantized, tiny_model  # noqa: E402
from support.native import Side  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from common import Rounds, alternating  # noqa: E402

from localllm.backends.native import kernels  # noqa: E402
from localllm.backends.native.lib import Tensor, library  # noqa: E402
from localllm.backends.native.model import NativeWeights  # noqa: E402
from localllm.gguf import GGML_TYPES  # noqa: E402

PROMPT = "Once upon a time, in a small village by the sea, there lived"
FORMATS = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12,
           "Q5_K": 13, "Q6_K": 14, "MXFP4": 39, "F16": 1, "BF16": 30, "F32": 0}  # fmt: skip
SCALE_FIELDS = {2: (0,), 3: (0, 2), 6: (0,), 7: (0, 2), 8: (0,), 10: (80, 82), 11: (108,), 12: (0, 2), 13: (0, 2),
                14: (208,), 39: ()}  # byte offsets of each block's half-float scales  # fmt: skip
E8M0_FIELDS = {39: (0,)}  # byte offsets of each block's power-of-two scale byte (MXFP4)
KERNEL_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "asimd", "asimddp")
BATCH = 512
SYNTHETIC_1B = {"n_embd": 2048, "n_ff": 5632, "n_vocab": 32000, "n_layer": 18, "head_dim": 512}


def cpu() -> dict:
    """The CPU's model name, family, model number and the flags among those the kernels dispatch on."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    field = lambda key: (re.search(rf"^{key}\s*:\s*(.*)$", info, re.MULTILINE) or [None, ""])[1]  # noqa: E731
    flags = set((field("flags") or field("Features")).split())
    return {"model": field("model name") or platform.processor(), "family": field("cpu family"),
            "model_number": field("model"), "flags_used": [f for f in KERNEL_FLAGS if f in flags],
            "isa": kernels.isa()}  # fmt: skip


def kernel_paths() -> dict[str, str]:
    """Per format, the layout a 4096 x 4096 matrix gets at load here and the level whose kernels run it."""
    paths = {}
    for name, t in FORMATS.items():
        packed = kernels.repacked_type(t, 4096, 4096)
        layout = f"repacked {kernels.type_name(packed)}" if packed != t else "GGUF in place"
        paths[name] = f"{layout}, {kernels.isa()} kernels"
    return paths


def synthetic_1b() -> Path:
    """A llama of about 1B parameters in Q4_K_M (random weights, llama.cpp's quantizer), made once and cached."""
    cache = Path(os.environ.get("LOCALLLM_BENCH_CACHE", Path.home() / ".cache" / "localllm-bench"))
    target = cache / "synthetic-llama-1b-q4_k_m.gguf"
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        source = tiny_model(cache / "synthetic-llama-1b-f16.gguf", file_type=F16, **SYNTHETIC_1B)
        try:
            quantized(source, cache / "partial.gguf").replace(target)
        finally:
            source.unlink(missing_ok=True)
    return target


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
    """Tokens/s of a prompt evaluated in batches of BATCH tokens (both engines' batch size here)."""
    side.reset()
    start = time.perf_counter()
    for first in range(0, len(tokens), BATCH):
        side.eval(tokens[first : first + BATCH], first)
    return len(tokens) / (time.perf_counter() - start)


def bandwidth_reader(threads: int, nbytes: int = 512 << 20) -> Callable[[], float]:
    """A measurement of the read bandwidth: the best of three passes over a buffer of ``nbytes`` (by default
    512 MiB, far beyond the caches) by ``threads`` threads, read as the repacked kernels read weights."""
    buf = np.ones(nbytes // 8, dtype=np.uint64)  # touched: pages are resident
    lib = library()
    return lambda: max(lib.llk_read_bandwidth(ctypes.c_void_p(buf.ctypes.data), buf.nbytes, threads) for _ in range(3))


def read_bandwidth(threads: int, nbytes: int = 512 << 20) -> float:
    return bandwidth_reader(threads, nbytes)()


def random_matrix(t: int, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Raw bytes of a matrix of format ``t``: random codes, and sane half-float scales (random bits
    there would be NaNs and subnormals, which no model has)."""
    size = kernels.row_size(t, cols) * rows
    if t in (0, 1, 30):  # the float formats: finite values
        values = rng.standard_normal(rows * cols).astype(np.float32)
        return values.view(np.uint8) if t == 0 else (values.astype(np.float16) if t == 1 else
                                                     (values.view(np.uint32) >> 16).astype(np.uint16)).view(np.uint8)
    block = GGML_TYPES[t][2]
    raw = rng.integers(0, 256, size, dtype=np.uint8).reshape(-1, block)
    for offset in SCALE_FIELDS[t]:
        raw[:, offset : offset + 2] = rng.uniform(0.001, 0.05, len(raw)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    for offset in E8M0_FIELDS.get(t, ()):
        raw[:, offset] = rng.integers(119, 125, len(raw))
    return raw.reshape(-1)


def gemm_gbps(t: int, data: np.ndarray, nbytes: int, rows: int, cols: int, x: np.ndarray, reps: int) -> float:
    tensor = Tensor(data.ctypes.data, t, cols, rows)
    y = np.empty(rows, dtype=np.float32)
    xp, yp = (a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for a in (x, y))
    start = time.perf_counter()
    for _ in range(reps):
        library().llk_gemm(ctypes.byref(tensor), xp, 1, yp)
    return nbytes * reps / (time.perf_counter() - start) / 1e9


def dot_gbps(rounds: int, rows: int = 4096, cols: int = 4096) -> dict[str, dict[str, float]]:
    """GB/s of GGUF weight bytes through a single-threaded matvec per format (see the module's docstring),
    every format measured in turn, round after round, medians."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(cols).astype(np.float32)
    best = kernels.isa()
    cases: dict[tuple[str, str], Callable[[], float]] = {}
    for name, t in FORMATS.items():
        raw = random_matrix(t, rows, cols, rng)
        size = raw.nbytes
        packed = kernels.repacked_type(t, cols, rows)
        if packed != t:
            _, copy = kernels.repack(t, raw, cols, rows)
            cases[name, "simd"] = lambda p=packed, c=copy, s=size: gemm_gbps(p, c, s, rows, cols, x, 10)
            cases[name, "in_place"] = lambda t=t, r=raw, s=size: gemm_gbps(t, r, s, rows, cols, x, 10)
        else:
            cases[name, "simd"] = lambda t=t, r=raw, s=size: gemm_gbps(t, r, s, rows, cols, x, 10)
        cases[name, "scalar"] = lambda t=t, r=raw, s=size: (kernels.set_isa("scalar"), gemm_gbps(t, r, s, rows, cols, x, 1),
                                                            kernels.set_isa(best))[1]  # fmt: skip
    samples = alternating(rounds, cases)
    out: dict[str, dict[str, float]] = {}
    for (name, path), values in samples.items():
        out.setdefault(name, {})[path] = statistics.median(values)
    for figures in out.values():
        figures["vs_q4_0"] = figures["simd"] / out["Q4_0"]["simd"]
    return out


def round_ratios(samples: dict[str, list[float]]) -> list[float]:
    """Each round's ratio, ours over theirs: the spread of a median ratio."""
    return [round(o / t, 3) for o, t in zip(samples["ours"], samples["theirs"])]


def medians(rounds: int, theirs: Callable[[], float], ours: Callable[[], float]) -> tuple[float, float, Rounds[float]]:
    """Medians of ``rounds`` alternating measurements of both sides (the machine's noise hits both), and the
    measurements."""
    samples = alternating(rounds, {"theirs": theirs, "ours": ours})
    return statistics.median(samples["theirs"]), statistics.median(samples["ours"]), samples


def rounded(value: float) -> float:
    return round(value, 2)


def compare(label: str, path: Path, threads: int, tokens: int, rounds: int, prefill: bool, bandwidth: float,
            result: dict) -> None:
    """Decode (and prefill) of one model on both engines, in turn, medians; the bandwidth it streams."""
    n_ctx = 4096 if prefill else 1024
    native, reference = Side("native", path, n_ctx=n_ctx, threads=threads), Side("llama.cpp", path, n_ctx=n_ctx, threads=threads)
    try:  # the synthetic model's vocabulary has no byte pieces for text: fixed token ids
        prompt = list(range(3, 19)) if label == "1b" else reference.model.vocab.tokenize_prompt(PROMPT)
        # the read bandwidth measured between the decode rounds too: other processes' load on the memory
        # varies from minute to minute, and the best pass of all is what the machine can do
        samples = alternating(rounds, {"theirs": lambda: llama_decode_rate(reference, prompt, tokens),
                                       "ours": lambda: native_decode_rate(native, prompt, tokens),
                                       "bandwidth": bandwidth_reader(threads)})
        theirs, ours = statistics.median(samples["theirs"]), statistics.median(samples["ours"])
        result[f"llama_decode_tps_{label}"], result[f"native_decode_tps_{label}"] = theirs, ours
        result[f"native_decode_ratio_{label}"] = ours / theirs
        result[f"rounds_native_decode_ratio_{label}"] = round_ratios(samples)
        result[f"round_pairs_decode_{label}"] = samples.pairs(rounded)  # tokens/s and GB/s, in the order they ran
        best = max(bandwidth, *samples["bandwidth"])
        result[f"read_bandwidth_gbps_{label}"] = best / 1e9
        streamed = ours * native.model.weights.nbytes
        result[f"bandwidth_fraction_{label}"] = streamed / best
        footprint = read_bandwidth(threads, native.model.weights.nbytes)
        result[f"bandwidth_fraction_model_footprint_{label}"] = streamed / footprint
        result[f"layouts_{label}"] = native.model.weights.layouts
        for n in (512, 2048) if prefill else ():
            long_prompt = (prompt * (n // len(prompt) + 1))[:n]
            suffix = "" if n == 512 else f"_{n}"
            theirs, ours, measured = medians(max(3, rounds // 2), lambda: prefill_rate(reference, long_prompt),
                                             lambda: prefill_rate(native, long_prompt))
            result[f"llama_prefill_tps_{label}{suffix}"], result[f"native_prefill_tps_{label}{suffix}"] = theirs, ours
            result[f"native_prefill_ratio_{label}{suffix}"] = ours / theirs
            result[f"rounds_native_prefill_ratio_{label}{suffix}"] = round_ratios(measured)
            result[f"round_pairs_prefill_{label}{suffix}"] = measured.pairs(rounded)
    finally:
        native.close()
        reference.close()


MODELS = ("smollm2", "gemma3", "1b")


def run(threads: int, tokens: int, rounds: int, labels: list[str], prefill: bool, dot: bool) -> dict:
    """The figures of the models named (some of MODELS, for iterating; all of them for the issue's table)."""
    result: dict = {"threads": threads, "tokens": tokens, "rounds": rounds, "cpu": cpu(), "kernel_paths": kernel_paths()}
    bandwidth = read_bandwidth(threads)
    result["read_bandwidth_gbps"] = bandwidth / 1e9
    paths = {"smollm2": fixtures.smollm2_gguf, "gemma3": fixtures.gemma3_gguf, "1b": synthetic_1b}
    models = [(label, paths[label](), prefill and label != "1b") for label in MODELS if label in labels]
    for label, path, with_prefill in models:
        compare(label, path, threads, tokens, rounds, with_prefill, bandwidth, result)
        progress(result)
    for label, path, _ in models:
        if label != "smollm2":
            weights = NativeWeights(path)
            result["repack_load_seconds" if label == "1b" else f"repack_load_seconds_{label}"] = weights.repack_seconds
            weights.close()
    if dot:
        result["dot_gbps"] = dot_gbps(rounds)
    return result


def progress(result: dict) -> None:
    """The figures so far, on stderr: a long run that fails late still says what it measured."""
    print(json.dumps(result), file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5, help="alternating measurements per figure (medians)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-1b", action="store_true", help="skip the synthetic ~1B model (made on first use: minutes)")
    p.add_argument("--models", default=",".join(MODELS), help="the models to measure, of " + ", ".join(MODELS))
    p.add_argument("--no-prefill", action="store_true", help="decode and bandwidth only")
    p.add_argument("--no-dot", action="store_true", help="skip the per-format dot_gbps")
    args = p.parse_args()
    labels = [label for label in args.models.split(",") if label and not (args.no_1b and label == "1b")]
    if unknown := set(labels) - set(MODELS):
        p.error(f"unknown model(s) {', '.join(sorted(unknown))}; known: {', '.join(MODELS)}")
    result = run(args.threads, args.tokens, args.rounds, labels, not args.no_prefill, not args.no_dot)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    width = max(map(len, result))
    for key, value in result.items():
        if key == "dot_gbps":
            print(f"{'format':<8} {'simd GB/s':>10} {'in place':>10} {'scalar GB/s':>12} {'vs Q4_0':>8}")
            for name, f in value.items():
                in_place = f"{f['in_place']:>10.2f}" if "in_place" in f else f"{'-':>10}"
                print(f"{name:<8} {f['simd']:>10.2f} {in_place} {f['scalar']:>12.2f} {f['vs_q4_0']:>8.2f}")
        else:
            print(f"{key:<{width}} {value:.3f}" if isinstance(value, float) else f"{key:<{width}} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
