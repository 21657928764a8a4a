"""Exact speculative decoding: where drafts come from and how long they may be.

A draft is a guess at the next few tokens of a sequence. The engine puts the
pending token and the draft in one batch, samples every position in order
from its own logits, and keeps draft tokens only while each equals the token
sampled before it (:meth:`localllm.runner.engine.Engine._verify`). The
native engine's logits do not depend on the batch, so every kept token and
its log-probability are exactly what one-at-a-time decoding gives; with a
seed too, since each position is sampled with the same draw plain decoding
would use there (one sampler call per produced token, in order).

Drafts come from the sequence itself (:class:`NgramIndex`: prompt lookup,
the tokens that followed the latest earlier occurrence of its last few
tokens) or from a smaller model with the same vocabulary
(:class:`localllm.runner.draft_model.DraftModel`). :class:`Speculation`
holds a sequence's drafting state: the draft length, which adapts to how
much of recent drafts was kept, and whether drafting pays at all.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

# Draft lengths 3, 7, 15: with the pending token, whole groups of four verified rows. The native matmul
# kernels take a weight group's tokens four at a time, so a fifth row costs nearly as much as the four
# before it (scripts/bench/speculative.py; the lengths 4, 8, 16 had verified 5, 9 and 17 rows).
MAX_DRAFT = 15  # tokens drafted at most per step
FIRST_DRAFT = 3  # the draft length a sequence starts with
# lengths of the suffix looked up, longest first: a suffix of two tokens recurs by chance too often to
# predict what follows (it cost more in rejected drafts than it gained, scripts/bench/speculative.py)
NGRAM_MAX, NGRAM_MIN = 8, 3
# auto: no drafting while this many sequences decode in one step (their batch already fills the cores)
MAX_SPECULATING = 4
LOW_ACCEPTANCE = 0.25  # auto: below this share of drafted tokens kept, a sequence pauses drafting ...
PAUSE_TOKENS = 32  # ... for this many generated tokens, then tries again
WARMUP_DRAFTED = 8  # drafted tokens seen before the acceptance rate is trusted
_TOKEN_BYTES = array("i").itemsize


class NgramIndex:
    """A token sequence searchable for prompt-lookup drafts.

    :meth:`draft` continues the sequence's last n-gram (n from ``NGRAM_MAX``
    down to ``NGRAM_MIN``) with what followed its latest earlier occurrence.
    The tokens are kept packed as 32-bit integers and searched when a draft
    is asked for (a C-speed byte search, microseconds at a full context), so
    taking in a request's whole prompt costs a copy, not Python work per
    token on the way to its first token.
    """

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self._packed = bytearray()  # self.tokens as native 32-bit integers (image placeholders fit too)

    def extend(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)
        self._packed += array("i", tokens).tobytes()

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the longest matching suffix."""
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(self.tokens) > n:
                end = self._latest_end(n)
                if end is not None:
                    return self.tokens[end : end + k]
        return []

    def _latest_end(self, n: int) -> int | None:
        """Where the latest occurrence of the last ``n`` tokens that has a following token ends, if any."""
        width = _TOKEN_BYTES * n
        suffix = bytes(self._packed[-width:])
        limit = len(self._packed) - _TOKEN_BYTES  # an occurrence ending before the last token
        while (at := self._packed.rfind(suffix, 0, limit)) >= 0:
            if at % _TOKEN_BYTES == 0:
                return at // _TOKEN_BYTES + n
            limit = at + width - 1  # a match across token boundaries: look before where it starts
        return None


@dataclass
class Speculation:
    """One sequence's drafting state and counts (see the module docstring)."""

    mode: str
    index: NgramIndex = field(default_factory=NgramIndex)
    length: int = FIRST_DRAFT
    drafted: int = 0  # draft tokens put in batches
    accepted: int = 0  # of those, kept
    rate: float = 1.0  # recent share of drafted tokens kept (exponential average per step)
    paused_until: int = 0  # generated-token count before which auto mode drafts nothing

    def wants(self, n_generated: int, n_decoding: int) -> bool:
        """Whether to draft this step: ``on`` always, ``auto`` where it pays."""
        if self.mode == "off":
            return False
        if self.mode == "on":
            return True
        return n_decoding <= MAX_SPECULATING and n_generated >= self.paused_until

    def limit(self, room: int) -> int:
        """The draft length this step: the adaptive length cut to ``room`` (context and num_predict left)."""
        return max(0, min(self.length, room))

    def record(self, drafted: int, kept: int, n_generated: int) -> None:
        """Learn from one verified draft: grow the length when all of it was kept (3, 7, 15), shrink it otherwise."""
        if not drafted:
            return
        self.drafted += drafted
        self.accepted += kept
        self.rate = 0.7 * self.rate + 0.3 * (kept / drafted)
        self.length = min(MAX_DRAFT, self.length * 2 + 1) if kept == drafted else max(1, kept + 1)
        if self.mode == "auto" and self.drafted >= WARMUP_DRAFTED and self.rate < LOW_ACCEPTANCE:
            self.paused_until = n_generated + PAUSE_TOKENS
            self.rate = LOW_ACCEPTANCE  # a fresh chance after the pause
