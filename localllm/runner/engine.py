"""The engine loop: continuous batching of many sequences over one context.

One thread owns the context. Each step it

1. admits waiting requests into free sequence slots,
2. drops cancelled requests (their KV is released at once),
3. builds ONE batch: the next token of every decoding sequence, then prompt
   chunks of prefilling sequences up to the batch budget (chunked prefill, so
   a long prompt never stalls the others for its whole length),
4. evaluates it in one decode call,
5. samples every sequence whose logits were requested and hands the text to
   the request's ``emit`` callback (which the HTTP side makes thread-safe).

An engine whose logits are batch-invariant may put a draft after a decoding
sequence's token and keep what sampling confirms (exact speculative decoding,
:mod:`localllm.runner.speculation`): several tokens for one pass over the weights.

Requests beyond the slots wait in arrival order. One that cannot start yet
(its KV does not fit, or it waits for a prefill it will share) lets later
arrivals start before it, but at most ``MAX_BYPASS`` of them: then it goes
first, and nothing behind it starts until it does. Where a sequence's KV lives
and how a new prompt reuses cached KV is the subclass's business:
:class:`~localllm.runner.stream_engine.StreamEngine` keeps one llama.cpp KV
stream per slot and copies shared prefixes between them;
:class:`~localllm.runner.paged_engine.PagedEngine` gives every sequence a
table of shared, reference-counted blocks of the native engine's pool.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from localllm.backends.llama_cpp import Batch
from localllm.backends.projector import ImageChunk, is_placeholder
from localllm.options import CompletionOptions
from localllm.runner.sampling import Sampler
from localllm.runner.speculation import Speculation, StepCosts
from localllm.runner.textstream import TextStream

log = logging.getLogger("localllm.runner")

Emit = Callable[[dict[str, Any]], None]
Logprob = tuple[float, list[tuple[int, float]]]  # a token's log-probability and the top alternatives

#: How an engine reuses cached prompts (``/api/ps``'s ``cache``): from any shared prefix, its KV cut back to where
#: a prompt diverges; or, for a state that cannot be cut back (recurrent and hybrid models), only from a point
#: where a copy of the state was kept.
KV_PREFIX = "kv prefix"
RECURRENT_CHECKPOINTS = "recurrent state checkpoints"
WINDOW_CHECKPOINTS = "sliding window checkpoints"  # the same, for sliding-window layers that keep only their window

WAIT_FOR_PREFIX = 64  # a request waits for a running prefill that will share this many more tokens
MAX_BYPASS = 4  # later arrivals that may start before a waiting request; then it goes first
CHORES_AFTER_IDLE_S = 1.0  # idle this long (no request since), the engine does its chores (the KV pool's pages)


@dataclass(eq=False)
class CompletionRequest:
    """A prompt to continue, and where to send what the engine produces.

    ``emit`` is called from the engine thread with ``{"content": str}`` pieces,
    then exactly one ``{"done": True, ...}`` or ``{"error": str}``.
    Setting ``cancelled`` (from any thread) frees the sequence at the next step.
    ``shift``: when generation fills the context, slide it (bounded by ten
    contexts of output) instead of ending the answer with ``"length"``.
    ``draft`` proposes speculative tokens instead of prompt lookup (a draft model).
    ``images``: the chunk of each image in ``prompt``, by its first placeholder token
    (:mod:`localllm.backends.projector`); the request owns them and frees them when it ends.
    ``shown``: control tokens whose text goes out like any other (they carry no text otherwise):
    the markers of the model's chat format, which the daemon's parser reads.
    """

    prompt: list[int]
    options: CompletionOptions
    sampler: Sampler
    emit: Emit
    cancelled: bool = False
    shift: bool = True  # slide a full context (Ollama's default); False ends the answer with "length"
    bypassed: int = 0  # later arrivals started before it (fair admission: at most MAX_BYPASS)
    draft: Drafter | None = None
    n_ctx: int = 0  # the request's own context (``num_ctx``) bounding its sequence; 0: the engine's
    images: dict[int, ImageChunk] = field(default_factory=dict)
    shown: frozenset[int] = frozenset()  # control tokens passed on as text (a chat format's markers)

    def close_images(self) -> None:
        for chunk in self.images.values():
            chunk.close()
        self.images = {}


@dataclass(eq=False)
class Slot:
    """One sequence of the KV cache and the request it is serving."""

    seq_id: int
    request: CompletionRequest | None = None
    tokens: list[int] = field(default_factory=list)  # exactly the tokens held in KV, by position
    prompt: list[int] = field(default_factory=list)
    feed: list[int] = field(default_factory=list)  # what KV must hold before the next sample (the prompt, ...)
    prefilled: int = 0  # tokens of ``feed`` in KV so far
    pending: int = -1  # sampled token not yet in KV, or -1
    generated: list[int] = field(default_factory=list)
    text: TextStream = field(default_factory=TextStream)
    num_keep: int = 0
    n_ctx: int = 0  # its request's context: the sequence never grows past it
    limit: int = 0  # most tokens to generate
    t_admit: float = 0.0
    t_first: float = 0.0
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # of tokens whose text is not sent yet
    cached: int = 0  # prompt tokens taken from the prefix cache
    truncated: bool = False  # the prompt was cut to fit the context
    parked: bool = False  # holds no KV and waits for room to resume (preempted)
    preemptions: int = 0  # times its request was preempted (in the final stats, for /metrics)
    spec: Speculation | None = None  # drafting state, where the engine and the request speculate

    @property
    def idle(self) -> bool:
        return self.request is None


@dataclass
class CacheStats:
    """Prompt tokens seen and served from the cache (the hit rate in /health), and the cache's moves."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    spills: int = 0  # KV moved to host RAM
    restores: int = 0  # KV moved back from host RAM
    disk_restores: int = 0  # KV blocks read back from the disk tier (native engine)
    copies: int = 0  # partly shared blocks copied on write (native engine)

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class Step:
    """What one slot puts in a batch: its pending token (``decode``) or a chunk of its feed."""

    slot: Slot
    tokens: list[int]
    sample: bool  # sample after the last token
    decode: bool
    draft: list[int] = field(default_factory=list)  # the tail of ``tokens`` that is a guess, sampled at every row
    image: ImageChunk | None = None  # ``tokens`` are this image's placeholders: decoded by the projector


class Drafter(Protocol):
    """A source of drafts besides prompt lookup (:class:`localllm.runner.draft_model.DraftModel`)."""

    def propose(self, wants: list[tuple[int, list[int], int]]) -> dict[int, list[int]]:
        """For (sequence id, its tokens so far, most tokens to draft) each: its draft, by sequence id."""
        ...


class DecodeContext(Protocol):
    """What the loop needs of a backend context (the KV itself is the subclass's)."""

    n_batch: int

    def decode(self, batch: Batch) -> int: ...


def fit_prompt(tokens: list[int], n_ctx: int, num_keep: int) -> list[int]:
    """Ollama's truncation: keep the first ``num_keep`` tokens and the most recent ones."""
    if len(tokens) <= n_ctx:
        return tokens
    keep = max(0, min(num_keep, n_ctx // 2))
    discard = len(tokens) - n_ctx
    return tokens[:keep] + tokens[keep + discard :]


class Engine:
    """Continuous-batching generation over one context; subclasses own the KV (see the module docstring)."""

    speculates = False  # whether the engine verifies drafts (batch-invariant logits and :meth:`_trim`)
    cache_mode = KV_PREFIX

    def __init__(self, model: Any, ctx: DecodeContext, slots: list[Slot], n_ctx_seq: int, stats: CacheStats) -> None:
        self.model = model
        self.stats = stats
        self.ctx = ctx
        self.n_ctx_seq = n_ctx_seq
        self.batch = Batch(ctx.n_batch)
        self._slots = slots
        self._active: list[Slot] = []  # in admission order
        self._incoming: queue.SimpleQueue[CompletionRequest | None] = queue.SimpleQueue()
        self._waiting: deque[CompletionRequest] = deque()
        self._stopping = False
        self.check_kv = False  # check the KV books after every step (``--check-kv``)
        self._step_costs = StepCosts()  # what one and two rows cost a step: the price of a guessed draft token
        self.kv_state: dict[str, Any] = {}  # what /health reports of the KV, published by the engine thread
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)

    # -- public, any thread -------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def queue_depth(self) -> int:
        return len(self._waiting) + self._incoming.qsize()

    def start(self) -> None:
        self._publish()
        self._thread.start()

    def refusal(self, prompt: list[int], n_ctx: int) -> str | None:
        """Why a request with this prompt and context could never run here (None: it can); checked before it
        queues. Sequences here hold at most :attr:`n_ctx_seq` positions."""
        if n_ctx > self.n_ctx_seq:
            return (f"num_ctx {n_ctx} is more than this runner's context of {self.n_ctx_seq} tokens; "
                    "the model must be loaded with the larger context")
        return None

    def context_of(self, request: CompletionRequest) -> int:
        """The context bounding ``request``'s sequence: its own ``num_ctx``, else the runner's."""
        return request.n_ctx or self.n_ctx_seq

    def submit(self, request: CompletionRequest) -> None:
        """Queue a request; the engine admits it when a slot is free."""
        self._incoming.put(request)

    def stop(self, timeout: float = 30.0) -> bool:
        """End the loop (requests still running get an error); False if it did not end in time."""
        self._stopping = True
        self._incoming.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        self.batch.close()
        return True

    # -- what subclasses provide (engine thread) -------------------------------

    @property
    def cache_tokens(self) -> int:
        """Tokens whose KV is kept for later requests."""
        raise NotImplementedError

    @property
    def cache_ram_bytes(self) -> int:
        """Host RAM holding KV moved out of the context."""
        raise NotImplementedError

    def kv_blocks(self) -> dict[str, int]:
        """Block counts of a paged cache (empty for one without blocks)."""
        return {}

    def kv_disk(self) -> dict[str, Any]:
        """What the prefix cache's disk tier did (empty without one)."""
        return {}

    def persist(self) -> None:
        """Keep what can outlive the runner (the engine has stopped)."""

    def _place(self, request: CompletionRequest, num_keep: int, prompt: list[int]) -> Slot | None:
        """A slot for ``request`` holding as much of ``prompt`` as the cache has (``slot.cached`` set).

        None (and nothing changed) when the request should wait.
        """
        raise NotImplementedError

    def _prefill_stop(self, slot: Slot) -> int:
        """Where ``slot``'s next prefill chunk ends at the latest: the end of its feed, or earlier where the
        engine keeps the state reached there."""
        return len(slot.feed)

    def _reserve(self, plan: list[Step]) -> list[Step]:
        """Make room in KV for the planned tokens; the plan that can run."""
        return plan

    def _committed(self, plan: list[Step]) -> None:
        """The planned tokens are now in KV."""

    def _shift(self, slot: Slot) -> bool:
        """Make room at the end of ``slot``'s full context; whether its pending token can go in this step."""
        raise NotImplementedError

    def _free_kv(self, slot: Slot, keep: bool) -> None:
        """Let go of ``slot``'s KV; with ``keep`` it stays as a cache entry where it can."""
        raise NotImplementedError

    def _chore(self) -> bool:
        """One short piece of work for a moment with nothing to run (a request waits at most that long);
        whether more remains."""
        return False

    def _check_kv(self) -> None:
        """Assert that the KV books agree with themselves and with the slots."""
        raise NotImplementedError

    def _trim(self, slot: Slot, n: int) -> None:
        """Forget the last ``n`` tokens of ``slot``'s KV (a rejected draft), before they are committed."""
        raise NotImplementedError

    # -- engine thread ------------------------------------------------------

    def _room_to_decode(self, slot: Slot) -> bool:
        """Whether ``slot`` can take its pending token now. A full context is shifted, or, for a request
        that may not shift, ends the answer with ``"length"``."""
        if len(slot.tokens) < slot.n_ctx:
            return True
        if not slot.request.shift:
            self._finish(slot, "length")
            return False
        return self._shift(slot)

    def _run(self) -> None:
        chores, busy_at = True, time.monotonic()  # idle-time work left (_chore); when there last was work
        while True:
            idle = not self._active and not self._waiting
            wait = max(0.0, busy_at + CHORES_AFTER_IDLE_S - time.monotonic()) if idle and chores else None
            self._receive(block=idle, timeout=wait)
            if self._stopping:
                break
            if idle and not self._waiting and chores:  # nothing came for CHORES_AFTER_IDLE_S
                chores = self._chore()
                continue
            busy_at = time.monotonic()
            try:
                self._admit()
                self._reap_cancelled()
                if self._active:
                    self._step()
                if self.check_kv:
                    self._check_kv()
            except Exception as exc:  # a bug or a native failure: fail what runs, keep serving
                log.exception("engine step failed")
                self._fail_all(f"generation failed: {exc}")
            self._publish()
        for slot in list(self._active):
            self._fail(slot, "the runner is shutting down")
        self._receive(block=False)
        for request in self._waiting:
            request.emit({"error": "the runner is shutting down"})
            request.sampler.close()
            request.close_images()

    def _publish(self) -> None:
        """Replace :attr:`kv_state` with the books as they are now, for /health to read from any thread."""
        self.kv_state = {
            "kv_used_cells": sum(len(s.tokens) for s in self._slots),
            "cache_tokens": self.cache_tokens,
            "cache_hit_rate": round(self.stats.hit_rate, 4),
            "cache_mode": self.cache_mode,
            "cache_reused_tokens": self.stats.cached_tokens,
            "cache_ram_bytes": self.cache_ram_bytes,
            "kv_blocks": self.kv_blocks(),
            "kv_disk": self.kv_disk(),
        }

    def _receive(self, block: bool, timeout: float | None = None) -> None:
        try:
            item = self._incoming.get(block=block, timeout=timeout)
            while True:
                if item is not None:
                    self._waiting.append(item)
                item = self._incoming.get_nowait()
        except queue.Empty:
            pass

    def _admit(self) -> None:
        """Start waiting requests in arrival order; one that cannot start yet is bypassed a bounded number of times."""
        deferred: list[CompletionRequest] = []
        while self._waiting and len(self._active) < len(self._slots):
            request = self._waiting.popleft()
            if request.cancelled:
                request.sampler.close()
                request.close_images()
                continue
            num_keep, prompt = self._fit(request)
            slot = self._place(request, num_keep, prompt)
            if slot is None:
                deferred.append(request)
                if request.bypassed >= MAX_BYPASS:
                    break  # its turn: nothing behind it starts before it does
                continue
            for earlier in deferred:
                earlier.bypassed += 1
            slot.num_keep = num_keep
            self._start(slot, request, prompt)
        self._waiting.extendleft(reversed(deferred))

    def _fit(self, request: CompletionRequest) -> tuple[int, list[int]]:
        """``num_keep`` and the prompt cut to the context as Ollama does."""
        o = request.options
        n_ctx = self.context_of(request)
        num_keep = len(request.prompt) if o.num_keep < 0 else o.num_keep
        num_keep = max(0, min(num_keep, n_ctx // 2))
        prompt = fit_prompt(request.prompt, n_ctx, num_keep)
        if len(prompt) < len(request.prompt):
            log.warning(
                "truncating input prompt: limit=%d prompt=%d keep=%d new=%d",
                n_ctx, len(request.prompt), num_keep, len(prompt),
            )
        return num_keep, prompt

    def _start(self, slot: Slot, request: CompletionRequest, prompt: list[int]) -> None:
        o = request.options
        n_ctx = slot.n_ctx = self.context_of(request)
        if o.num_predict == -2:
            slot.limit = max(0, n_ctx - len(prompt))
        elif o.num_predict < 0 or o.num_predict > 10 * n_ctx:
            slot.limit = 10 * n_ctx  # as Ollama: at most ten context shifts, never forever
        else:
            slot.limit = o.num_predict
        slot.request = request
        slot.prompt = prompt
        slot.truncated = len(prompt) < len(request.prompt)
        slot.feed = prompt
        slot.prefilled = slot.cached
        slot.pending = -1
        slot.generated = []
        slot.logprobs = []
        slot.text = TextStream(o.stop)
        slot.t_admit = time.perf_counter()
        slot.t_first = 0.0
        slot.preemptions = 0
        self.stats.prompt_tokens += len(prompt)
        self.stats.cached_tokens += slot.cached
        slot.spec = None
        if self.speculates and o.speculative != "off":
            slot.spec = Speculation(o.speculative)
            slot.spec.index.extend(prompt)
        request.sampler.accept_prompt([t for t in prompt if not is_placeholder(t)])
        self._active.append(slot)

    def _reap_cancelled(self) -> None:
        for slot in [s for s in self._active if s.request.cancelled]:
            self._release(slot, keep=True)
        if self._waiting and any(r.cancelled for r in self._waiting):
            for request in [r for r in self._waiting if r.cancelled]:
                request.sampler.close()
                request.close_images()
            self._waiting = deque(r for r in self._waiting if not r.cancelled)

    def _next_position(self, slot: Slot) -> int:
        """The position of the next token ``slot`` decodes: one a token (engines with M-RoPE images differ)."""
        return len(slot.tokens)

    def _decode_image(self, slot: Slot, image: ImageChunk) -> None:
        """Put ``image`` into ``slot``'s KV after its tokens (engines that take images)."""
        raise NotImplementedError

    def _step(self) -> None:
        plan = self._reserve(self._plan())
        if not plan:
            return
        for step in [s for s in plan if s.image is not None]:
            plan.remove(step)
            try:
                self._decode_image(step.slot, step.image)
            except Exception as exc:
                self._fail(step.slot, f"generation failed: {exc}")
                continue
            step.slot.tokens.extend(step.tokens)
        if not plan:
            return
        batch = self.batch
        batch.clear()
        rows: list[tuple[Step, int]] = []  # steps to sample, with the logits row of their first sample
        for step in sorted(plan, key=lambda p: p.slot.seq_id):
            slot, seq, pos = step.slot, step.slot.seq_id, self._next_position(step.slot)
            first = len(step.tokens) - 1 - len(step.draft)  # the token whose logits are sampled first
            for j, token in enumerate(step.tokens):
                row = batch.add(token, pos + j, seq, step.sample and j >= first)
                if j == first and step.sample:
                    rows.append((step, row))
            slot.tokens.extend(step.tokens)
        started = time.perf_counter()
        rc = self.ctx.decode(batch)
        if rc != 0:
            reason = "no free KV cells for the batch" if rc == 1 else f"decode returned {rc}"
            for step in plan:
                self._fail(step.slot, f"generation failed: {reason}")
            return
        picked = [(step.slot, self._verify(step, row)) for step, row in rows]
        self._committed(plan)
        now = time.perf_counter()
        self._step_costs.observe(batch.n_tokens, now - started)  # decoded and verified: what a guess costs
        for slot, tokens in picked:
            if not slot.t_first:
                slot.t_first = now
            for token, logprob in tokens:
                if slot.request is None:  # finished by an earlier token of the same step
                    break
                self._on_token(slot, token, logprob)

    def _verify(self, step: Step, row: int) -> list[tuple[int, Logprob | None]]:
        """Sample ``step``'s rows from ``row`` on, in order, while each sample equals the draft token after it.

        Every sample is the sampler's next call, as in one-at-a-time decoding,
        so the tokens (seeded ones too) are plain decoding's. The rejected
        rest of the draft leaves the KV before it is committed.
        """
        slot, draft = step.slot, step.draft
        sampler = slot.request.sampler
        picks: list[tuple[int, Logprob | None]] = []
        for i in range(len(draft) + 1):
            token = sampler.sample(self.ctx, row + i)
            picks.append((token, sampler.last_logprobs))
            if i == len(draft) or token != draft[i] or self.model.vocab.is_eog(token):
                break
        kept = len(picks) - 1
        if draft:
            if kept < len(draft):
                self._trim(slot, len(draft) - kept)
            slot.spec.record(len(draft), kept, len(slot.generated) + len(picks))
        return picks

    def _plan(self) -> list[Step]:
        """What each slot puts in this step's batch.

        Every decoding sequence gets its one token; the remaining budget goes
        to prefill chunks in admission order. The batch itself is laid out by
        sequence id: llama.cpp splits a multi-stream batch into one ubatch per
        run of consecutive sequence ids.
        """
        plan = []
        for slot in list(self._active):
            if slot.pending >= 0 and not slot.parked and self._room_to_decode(slot):
                plan.append(Step(slot, [slot.pending], sample=True, decode=True))
                slot.pending = -1
        budget = self.batch.capacity - len(plan)
        if self.speculates:
            budget -= self._add_drafts(plan, budget)
        for slot in self._active:
            image = slot.request.images.get(slot.feed[slot.prefilled]) if slot.prefilled < len(slot.feed) else None
            if image is not None and not slot.parked:  # an image goes alone, decoded apart from the batch
                slot.prefilled += image.n_tokens
                plan.append(Step(slot, slot.feed[slot.prefilled - image.n_tokens : slot.prefilled], sample=False,
                                 decode=False, image=image))
                continue
            n = 0 if slot.parked else min(self._prefill_stop(slot) - slot.prefilled, budget)
            chunk = slot.feed[slot.prefilled : slot.prefilled + n]
            n = next((i for i, token in enumerate(chunk) if is_placeholder(token)), n)  # up to the next image
            if n > 0:
                slot.prefilled += n
                plan.append(Step(slot, chunk[:n], sample=slot.prefilled == len(slot.feed), decode=False))
                budget -= n
        return plan

    def _add_drafts(self, plan: list[Step], budget: int) -> int:
        """Put drafts after the decoding steps that want one; how many tokens they add.

        A draft never runs past the context, the request's ``num_predict``
        or the batch.
        """
        wanting: list[tuple[Step, int]] = []
        for step in plan:
            slot = step.slot
            if slot.spec is not None and slot.spec.wants(len(slot.generated), len(plan)):
                room = min(slot.n_ctx - len(slot.tokens) - 1, slot.limit - len(slot.generated) - 1, budget)
                k = slot.spec.limit(room)
                if k > 0:
                    wanting.append((step, k))
                    budget -= k
        by_model: dict[Drafter, list[tuple[int, list[int], int]]] = {}
        for step, k in wanting:
            slot = step.slot
            index = slot.spec.index
            index.extend(slot.generated[len(index) - len(slot.prompt) :])
            drafter = slot.request.draft
            if drafter is None:
                step.draft = slot.spec.draft(k, len(slot.generated), self._step_costs.extra_row())
            else:
                by_model.setdefault(drafter, []).append((slot.seq_id, slot.tokens + step.tokens, k))
        for drafter, wants in by_model.items():
            drafts = drafter.propose(wants)
            for step, _ in wanting:
                step.draft = drafts.get(step.slot.seq_id, step.draft)
        added = 0
        for step, _ in wanting:
            step.tokens = step.tokens + step.draft
            added += len(step.draft)
        return added

    def _on_token(self, slot: Slot, token: int, logprob: Logprob | None = None) -> None:
        if self.model.vocab.is_eog(token):
            self._finish(slot, "stop")
            return
        if len(slot.generated) >= slot.limit:
            self._finish(slot, "length")
            return
        slot.generated.append(token)
        if logprob is not None:
            slot.logprobs.append(self._logprob_entry(token, *logprob))
        vocab = self.model.vocab
        text = slot.text.feed(vocab.token_text(token).encode() if token in slot.request.shown else vocab.piece(token))
        if text:
            slot.request.emit(self._content(slot, text))
        if slot.text.stopped:
            self._finish(slot, "stop")
        elif len(slot.generated) >= slot.limit:
            self._finish(slot, "length")
        else:
            slot.pending = token

    def _logprob_entry(self, token: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
        def describe(tok: int, value: float) -> dict[str, Any]:
            piece = self.model.vocab.piece(tok)
            return {"id": tok, "token": piece.decode("utf-8", "replace"), "bytes": list(piece), "logprob": value}

        entry = describe(token, logprob)
        entry["top_logprobs"] = [describe(tok, value) for tok, value in top]
        return entry

    @staticmethod
    def _content(slot: Slot, text: str) -> dict[str, Any]:
        """A content event carrying the log-probabilities of the tokens it completes."""
        event: dict[str, Any] = {"content": text}
        if slot.logprobs:
            event["logprobs"], slot.logprobs = slot.logprobs, []
        return event

    def _finish(self, slot: Slot, reason: str) -> None:
        request = slot.request
        tail = slot.text.flush()
        if tail or slot.logprobs:
            request.emit(self._content(slot, tail))
        now = time.perf_counter()
        first = slot.t_first or now
        request.emit(
            {
                "done": True,
                "done_reason": reason,
                "prompt_eval_count": len(slot.prompt) - slot.cached,
                "prompt_eval_duration": int((first - slot.t_admit) * 1e9),
                "eval_count": len(slot.generated),
                "eval_duration": int((now - first) * 1e9),
                "cached_tokens": slot.cached,
                "preemptions": slot.preemptions,
                "context": [t for t in slot.prompt if not is_placeholder(t)] + slot.generated,
                **({"truncated": True} if slot.truncated else {}),
                **self._draft_counts(slot),
                **({"stop_sequence": slot.text.matched} if slot.text.matched else {}),
            }
        )
        self._release(slot, keep=True)

    @staticmethod
    def _draft_counts(slot: Slot) -> dict[str, int]:
        """Drafted and kept tokens of a request that could speculate (llama-server's ``draft_n``, ``draft_n_accepted``)."""
        if slot.spec is None:
            return {}
        return {"draft_count": slot.spec.drafted, "draft_accepted_count": slot.spec.accepted}

    def _fail_all(self, message: str) -> None:
        """Fail every running request; if even that fails the KV books are beyond repair: end the process
        (its requests get an error from the daemon, which loads the model again) rather than hang them."""
        try:
            for slot in list(self._active):
                self._fail(slot, message)
        except Exception:
            log.critical("the engine cannot recover from a failed step; exiting", exc_info=True)
            os._exit(70)

    def _fail(self, slot: Slot, message: str) -> None:
        log.error("request failed: %s", message)
        slot.request.emit({"error": message})
        self._release(slot)

    def _release(self, slot: Slot, keep: bool = False) -> None:
        """Return the slot to the pool; with ``keep`` its KV stays as a cache entry."""
        slot.request.sampler.close()
        slot.request.close_images()
        slot.request = None
        slot.prompt = []
        slot.feed = []
        slot.pending = -1
        self._active.remove(slot)
        self._free_kv(slot, keep)
