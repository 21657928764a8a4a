"""Sliding-window layers that keep only their window (the native Context's ``window_kv``, as gpt-oss's and Gemma
4's runners have it): the pool's blocks hold the other layers, and each sequence's sliding layers live in a ring
of blocks of a fixed length, carried in the sequence's state.

Tiny gpt-oss (a 16-position window on layers 0 and 2 of 3) and Gemma 4s (an 8-position window; the E4B-style one
with layers reading earlier layers' KV), over sequences many windows long: the logits are bit for bit those of
the same context keeping every position, in prefill chunks that straddle the ring and in decode steps; the memory
a sequence holds for its sliding layers does not grow with it; a state read at one position continues in another
sequence; and a context the kernels refuse says why.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from localllm.backends.contract import BackendError
from localllm.backends.llama_cpp import Batch, init_backend
from localllm.backends.native import backend as native
from support.arch_models import gpt_oss

BLOCK = 16
N_BATCH = 64
MAX_LEN = 1024
LENGTH = 400  # positions a sequence reaches: 25 windows of gpt-oss's, 50 of Gemma 4's


@pytest.fixture(scope="module", params=["gpt_oss_path", "gemma4_path", "gemma4_e_path"])
def model(request: pytest.FixtureRequest):
    init_backend()
    m = native.Model(request.getfixturevalue(request.param))
    yield m
    m.close()


def context(model: native.Model, window_kv: bool, n_seq: int = 2) -> native.Context:
    per_seq = MAX_LEN // BLOCK
    ctx = native.Context(model, per_seq * n_seq, BLOCK, MAX_LEN, n_seq, N_BATCH, 2, window_kv=window_kv)
    ctx.tables[:] = np.arange(per_seq * n_seq, dtype=np.int32).reshape(n_seq, per_seq)
    return ctx


def run(ctx: native.Context, tokens: list[int], chunks: list[int], seq: int = 0, start: int = 0) -> np.ndarray:
    """``tokens`` from position ``start`` in runs of the given lengths (repeated), every token's logits."""
    batch, out, at = Batch(N_BATCH), [], 0
    for i in range(10**6):
        if at == len(tokens):
            break
        run_len = min(chunks[i % len(chunks)], len(tokens) - at)
        batch.clear()
        rows = [batch.add(t, start + at + j, seq, True) for j, t in enumerate(tokens[at : at + run_len])]
        assert ctx.decode(batch) == 0, ctx.last_error
        out += [ctx.logits(row).copy() for row in rows]
        at += run_len
    batch.close()
    return np.stack(out)


def tokens_of(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 2000) for _ in range(n)]


def test_logits_are_those_of_a_context_keeping_every_position(model: native.Model) -> None:
    tokens = tokens_of(LENGTH, 1)
    chunks = [N_BATCH, 37, 1, 1, 5, N_BATCH, 16, 3]  # full batches, ring-straddling runs, decode steps
    whole, trimmed = context(model, False), context(model, True)
    try:
        assert whole.ring_blocks == 0 and trimmed.ring_blocks > 0
        assert np.array_equal(run(trimmed, tokens, chunks), run(whole, tokens, [N_BATCH]))
    finally:
        whole.close()
        trimmed.close()


def test_the_sliding_layers_hold_a_fixed_ring_and_the_pool_the_other_layers(model: native.Model) -> None:
    whole, trimmed = context(model, False), context(model, True)
    try:
        p = model.weights.params
        window = p.sliding_window
        assert trimmed.ring_blocks == (N_BATCH + window - 2) // BLOCK + 2  # window + a batch, and a partial block
        assert trimmed.ring_blocks * BLOCK < MAX_LEN
        # a position's KV is split between the two: the pool's block holds only the layers that do not slide
        assert trimmed.block_bytes + trimmed.ring_block_bytes == whole.block_bytes
        assert 0 < trimmed.block_bytes < whole.block_bytes
        # the state: the position count, then the blocks the next token's window reaches
        assert trimmed.state_bytes == 64 + (-(-window // BLOCK) + 1) * trimmed.ring_block_bytes
        assert whole.state_bytes == 0
        assert "sliding window" in trimmed.layout and "sliding window" not in whole.layout
    finally:
        whole.close()
        trimmed.close()


def test_a_state_read_at_one_position_continues_in_another_sequence(model: native.Model) -> None:
    """Sequence 1 gets sequence 0's pool blocks (as the prefix cache shares them) and its state: it continues as a
    sequence computed whole; its ring's other blocks held another sequence's positions before."""
    tokens = tokens_of(LENGTH, 2)
    cut = 13 * BLOCK
    whole, trimmed = context(model, False), context(model, True)
    try:
        want = run(whole, tokens, [N_BATCH])
        run(trimmed, tokens_of(LENGTH, 3), [N_BATCH], seq=1)  # sequence 1's ring full of something else
        run(trimmed, tokens[:cut], [N_BATCH])
        trimmed.tables[1, : cut // BLOCK] = trimmed.tables[0, : cut // BLOCK]
        trimmed.write_state(1, trimmed.read_state(0))
        got = run(trimmed, tokens[cut:], [N_BATCH, 1], seq=1, start=cut)
        assert np.array_equal(got, want[cut:])
    finally:
        whole.close()
        trimmed.close()


def test_a_rejected_draft_is_rewound_and_nothing_earlier(model: native.Model) -> None:
    """A verified draft's rejected tokens are dropped by taking the sequence back (no saved state, no recomputing
    the accepted ones): it goes on as a sequence that never saw them. Further back than the draft's batch, or
    anywhere without taking it back, it cannot go: the ring no longer holds the window there."""
    tokens, wrong = tokens_of(LENGTH, 5), tokens_of(40, 6)
    whole, trimmed = context(model, False), context(model, True)
    try:
        assert trimmed.rewinds and not whole.rewinds
        want = run(whole, tokens, [N_BATCH])
        at = 300
        run(trimmed, tokens[:at], [N_BATCH, 7])
        run(trimmed, tokens[at : at + 3] + wrong[:20], [N_BATCH], start=at)  # 3 accepted, then 20 rejected
        with pytest.raises(BackendError, match="cannot take sequence 0 back"):
            trimmed.rewind_state(0, at - 1)  # before the draft's batch
        trimmed.rewind_state(0, at + 3)
        got = run(trimmed, tokens[at + 3 :], [1, 4, N_BATCH], start=at + 3)
        assert np.array_equal(got, want[at + 3 :])
        batch = Batch(N_BATCH)
        batch.add(5, 20, 0, True)  # back inside what it holds, not taken back: refused
        assert trimmed.decode(batch) == -7
        assert "does not continue" in trimmed.last_error
        batch.close()
    finally:
        whole.close()
        trimmed.close()


def test_a_context_the_kernels_cannot_make_says_why(model: native.Model) -> None:
    with pytest.raises(BackendError, match="multiple of 16 cells"):  # it said "out of memory"
        native.Context(model, 8, 8, 64, 1, 8, 1)


def test_a_window_captured_inside_a_batch_goes_on_as_a_batch_ending_there(model: native.Model) -> None:
    """llk_state_capture on a sliding-window context (the snapshots a prompt takes inside its prefill batches): the
    copy holds the window that ends at the asked position, even where the rest of the batch went on writing the
    ring: written back, the sequence goes on with the logits of one whose batches were cut there (the cells after
    that position differ: they are written before they are read)."""
    tokens = tokens_of(3 * N_BATCH + 20, 7)
    ctx = context(model, True, n_seq=1)
    try:
        captures = {n: bytearray(ctx.state_bytes) for n in (N_BATCH + 5, 2 * N_BATCH + 17, 3 * N_BATCH)}
        run(ctx, tokens[:N_BATCH], [N_BATCH])
        for first in (N_BATCH, 2 * N_BATCH):
            for n, into in captures.items():
                if first < n <= first + N_BATCH:
                    assert ctx.capture_state(0, n - 1, into)
            run(ctx, tokens[first:first + N_BATCH], [N_BATCH], start=first)
        for n, into in captures.items():
            ctx.reset_state(0)
            run(ctx, tokens[:n], [N_BATCH])  # the same tokens, the batches cut after the captured one
            expected = run(ctx, tokens[n:n + 20], [7, 1], start=n)
            ctx.write_state(0, into)
            assert np.array_equal(run(ctx, tokens[n:n + 20], [7, 1], start=n), expected), n
    finally:
        ctx.close()


def test_a_sequence_restarting_inside_a_batch_is_refused_and_its_state_kept(model: native.Model) -> None:
    """Position 0 starts a sequence afresh only as its first token of a batch: later in the batch it would write the
    ring cells that the sequence's earlier tokens of that batch read (every token's KV is written before any
    attends). Such a batch is refused whole, saying so; the sequence goes on from the state it held."""
    tokens = tokens_of(40, 11)
    ctx = context(model, True, n_seq=1)
    try:
        run(ctx, tokens[:20], [20])
        held = ctx.read_state(0)
        batch = Batch(N_BATCH)
        for pos, token in [(20, tokens[20]), (21, tokens[21]), (0, tokens[0]), (1, tokens[1])]:
            batch.add(token, pos, 0, True)
        assert ctx.decode(batch) == -7
        assert "position 0 of sequence 0 after its position 21 in the same batch" in ctx.last_error
        batch.close()
        assert ctx.read_state(0) == held
        expected = run(ctx, tokens[20:40], [20], start=20)
        ctx.reset_state(0)
        run(ctx, tokens[:20], [20])
        assert np.array_equal(run(ctx, tokens[20:40], [7, 13], start=20), expected)
        run(ctx, tokens[:5], [5])  # at the start of a batch, position 0 starts it again
        assert ctx.read_state(0)[:8] == (5).to_bytes(8, "little")
    finally:
        ctx.close()


def test_the_layout_names_every_layer_of_a_deep_model(tmp_path: Path, smollm2_path: Path) -> None:
    """The layout text (the disk tier reads its files only under the same one) is as long as it needs: every layer of
    a model of 300 is named (a fixed 1 KiB buffer cut it past about 250), the pool's and the rings' alike."""
    deep = native.Model(gpt_oss(tmp_path / "deep.gguf", smollm2_path, n_layer=300, context=4096))
    try:
        ctx = native.Context(deep, 8, BLOCK, 4096, 1, N_BATCH, 1, window_kv=True)
        pooled, ring = ctx.layout.split("; sliding window")
        ctx.close()
    finally:
        deep.close()
    assert pooled.startswith("block: layers [1 3 5 ") and " 297 299]: [layer 150]" in pooled
    assert ring.count(" ") > 150 and " 296 298]: [layer 150]" in ring and ring.endswith("blocks in a state")
