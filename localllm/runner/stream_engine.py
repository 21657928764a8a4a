"""The llama.cpp engine's KV: one stream of cells per slot, shared prefixes copied between streams.

A slot knows exactly which tokens its sequence holds in the KV cache
(:attr:`StreamSlot.tokens`), and keeps them after its request ends: the prefix
cache (:mod:`.prefix_cache`) finds the slot, running sequence or spilled copy
sharing the longest prefix with a new prompt, the engine copies those cells
(or takes the idle slot as it is) and prefills only the rest. A request whose
prompt starts like one still being prefilled waits for it instead of
computing the same prefix twice.

Why copies and not shared cells: llama.cpp decides where a token's KV lands,
and in a unified cache a sequence's logits change with what else is batched
(see :class:`localllm.backends.llama_cpp.Context`).

Recurrent and hybrid models (Mamba, Qwen 3.5, Qwen3-Next, LFM2, Granite 4,
Nemotron-H) also keep a per-sequence state that sums up every token so far
and cannot be cut back to an earlier position, as llama-server's context
checkpoints know. Their prompts resume only where a state ends: an idle slot
whose whole sequence starts the prompt, or a checkpoint, a copy of the state
in host RAM (the same budget as spilled KV). A checkpoint is kept one token
before the end of every prompt (the next turn of a chat, and the same prompt
again, resume there) and whenever an idle slot is given to another request.
Anything else is computed again from the start.

An M-RoPE model (Qwen-VL, Qwen 3.5, GLM-OCR) places an image's tokens on a
2D grid that advances the sequence by fewer positions than it has tokens
(llama-server tracks the same). Positions then run behind token indices:
:meth:`StreamEngine._position` maps an index to its position from the images
before it, known by their first placeholder token.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from localllm.backends.llama_cpp import Context, Model
from localllm.runner.engine import (
    RECURRENT_CHECKPOINTS, WAIT_FOR_PREFIX, CacheStats, CompletionRequest, Engine, Slot, Step,
)
from localllm.runner.prefix_cache import HostSpill, RadixTree, Spilled
from localllm.backends.projector import ImageChunk, Projector, is_placeholder

log = logging.getLogger("localllm.runner")

MIN_REUSE = 16  # fewer shared tokens are not worth a stream copy or a restore
MIN_SPILL = 64  # shorter idle sequences are dropped, not spilled to RAM, when their slot is needed
REREAD_AFTER_MEDIUM = 64  # a cached prompt ending in at most this much text after its last image re-reads that text


@dataclass(eq=False)
class StreamSlot(Slot):
    """A slot that owns one KV stream of the llama.cpp context."""

    exact: int = 0  # leading tokens whose KV equals a fresh computation (a context shift breaks that)
    last_used: float = 0.0  # when its request ended: the least recently used idle slot is evicted first
    copy_pending: bool = False  # target of a stream copy that llama.cpp runs at the next decode
    checkpoint_at: int = 0  # recurrent state: tokens after which its prefill stops to keep a checkpoint (0: none)
    scanned: tuple[int, int] = (0, 0)  # M-RoPE: leading tokens scanned for images, and positions they save


class StreamEngine(Engine):
    """Continuous batching over a llama.cpp context of ``n_parallel`` KV streams."""

    def __init__(self, model: Model, ctx: Context, n_parallel: int, n_ctx_seq: int, cache_ram_bytes: int = 0,
                 projector: Projector | None = None) -> None:
        super().__init__(model, ctx, [StreamSlot(seq_id=i) for i in range(n_parallel)], n_ctx_seq, CacheStats())
        self._tree: RadixTree[StreamSlot | Spilled] = RadixTree()
        self._spill = HostSpill(cache_ram_bytes)
        self.projector = projector
        self._mrope = projector is not None and projector.mrope
        self._image_runs: dict[int, tuple[int, int]] = {}  # M-RoPE: first placeholder -> (tokens, positions saved)
        self._recurrent = model.recurrent_state
        if self._recurrent:
            self.cache_mode = RECURRENT_CHECKPOINTS

    @property
    def cache_tokens(self) -> int:
        return sum(len(s.tokens) for s in self._slots if s.idle)

    @property
    def cache_ram_bytes(self) -> int:
        return self._spill.used

    def _admit(self) -> None:
        for slot in self._slots:  # a decode ran since the last admission: the copies are done
            slot.copy_pending = False
        super()._admit()

    def _place(self, request: CompletionRequest, num_keep: int, prompt: list[int]) -> StreamSlot | None:
        if self._mrope:
            for first, image in request.images.items():
                self._image_runs[first] = (image.n_tokens, image.n_tokens - image.n_pos)
        if self._recurrent:
            return self._place_at_checkpoint(prompt)
        shared, holders = self._tree.match(prompt)
        shared = min(shared, len(prompt) - 1)  # evaluate at least one token: its logits start the answer
        source, usable = self._best_source(holders, shared)
        while 0 < usable < len(prompt) and is_placeholder(prompt[usable]) and is_placeholder(prompt[usable - 1]):
            usable -= 1  # an image's KV is reused whole or not at all: its decode starts at its first position
        usable = _after_last_medium(prompt, usable)
        if usable + WAIT_FOR_PREFIX <= shared and any(
            isinstance(h, StreamSlot) and not h.idle and (h.prefilled < shared or h.copy_pending) for h in holders
        ):
            return None
        if isinstance(source, StreamSlot) and source.idle and usable >= MIN_REUSE:
            target = source
            if len(target.tokens) > usable:
                self._spill_out(target)  # keep the conversation this request branches off
            self._truncate(target, usable)
        else:
            target = self._victim()
            usable = self._load(target, source, usable) if usable >= MIN_REUSE else 0
        target.cached = usable
        target.exact = self.n_ctx_seq  # all it holds matches a fresh computation until a context shift
        self._tree.insert(prompt, target)  # what it will hold: later requests may wait for it
        return target

    def _place_at_checkpoint(self, prompt: list[int]) -> StreamSlot:
        """A slot for ``prompt`` on a recurrent model: resumed where a state ends (an idle slot holding a
        prefix of the prompt and nothing more, else the longest checkpoint), or started from nothing."""
        source: StreamSlot | Spilled | None = None
        usable = 0
        for n, holders in self._tree.ends_along(prompt[:-1]):  # evaluate at least one token: its logits start it
            if n < MIN_REUSE:
                break
            if is_placeholder(prompt[n]) and is_placeholder(prompt[n - 1]):
                continue  # inside an image
            idle = [h for h in holders if isinstance(h, StreamSlot) and h.idle]
            saved = [h for h in holders if isinstance(h, Spilled)]
            if idle or saved:
                source, usable = (idle or saved)[0], n
                break
        if isinstance(source, StreamSlot):
            target = source
        else:
            target = self._victim()
            usable = self._load(target, source, usable)
        target.cached = usable
        target.exact = self.n_ctx_seq
        end = len(prompt) - 1
        target.checkpoint_at = end if end > usable and end >= MIN_REUSE and self._spill.budget else 0
        self._tree.insert(prompt, target)
        return target

    def _prefill_stop(self, slot: StreamSlot) -> int:
        return slot.checkpoint_at if slot.checkpoint_at > slot.prefilled else len(slot.feed)

    def _committed(self, plan: list[Step]) -> None:
        for step in plan:
            slot = step.slot
            if slot.checkpoint_at and slot.checkpoint_at == len(slot.tokens):
                self._keep_state(slot, tuple(slot.tokens), MIN_REUSE)
                slot.checkpoint_at = 0

    def _best_source(self, holders: set[StreamSlot | Spilled], shared: int) -> tuple[StreamSlot | Spilled | None, int]:
        """The holder to take the most of the ``shared`` prefix from now, and how many tokens.

        Ties go to an idle slot (no copy), then a running one (a stream
        copy), then a spilled copy (a restore from RAM).
        """
        best, best_key = None, (0, 0)
        for holder in holders:
            if isinstance(holder, Spilled):
                usable, rank = shared, 0
            elif holder.copy_pending or len(holder.tokens) >= self.n_ctx_seq - 1:  # no data yet / about to shift
                continue
            else:
                usable, rank = min(shared, len(holder.tokens), holder.exact), 2 if holder.idle else 1
            if (usable, rank) > best_key:
                best, best_key = holder, (usable, rank)
        return best, best_key[0]

    def _victim(self) -> StreamSlot:
        """A slot to start a request in: an empty one, else the least recently used idle one."""
        idle = [s for s in self._slots if s.idle]
        victim = min(idle, key=lambda s: (len(s.tokens) > 0, s.last_used))
        if victim.tokens:
            self._spill_out(victim)
            self._truncate(victim, 0)
        return victim

    def _load(self, target: StreamSlot, source: StreamSlot | Spilled | None, usable: int) -> int:
        """Give the empty ``target`` the first ``usable`` tokens of ``source``; how many it got."""
        if isinstance(source, StreamSlot):
            self.ctx.seq_cp(source.seq_id, target.seq_id)
            target.copy_pending = True
            tokens = source.tokens[:usable]
        elif isinstance(source, Spilled):
            if not self.ctx.set_seq_state(source.state, target.seq_id):
                log.warning("could not restore a spilled prefix of %d tokens; recomputing", len(source.tokens))
                self.ctx.seq_rm(target.seq_id)
                return 0
            self._spill.touch(source)
            self.stats.restores += 1
            tokens = list(source.tokens[:usable])
        else:
            return 0
        self.ctx.seq_rm(target.seq_id, self._position(tokens, usable), -1)
        target.tokens = tokens
        target.scanned = (0, 0)
        target.exact = usable
        return usable

    def _decode_image(self, slot: StreamSlot, image: ImageChunk) -> None:
        self.projector.decode(self.ctx, image, self._next_position(slot), slot.seq_id)

    def _next_position(self, slot: StreamSlot) -> int:
        if not self._image_runs:
            return len(slot.tokens)
        scanned, saved = slot.scanned
        if scanned > len(slot.tokens):  # tokens were taken off the end (a rejected draft): scan again
            scanned, saved = 0, 0
        scanned, saved = self._scan(slot.tokens, scanned, saved, len(slot.tokens))
        slot.scanned = (scanned, saved)
        return len(slot.tokens) - saved

    def _position(self, tokens: list[int], n: int) -> int:
        """The position of the ``n``-th of ``tokens`` (``n`` past their end: as many positions after it), which
        is never inside an image."""
        return n - self._scan(tokens, 0, 0, min(n, len(tokens)))[1] if self._image_runs else n

    def _scan(self, tokens: list[int], index: int, saved: int, end: int) -> tuple[int, int]:
        """From ``index`` (after ``saved`` positions saved) to ``end``: where the scan stops and the positions
        the M-RoPE images on the way save (an image is passed whole)."""
        runs = self._image_runs
        while index < end:
            run = runs.get(tokens[index]) if tokens[index] < 0 else None
            if run is None:
                index += 1
            else:
                index += run[0]
                saved += run[1]
        return index, saved

    def _truncate(self, slot: StreamSlot, n: int) -> None:
        """Keep only the first ``n`` tokens of ``slot``'s KV (none: the slot leaves the cache). A recurrent
        state cannot be cut back: such a slot keeps all its tokens or none."""
        if self._recurrent and n < len(slot.tokens):
            n = 0
        self.ctx.seq_rm(slot.seq_id, self._position(slot.tokens, n), -1)
        del slot.tokens[n:]
        slot.scanned = (0, 0)
        slot.exact = min(slot.exact, n)
        if n == 0:
            self._tree.remove(slot)

    def _spill_out(self, slot: StreamSlot) -> None:
        """Copy an idle slot's KV to host RAM if it is long, new and fits the budget."""
        if not self._recurrent or slot.exact >= len(slot.tokens):  # a recurrent state is past an earlier point
            self._keep_state(slot, tuple(slot.tokens[: slot.exact]), MIN_SPILL)

    def _keep_state(self, slot: StreamSlot, tokens: tuple[int, ...], least: int) -> None:
        """Copy ``slot``'s state, whose first ``tokens`` are reusable, to host RAM if there are at least
        ``least`` of them, no other holder has them and they fit the budget."""
        if len(tokens) < least or not self._spill.budget or self._tree.covers(tokens, besides=slot,
                                                                               exactly=self._recurrent):
            return
        if self.ctx.seq_state_size(slot.seq_id) > self._spill.budget:
            return  # it could never be kept: no copy
        entry = Spilled(tokens, self.ctx.seq_state(slot.seq_id))
        if not self._recurrent:  # older turns of the same conversation are now redundant (not so for checkpoints)
            for old in self._spill:
                if tokens[: len(old.tokens)] == old.tokens:
                    self._drop_spilled(old)
        for old in self._spill.add(entry):
            self._drop_spilled(old)
        if entry in self._spill:
            self._tree.insert(tokens, entry)
            self.stats.spills += 1

    def _drop_spilled(self, entry: Spilled) -> None:
        self._spill.discard(entry)
        self._tree.remove(entry)

    def _shift(self, slot: StreamSlot) -> bool:
        """Make room at the context end: drop half of the tokens after ``num_keep``."""
        if not self.ctx.can_shift or self._next_position(slot) != len(slot.tokens):  # no shift past M-RoPE images
            self._finish(slot, "length")
            return False
        keep, n = slot.num_keep, len(slot.tokens)
        discard = (n - keep) // 2
        self.ctx.seq_rm(slot.seq_id, keep, keep + discard)
        self.ctx.seq_add(slot.seq_id, keep + discard, n, -discard)
        del slot.tokens[keep : keep + discard]
        slot.exact = min(slot.exact, keep)
        log.info("context shift: seq=%d kept=%d discarded=%d", slot.seq_id, keep, discard)
        return True

    def _check_kv(self) -> None:
        self._tree.check()
        for slot in self._slots:
            assert slot.exact <= self.n_ctx_seq and len(slot.tokens) <= self.n_ctx_seq, f"seq {slot.seq_id} too long"
            if slot.idle and slot in self._tree:
                assert self._tree.tokens(slot) == tuple(slot.tokens), f"idle seq {slot.seq_id} is indexed wrongly"
            mid_image = bool(self._image_runs) and is_placeholder(slot.tokens[-1]) if slot.tokens else False
            if slot.tokens and not slot.copy_pending and not mid_image:  # an M-RoPE image's cells share a position
                last = self._position(slot.tokens, len(slot.tokens)) - 1
                assert self.ctx.seq_pos_max(slot.seq_id) == last, f"seq {slot.seq_id}'s KV cells"
        assert all(entry in self._tree for entry in self._spill), "a spilled prefix outside the tree"

    def _free_kv(self, slot: StreamSlot, keep: bool) -> None:
        """A failed request's cells are not trusted (the decode that failed may have written some), nor
        are those of a copy llama.cpp has not run yet."""
        slot.last_used = time.perf_counter()
        if keep and not slot.copy_pending:
            self._truncate(slot, slot.exact)
            if slot.tokens:
                self._tree.insert(slot.tokens, slot)
        else:
            slot.exact = 0
            self._truncate(slot, 0)


def _after_last_medium(prompt: list[int], usable: int) -> int:
    """Where a prompt found in the cache up to ``usable`` is read on from: where its last image or audio clip
    ends, when no more than :data:`REREAD_AFTER_MEDIUM` tokens of text follow it, else ``usable``.

    A cold read decodes the text after the last medium in one batch; a cached one would decode only its
    last token, and llama.cpp's CPU matrix kernels round a row differently by batch shape once the context
    holds some 200 tokens, so the answer's log-probabilities drifted (up to 0.08 for a clip of two windows)
    and a long greedy answer could part ways. Reading that short text again as the cold read did gives the
    same bits, for a few tokens' prefill."""
    end = next((i + 1 for i in range(len(prompt) - 1, -1, -1) if is_placeholder(prompt[i])), 0)
    return end if 0 < end <= usable and len(prompt) - end <= REREAD_AFTER_MEDIUM else usable
