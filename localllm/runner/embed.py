"""Embeddings and rerank scores for a runner started with ``--embedding``.

Embedding requests are short and have no streaming, so they do not go through
the batching engine: each call runs on a worker thread that holds the
context's lock. The inputs of a call are packed into as few ``llama_decode``
calls as fit: each input is its own sequence of one batch (up to
:data:`SEQUENCES` of them, within the batch's token budget), and llama.cpp
pools each sequence separately. A reranker (pooling ``rank``) scores
query/document pairs the same way: each pair one sequence, its score the
first output of the model's classification head.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from localllm.backends.contract import BackendError
from localllm.backends.llama_cpp import Batch, Context, Model

SEQUENCES = 16  # inputs embedded together in one decode at most (the context's n_seq_max)
RANK_BATCH = 2048  # tokens a reranker's decode holds at least: 2,048 took a third less CPU than 512 (bench/rerank.py)


class InputTooLong(ValueError):
    """An input exceeds the context and truncation was not allowed."""


@dataclass(frozen=True)
class Ranked:
    """One document's relevance to the query, as the model's classification head scores the pair."""

    score: float
    tokens: int  # the pair's tokens evaluated
    truncated: bool  # the document was cut to fit the context


class Embedder:
    """Pooled, L2-normalised embeddings of whole inputs, or a reranker's scores of query/document pairs."""

    def __init__(self, model: Model, ctx: Context, n_ctx_seq: int) -> None:
        self.model = model
        self.ctx = ctx
        self.limit = min(n_ctx_seq, ctx.n_batch)
        self.batch = Batch(ctx.n_batch)
        self._lock = threading.Lock()

    @property
    def ranks(self) -> bool:
        """The model is a reranker: it scores pairs (:meth:`rank`) instead of embedding texts."""
        return self.model.ranks

    def embed(self, texts: Sequence[str], truncate: bool = True) -> tuple[list[list[float]], int]:
        """Embeddings of ``texts`` and the number of tokens evaluated."""
        inputs = []
        for i, text in enumerate(texts):
            tokens = self.model.vocab.tokenize_prompt(text)
            if len(tokens) > self.limit:
                if not truncate:
                    raise InputTooLong(
                        f"input {i} has {len(tokens)} tokens, more than the context length {self.limit}"
                    )
                tokens = tokens[: self.limit]
            if not tokens:
                raise InputTooLong(f"input {i} is empty")
            inputs.append(tokens)
        return [_normalised(v) for v in self._pooled(inputs)], sum(len(t) for t in inputs)

    def rank(self, query: str, documents: Sequence[str]) -> list[Ranked]:
        """The relevance of each of ``documents`` to ``query``, in order. Each pair is built as
        llama-server builds it; a document too long for the context is cut to fit (and says so),
        a query that leaves no room for any document is refused."""
        pairs = [self._fitted_pair(query, document) for document in documents]
        outputs = self._pooled([tokens for tokens, _ in pairs])
        return [Ranked(out[0], len(tokens), cut) for out, (tokens, cut) in zip(outputs, pairs)]

    def _pair(self, query: str, document: str) -> list[int]:
        """The tokens of one query/document pair, as llama-server's ``format_prompt_rerank``: the model's
        ``rerank`` template filled in, else ``[BOS] query [EOS] [SEP] document [EOS]`` as its vocabulary adds them."""
        vocab = self.model.vocab
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
        vocab = self.model.vocab
        text = vocab.tokenize(document, add_special=False, parse_special=False)
        keep = len(text) - (len(tokens) - self.limit)
        while True:  # detokenized text may tokenize a little differently: shrink until the pair fits
            tokens = self._pair(query, vocab.detokenize(text[:max(keep, 0)]))
            if len(tokens) <= self.limit:
                return tokens, True
            keep -= len(tokens) - self.limit

    def _pooled(self, inputs: list[list[int]]) -> list[list[float]]:
        """The model's pooled output for each input, in order."""
        with self._lock:
            return [v for group in self._groups(inputs) for v in self._decode_group(group)]

    def _groups(self, inputs: list[list[int]]) -> Iterator[list[list[int]]]:
        """Consecutive inputs packed into batches: at most SEQUENCES of them, within the token budget."""
        group: list[list[int]] = []
        used = 0
        for tokens in inputs:
            if group and (len(group) == SEQUENCES or used + len(tokens) > self.batch.capacity):
                yield group
                group, used = [], 0
            group.append(tokens)
            used += len(tokens)
        if group:
            yield group

    def _decode_group(self, group: list[list[int]]) -> list[list[float]]:
        batch = self.batch
        batch.clear()
        last_rows = []
        for seq, tokens in enumerate(group):
            for pos, token in enumerate(tokens):
                row = batch.add(token, pos, seq, True)
            last_rows.append(row)
        try:
            rc = self.ctx.decode(batch)
            if rc != 0:
                raise BackendError(f"llama_decode returned {rc}")
            vectors = [self.ctx.embedding(seq, row) for seq, row in enumerate(last_rows)]
        finally:
            self.ctx.seq_rm(-1)  # every sequence
        return vectors

    def close(self) -> None:
        self.batch.close()


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]
