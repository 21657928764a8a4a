"""Batch invariance of the native engine: a sequence's logits are bit for bit the same whatever else happens.

Alone or batched with seven other sequences (prefilling and decoding), its
prompt in one chunk or in chunks of any size, its KV in any blocks, shared
with another sequence's table, or written back from bytes saved in host RAM.
On SmolLM2 and on Gemma 3, whose sliding-window layers are exercised by a
prompt longer than their window, and on SmolLM2 with a q8_0 cache and a prompt
of three attention segments (merged in place for a prefill chunk, split over
threads for a decode step); and on a tiny qwen3moe (Q4_K_M and Q8_0), whose tokens' experts are
grouped by expert across the batch (each token's experts and sum its own), and a tiny gpt-oss (MXFP4
experts, attention sinks, a 16-position window on every other layer); two tiny Gemma 4s: 26B-A4B's dense
FFN beside experts with layers of two head geometries, and E4B's per-layer embeddings and layers reading earlier
layers' KV; and tiny qwen35 (Q8_0) and qwen35moe (Q4_K_M), whose Gated DeltaNet layers carry each sequence's
recurrent state from step to step: where a sequence continues from shared or restored blocks, its state saved at
the same position comes with them. gpt-oss and both Gemma 4s again with the sliding layers keeping only their
window (``window_kv``, as their runners do): their KV in a ring a sequence, carried in its state.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from localllm.backends.native import backend as native
from localllm.backends.llama_cpp import Batch, init_backend

BLOCK = 16
N_SEQ = 8


class Pool:
    """A native context whose 8 sequences each own blocks drawn at random from a shared pool."""

    def __init__(self, path: Path, max_len: int, kv_cache_type: str = "f16", seed: int = 0,
                 window_kv: bool = False) -> None:
        init_backend()
        self.model = native.Model(path)
        per_seq = -(-max_len // BLOCK)
        self.ctx = native.Context(self.model, per_seq * N_SEQ, BLOCK, max_len, N_SEQ, 512, 2, kv_cache_type,
                                  window_kv=window_kv)
        assert bool(self.ctx.ring_blocks) == window_kv
        order = np.random.default_rng(seed).permutation(per_seq * N_SEQ).astype(np.int32)
        self.ctx.tables[:] = order.reshape(N_SEQ, per_seq)
        self.batch = Batch(512)

    def run(self, work: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        """One decode of (sequence, tokens, first position) parts; the logits after each part's last token."""
        self.batch.clear()
        rows = []
        for seq, tokens, start in work:
            for i, token in enumerate(tokens):
                row = self.batch.add(token, start + i, seq, i == len(tokens) - 1)
            rows.append(row)
        assert self.ctx.decode(self.batch) == 0, self.ctx.last_error
        return [self.ctx.logits(row).copy() for row in rows]

    def prefill(self, seq: int, tokens: Sequence[int], chunk: int) -> np.ndarray:
        for start in range(0, len(tokens), chunk):
            logits = self.run([(seq, tokens[start : start + chunk], start)])[0]
        return logits

    def state(self, seq: int) -> bytes | None:
        """The sequence's recurrent state where the model has one (to continue it elsewhere), else None."""
        return self.ctx.read_state(seq) if self.ctx.state_bytes else None

    def restore(self, seq: int, state: bytes | None) -> None:
        if state is not None:
            self.ctx.write_state(seq, state)

    def greedy(self, seq: int, prompt: Sequence[int], first: np.ndarray, n: int) -> list[np.ndarray]:
        steps, logits = [first], first
        for i in range(n):
            logits = self.run([(seq, [int(np.argmax(logits))], len(prompt) + i)])[0]
            steps.append(logits)
        return steps

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


def prompt_tokens(model: native.Model, n: int, salt: str) -> list[int]:
    text = f"{salt}: " + " ".join(f"The {w} of the {v} is not the {u}." for w, v, u in zip(
        ["colour", "shape", "weight", "sound", "taste"] * 200, ["sea", "sky", "hill", "bird"] * 250,
        ["answer", "question", "point"] * 334))  # fmt: skip
    return model.vocab.tokenize_prompt(text)[:n]


CASES = [("smollm2_path", 200, 1024, "f16"), ("gemma3_path", 560, 1024, "f16"),  # Gemma 3's window: 512 positions
         ("smollm2_path", 1100, 1280, "q8_0"), ("qwen3moe_path", 200, 1024, "f16"),
         ("qwen3moe_q8_0_path", 200, 1024, "f16"), ("gpt_oss_path", 200, 1024, "f16"),  # gpt-oss's window: 16
         ("gemma4_path", 200, 1024, "f16"), ("gemma4_e_path", 200, 1024, "f16"),  # Gemma 4's tiny ones' window: 8
         ("qwen35_path", 200, 1024, "f16"), ("qwen35moe_path", 200, 1024, "f16"),
         ("gpt_oss_path", 200, 1024, "f16", True), ("gemma4_path", 200, 1024, "f16", True),  # window_kv
         ("gemma4_e_path", 200, 1024, "f16", True)]


@pytest.fixture(scope="module", params=CASES,
                ids=["smollm2", "gemma3", "smollm2-q8_0", "qwen3moe", "qwen3moe-q8_0", "gpt-oss", "gemma4-moe",
                     "gemma4-e", "qwen35", "qwen35moe", "gpt-oss-window", "gemma4-moe-window", "gemma4-e-window"])
def pool(request: pytest.FixtureRequest):
    name, prompt_len, max_len, kv_cache_type, *window_kv = request.param
    p = Pool(request.getfixturevalue(name), max_len, kv_cache_type, window_kv=bool(window_kv))
    p.prompt_len = prompt_len
    yield p
    p.close()


@pytest.fixture(scope="module")
def reference(pool: Pool) -> tuple[list[int], list[np.ndarray]]:
    """The prompt of sequence 0 prefilled in one chunk alone, then 4 greedy steps alone."""
    prompt = prompt_tokens(pool.model, pool.prompt_len, "reference")
    return prompt, pool.greedy(0, prompt, pool.prefill(0, prompt, 512), 4)


@pytest.mark.parametrize("chunk", [1, 7, 16, 100])
def test_any_prefill_chunking_gives_the_same_logits(pool: Pool, reference, chunk: int) -> None:
    prompt, expected = reference
    if chunk == 1:  # the head in one chunk, then the last 40 tokens one at a time, as decode steps
        pool.prefill(1, prompt[:-40], 512)
        logits = [pool.run([(1, [t], len(prompt) - 40 + i)])[0] for i, t in enumerate(prompt[-40:])][-1]
    else:
        logits = pool.prefill(1, prompt, chunk)
    assert np.array_equal(logits, expected[0])
    assert all(np.array_equal(a, b) for a, b in zip(pool.greedy(1, prompt, expected[0], 4), expected))


def test_batched_with_seven_others_in_prefill_and_decode(pool: Pool, reference) -> None:
    prompt, expected = reference
    rng = random.Random(3)
    others = {s: prompt_tokens(pool.model, rng.randrange(20, 120), f"other {s}") for s in range(2, N_SEQ)}
    for s in (2, 3, 4):  # these are decoding while ours prefills
        pool.prefill(s, others[s], 512)
    head = prompt[:-1]  # all but the last prompt token, which comes last
    work = [(1, head[:300], 0)] + [(s, [5], len(others[s])) for s in (2, 3, 4)]
    work += [(s, others[s][:50], 0) for s in (5, 6, 7)]  # and these prefill beside it
    pool.run(work)
    if len(head) > 300:
        pool.run([(1, head[300:700], 300), (5, others[5][50:], 50), (6, [9], 0)])
    if len(head) > 700:
        pool.run([(1, head[700:], 700), (6, [10], 1)])
    # the last prompt token, batched with decoding and prefilling neighbours
    got = pool.run([(2, [7], len(others[2]) + 1), (1, prompt[-1:], len(prompt) - 1), (7, others[7][50:], 50)])[1]
    assert np.array_equal(got, expected[0])
    token = int(np.argmax(got))
    steps = pool.run([(3, [8], len(others[3]) + 1), (1, [token], len(prompt)), (4, [11], len(others[4]) + 1)])
    assert np.array_equal(steps[1], expected[1])


def test_shared_blocks_continue_the_same(pool: Pool, reference) -> None:
    """Sequence 1 points at sequence 0's full blocks (no copy) and evaluates only the rest."""
    prompt, expected = reference
    shared = (len(prompt) - 1) // BLOCK
    pool.prefill(0, prompt[: shared * BLOCK], 512)
    saved = pool.ctx.tables[1].copy()
    try:
        pool.ctx.tables[1, :shared] = pool.ctx.tables[0, :shared]
        pool.restore(1, pool.state(0))
        got = pool.run([(1, prompt[shared * BLOCK :], shared * BLOCK)])[0]
        assert np.array_equal(got, expected[0])
    finally:
        pool.ctx.tables[1] = saved


def test_blocks_restored_from_host_ram_continue_the_same(pool: Pool, reference) -> None:
    """Blocks saved as bytes and written into other blocks (another sequence's) give the same logits."""
    prompt, expected = reference
    full = (len(prompt) - 1) // BLOCK
    pool.prefill(0, prompt[: full * BLOCK], 512)
    saved = [pool.ctx.read_block(int(b)) for b in pool.ctx.tables[0, :full]]
    state = pool.state(0)
    pool.prefill(0, prompt_tokens(pool.model, len(prompt), "something else"), 512)  # overwrite the originals
    for block, data in zip(pool.ctx.tables[2, :full], saved):
        pool.ctx.write_block(int(block), data)
    pool.restore(2, state)
    got = pool.run([(2, prompt[full * BLOCK :], full * BLOCK)])[0]
    assert np.array_equal(got, expected[0])


def test_random_batch_compositions_give_every_row_its_logits_alone(pool: Pool) -> None:
    """Seeded random steps: 1 to 7 sequences at once, each a run of 1 to 33 tokens (decode steps, verified
    drafts, prefill chunks) from wherever it stands; every row's logits equal those of its sequence evaluated
    alone in one chunk. Covers compositions the cases above do not name."""
    length, rng = 96, random.Random(7)
    prompts = {s: prompt_tokens(pool.model, length, f"seq {s}") for s in range(1, N_SEQ)}
    alone = {}
    for s, tokens in prompts.items():
        pool.batch.clear()
        rows = [pool.batch.add(t, i, 0, True) for i, t in enumerate(tokens)]
        assert pool.ctx.decode(pool.batch) == 0, pool.ctx.last_error
        alone[s] = [pool.ctx.logits(row).copy() for row in rows]
    at = dict.fromkeys(prompts, 0)
    for _step in range(60):
        pool.batch.clear()
        rows = []
        for s in rng.sample(sorted(prompts), rng.randint(1, N_SEQ - 1)):
            tokens = prompts[s][at[s] : at[s] + rng.choice([1, 1, 2, 4, 5, 8, 15, 16, 17, 33])]
            rows += [(s, at[s] + i, pool.batch.add(t, at[s] + i, s, True)) for i, t in enumerate(tokens)]
            at[s] = (at[s] + len(tokens)) % length
        assert pool.ctx.decode(pool.batch) == 0, pool.ctx.last_error
        for s, position, row in rows:
            assert np.array_equal(pool.ctx.logits(row), alone[s][position]), (s, position)
