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

Where no n-gram of ``NGRAM_MIN`` tokens or more matches, a sequence may
*guess* one token from a shorter match. A guess holds less often, so it
pays only where one more row costs the step little: it is made while the
recent share of guesses kept exceeds, with a margin, what a second row
adds to a step's time (decoding and verifying), as :class:`StepCosts`
measures it on the running engine: a few percent on Gemma 3 and SmolLM2,
whose steps are mostly one pass over the weights, more where the matrix
products are compute-bound.
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
GUESS_NGRAM_MIN = 1  # a guess continues a match of this many tokens at least (and fewer than NGRAM_MIN)
WARMUP_GUESSES = 4  # guesses seen before their rate is trusted
GUESS_MARGIN = 2.0  # guesses go on while kept this many times more often than the second row costs (noise)
ROW_COST_PRIOR = 0.3  # what a second row adds to a step's time, until the engine has timed both
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
        self._packed = bytearray()  # the tokens as native 32-bit integers (image placeholders fit too)

    def __len__(self) -> int:
        return len(self._packed) // _TOKEN_BYTES

    def extend(self, tokens: list[int]) -> None:
        self._packed += array("i", tokens).tobytes()

    def draft(self, k: int, longest: int = NGRAM_MAX, shortest: int = NGRAM_MIN) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the longest matching suffix
        (of ``longest`` tokens down to ``shortest``)."""
        for n in range(longest, shortest - 1, -1):
            if len(self) > n:
                end = self._latest_end(n)
                if end is not None:
                    return array("i", self._packed[_TOKEN_BYTES * end : _TOKEN_BYTES * (end + k)]).tolist()
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


class StepCosts:
    """How long the engine's steps of one row and of two rows take, decoded and verified (exponential averages).

    Their ratio is the price of a guessed token: a guess kept more often
    than the second row's share of a step's time pays for itself.
    """

    def __init__(self) -> None:
        self._seconds: dict[int, float] = {}

    def observe(self, rows: int, seconds: float) -> None:
        if rows in (1, 2):
            known = self._seconds.get(rows)
            self._seconds[rows] = seconds if known is None else 0.8 * known + 0.2 * seconds

    def extra_row(self) -> float:
        """What a second row adds to a one-row step, as a share of its time (``ROW_COST_PRIOR`` until timed)."""
        one, two = self._seconds.get(1), self._seconds.get(2)
        if not one or two is None:
            return ROW_COST_PRIOR
        return max(0.0, two / one - 1)


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
    guesses: int = 0  # one-token drafts from a match shorter than NGRAM_MIN
    guess_rate: float = 0.5  # recent share of guesses kept (exponential average; an even chance at first)
    guesses_paused_until: int = 0  # generated-token count before which auto mode guesses nothing
    guess_pauses: int = 0  # pauses in a row: each lasts twice the one before
    guessing: bool = False  # whether the draft now being verified is a guess

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

    def draft(self, k: int, n_generated: int, extra_row: float) -> list[int]:
        """Up to ``k`` tokens by prompt lookup, else one guess where guesses pay (``extra_row``: StepCosts')."""
        tokens = self.index.draft(k)
        self.guessing = not tokens and k > 0 and self._guesses_pay(n_generated, extra_row)
        return self.index.draft(1, NGRAM_MIN - 1, GUESS_NGRAM_MIN) if self.guessing else tokens

    def _guesses_pay(self, n_generated: int, extra_row: float) -> bool:
        """Whether to guess now; in ``auto``, where recent guesses stopped paying, this starts a pause."""
        if self.mode == "on":
            return True
        if n_generated < self.guesses_paused_until:
            return False
        if self.guesses >= WARMUP_GUESSES and self.guess_rate <= GUESS_MARGIN * extra_row:
            self.guesses_paused_until = n_generated + (PAUSE_TOKENS << min(self.guess_pauses, 3))
            self.guess_pauses += 1
            self.guess_rate = 0.5  # a fresh chance after the pause, shorter than the first
            return False
        return True

    def record(self, drafted: int, kept: int, n_generated: int) -> None:
        """Learn from one verified draft: grow the length when all of it was kept (3, 7, 15), shrink it otherwise.

        A guess counts among the drafted tokens but leaves the length alone: it says how often a short match
        holds, not a long one."""
        if not drafted:
            return
        self.drafted += drafted
        self.accepted += kept
        if self.guessing:
            self.guesses += 1
            self.guess_rate = 0.7 * self.guess_rate + 0.3 * kept
            if kept:
                self.guess_pauses = 0
            return
        self.rate = 0.7 * self.rate + 0.3 * (kept / drafted)
        self.length = min(MAX_DRAFT, self.length * 2 + 1) if kept == drafted else max(1, kept + 1)
        if self.mode == "auto" and self.drafted >= WARMUP_DRAFTED and self.rate < LOW_ACCEPTANCE:
            self.paused_until = n_generated + PAUSE_TOKENS
            self.rate = LOW_ACCEPTANCE  # a fresh chance after the pause
