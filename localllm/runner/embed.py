"""Embeddings and rerank scores for a runner started with ``--embedding``: every client's inputs share
forward passes.

Requests hand their tokenized inputs to one worker thread (:class:`Embedder`),
which packs whatever is waiting, from any number of requests, into passes of
up to ``n_seq`` sequences within the pass's token budget.  Each input is a
sequence of its own and is pooled from its own rows alone, so its vector does
not depend on what it shared a pass with, as long as the forward pass itself
is batch-invariant.  Which engine's forward runs is therefore a choice made
here:

- :class:`NativeEncoder`: the decoder architectures the native engine runs
  (llama, qwen2, qwen3, gemma3, phi3: SmolLM2, Qwen3-Embedding...).  Its
  forward is batch-invariant by design (``kernels/model.c``); the final
  hidden states come back and are pooled here, many sequences a pass.
- :class:`LlamaCppEncoder`: everything else (the BERT family,
  gemma-embedding's non-causal attention).  llama.cpp's CPU path rounds
  differently with the batch's shape and with the cache cells a sequence
  lands in (measured on SmolLM2: up to 4e-3 in a unit vector), so it gets one
  sequence a pass, and llama.cpp pools it.

Vectors are L2-normalised, as Ollama and OpenAI return them.  Pooling is the
one ``<arch>.pooling_type`` names (:func:`~localllm.backends.pooling.model_pooling`).  A reranker
(pooling ``rank``, on llama.cpp) scores query/document pairs through the same passes: each pair one
sequence, its score the first output of the model's classification head, never normalised.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from localllm.backends.contract import BackendError
from localllm.backends.llama_cpp import Batch
from localllm.backends.pooling import NATIVE_POOLINGS, Pooling

log = logging.getLogger(__name__)

SEQUENCES = 16  # inputs embedded together in one pass at most


class InputTooLong(ValueError):
    """An input exceeds the context and truncation was not allowed."""


@dataclass(frozen=True)
class Ranked:
    """One document's relevance to the query, as the model's classification head scores the pair."""

    score: float
    tokens: int  # the pair's tokens evaluated
    truncated: bool  # the document was cut to fit the context


class Encoder(Protocol):
    """One engine's forward pass and pooling over a group of token sequences (owned by the worker thread)."""

    ctx: Any  # the engine's context, which the encoder owns
    n_seq: int  # sequences one pass takes at most
    n_tokens: int  # tokens one pass takes at most
    ranks: bool  # its outputs are a classifier's scores (pooling rank), not vectors to normalise

    def encode(self, group: list[list[int]]) -> list[np.ndarray]:
        """The pooled, not yet normalised, vector of each sequence of ``group``."""

    def close(self) -> None: ...


class NativeEncoder:
    """The native engine's final hidden states, pooled here: sequence ``i`` of a pass is row ``i`` of the
    context's block tables, over blocks handed out afresh each pass (nothing outlives a pass)."""

    def __init__(self, ctx: Any, pooling: Pooling) -> None:
        if pooling not in NATIVE_POOLINGS:
            raise BackendError(f"{pooling.name.lower()} pooling is not supported by the native engine; "
                               "use the llama.cpp engine")
        self.ctx = ctx
        self.pooling = pooling
        self.ranks = False
        self.n_seq = len(ctx.tables)
        self.n_tokens = ctx.n_batch
        self.batch = Batch(ctx.n_batch)

    def encode(self, group: list[list[int]]) -> list[np.ndarray]:
        batch, tables, block_size = self.batch, self.ctx.tables, self.ctx.block_size
        batch.clear()
        next_block = 0
        for seq, tokens in enumerate(group):
            n_blocks = -(-len(tokens) // block_size)
            tables[seq, :n_blocks] = np.arange(next_block, next_block + n_blocks)
            next_block += n_blocks
            for pos, token in enumerate(tokens):
                batch.add(token, pos, seq, self._pooled(pos, len(tokens)))
        hidden = self.ctx.decode_hidden(batch)
        vectors, row = [], 0
        for tokens in group:
            if self.pooling == Pooling.MEAN:  # the sequence's own rows, summed in position order
                rows = hidden[row:row + len(tokens)]
                vectors.append(rows.sum(axis=0, dtype=np.float64) / len(tokens))
                row += len(tokens)
            else:
                vectors.append(hidden[row].astype(np.float64))
                row += 1
        return vectors

    def _pooled(self, pos: int, length: int) -> bool:
        """Whether the hidden state at ``pos`` of a sequence of ``length`` tokens goes into its vector."""
        if self.pooling == Pooling.CLS:
            return pos == 0
        if self.pooling == Pooling.LAST:
            return pos == length - 1
        return True

    def close(self) -> None:
        self.batch.close()


class LlamaCppEncoder:
    """llama.cpp's forward and pooling, one sequence a pass (its results vary with the batch's shape)."""

    n_seq = 1

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.ranks = ctx.model.ranks
        self.n_tokens = ctx.n_batch
        self.batch = Batch(ctx.n_batch)

    def encode(self, group: list[list[int]]) -> list[np.ndarray]:
        (tokens,) = group
        batch = self.batch
        batch.clear()
        for pos, token in enumerate(tokens):
            row = batch.add(token, pos, 0, True)
        try:
            rc = self.ctx.decode(batch)
            if rc != 0:
                raise BackendError(f"llama_decode returned {rc}")
            return [np.asarray(self.ctx.embedding(0, row), dtype=np.float64)]
        finally:
            self.ctx.seq_rm(-1)

    def close(self) -> None:
        self.batch.close()


@dataclass(eq=False)  # one request is one set member, whatever its vectors
class _Request:
    """One call's inputs and the vectors found so far."""

    inputs: list[list[int]]
    future: Future = field(default_factory=Future)
    vectors: list[list[float] | None] = field(default_factory=list)
    remaining: int = 0

    def __post_init__(self) -> None:
        self.vectors = [None] * len(self.inputs)
        self.remaining = len(self.inputs)


class Embedder:
    """Normalised embeddings of whole inputs, or a reranker's scores of query/document pairs; one worker
    thread owns the encoder and packs every waiting request's inputs into its passes, in arrival order."""

    def __init__(self, model: Any, encoder: Encoder, n_ctx_seq: int) -> None:
        self.model = model
        self.vocab = model.vocab
        self.encoder = encoder
        self.limit = min(n_ctx_seq, encoder.n_tokens)
        self._waiting: collections.deque[tuple[_Request, int]] = collections.deque()
        self._changed = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="embedder", daemon=True)
        self._thread.start()

    @property
    def ranks(self) -> bool:
        """The model is a reranker: it scores pairs (:meth:`rank`) instead of embedding texts."""
        return self.encoder.ranks

    def tokenize(self, texts: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """The tokens of each text, cut to the context when ``truncate`` (else :class:`InputTooLong`)."""
        inputs = []
        for i, text in enumerate(texts):
            tokens = self.vocab.tokenize_prompt(text)
            if len(tokens) > self.limit:
                if not truncate:
                    raise InputTooLong(
                        f"input {i} has {len(tokens)} tokens, more than the context length {self.limit}"
                    )
                tokens = tokens[: self.limit]
            if not tokens:
                raise InputTooLong(f"input {i} is empty")
            inputs.append(tokens)
        return inputs

    def submit(self, inputs: list[list[int]]) -> Future:
        """A future of the vectors of ``inputs`` (token lists from :meth:`tokenize`), in their order."""
        request = _Request(inputs)
        if not inputs:
            request.future.set_result([])
            return request.future
        with self._changed:
            if self._closing:
                raise BackendError("the embedder is shutting down")
            self._waiting.extend((request, i) for i in range(len(inputs)))
            self._changed.notify()
        return request.future

    def embed(self, texts: Sequence[str], truncate: bool = True) -> tuple[list[list[float]], int]:
        """Embeddings of ``texts`` and the number of tokens evaluated (blocking)."""
        inputs = self.tokenize(texts, truncate)
        return self.submit(inputs).result(), sum(len(t) for t in inputs)

    def rank(self, query: str, documents: Sequence[str]) -> list[Ranked]:
        """The relevance of each of ``documents`` to ``query``, in order (blocking). Each pair is built as
        llama-server builds it; a document too long for the context is cut to fit (and says so),
        a query that leaves no room for any document is refused."""
        pairs = [self._fitted_pair(query, document) for document in documents]
        outputs = self.submit([tokens for tokens, _ in pairs]).result()
        return [Ranked(out[0], len(tokens), cut) for out, (tokens, cut) in zip(outputs, pairs)]

    def _pair(self, query: str, document: str) -> list[int]:
        """The tokens of one query/document pair, as llama-server's ``format_prompt_rerank``: the model's
        ``rerank`` template filled in, else ``[BOS] query [EOS] [SEP] document [EOS]`` as its vocabulary adds them."""
        vocab = self.vocab
        template = self.model.rerank_template
        if template is not None:
            text = template.replace("{query}", query).replace("{document}", document)
            return vocab.tokenize(text, add_special=False, parse_special=True)
        end = vocab.eos if vocab.eos >= 0 else vocab.sep
        tokens = [vocab.bos] if vocab.add_bos else []
        tokens += vocab.tokenize(query, add_special=False, parse_special=False)
        tokens += [end] if vocab.add_eos else []
        tokens += [vocab.sep] if vocab.add_sep else []
        tokens += vocab.tokenize(document, add_special=False, parse_special=False)
        tokens += [end] if vocab.add_eos else []
        return tokens

    def _fitted_pair(self, query: str, document: str) -> tuple[list[int], bool]:
        """The pair's tokens within the context, the document's tail cut if need be; and whether it was."""
        tokens = self._pair(query, document)
        if len(tokens) <= self.limit:
            return tokens, False
        bare = len(self._pair(query, ""))
        if bare >= self.limit:
            raise InputTooLong(f"the query takes {bare} tokens of the rerank prompt, which leaves no room for a "
                               f"document in the context length {self.limit}; shorten the query")
        vocab = self.vocab
        text = vocab.tokenize(document, add_special=False, parse_special=False)
        keep = len(text) - (len(tokens) - self.limit)
        while True:  # detokenized text may tokenize a little differently: shrink until the pair fits
            tokens = self._pair(query, vocab.detokenize(text[:max(keep, 0)]))
            if len(tokens) <= self.limit:
                return tokens, True
            keep -= len(tokens) - self.limit

    def _next_group(self) -> list[tuple[_Request, int]] | None:
        """The waiting inputs of the next pass, in arrival order (None: closing)."""
        with self._changed:
            self._changed.wait_for(lambda: self._waiting or self._closing)
            if self._closing:
                return None
            group: list[tuple[_Request, int]] = []
            used = 0
            while self._waiting and len(group) < self.encoder.n_seq:
                request, i = self._waiting[0]
                size = len(request.inputs[i])
                if group and used + size > self.encoder.n_tokens:
                    break
                group.append(self._waiting.popleft())
                used += size
            return group

    def _run(self) -> None:
        while (group := self._next_group()) is not None:
            try:
                vectors = self.encoder.encode([request.inputs[i] for request, i in group])
            except Exception as exc:  # the pass failed: so did every request with an input in it
                log.exception("embedding pass failed")
                self._fail({request for request, _ in group}, exc)
                continue
            for (request, i), vector in zip(group, vectors):
                if request.future.done():  # failed with an earlier pass
                    continue
                request.vectors[i] = vector.tolist() if self.encoder.ranks else _normalised(vector)
                request.remaining -= 1
                if not request.remaining:
                    request.future.set_result(request.vectors)

    def _fail(self, requests: set[_Request], exc: Exception) -> None:
        with self._changed:
            self._waiting = collections.deque(item for item in self._waiting if item[0] not in requests)
        for request in requests:
            if not request.future.done():
                request.future.set_exception(exc)

    def close(self) -> None:
        with self._changed:
            self._closing = True
            waiting = {request for request, _ in self._waiting}
            self._waiting.clear()
            self._changed.notify()
        self._thread.join()
        for request in waiting:
            if not request.future.done():
                request.future.set_exception(BackendError("the runner is shutting down"))
        self.encoder.close()


def _normalised(vector: np.ndarray) -> list[float]:
    norm = math.sqrt(float(np.dot(vector, vector))) or 1.0
    return (vector / norm).tolist()
