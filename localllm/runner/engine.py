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

Requests beyond the slots wait in arrival order. Where a sequence's KV lives
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
from localllm.options import CompletionOptions
from localllm.runner.sampling import Sampler
from localllm.runner.textstream import TextStream

log = logging.getLogger("localllm.runner")

Emit = Callable[[dict[str, Any]], None]

WAIT_FOR_PREFIX = 64  # a request waits for a running prefill that will share this many more tokens


@dataclass(eq=False)
class CompletionRequest:
    """A prompt to continue, and where to send what the engine produces.

    ``emit`` is called from the engine thread with ``{"content": str}`` pieces,
    then exactly one ``{"done": True, ...}`` or ``{"error": str}``.
    Setting ``cancelled`` (from any thread) frees the sequence at the next step.
    """

    prompt: list[int]
    options: CompletionOptions
    sampler: Sampler
    emit: Emit
    cancelled: bool = False


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
    limit: int = 0  # most tokens to generate
    t_admit: float = 0.0
    t_first: float = 0.0
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # of tokens whose text is not sent yet
    cached: int = 0  # prompt tokens taken from the prefix cache
    parked: bool = False  # holds no KV and waits for room to resume (preempted)

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
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)

    # -- public, any thread -------------------------------------------------

    @property
    def kv_used_cells(self) -> int:
        """KV cells held by sequences (read without locking: a snapshot for /health)."""
        return sum(len(s.tokens) for s in self._slots)

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

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def queue_depth(self) -> int:
        return len(self._waiting) + self._incoming.qsize()

    def start(self) -> None:
        self._thread.start()

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

    # -- what subclasses provide ----------------------------------------------

    def _place(self, request: CompletionRequest, num_keep: int, prompt: list[int]) -> Slot | None:
        """A slot for ``request`` holding as much of ``prompt`` as the cache has (``slot.cached`` set).

        None (and nothing changed) when the request should wait.
        """
        raise NotImplementedError

    def _reserve(self, plan: list[Step]) -> list[Step]:
        """Make room in KV for the planned tokens; the plan that can run."""
        return plan

    def _committed(self, plan: list[Step]) -> None:
        """The planned tokens are now in KV."""

    def _room_to_decode(self, slot: Slot) -> bool:
        """Whether ``slot`` can take its pending token (shifting its context if needed)."""
        raise NotImplementedError

    def _free_kv(self, slot: Slot, keep: bool) -> None:
        """Let go of ``slot``'s KV; with ``keep`` it stays as a cache entry where it can."""
        raise NotImplementedError

    # -- engine thread ------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._receive(block=not self._active and not self._waiting)
            if self._stopping:
                break
            try:
                self._admit()
                self._reap_cancelled()
                if self._active:
                    self._step()
            except Exception as exc:  # a bug or a native failure: fail what runs, keep serving
                log.exception("engine step failed")
                self._fail_all(f"generation failed: {exc}")
        for slot in list(self._active):
            self._fail(slot, "the runner is shutting down")
        self._receive(block=False)
        for request in self._waiting:
            request.emit({"error": "the runner is shutting down"})
            request.sampler.close()

    def _receive(self, block: bool) -> None:
        try:
            item = self._incoming.get(block=block)
            while True:
                if item is not None:
                    self._waiting.append(item)
                item = self._incoming.get_nowait()
        except queue.Empty:
            pass

    def _admit(self) -> None:
        deferred: list[CompletionRequest] = []
        while self._waiting and len(self._active) < len(self._slots):
            request = self._waiting.popleft()
            if request.cancelled:
                request.sampler.close()
                continue
            num_keep, prompt = self._fit(request)
            slot = self._place(request, num_keep, prompt)
            if slot is None:
                deferred.append(request)
            else:
                slot.num_keep = num_keep
                self._start(slot, request, prompt)
        self._waiting.extendleft(reversed(deferred))

    def _fit(self, request: CompletionRequest) -> tuple[int, list[int]]:
        """``num_keep`` and the prompt cut to the context as Ollama does."""
        o = request.options
        n_ctx = self.n_ctx_seq
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
        n_ctx = self.n_ctx_seq
        if o.num_predict == -2:
            slot.limit = max(0, n_ctx - len(prompt))
        elif o.num_predict < 0 or o.num_predict > 10 * n_ctx:
            slot.limit = 10 * n_ctx  # as Ollama: at most ten context shifts, never forever
        else:
            slot.limit = o.num_predict
        slot.request = request
        slot.prompt = prompt
        slot.feed = prompt
        slot.prefilled = slot.cached
        slot.pending = -1
        slot.generated = []
        slot.logprobs = []
        slot.text = TextStream(o.stop)
        slot.t_admit = time.perf_counter()
        slot.t_first = 0.0
        self.stats.prompt_tokens += len(prompt)
        self.stats.cached_tokens += slot.cached
        request.sampler.accept_prompt(prompt)
        self._active.append(slot)

    def _reap_cancelled(self) -> None:
        for slot in [s for s in self._active if s.request.cancelled]:
            self._release(slot, keep=True)
        if self._waiting and any(r.cancelled for r in self._waiting):
            for request in [r for r in self._waiting if r.cancelled]:
                request.sampler.close()
            self._waiting = deque(r for r in self._waiting if not r.cancelled)

    def _step(self) -> None:
        plan = self._reserve(self._plan())
        if not plan:
            return
        batch = self.batch
        batch.clear()
        rows: list[tuple[Slot, int]] = []  # slots to sample, with their logits row
        for step in sorted(plan, key=lambda p: p.slot.seq_id):
            slot, seq, pos = step.slot, step.slot.seq_id, len(step.slot.tokens)
            for j, token in enumerate(step.tokens):
                row = batch.add(token, pos + j, seq, False)
            if step.sample:
                batch.request_logits(row)
                rows.append((slot, row))
            slot.tokens.extend(step.tokens)
        rc = self.ctx.decode(batch)
        if rc != 0:
            reason = "no free KV cells for the batch" if rc == 1 else f"decode returned {rc}"
            for step in plan:
                self._fail(step.slot, f"generation failed: {reason}")
            return
        self._committed(plan)
        now = time.perf_counter()
        for slot, row in rows:
            if not slot.t_first:
                slot.t_first = now
            self._on_token(slot, slot.request.sampler.sample(self.ctx, row))

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
        for slot in self._active:
            n = 0 if slot.parked else min(len(slot.feed) - slot.prefilled, budget)
            if n > 0:
                slot.prefilled += n
                chunk = slot.feed[slot.prefilled - n : slot.prefilled]
                plan.append(Step(slot, chunk, sample=slot.prefilled == len(slot.feed), decode=False))
                budget -= n
        return plan

    def _on_token(self, slot: Slot, token: int) -> None:
        if self.model.vocab.is_eog(token):
            self._finish(slot, "stop")
            return
        if len(slot.generated) >= slot.limit:
            self._finish(slot, "length")
            return
        slot.generated.append(token)
        if slot.request.sampler.last_logprobs is not None:
            slot.logprobs.append(self._logprob_entry(token, *slot.request.sampler.last_logprobs))
        text = slot.text.feed(self.model.vocab.piece(token))
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
                "context": slot.prompt + slot.generated,
                **({"stop_sequence": slot.text.matched} if slot.text.matched else {}),
            }
        )
        self._release(slot, keep=True)

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
        slot.request = None
        slot.prompt = []
        slot.feed = []
        slot.pending = -1
        self._active.remove(slot)
        self._free_kv(slot, keep)
