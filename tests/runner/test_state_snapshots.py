"""The block pool's recurrent state snapshots on their own (localllm/runner/kv_blocks.py), over a real native
context of a tiny qwen35 model: where a prompt resumes, the RAM budget, the disk tier and a damaged file.
The engine's use of them, through the daemon: tests/server/test_hybrid_prefix_cache.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localllm.backends.capabilities import STATE_CAPTURES
from localllm.backends.native import backend as native
from localllm.backends.native.backend import Batch
from localllm.runner.kv_blocks import BlockPool
from localllm.runner.kv_disk import STATE_SUFFIX, DiskTier
from localllm.runner.paged_engine import PagedEngine
from support.arch_models import qwen_hybrid

BS = 16


@pytest.fixture(scope="module")
def hybrid(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[native.Model]:
    model = native.Model(qwen_hybrid(tmp_path_factory.mktemp("q35") / "q35.gguf", smollm2_path, "qwen35"))
    yield model
    model.close()


@pytest.fixture(scope="module")
def ctx(hybrid: native.Model) -> Iterator[native.Context]:
    context = native.Context(hybrid, 8, BS, 128, 1, 16, 1)
    yield context
    context.close()


def held(pool: BlockPool, tokens: list[int]) -> tuple[list[int], list]:
    """A sequence's blocks for ``tokens``, committed (indexed) as the engine commits them."""
    blocks = [pool.allocate() for _ in range(pool.blocks_for(len(tokens)))]
    nodes: list = [None] * len(blocks)
    pool.commit(blocks, nodes, tokens)
    return blocks, nodes


def decode(ctx: native.Context, tokens: list[int], start: int) -> None:
    batch = Batch(ctx.n_batch)
    for i, token in enumerate(tokens):
        batch.add(token, start + i, 0, i == len(tokens) - 1)
    assert ctx.decode(batch) == 0, ctx.last_error
    batch.close()


def test_a_state_captured_inside_a_batch_is_the_state_of_a_batch_ending_there(ctx: native.Context) -> None:
    ctx.tables[0, :8] = range(8)
    tokens = [(7 * i + 3) % 500 for i in range(BS)]
    inside, last, elsewhere = (bytearray(ctx.state_bytes) for _ in range(3))
    ctx.reset_state(0)
    assert ctx.capture_state(0, 4, inside) and ctx.capture_state(0, BS - 1, last)
    assert ctx.capture_state(0, BS + 3, elsewhere)  # a position the batch does not hold: left as it was
    decode(ctx, tokens, 0)
    whole = ctx.read_state(0)
    ctx.reset_state(0)
    decode(ctx, tokens[:5], 0)  # the same tokens, the batch cut after the captured one
    assert ctx.read_state(0) == inside
    decode(ctx, tokens[5:], 5)
    assert ctx.read_state(0) == whole == last
    assert elsewhere == bytearray(ctx.state_bytes)
    decode(ctx, [1], BS)  # the requests were used up by the batch they were made for
    assert ctx.read_state(0) != last and last == whole


def test_a_prompt_resumes_from_its_deepest_snapshot_in_ram_or_on_disk(ctx: native.Context, tmp_path: Path) -> None:
    size = ctx.state_bytes
    assert size > 0
    disk = DiskTier(tmp_path, "sha256-test", 1 << 30, engine="native", kv_type="f16", block_size=BS, layout="tiny",
                    block_bytes=ctx.block_bytes, state_bytes=size)
    pool = BlockPool(ctx, 8, BS, disk=disk, recurrent=True, state_budget=size)  # RAM for one snapshot
    first, second, end = (bytes([n]) * size for n in (1, 2, 3))
    tokens = list(range(3 * BS + 5))
    blocks, nodes = held(pool, tokens)
    pool.keep_state(nodes[0], first)
    pool.keep_state(nodes[1], second)  # the first goes to disk to make room
    pool.release(blocks, nodes, tokens, keep=True, state=end)  # the end of the sequence: the second to disk
    pool.check()
    assert pool.counts()["snapshots"] == 1 and pool.state_used == size
    assert len(list(tmp_path.glob(f"*/*/*{STATE_SUFFIX}"))) == 2

    found = pool.match(tokens + [7])  # a next turn: from the end, in a copy of the partial block
    assert (found.tokens, found.matched, found.state) == (len(tokens), 3 * BS, end)
    assert found.nodes[-1] is None and pool.stats.copies == 1
    pool.release(found.blocks, found.nodes, (), keep=False)

    found = pool.match(tokens[: 3 * BS - 1] + [999] * 9)  # leaves the path in the third block: the second's
    assert (found.tokens, found.matched, found.state) == (2 * BS, 2 * BS, second)
    assert len(found.blocks) == 2 and disk.reads == 1
    pool.release(found.blocks, found.nodes, (), keep=False)
    pool.check()


def test_a_damaged_snapshot_file_is_dropped_and_an_earlier_one_taken(ctx: native.Context, tmp_path: Path) -> None:
    size = ctx.state_bytes
    disk = DiskTier(tmp_path, "sha256-test", 1 << 30, engine="native", kv_type="f16", block_size=BS, layout="tiny",
                    block_bytes=ctx.block_bytes, state_bytes=size)
    pool = BlockPool(ctx, 8, BS, disk=disk, recurrent=True, state_budget=0)  # every snapshot straight to disk
    tokens = list(range(2 * BS))
    blocks, nodes = held(pool, tokens)
    pool.keep_state(nodes[0], b"\1" * size)
    pool.keep_state(nodes[1], b"\2" * size)
    pool.release(blocks, nodes, tokens, keep=True)
    files = {f.stem: f for f in tmp_path.glob(f"*/*/*{STATE_SUFFIX}")}
    deeper = files[nodes[1].key.hex()]
    deeper.write_bytes(deeper.read_bytes()[:-7])  # cut short
    found = pool.match(tokens + [5])
    assert (found.tokens, found.state) == (BS, b"\1" * size)
    assert disk.dropped == 1 and not deeper.exists()
    pool.release(found.blocks, found.nodes, (), keep=False)
    flipped = files[nodes[0].key.hex()]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    found = pool.match(tokens + [5])
    assert (found.tokens, found.state, found.blocks) == (0, None, [])  # nothing to resume from: all again
    assert disk.dropped == 2
    pool.check()


def test_a_batch_copies_at_most_state_captures_states_and_reuses_the_buffers_no_snapshot_kept(hybrid) -> None:
    """The state copies a batch takes are bounded (the memory planner counts STATE_CAPTURES of them beside the
    snapshots' budget): a prefill batch reaching more snapshot points copies the states nearest its end, each what
    the sequence holds there; the copies that no snapshot keeps serve the next batch's, not new buffers."""
    ctx = native.Context(hybrid, 16, BS, 256, 1, 256, 1)
    try:
        engine = PagedEngine(hybrid, ctx, 1, 256, BlockPool(ctx, 16, BS, recurrent=True, state_budget=1 << 30))
        slot = engine._slots[0]
        slot.snapshot_at = list(range(BS, 241, BS))  # 15 points in the coming batch of 240 tokens
        ctx.tables[0, :16] = range(16)
        ctx.reset_state(0)
        assert engine._capture(slot, 240, STATE_CAPTURES) == STATE_CAPTURES
        assert [n for n, _ in slot.captures] == list(range(240, 240 - STATE_CAPTURES * BS, -BS))
        tokens = [(5 * i + 1) % 400 for i in range(240)]
        decode(ctx, tokens, 0)
        last = dict(slot.captures)[240]
        assert last == ctx.read_state(0)
        buffers = {id(buffer) for _, buffer in slot.captures}
        engine._snapshot(slot)  # the slot holds no blocks: no snapshot keeps them
        assert not slot.captures and {id(buffer) for buffer in engine._spare} == buffers
        slot.snapshot_at = [BS]
        assert engine._capture(slot, 16, STATE_CAPTURES) == 1 and id(slot.captures[0][1]) in buffers
        assert engine._capture(slot, 16, 0) == 0  # no room left in the batch
    finally:
        ctx.close()
