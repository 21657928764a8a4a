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
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from localllm.backends.native.backend import Context, Model
from localllm.runner.engine import WAIT_FOR_PREFIX, CompletionRequest, Engine, Slot, Step
from localllm.runner.kv_blocks import BlockPool, Node

log = logging.getLogger("localllm.runner")

PERSIST_BUDGET_S = 10.0  # a stopping runner's time for writing its cached blocks to the disk tier (parents first)


@dataclass(eq=False)
class PagedSlot(Slot):
    """A slot whose sequence is a row of the context's block tables."""

    blocks: list[int] = field(default_factory=list)
    nodes: list[Node | None] = field(default_factory=list)  # each block's index node (None: private)
    admitted: int = 0  # admission order: the newest running sequence is preempted first


class PagedEngine(Engine):
    """Continuous batching over the native engine's paged KV pool; see the module docstring."""

    speculates = True  # the native engine's logits are batch-invariant: a verified draft is plain decoding's

    def __init__(self, model: Model, ctx: Context, n_parallel: int, n_ctx_seq: int, pool: BlockPool) -> None:
        super().__init__(model, ctx, [PagedSlot(seq_id=i) for i in range(n_parallel)], n_ctx_seq, pool.stats)
        self.pool = pool
        self._admissions = 0
        # A hybrid model's sequences also carry a recurrent state (Gated DeltaNet), which the cached blocks do not
        # hold and which cannot be cut back: until the prefix cache keeps snapshots of it, every prompt is
        # evaluated from position 0 and no draft is verified (a rejected one could not be taken back).
        self._fresh_only = ctx.state_bytes > 0
        if self._fresh_only:
            self.speculates = False

    @property
    def cache_tokens(self) -> int:
        return self.pool.counts()["cached"] * self.pool.block_size

    @property
    def cache_ram_bytes(self) -> int:
        return self.pool.host_used

    def kv_blocks(self) -> dict[str, int]:
        return {**self.pool.counts(), "block_size": self.pool.block_size}

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
        found = self._match(feed[:-1])  # evaluate at least one token: its logits start the answer
        needed = self.pool.blocks_for(len(feed) + 1) - len(found.blocks) + headroom
        if needed > self.pool.available or self._prefill_ahead(feed, found.tokens):
            self.pool.release(found.blocks, found.nodes, (), keep=False)
            return False
        slot.blocks, slot.nodes = found.blocks, found.nodes
        slot.tokens = list(feed[: found.tokens])
        self._sync_table(slot)
        return True

    def _match(self, tokens: list[int]) -> Any:
        """The pool's longest cached prefix of ``tokens`` (none where sequences carry a recurrent state)."""
        return self.pool.match([] if self._fresh_only else tokens)

    def _prefill_ahead(self, feed: list[int], cached: int) -> bool:
        """Whether a running prefill is computing the next ``WAIT_FOR_PREFIX`` tokens of ``feed`` now."""
        want = feed[cached : cached + WAIT_FOR_PREFIX]
        return len(want) == WAIT_FOR_PREFIX and any(
            not s.parked and s.prefilled < len(s.feed) and s.feed[cached : cached + WAIT_FOR_PREFIX] == want
            for s in self._active
        )

    def _growth(self, besides: PagedSlot) -> int:
        """Blocks the running sequences other than ``besides`` take to finish their feed and grow by a block."""
        bs = self.pool.block_size
        return sum(
            max(0, self.pool.blocks_for(max(len(s.feed), len(s.tokens)) + bs) - len(s.blocks))
            for s in self._active
            if not s.parked and s is not besides
        )

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
        for step in plan:
            slot = step.slot
            for _ in range(short(step)):
                slot.blocks.append(self.pool.allocate())
                slot.nodes.append(None)
            self._sync_table(slot)
        return plan

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
        self.pool.release(slot.blocks, slot.nodes, held, keep=True)
        slot.blocks, slot.nodes, slot.tokens = [], [], []
        slot.parked = True
        slot.preemptions += 1

    def _committed(self, plan: list[Step]) -> None:
        for step in plan:
            self.pool.commit(step.slot.blocks, step.slot.nodes, step.slot.tokens)

    def _shift(self, slot: PagedSlot) -> bool:
        """Make room at the context end: keep ``num_keep`` tokens and the newer half of the rest, recomputed
        (so the pending token waits for that recomputation)."""
        keep, n = slot.num_keep, len(slot.tokens)
        discard = (n - keep) // 2
        kept = slot.tokens[:keep] + slot.tokens[keep + discard :]
        log.info("context shift: seq=%d kept=%d discarded=%d", slot.seq_id, len(kept), discard)
        self.pool.release(slot.blocks, slot.nodes, slot.tokens, keep=True)
        found = self._match(kept)
        slot.blocks, slot.nodes = found.blocks, found.nodes
        slot.tokens = kept[: found.tokens]
        slot.feed = kept + [slot.pending]
        slot.prefilled = len(slot.tokens)
        slot.pending = -1
        self._sync_table(slot)
        return False

    def _trim(self, slot: PagedSlot, n: int) -> None:
        """Drop a rejected draft: its blocks past the kept tokens are private (not yet committed) and go back."""
        del slot.tokens[-n:]
        keep = self.pool.blocks_for(len(slot.tokens))
        if len(slot.blocks) > keep:
            self.pool.release(slot.blocks[keep:], slot.nodes[keep:], (), keep=False)
            del slot.blocks[keep:], slot.nodes[keep:]

    # -- release -----------------------------------------------------------------

    def _free_kv(self, slot: PagedSlot, keep: bool) -> None:
        """A failed request's full blocks were complete before the failure; its partial last block is not kept."""
        self.pool.release(slot.blocks, slot.nodes, slot.tokens, keep=keep)
        slot.blocks, slot.nodes, slot.tokens = [], [], []
        slot.parked = False

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
