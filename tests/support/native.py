"""Drive the native engine and llama.cpp side by side on one model (tests and benchmark)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import llama_cpp as ll
import numpy as np

from localllm.backends.native import backend as native
from localllm.backends import llama_cpp as llama
from localllm.backends.native.model import native_support


BLOCK = 16
# Parity with llama.cpp on a quantized model (measured and explained in test_native_engine's docstring): the
# first-step logits' cosine, and where greedy continuations part, the most llama.cpp's top two logits may differ
# by (our sums run in other orders than ggml's, so near ties may go either way).
MIN_COSINE = 0.995
MAX_GAP = 0.25
WINDOW_BATCH = 64  # a window_kv side's batch


class Side:
    """One engine with ``n_seq`` sequences: prefill a prompt, then greedy steps; logits as NumPy rows.

    The native side's sequences own fixed runs of KV blocks (sequence s: blocks s*k ... s*k + k-1). With
    ``window_kv`` its sliding layers keep only their window (as a runner's do), in batches of at most
    :data:`WINDOW_BATCH` tokens, so that the ring is shorter than a short test's context (where it is not, or
    the model has no window, the context keeps every position, as a runner's does).
    """

    def __init__(self, kind: str, model_path: Path, n_ctx: int = 1024, n_seq: int = 1, threads: int = 2,
                 kv_cache_type: str = "f16", window_kv: bool = False) -> None:
        llama.init_backend()
        self.kind = kind
        if kind == "native":
            self.model = native.Model(model_path)
            per_seq = -(-n_ctx // BLOCK)
            self.ctx = native.Context(self.model, per_seq * n_seq, BLOCK, n_ctx, n_seq,
                                      WINDOW_BATCH if window_kv else 512, threads, kv_cache_type, window_kv=window_kv)
            self.ctx.tables[:] = np.arange(per_seq * n_seq, dtype=np.int32).reshape(n_seq, per_seq)
        else:
            self.model = llama.Model(model_path)
            self.ctx = llama.Context(self.model, n_ctx * n_seq, n_seq, 512, threads)
        self.batch = llama.Batch(512)

    def reset(self, seq: int = 0) -> None:
        """Forget what ``seq`` holds (the native side simply overwrites its cells)."""
        if self.kind != "native":
            self.ctx.seq_rm(seq)

    def logits(self, row: int) -> np.ndarray:
        if self.kind == "native":
            return self.ctx.logits(row).copy()
        ptr = ll.llama_get_logits_ith(self.ctx.ptr, row)
        return np.ctypeslib.as_array(ptr, shape=(self.model.vocab.n_vocab,)).copy()

    def eval(self, tokens: Sequence[int], start: int, seq: int = 0) -> np.ndarray:
        """Evaluate ``tokens`` at positions ``start``...; the logits after the last one."""
        self.batch.clear()
        for i, token in enumerate(tokens):
            row = self.batch.add(token, start + i, seq, i == len(tokens) - 1)
        rc = self.ctx.decode(self.batch)
        assert rc == 0, f"{self.kind} decode returned {rc}"
        return self.logits(row)

    def greedy(self, prompt: Sequence[int], n: int) -> tuple[list[int], list[np.ndarray]]:
        """``n`` greedy tokens after ``prompt`` (a fresh sequence 0), and the logits each was picked from."""
        self.reset()
        logits = self.eval(prompt, 0)
        tokens, steps = [], []
        for i in range(n):
            steps.append(logits)
            tokens.append(int(np.argmax(logits)))
            logits = self.eval([tokens[-1]], len(prompt) + i)
        return tokens, steps

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def top2_gap(logits: np.ndarray) -> float:
    top = np.sort(logits)[-2:]
    return float(top[1] - top[0])


@contextmanager
def tiny_block_store(tmp_path: Path, n_blocks: int) -> Iterator[native.Context]:
    """A native context of a tiny model with ``n_blocks`` KV blocks of ``BLOCK`` cells: a real store for a
    :class:`~localllm.runner.kv_blocks.BlockPool`, so its copies, spills and restores move real bytes."""
    from support.gguf_builders import tiny_model

    llama.init_backend()
    model = native.Model(tiny_model(tmp_path / "tiny.gguf"))
    ctx = native.Context(model, n_blocks, BLOCK, 128, 2, 64, 1)
    try:
        yield ctx
    finally:
        ctx.close()
        model.close()


def against_llama_cpp(path: Path, prompt: Sequence[int] | str, steps: int = 24, n_ctx: int = 128,
                      window_kv: bool = False) -> tuple:
    """``prompt`` (tokens, or text llama.cpp tokenizes) through ``path`` on both engines: (our first-step logits,
    llama.cpp's, our ``steps`` greedy tokens, llama.cpp's, llama.cpp's logits at each of its steps), for parity
    tests that judge near ties by llama.cpp's own gaps. ``window_kv``: see :class:`Side`."""
    native, reference = Side("native", path, n_ctx=n_ctx, window_kv=window_kv), Side("llama.cpp", path, n_ctx=n_ctx)
    try:
        tokens = reference.model.vocab.tokenize_prompt(prompt) if isinstance(prompt, str) else prompt
        ours, theirs = native.eval(tokens, 0), reference.eval(tokens, 0)
        greedy_ours = native.greedy(tokens, steps)[0]
        greedy_theirs, their_steps = reference.greedy(tokens, steps)
        return ours, theirs, greedy_ours, greedy_theirs, their_steps
    finally:
        native.close()
        reference.close()


def parity_runs(directory: Path, models: dict[str, dict], build: Callable[..., Path],
                prompt: Sequence[int], window_kv: bool = False) -> dict[str, tuple]:
    """Each of ``models`` (id: ``build``'s keyword arguments) written into ``directory``, checked to run on the
    native engine, and its :func:`against_llama_cpp` runs of ``prompt``, by id (``window_kv``: see :class:`Side`)."""
    results = {}
    for name, kwargs in models.items():
        path = build(directory / f"{name}.gguf", **kwargs)
        assert native_support(path) is None, native_support(path)
        results[name] = against_llama_cpp(path, prompt, window_kv=window_kv)
    return results


def assert_matches_llama_cpp(ours: np.ndarray, theirs: np.ndarray, greedy_ours: Sequence[int],
                             greedy_theirs: Sequence[int], their_steps: Sequence[np.ndarray], all_f32: bool) -> None:
    """Parity as :func:`against_llama_cpp` measures it: F32 files agree to the order of float sums and the
    half-precision KV; quantized ones to :data:`MIN_COSINE`; greedy continuations part only at a near tie."""
    if all_f32:
        assert cosine(ours, theirs) > 0.99999
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-3 * np.abs(theirs).max())
    else:
        assert cosine(ours, theirs) >= MIN_COSINE
    first = next((i for i, (a, b) in enumerate(zip(greedy_ours, greedy_theirs)) if a != b), None)
    if first is not None:
        gap = top2_gap(their_steps[first])
        assert gap < MAX_GAP, f"diverged at token {first} where llama.cpp's top two logits differ by {gap:.3f}"
