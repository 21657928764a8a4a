"""The native engine's KV: sequences as tables of shared, reference-counted blocks.

A new request takes the blocks of the longest cached prefix of its prompt
(:meth:`BlockPool.match`: no copy, except one partly shared block), then
takes a block whenever it crosses into a new one. When a request ends its
blocks stay cached (indexed by their tokens) until the pool needs them; the
least recently released go first, full ones to host RAM within a budget.

The pool, not ``n_ctx x n_parallel``, is the memory budget: a request is
admitted when the pool could hold its whole prompt, and waits otherwise (the
pool always holds at least one whole context, so every prompt fits alone). If
running sequences outgrow the pool, the most recently admitted one is
preempted: its blocks go back (full ones stay cached) and it is later
resumed by evaluating what it held again, which the native engine's batch
invariance makes bit for bit what it held before.

A context shift recomputes the kept tokens the same way instead of rotating
cached keys, so a shifted sequence's KV too is what a fresh computation gives.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from localllm.backends.native.backend import Context, Model
from localllm.runner.engine import WAIT_FOR_PREFIX, CompletionRequest, Engine, Slot, Step
from localllm.runner.kv_blocks import BlockPool, Node

log = logging.getLogger("localllm.runner")


@dataclass(eq=False)
class PagedSlot(Slot):
    """A slot whose sequence is a row of the context's block tables."""

    blocks: list[int] = field(default_factory=list)
    nodes: list[Node | None] = field(default_factory=list)  # each block's index node (None: private)
    admitted: int = 0  # admission order: the newest running sequence is preempted first


class PagedEngine(Engine):
    """Continuous batching over the native engine's paged KV pool; see the module docstring."""

    def __init__(self, model: Model, ctx: Context, n_parallel: int, n_ctx_seq: int, pool: BlockPool) -> None:
        if pool.n_blocks < pool.blocks_for(n_ctx_seq + 1):
            raise ValueError(f"a KV pool of {pool.n_blocks} blocks cannot hold one context of {n_ctx_seq} tokens")
        super().__init__(model, ctx, [PagedSlot(seq_id=i) for i in range(n_parallel)], n_ctx_seq, pool.stats)
        self.pool = pool
        self._admissions = 0

    @property
    def cache_tokens(self) -> int:
        return self.pool.counts()["cached"] * self.pool.block_size

    @property
    def cache_ram_bytes(self) -> int:
        return self.pool.host_used

    def kv_blocks(self) -> dict[str, int]:
        return {**self.pool.counts(), "block_size": self.pool.block_size}

    # -- admission ---------------------------------------------------------------

    def _admit(self) -> None:
        parked = sorted((s for s in self._active if s.parked), key=lambda s: s.admitted)
        for slot in parked:  # preempted sequences come back before anything new starts
            if not self._hold_prefix(slot, slot.feed):
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

    def _hold_prefix(self, slot: PagedSlot, feed: list[int]) -> bool:
        """Give ``slot`` the cached blocks of ``feed``'s prefix, if the pool can then hold the rest.

        False (nothing held) when the sequence should wait: for blocks, or
        for a running prefill that will soon cache much more of ``feed``.
        """
        found = self.pool.match(feed[:-1])  # evaluate at least one token: its logits start the answer
        needed = self.pool.blocks_for(len(feed) + 1) - len(found.blocks)
        if needed > self.pool.available or self._prefill_ahead(feed, found.tokens):
            self.pool.release(found.blocks, found.nodes, (), keep=False)
            return False
        slot.blocks, slot.nodes = found.blocks, found.nodes
        slot.tokens = list(feed[: found.tokens])
        self._sync_table(slot)
        return True

    def _prefill_ahead(self, feed: list[int], cached: int) -> bool:
        """Whether a running prefill is computing the next ``WAIT_FOR_PREFIX`` tokens of ``feed`` now."""
        want = feed[cached : cached + WAIT_FOR_PREFIX]
        return len(want) == WAIT_FOR_PREFIX and any(
            not s.parked and s.prefilled < len(s.feed) and s.feed[cached : cached + WAIT_FOR_PREFIX] == want
            for s in self._active
        )

    # -- growth ------------------------------------------------------------------

    def _reserve(self, plan: list[Step]) -> list[Step]:
        """Blocks for every planned token; the newest sequences are preempted while the pool is short."""

        def short(step: Step) -> int:
            return self.pool.blocks_for(len(step.slot.tokens) + len(step.tokens)) - len(step.slot.blocks)

        while sum(short(step) for step in plan) > self.pool.available:
            running = [s for s in self._active if not s.parked]
            assert len(running) > 1, "one sequence alone always fits: the pool holds a whole context"
            victim = max(running, key=lambda s: s.admitted)
            self._preempt(victim, next((step for step in plan if step.slot is victim), None))
            plan = [step for step in plan if step.slot is not victim]
        for step in plan:
            slot = step.slot
            for _ in range(short(step)):
                slot.blocks.append(self.pool.allocate())
                slot.nodes.append(None)
            self._sync_table(slot)
        return plan

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

    def _committed(self, plan: list[Step]) -> None:
        for step in plan:
            self.pool.commit(step.slot.blocks, step.slot.nodes, step.slot.tokens)

    def _room_to_decode(self, slot: PagedSlot) -> bool:
        if len(slot.tokens) < self.n_ctx_seq:
            return True
        self._shift(slot)
        return False

    def _shift(self, slot: PagedSlot) -> None:
        """Make room at the context end: keep ``num_keep`` tokens and the newer half of the rest, recomputed."""
        keep, n = slot.num_keep, len(slot.tokens)
        discard = (n - keep) // 2
        kept = slot.tokens[:keep] + slot.tokens[keep + discard :]
        log.info("context shift: seq=%d kept=%d discarded=%d", slot.seq_id, len(kept), discard)
        self.pool.release(slot.blocks, slot.nodes, slot.tokens, keep=True)
        found = self.pool.match(kept)
        slot.blocks, slot.nodes = found.blocks, found.nodes
        slot.tokens = kept[: found.tokens]
        slot.feed = kept + [slot.pending]
        slot.prefilled = len(slot.tokens)
        slot.pending = -1
        self._sync_table(slot)

    # -- release -----------------------------------------------------------------

    def _free_kv(self, slot: PagedSlot, keep: bool) -> None:
        """A failed request's full blocks were complete before the failure; its partial last block is not kept."""
        self.pool.release(slot.blocks, slot.nodes, slot.tokens, keep=keep)
        slot.blocks, slot.nodes, slot.tokens = [], [], []
        slot.parked = False

    def _sync_table(self, slot: PagedSlot) -> None:
        self.ctx.tables[slot.seq_id, : len(slot.blocks)] = slot.blocks
