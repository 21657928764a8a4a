"""A draft model: a smaller model with the target's vocabulary that proposes speculative tokens.

It runs on the native engine in its own KV pool, one lane per target
sequence (the same sequence ids). Each step a lane is brought up to the
target sequence's tokens (what it already holds is kept as far as it
agrees), then extended greedily one token per batched pass for every lane
at once. Its drafts need not be good, only cheap: the target verifies them
(:mod:`localllm.runner.speculation`).

Only the engine thread calls :meth:`DraftModel.propose`; :class:`DraftModels`
loads and checks a draft on the HTTP side, once per file.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from localllm.backends.capabilities import native_pool_tokens
from localllm.backends.contract import BackendError
from localllm.backends.llama_cpp import Batch
from localllm.backends.native.backend import Context, Model

log = logging.getLogger("localllm.runner")

BLOCK_SIZE = 16


class DraftRefused(ValueError):
    """A draft model that cannot serve the target: not loadable, another vocabulary, a larger context."""


@dataclass
class _Lane:
    tokens: list[int] = field(default_factory=list)  # what the lane's KV holds, by position
    blocks: list[int] = field(default_factory=list)


def check_compatible(draft: Model, target: Model) -> None:
    """Refuse a draft whose tokens would not mean the target's, or whose context is larger."""
    ours, theirs = draft.vocab, target.vocab
    if ours.n_vocab != theirs.n_vocab:
        raise DraftRefused(f"its vocabulary has {ours.n_vocab} tokens, the model's has {theirs.n_vocab}")
    if (ours.bos, ours.eos) != (theirs.bos, theirs.eos):
        raise DraftRefused("its BOS/EOS tokens differ from the model's")
    differs = next((t for t in range(theirs.n_vocab) if ours.piece(t) != theirs.piece(t)), None)
    if differs is not None:
        raise DraftRefused(f"its vocabulary differs from the model's (token {differs}: "
                           f"{ours.piece(differs)!r} against {theirs.piece(differs)!r})")
    if draft.n_ctx_train > target.n_ctx_train:
        raise DraftRefused(f"its context ({draft.n_ctx_train}) is larger than the model's ({target.n_ctx_train})")


class DraftModel:
    """A loaded draft model and its KV lanes; see the module docstring."""

    def __init__(self, path: Path, target: Model, n_ctx: int, n_seq: int, n_batch: int, n_threads: int) -> None:
        try:
            self.model = Model(path)
        except BackendError as exc:
            raise DraftRefused(f"it cannot be loaded: {exc}") from None
        try:
            check_compatible(self.model, target)
            self.n_ctx = min(n_ctx, self.model.n_ctx_train)
            n_blocks = -(-native_pool_tokens(self.n_ctx) // BLOCK_SIZE)
            self.ctx = Context(self.model, n_blocks, BLOCK_SIZE, self.n_ctx, n_seq, n_batch, n_threads)
            if self.ctx.state_bytes:  # its lanes are cut back to where they agree with the target: KV only
                self.ctx.close()
                raise DraftRefused("it keeps a recurrent state (Gated DeltaNet layers); a draft model must be a "
                                   "transformer")
        except BaseException:
            self.model.close()
            raise
        self.batch = Batch(n_batch)
        self._free = list(range(n_blocks - 1, -1, -1))
        self._lanes = [_Lane() for _ in range(n_seq)]

    def propose(self, wants: list[tuple[int, list[int], int]]) -> dict[int, list[int]]:
        """Greedy drafts of up to ``k`` tokens after each (sequence id, tokens, k); a lane without room gets none."""
        ready: dict[int, tuple[list[int], int]] = {}
        for seq, tokens, k in wants:
            lane = self._lanes[seq]
            common = 0
            for a, b in zip(lane.tokens, tokens):
                if a != b:
                    break
                common += 1
            self._truncate(lane, min(common, len(tokens) - 1))  # feed at least one token: its logits draft
            if len(tokens) + k - 1 <= self.n_ctx and self._grow(lane, len(tokens) + k - 1, {s for s, _, _ in wants}):
                ready[seq] = (tokens, k)
            else:
                self._truncate(lane, 0)
        drafts: dict[int, list[int]] = {seq: [] for seq in ready}
        feeds = {seq: tokens[len(self._lanes[seq].tokens) :] for seq, (tokens, _) in ready.items()}
        while feeds:
            for seq, token in self._feed(feeds).items():
                drafts[seq].append(token)
            feeds = {seq: [drafts[seq][-1]] for seq in feeds if len(drafts[seq]) < ready[seq][1]}
        return drafts

    def _feed(self, feeds: dict[int, list[int]]) -> dict[int, int]:
        """Evaluate each lane's new tokens (in as many batches as it takes); the greedy next token of each."""
        picked: dict[int, int] = {}
        pending = {seq: list(tokens) for seq, tokens in feeds.items()}
        while pending:
            self.batch.clear()
            last: dict[int, int] = {}
            for seq in sorted(pending):
                lane, tokens = self._lanes[seq], pending[seq]
                n = min(len(tokens), self.batch.free)
                for j, token in enumerate(tokens[:n]):
                    row = self.batch.add(token, len(lane.tokens) + j, seq, j == len(tokens) - 1)
                lane.tokens.extend(tokens[:n])
                if n == len(tokens):
                    last[seq] = row
                del tokens[:n]
                if not self.batch.free:
                    break
            if self.ctx.decode(self.batch) != 0:
                raise BackendError(f"the draft model's decode failed: {self.ctx.last_error}")
            picked.update((seq, int(self.ctx.logits(row).argmax())) for seq, row in last.items())
            pending = {seq: tokens for seq, tokens in pending.items() if tokens}
        return picked

    def _grow(self, lane: _Lane, n_tokens: int, busy: set[int]) -> bool:
        """Blocks for ``n_tokens`` positions of ``lane``, taken from lanes not drafting now if need be."""
        need = -(-n_tokens // BLOCK_SIZE) - len(lane.blocks)
        for other in self._lanes:
            if len(self._free) >= need:
                break
            if other is not lane and other.blocks and self._lanes.index(other) not in busy:
                self._truncate(other, 0)
        if len(self._free) < need:
            return False
        for _ in range(need):
            lane.blocks.append(self._free.pop())
        seq = self._lanes.index(lane)
        self.ctx.tables[seq, : len(lane.blocks)] = lane.blocks
        return True

    def _truncate(self, lane: _Lane, n: int) -> None:
        del lane.tokens[n:]
        keep = -(-n // BLOCK_SIZE)
        self._free.extend(reversed(lane.blocks[keep:]))
        del lane.blocks[keep:]

    def close(self) -> None:
        self.batch.close()
        self.ctx.close()
        self.model.close()


class DraftModels:
    """The draft models requests named, loaded once each and kept while the runner lives."""

    def __init__(self, target: Model, n_ctx: int, n_seq: int, n_batch: int, n_threads: int) -> None:
        self._target = target
        self._shape = (n_ctx, n_seq, n_batch, n_threads)
        self._loaded: dict[Path, DraftModel] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> DraftModel:
        """The draft model in ``path``, loaded and checked on first use (:class:`DraftRefused` if unfit)."""
        key = Path(path)
        with self._lock:
            if key not in self._loaded:
                if not key.is_file():
                    raise DraftRefused("its file does not exist")
                self._loaded[key] = DraftModel(key, self._target, *self._shape)
                log.info("loaded draft model %s", key)
            return self._loaded[key]

    def close(self) -> None:
        for draft in self._loaded.values():
            draft.close()
        self._loaded.clear()
