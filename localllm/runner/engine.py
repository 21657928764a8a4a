"""The engine loop: continuous batching of many sequences over one llama_context.

One thread owns the context. Each step it

1. admits waiting requests into free sequence slots,
2. drops cancelled requests (their KV cells are freed at once),
3. builds ONE batch: the next token of every decoding sequence, then prompt
   chunks of prefilling sequences up to the batch budget (chunked prefill, so
   a long prompt never stalls the others for its whole length),
4. calls ``llama_decode`` once,
5. samples every sequence whose logits were requested and hands the text to
   the request's ``emit`` callback (which the HTTP side makes thread-safe).

Requests beyond the slots wait in arrival order. A slot knows exactly which
tokens its sequence holds in the KV cache (:attr:`Slot.tokens`), and keeps
them after its request ends: the prefix cache (:mod:`.prefix_cache`) finds
the slot, running sequence or spilled copy sharing the longest prefix with a
new prompt, the engine copies those cells (or takes the idle slot as it is)
and prefills only the rest. A request whose prompt starts like one still
being prefilled waits for it instead of computing the same prefix twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from localllm.runner.backend import Batch, Context, Model
from localllm.runner.options import CompletionOptions
from localllm.runner.prefix_cache import CacheStats, HostSpill, RadixTree, Spilled
from localllm.runner.sampling import Sampler
from localllm.runner.textstream import TextStream

log = logging.getLogger("localllm.runner")

Emit = Callable[[dict[str, Any]], None]

MIN_REUSE = 16  # fewer shared tokens are not worth a stream copy or a restore
MIN_SPILL = 64  # shorter idle sequences are dropped, not spilled to RAM, when their slot is needed
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
    """One sequence id of the KV cache and the request it is serving."""

    seq_id: int
    request: CompletionRequest | None = None
    tokens: list[int] = field(default_factory=list)  # exactly the tokens held in KV, by position
    prompt: list[int] = field(default_factory=list)
    prefilled: int = 0  # prompt tokens evaluated so far
    pending: int = -1  # sampled token not yet in KV, or -1
    generated: list[int] = field(default_factory=list)
    text: TextStream = field(default_factory=TextStream)
    num_keep: int = 0
    limit: int = 0  # most tokens to generate
    t_admit: float = 0.0
    t_first: float = 0.0
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # of tokens whose text is not sent yet
    cached: int = 0  # prompt tokens taken from the prefix cache
    exact: int = 0  # leading tokens whose KV equals a fresh computation (a context shift breaks that)
    last_used: float = 0.0  # when its request ended: the least recently used idle slot is evicted first
    copy_pending: bool = False  # target of a stream copy that llama.cpp runs at the next decode

    @property
    def idle(self) -> bool:
        return self.request is None


def fit_prompt(tokens: list[int], n_ctx: int, num_keep: int) -> list[int]:
    """Ollama's truncation: keep the first ``num_keep`` tokens and the most recent ones."""
    if len(tokens) <= n_ctx:
        return tokens
    keep = max(0, min(num_keep, n_ctx // 2))
    discard = len(tokens) - n_ctx
    return tokens[:keep] + tokens[keep + discard :]


class Engine:
    """Continuous-batching generation over one context; see the module docstring."""

    def __init__(
        self, model: Model, ctx: Context, n_parallel: int, n_ctx_seq: int, cache_ram_bytes: int = 0
    ) -> None:
        self.model = model
        self.ctx = ctx
        self.n_ctx_seq = n_ctx_seq
        self.batch = Batch(ctx.n_batch)
        self._slots = [Slot(seq_id=i) for i in range(n_parallel)]
        self._active: list[Slot] = []  # in admission order
        self._tree: RadixTree[Slot | Spilled] = RadixTree()
        # the native engine cannot save a sequence's state: it only keeps what is resident
        self._spill = HostSpill(cache_ram_bytes if hasattr(ctx, "seq_state") else 0)
        self.stats = CacheStats()
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
        """Tokens whose KV idle slots keep for later requests."""
        return sum(len(s.tokens) for s in self._slots if s.idle)

    @property
    def cache_ram_bytes(self) -> int:
        """Host RAM held by spilled sequences."""
        return self._spill.used

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
                for slot in list(self._active):
                    self._fail(slot, f"generation failed: {exc}")
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
        for slot in self._slots:  # a decode ran since the last admission: the copies are done
            slot.copy_pending = False
        deferred: list[CompletionRequest] = []
        while self._waiting and len(self._active) < len(self._slots):
            request = self._waiting.popleft()
            if request.cancelled:
                request.sampler.close()
            elif not self._place(request):
                deferred.append(request)
        self._waiting.extendleft(reversed(deferred))

    def _place(self, request: CompletionRequest) -> bool:
        """Start ``request`` in a slot holding as much of its prompt as the cache has.

        False (and nothing done) when a running prefill will soon hold much
        more of the prompt than anything cached now: the request waits for it.
        """
        num_keep, prompt = self._fit(request)
        shared, holders = self._tree.match(prompt)
        shared = min(shared, len(prompt) - 1)  # evaluate at least one token: its logits start the answer
        source, usable = self._best_source(holders, shared)
        if usable + WAIT_FOR_PREFIX <= shared and any(
            isinstance(h, Slot) and not h.idle and (h.prefilled < shared or h.copy_pending) for h in holders
        ):
            return False
        if isinstance(source, Slot) and source.idle and usable >= MIN_REUSE:
            target = source
            if len(target.tokens) > usable:
                self._spill_out(target)  # keep the conversation this request branches off
            self._truncate(target, usable)
        else:
            target = self._victim()
            usable = self._load(target, source, usable) if usable >= MIN_REUSE else 0
        target.num_keep = num_keep
        target.cached = usable
        self.stats.prompt_tokens += len(prompt)
        self.stats.cached_tokens += usable
        self._tree.insert(prompt, target)  # what it will hold: later requests may wait for it
        self._start(target, request, prompt)
        return True

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

    def _best_source(self, holders: set[Slot | Spilled], shared: int) -> tuple[Slot | Spilled | None, int]:
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

    def _victim(self) -> Slot:
        """A slot to start a request in: an empty one, else the least recently used idle one."""
        idle = [s for s in self._slots if s.idle]
        victim = min(idle, key=lambda s: (len(s.tokens) > 0, s.last_used))
        if victim.tokens:
            self._spill_out(victim)
            self._truncate(victim, 0)
        return victim

    def _load(self, target: Slot, source: Slot | Spilled | None, usable: int) -> int:
        """Give the empty ``target`` the first ``usable`` tokens of ``source``; how many it got."""
        if isinstance(source, Slot):
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
        self.ctx.seq_rm(target.seq_id, usable, -1)
        target.tokens = tokens
        target.exact = usable
        return usable

    def _truncate(self, slot: Slot, n: int) -> None:
        """Keep only the first ``n`` tokens of ``slot``'s KV (none: the slot leaves the cache)."""
        self.ctx.seq_rm(slot.seq_id, n, -1)
        del slot.tokens[n:]
        slot.exact = min(slot.exact, n)
        if n == 0:
            self._tree.remove(slot)

    def _spill_out(self, slot: Slot) -> None:
        """Copy an idle slot's KV to host RAM if it is long, new and fits the budget."""
        tokens = tuple(slot.tokens[: slot.exact])
        if len(tokens) < MIN_SPILL or not self._spill.budget or self._tree.covers(tokens, besides=slot):
            return
        entry = Spilled(tokens, self.ctx.seq_state(slot.seq_id))
        for old in self._spill:  # older turns of the same conversation are now redundant
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
        slot.prefilled = slot.cached
        slot.exact = self.n_ctx_seq  # all it holds matches a fresh computation until a context shift
        slot.pending = -1
        slot.generated = []
        slot.logprobs = []
        slot.text = TextStream(o.stop)
        slot.t_admit = time.perf_counter()
        slot.t_first = 0.0
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
        plan = self._plan()
        if not plan:
            return
        batch = self.batch
        batch.clear()
        rows: list[tuple[Slot, int]] = []  # slots to sample, with their logits row
        for slot, tokens, sample in sorted(plan, key=lambda p: p[0].seq_id):
            seq, pos = slot.seq_id, len(slot.tokens)
            for j, token in enumerate(tokens):
                row = batch.add(token, pos + j, seq, False)
            if sample:
                batch.request_logits(row)
                rows.append((slot, row))
            slot.tokens.extend(tokens)
        rc = self.ctx.decode(batch)
        if rc != 0:
            reason = "no free KV cells for the batch" if rc == 1 else f"llama_decode returned {rc}"
            for slot, _, _ in plan:
                self._fail(slot, f"generation failed: {reason}")
            return
        now = time.perf_counter()
        for slot, row in rows:
            if not slot.t_first:
                slot.t_first = now
            self._on_token(slot, slot.request.sampler.sample(self.ctx, row))

    def _plan(self) -> list[tuple[Slot, list[int], bool]]:
        """What each slot puts in this step's batch: (slot, tokens, sample after it?).

        Every decoding sequence gets its one token; the remaining budget goes
        to prompt chunks in admission order. The batch itself is laid out by
        sequence id: llama.cpp splits a multi-stream batch into one ubatch per
        run of consecutive sequence ids.
        """
        plan = []
        for slot in list(self._active):
            if slot.pending >= 0 and (len(slot.tokens) < self.n_ctx_seq or self._shift(slot)):
                plan.append((slot, [slot.pending], True))
                slot.pending = -1
        budget = self.batch.capacity - len(plan)
        for slot in self._active:
            todo = len(slot.prompt) - slot.prefilled
            n = min(todo, budget)
            if n > 0:
                slot.prefilled += n
                plan.append((slot, slot.prompt[slot.prefilled - n : slot.prefilled], slot.prefilled == len(slot.prompt)))
                budget -= n
        return plan

    def _on_token(self, slot: Slot, token: int) -> None:
        if self.model.is_eog(token):
            self._finish(slot, "stop")
            return
        if len(slot.generated) >= slot.limit:
            self._finish(slot, "length")
            return
        slot.generated.append(token)
        if slot.request.sampler.last_logprobs is not None:
            slot.logprobs.append(self._logprob_entry(token, *slot.request.sampler.last_logprobs))
        text = slot.text.feed(self.model.piece(token))
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
            piece = self.model.piece(tok)
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

    def _shift(self, slot: Slot) -> bool:
        """Make room at the context end: drop half of the tokens after ``num_keep``."""
        if not self.ctx.can_shift:
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
                "prompt_eval_count": slot.prefilled - slot.cached,
                "prompt_eval_duration": int((first - slot.t_admit) * 1e9),
                "eval_count": len(slot.generated),
                "eval_duration": int((now - first) * 1e9),
                "cached_tokens": slot.cached,
                "context": slot.prompt + slot.generated,
            }
        )
        self._release(slot, keep=True)

    def _fail(self, slot: Slot, message: str) -> None:
        log.error("request failed: %s", message)
        slot.request.emit({"error": message})
        self._release(slot)

    def _release(self, slot: Slot, keep: bool = False) -> None:
        """Return the slot to the pool; with ``keep`` its KV stays as a cache entry.

        A failed request's cells are not trusted (the decode that failed may
        have written some), nor are those of a copy llama.cpp has not run yet.
        """
        slot.request.sampler.close()
        slot.request = None
        slot.prompt = []
        slot.pending = -1
        slot.last_used = time.perf_counter()
        self._active.remove(slot)
        if keep and not slot.copy_pending:
            self._truncate(slot, slot.exact)
            if slot.tokens:
                self._tree.insert(slot.tokens, slot)
        else:
            slot.exact = 0
            self._truncate(slot, 0)
