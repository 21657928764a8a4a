"""Paired A/B of two builds of the kernels library on one model, in one process.

    python scripts/bench/kernel_ab.py MODEL --a REV_OR_DIR --b REV_OR_DIR [--rounds 120] [--tokens 8]
                                      [--prefill N] [--threads 2] [--json]

``--a`` and ``--b`` name the kernels' C sources: a git revision of this checkout (``HEAD~1``, a branch; its
``kernels/`` is written to a temporary directory) or a directory holding them (``.`` or a worktree: its
``kernels/``). Each side is compiled as the engine compiles itself (into the same cache). Both builds drive their
own native context over the one loaded model, so they must lay the weights out alike. Each round runs A then B,
the order reversed every other round (``common.alternating``: rounds rounded up to even): ``--tokens`` decode
steps each, or with ``--prefill N`` one N-token prompt from position 0. This host's memory bandwidth moves by half
between minutes, so separate runs cannot resolve a few percent; the median of the per-round B/A ratios over ~120
decode rounds resolves ~1%.

Figures (top-level keys): ``cpu``; ``a_tokens_per_s`` and ``b_tokens_per_s`` (medians of the rounds);
``ratio_median``, ``ratio_geomean``, ``ratio_q1`` and ``ratio_q3`` (of the per-round B/A ratios); ``rounds``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from common import alternating, cpu_name, report

from localllm.backends.llama_cpp import Batch, init_backend
from localllm.backends.native import backend as native
from localllm.backends.native import lib as kernels_lib

ROOT = Path(__file__).resolve().parents[2]
N_CTX = 8192


def sources(spec: str, scratch: Path) -> Path:
    """The kernels directory ``spec`` names: ``spec/kernels`` (or ``spec`` itself) of a directory, or a git
    revision's ``kernels/`` exported under ``scratch``."""
    path = Path(spec)
    if path.is_dir():
        return path / "kernels" if (path / "kernels").is_dir() else path

    def git(*args: str) -> bytes:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{spec!r} is neither a directory nor a git revision: {done.stderr.decode().strip()}")
        return done.stdout

    target = scratch / spec.replace("/", "_")
    target.mkdir()
    for name in git("ls-tree", "--name-only", f"{spec}:kernels").decode().split():
        (target / name).write_bytes(git("show", f"{spec}:kernels/{name}"))
    return target


class Side:
    """One build's context over the shared model; a round is ``tokens`` decode steps, or with ``prefill`` one
    prompt of that many tokens from position 0 (both sides draw the same prompts, in the same order)."""

    def __init__(self, model: native.Model, tokens: int, prefill: int, threads: int) -> None:
        self.tokens, self.prefill = tokens, prefill
        n_batch = max(64, prefill)
        self.ctx = native.Context(model, N_CTX // 16, 16, N_CTX, 1, n_batch, threads)
        self.ctx.tables[0, :] = np.arange(self.ctx.tables.shape[1])
        self.batch = Batch(n_batch)
        for i in range(32):
            self.batch.add(100 + i, i, 0, i == 31)
        assert self.ctx.decode(self.batch) == 0
        self.pos = 32
        self.prompts = np.random.default_rng(0)

    def round(self) -> float:
        """Tokens/s of one round."""
        self.batch.clear()
        if self.prefill:
            for i, token in enumerate(self.prompts.integers(100, 30000, self.prefill)):
                self.batch.add(int(token), i, 0, i == self.prefill - 1)
            start = time.perf_counter()
            assert self.ctx.decode(self.batch) == 0
            return self.prefill / (time.perf_counter() - start)
        if self.pos + self.tokens > N_CTX:
            raise SystemExit("too many decode steps for the context: fewer --rounds or --tokens")
        start = time.perf_counter()
        for k in range(self.tokens):
            self.batch.clear()
            self.batch.add(200 + k, self.pos + k, 0, True)
            assert self.ctx.decode(self.batch) == 0
        self.pos += self.tokens
        return self.tokens / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path)
    p.add_argument("--a", required=True, help="git revision or directory of side A's kernels")
    p.add_argument("--b", required=True, help="git revision or directory of side B's kernels")
    p.add_argument("--rounds", type=int, default=120)
    p.add_argument("--tokens", type=int, default=8, help="decode steps a side takes a round")
    p.add_argument("--prefill", type=int, default=0, help="time one prompt of this many tokens a round instead")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    init_backend()
    with tempfile.TemporaryDirectory() as scratch:
        libs = [kernels_lib.load(kernels_lib.build(sources(spec, Path(scratch)))) for spec in (args.a, args.b)]
    kernels_lib.use(libs[0])
    model = native.Model(args.model)  # laid out once, by A's build
    sides = {}
    for name, lib in zip("ab", libs, strict=True):
        kernels_lib.use(lib)
        sides[name] = Side(model, args.tokens, args.prefill, args.threads).round
    rates = alternating(args.rounds, sides)
    ratios = sorted(b / a for a, b in zip(rates["a"], rates["b"], strict=True))
    results = {
        "cpu": cpu_name(),
        "a_tokens_per_s": statistics.median(rates["a"]),
        "b_tokens_per_s": statistics.median(rates["b"]),
        "ratio_median": statistics.median(ratios),
        "ratio_geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)),
        "ratio_q1": ratios[len(ratios) // 4],
        "ratio_q3": ratios[3 * len(ratios) // 4],
        "rounds": len(ratios),
    }
    what = f"{args.prefill}-token prefill" if args.prefill else f"decode, {args.tokens} tokens a round"
    report(f"kernels {args.b} over {args.a}: {args.model.name}, {what}, {args.threads} threads",
           [(key, value) for key, value in results.items()], results, args.json)


if __name__ == "__main__":
    main()
