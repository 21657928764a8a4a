"""The native engine's KV: sequences as tables of shared, reference-counted blocks.

A new request takes the blocks of the longest cached prefix of its prompt
(:meth:`BlockPool.match`: no copy, except one partly shared block), then
takes a block whenever it crosses into a new one. When a request ends its
blocks stay cached (indexed by their tokens) until the pool needs them; the
least recently released go first, full ones to host RAM within a budget.

The pool, not ``n_ctx x n_parallel``, is the memory budget: a request is
admitted when the pool could hold its whole prompt, and waits otherwise (a
prompt the whole pool could never hold is refused before it queues). If
running sequences outgrow the pool, the most recently admitted one is
preempted: its blocks go back (full ones stay cached) and it is later
resumed by evaluating what it held again, which the native engine's batch
invariance makes bit for bit what it held before. Against thrashing, a
preempted sequence resumes only when the pool also holds what the running
ones need to finish their prompts and grow by a block, and nothing new
starts while one waits to resume. A sequence that outgrows the pool while
running alone fails with an error.

A context shift recomputes the kept tokens the same way instead of rotating
cached keys, so a shifted sequence's KV too is what a fresh computation gives.

A model with recurrent layers (qwen35, qwen35moe: Gated DeltaNet) keeps a
state per sequence that cannot be cut back; so does one whose sliding-window
layers keep only their window (gpt-oss, Gemma 4: the window is in a ring of
blocks a sequence, outside the pool, and its state carries the window). The pool keeps snapshots of it
at block boundaries (:mod:`localllm.runner.kv_blocks`): a sequence resumes
from the deepest snapshot its cached prefix reaches, with the state written
back into its row, and computes the rest. The batch that computes a
snapshot's last token copies the state after it out
(:meth:`Context.capture_state`: the recurrence runs token by token, so a
state inside a batch is the state of a batch ending there), so prefill
chunks are never cut for one; a batch takes at most ``STATE_CAPTURES``
copies (those nearest its sequences' ends first, as the memory planner
counts them), into the buffers of earlier copies that no snapshot kept where
there are some. A sequence snapshots at

- every ``n_batch`` tokens (rounded down to blocks): a prompt that leaves a
  cached one anywhere recomputes less than that. A snapshot's copy is a
  small fraction of computing the tokens before it (Qwen 3.6 35B-A3B: a
  66 MB state, 0.6 s into a new buffer on a loaded 2-core EPYC, against 512
  tokens through 40 layers of 3B active weights); its memory (13 times the
  KV of the 512 tokens for that model) is bounded by the snapshots' RAM
  budget, past which they go to disk (least recently used first: a long
  prompt's earliest ones);
- the last block boundary before its prompt's last token (the same prompt
  again, ``n`` > 1 forks), and 1, 2, 4, ... blocks before it up to
  ``n_batch``: a later conversation sharing a system prompt parts from an
  earlier prompt near that prompt's end (where the last user turn starts),
  and resumes at most about as far before that point as it is from the
  earlier prompt's end (a block or two for a short question) instead of up
  to ``n_batch`` tokens;
- the last block boundary where its prompt left the cached path, and where
  a prompt waiting for this prefill leaves it: every later conversation
  sharing that prefix (a system prompt) resumes there.

Decoding takes one at every ``n_batch`` boundary it reaches, and a sequence
that lets its blocks go (finished, preempted, shifted) leaves the state at
its end with them: the next turn of a chat computes only its new message. A verified
draft moves the state past its rejected tokens, so a drafting step saves
the state first; if the draft is cut, that state is written back and the
accepted tokens computed again (their KV rewritten with the same bits),
before anything is committed. A state that is only the sliding layers'
window simply goes back: its ring still holds the window before the draft.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from localllm.backends.capabilities import STATE_CAPTURES
from localllm.backends.native.backend import Batch, Context, Model
from localllm.runner.engine import (
    RECURRENT_CHECKPOINTS, WAIT_FOR_PREFIX, WINDOW_CHECKPOINTS, CompletionRequest, Engine, Slot, Step,
)
from localllm.runner.kv_blocks import BlockPool, Node, Placement

log = logging.getLogger("localllm.runner")

PERSIST_BUDGET_S = 10.0  # a stopping runner's time for writing its cached blocks to the disk tier (parents first)


@dataclass(eq=False)
class PagedSlot(Slot):
    """A slot whose sequence is a row of the context's block tables."""

    blocks: list[int] = field(default_factory=list)
    nodes: list[Node | None] = field(default_factory=list)  # each block's index node (None: private)
    admitted: int = 0  # admission order: the newest running sequence is preempted first
    snapshot_at: list[int] = field(default_factory=list)  # recurrent: token counts to snapshot at (besides n_batch's)
    captures: list[tuple[int, bytearray]] = field(default_factory=list)  # recurrent: the step's (token count, state)
    verify_at: int = -1  # recurrent: the tokens held when a drafting step began (-1: none is verifying)
    verify_state: bytearray = field(default_factory=bytearray)  # recurrent: the state then (the buffer is reused)


class PagedEngine(Engine):
    """Continuous batching over the native engine's paged KV pool; see the module docstring."""

    speculates = True  # the native engine's logits are batch-invariant: a verified draft is plain decoding's

    def __init__(self, model: Model, ctx: Context, n_parallel: int, n_ctx_seq: int, pool: BlockPool) -> None:
        super().__init__(model, ctx, [PagedSlot(seq_id=i) for i in range(n_parallel)], n_ctx_seq, pool.stats)
        self.pool = pool
        self._admissions = 0
        self._recurrent = pool.recurrent
        if self._recurrent:
            self.cache_mode = WINDOW_CHECKPOINTS if ctx.rewinds else RECURRENT_CHECKPOINTS
            self._snapshot_every = max(1, ctx.n_batch // pool.block_size) * pool.block_size
            self._replay = Batch(ctx.n_batch)  # accepted draft tokens computed again after a cut draft
            self._spare: list[bytearray] = []  # capture buffers that no snapshot kept, for the next batch's captures

    def stop(self, timeout: float = 30.0) -> bool:
        stopped = super().stop(timeout)
        if stopped and self._recurrent:
            self._replay.close()
        return stopped

    @property
    def cache_tokens(self) -> int:
        return self.pool.counts()["cached"] * self.pool.block_size

    @property
    def cache_ram_bytes(self) -> int:
        return self.pool.host_used

    def kv_blocks(self) -> dict[str, int]:
        """The pool's block counts; where the sliding layers keep only their window, also the blocks of the
        sequences' rings that hold it (a fixed number, however long the sequences grow)."""
        rings = {"window_blocks": self.ctx.ring_blocks * len(self._slots)} if self.ctx.ring_blocks else {}
        return {**self.pool.counts(), "block_size": self.pool.block_size, **rings}

    def _chore(self) -> bool:
        return self.ctx.populate_next()  # the pool's pages, a slice at a time

    def kv_disk(self) -> dict[str, Any]:
        disk = self.pool.disk
        if disk is None:
            return {}
        return {"reads": disk.reads, "writes": disk.writes, "dropped": disk.dropped, "writing": disk.writing}

    def persist(self) -> None:
        """Write the cached blocks to the disk tier, so a later runner of this model starts from them; at most
        PERSIST_BUDGET_S, so that an unload (and the memory it gives back) never waits long on a slow disk."""
        if self.pool.disk is not None:
            started, before = time.monotonic(), self.pool.disk.writes
            kept = self.pool.persist(deadline=started + PERSIST_BUDGET_S)
            log.info("KV disk tier: %d cached blocks on disk (%d written now) in %.2f s", kept,
                     self.pool.disk.writes - before, time.monotonic() - started)

    # -- admission ---------------------------------------------------------------

    def refusal(self, prompt: list[int], n_ctx: int) -> str | None:
        """Any context up to the model's trained one (the tables' width) runs here while the pool can hold it
        (or the runner was loaded with it)."""
        positions = self.pool.n_blocks * self.pool.block_size
        if n_ctx > self.ctx.max_seq_len:
            return f"num_ctx {n_ctx} is more than the model's trained context of {self.ctx.max_seq_len} tokens"
        if n_ctx > max(positions, self.n_ctx_seq):  # a pool smaller than the loaded context was asked for
            return (f"num_ctx {n_ctx} is more than this runner's KV pool holds ({positions} positions); "
                    "the model must be loaded with a larger pool (LOCALLLM_KV_TOKENS)")
        n = min(len(prompt), n_ctx) + 1  # as the context cuts it, and the first generated token
        if self.pool.blocks_for(n) <= self.pool.n_blocks:
            return None
        return (f"the prompt needs {n} KV positions but the whole KV pool holds "
                f"{positions}; shorten it or give the pool more (LOCALLLM_KV_TOKENS)")

    def _admit(self) -> None:
        parked = sorted((s for s in self._active if s.parked), key=lambda s: s.admitted)
        for slot in parked:  # preempted sequences come back before anything new starts
            if self.pool.blocks_for(len(slot.feed) + 1) > self.pool.n_blocks:
                self._fail_outgrown(slot, len(slot.feed))
                continue
            if not self._hold_prefix(slot, slot.feed, headroom=self._growth(besides=slot)):
                return
            slot.prefilled = len(slot.tokens)
            slot.parked = False
        super()._admit()

    def _place(self, request: CompletionRequest, num_keep: int, prompt: list[int]) -> PagedSlot | None:
        slot = next(s for s in self._slots if s.idle)
        if not self._hold_prefix(slot, prompt):
            return None
        slot.cached = len(slot.tokens)
        self._admissions += 1
        slot.admitted = self._admissions
        return slot

    def _hold_prefix(self, slot: PagedSlot, feed: list[int], headroom: int = 0) -> bool:
        """Give ``slot`` the cached blocks of ``feed``'s prefix, if the pool can then hold the rest
        and ``headroom`` blocks more.

        False (nothing held) when the sequence should wait: for blocks, or
        for a running prefill that will soon cache much more of ``feed``.
        """
        found = self.pool.match(feed[:-1])  # evaluate at least one token: its logits start the answer
        needed = self.pool.blocks_for(len(feed) + 1) - len(found.blocks) + headroom
        ahead = self._prefill_ahead(feed, found.tokens)
        if needed > self.pool.available or ahead is not None:
            self.pool.release(found.blocks, found.nodes, (), keep=False)
            if ahead is not None and self._recurrent:  # it snapshots where this prompt leaves it: resumed there
                shared = next((i for i, (a, b) in enumerate(zip(feed, ahead.feed)) if a != b),
                              min(len(feed), len(ahead.feed)) - 1)
                ahead.snapshot_at = sorted({*ahead.snapshot_at, shared // self.pool.block_size * self.pool.block_size})
            return False
        self._hold(slot, feed, found)
        return True

    def _hold(self, slot: PagedSlot, feed: list[int], found: Placement) -> None:
        """``slot`` now holds what ``found`` has of ``feed``: its blocks, and its recurrent state."""
        slot.blocks, slot.nodes = found.blocks, found.nodes
        slot.tokens = list(feed[: found.tokens])
        self._sync_table(slot)
        if self._recurrent:
            if found.state is not None:
                self.ctx.write_state(slot.seq_id, found.state)
            else:
                self.ctx.reset_state(slot.seq_id)
            slot.snapshot_at = sorted(n for n in self._snapshot_points(feed, found.matched) if n > found.tokens)

    def _prefill_ahead(self, feed: list[int], cached: int) -> PagedSlot | None:
        """The running prefill computing the next ``WAIT_FOR_PREFIX`` tokens of ``feed`` now, if one is."""
        want = feed[cached : cached + WAIT_FOR_PREFIX]
        if len(want) < WAIT_FOR_PREFIX:
            return None
        return next((s for s in self._active if not s.parked and s.prefilled < len(s.feed)
                     and s.feed[cached : cached + WAIT_FOR_PREFIX] == want), None)

    def _growth(self, besides: PagedSlot) -> int:
        """Blocks the running sequences other than ``besides`` take to finish their feed and grow by a block."""
        bs = self.pool.block_size
        return sum(
            max(0, self.pool.blocks_for(max(len(s.feed), len(s.tokens)) + bs) - len(s.blocks))
            for s in self._active
            if not s.parked and s is not besides
        )

    def _snapshot_points(self, feed: list[int], matched: int) -> set[int]:
        """The token counts besides every n_batch's where a sequence holding ``feed`` snapshots its state, the
        cache having matched ``matched`` tokens of it: the last block boundary before its last token and
        blocks 1, 2, 4, ... up to n_batch before it, and the last block boundary where it left the cache."""
        bs = self.pool.block_size
        last = (len(feed) - 1) // bs * bs
        points, back = {last, matched // bs * bs}, bs
        while back <= min(self._snapshot_every, last):
            points.add(last - back)
            back *= 2
        return points

    # -- growth ------------------------------------------------------------------

    def _reserve(self, plan: list[Step]) -> list[Step]:
        """Blocks for every planned token; the newest sequences are preempted while the pool is short,
        and one that is short while running alone fails: the whole pool cannot hold it."""

        def short(step: Step) -> int:
            return self.pool.blocks_for(len(step.slot.tokens) + len(step.tokens)) - len(step.slot.blocks)

        if sum(short(step) for step in plan) > self.pool.available:  # drafts go first: they never preempt
            for step in plan:
                if step.draft:
                    del step.tokens[len(step.tokens) - len(step.draft) :]
                    step.draft = []
        while sum(short(step) for step in plan) > self.pool.available:
            running = [s for s in self._active if not s.parked]
            victim = max(running, key=lambda s: s.admitted)
            step = next((step for step in plan if step.slot is victim), None)
            if len(running) == 1:
                self._fail_outgrown(victim, len(victim.tokens) + (len(step.tokens) if step else 0))
            else:
                self._preempt(victim, step)
            plan = [step for step in plan if step.slot is not victim]
        room = STATE_CAPTURES  # the state copies a batch takes at most (the memory planner counts them)
        for step in plan:
            slot = step.slot
            for _ in range(short(step)):
                slot.blocks.append(self.pool.allocate())
                slot.nodes.append(None)
            self._sync_table(slot)
            if self._recurrent and step.draft and not self.ctx.rewinds:  # the state a cut draft goes back to
                slot.verify_at = len(slot.tokens)
                slot.verify_state = self.ctx.read_state(slot.seq_id, into=slot.verify_state)
            if self._recurrent:
                room -= self._capture(slot, len(step.tokens), room)
        return plan

    def _capture(self, slot: PagedSlot, n_new: int, room: int) -> int:
        """Ask the coming batch for ``slot``'s state at the snapshot points its ``n_new`` tokens reach, at most
        ``room`` of them, those nearest its end first (the prompt's end, where later conversations part from it);
        kept once they are committed (:meth:`_snapshot`). How many it asked for."""
        held, bs, every = len(slot.tokens), self.pool.block_size, self._snapshot_every
        points = [n for n in range((held // bs + 1) * bs, held + n_new + 1, bs)
                  if not n % every or n in slot.snapshot_at]
        asked = 0
        for n in reversed(points[len(points) - max(room, 0):]):
            buffer = self._spare.pop() if self._spare else bytearray(self.ctx.state_bytes)
            if not self.ctx.capture_state(slot.seq_id, n - 1, buffer):
                self._spare.append(buffer)
                break
            slot.captures.append((n, buffer))
            asked += 1
        return asked

    def _fail_outgrown(self, slot: PagedSlot, n_tokens: int) -> None:
        self._fail(slot, f"the KV pool of {self.pool.n_blocks * self.pool.block_size} positions cannot hold "
                         f"this sequence's {n_tokens} tokens")

    def _preempt(self, slot: PagedSlot, step: Step | None) -> None:
        """Give back ``slot``'s blocks; it resumes by evaluating what it held again."""
        if step is not None and step.decode:  # undo what planning took
            slot.pending = step.tokens[0]
        elif step is not None:
            slot.prefilled -= len(step.tokens)
        held = slot.tokens
        if slot.prefilled >= len(slot.feed):  # it was decoding: resume with its pending token
            slot.feed = held + [slot.pending]
            slot.pending = -1
        log.info("KV pool full: preempting sequence %d (%d tokens held)", slot.seq_id, len(held))
        self.pool.release(slot.blocks, slot.nodes, held, keep=True, state=self._end_state(slot))
        slot.blocks, slot.nodes, slot.tokens = [], [], []
        slot.parked = True
        slot.preemptions += 1

    def _committed(self, plan: list[Step]) -> None:
        if self._recurrent:
            self._rewind_cut_drafts(plan)
        for step in plan:
            self.pool.commit(step.slot.blocks, step.slot.nodes, step.slot.tokens)
        if self._recurrent:
            for step in plan:
                self._sync_table(step.slot)  # commit may have swapped a recomputed block for its indexed twin
                self._snapshot(step.slot)

    def _rewind_cut_drafts(self, plan: list[Step]) -> None:
        """Give every sequence whose draft was cut the state of its accepted tokens: the state saved when its
        step began, then those tokens computed again (all such sequences in one batch)."""
        batch = self._replay
        batch.clear()
        rewound = []
        for step in plan:
            slot = step.slot
            if slot.verify_at < 0:
                continue
            if len(slot.tokens) < slot.verify_at + len(step.tokens):
                self.ctx.write_state(slot.seq_id, slot.verify_state)
                for pos in range(slot.verify_at, len(slot.tokens)):
                    batch.add(slot.tokens[pos], pos, slot.seq_id, False)
                rewound.append(slot)
            slot.verify_at = -1
        if rewound and self.ctx.decode(batch) != 0:
            for slot in rewound:  # its state is not its tokens': it cannot go on
                self._fail(slot, f"generation failed: recomputing the accepted draft: {self.ctx.last_error}")

    def _end_state(self, slot: PagedSlot) -> bytearray | None:
        """The state after all ``slot`` holds, kept with its blocks when it lets them go (recurrent models)."""
        return self.ctx.read_state(slot.seq_id) if self._recurrent and slot.tokens else None

    def _snapshot(self, slot: PagedSlot) -> None:
        """Keep the states the batch captured for ``slot`` as the snapshots of the blocks they end, those of tokens
        it kept (a cut draft's are past them)."""
        captures, slot.captures = slot.captures, []
        for n, state in captures:
            node = slot.nodes[n // self.pool.block_size - 1] if not slot.idle and n <= len(slot.tokens) else None
            if node is not None and node.state is None:
                self.pool.keep_state(node, state)
            if (node is None or node.state is not state) and len(self._spare) < STATE_CAPTURES:
                self._spare.append(state)  # kept by no snapshot: the buffer serves a later capture

    def _shift(self, slot: PagedSlot) -> bool:
        """Make room at the context end: keep ``num_keep`` tokens and the newer half of the rest, recomputed
        (so the pending token waits for that recomputation)."""
        keep, n = slot.num_keep, len(slot.tokens)
        discard = (n - keep) // 2
        kept = slot.tokens[:keep] + slot.tokens[keep + discard :]
        log.info("context shift: seq=%d kept=%d discarded=%d", slot.seq_id, len(kept), discard)
        self.pool.release(slot.blocks, slot.nodes, slot.tokens, keep=True, state=self._end_state(slot))
        slot.feed = kept + [slot.pending]
        self._hold(slot, slot.feed, self.pool.match(kept))
        slot.prefilled = len(slot.tokens)
        slot.pending = -1
        return False

    def _trim(self, slot: PagedSlot, n: int) -> None:
        """Drop a rejected draft: its blocks past the kept tokens are private (not yet committed) and go back; a
        state that is only the sliding layers' window goes back with them (the window before is still held)."""
        del slot.tokens[-n:]
        if self.ctx.rewinds:
            self.ctx.rewind_state(slot.seq_id, len(slot.tokens))
        keep = self.pool.blocks_for(len(slot.tokens))
        if len(slot.blocks) > keep:
            self.pool.release(slot.blocks[keep:], slot.nodes[keep:], (), keep=False)
            del slot.blocks[keep:], slot.nodes[keep:]

    # -- release -----------------------------------------------------------------

    def _free_kv(self, slot: PagedSlot, keep: bool) -> None:
        """A failed request's full blocks were complete before the failure; its partial last block is not kept."""
        end_state = self._end_state(slot) if keep else None
        self.pool.release(slot.blocks, slot.nodes, slot.tokens, keep=keep, state=end_state)
        slot.blocks, slot.nodes, slot.tokens = [], [], []
        slot.parked = False
        slot.snapshot_at, slot.captures, slot.verify_at = [], [], -1

    def _check_kv(self) -> None:
        self.pool.check()
        for slot in self._slots:
            assert len(slot.tokens) <= len(slot.blocks) * self.pool.block_size, f"seq {slot.seq_id} outgrew its blocks"
            assert not (slot.idle and slot.blocks), f"idle seq {slot.seq_id} holds blocks"
            assert list(self.ctx.tables[slot.seq_id, : len(slot.blocks)]) == slot.blocks, f"seq {slot.seq_id}'s table"
        held = Counter(block for slot in self._slots for block in slot.blocks)
        assert held == {b: n for b, n in enumerate(self.pool.ref) if n}, "reference counts differ from the tables"

    def _sync_table(self, slot: PagedSlot) -> None:
        self.ctx.tables[slot.seq_id, : len(slot.blocks)] = slot.blocks
