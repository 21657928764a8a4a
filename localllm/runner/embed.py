"""Embeddings for a runner started with ``--embedding``.

Embedding requests are short and have no streaming, so they do not go through
the batching engine: each call runs on a worker thread that holds the
context's lock. The inputs of a call are packed into as few ``llama_decode``
calls as fit: each input is its own sequence of one batch (up to
:data:`SEQUENCES` of them, within the batch's token budget), and llama.cpp
pools each sequence separately.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence

from localllm.backends.contract import BackendError
from localllm.backends.llama_cpp import Batch, Context, Model

SEQUENCES = 16  # inputs embedded together in one decode at most (the context's n_seq_max)


class InputTooLong(ValueError):
    """An input exceeds the context and truncation was not allowed."""


class Embedder:
    """Pooled, L2-normalised embeddings of whole inputs."""

    def __init__(self, model: Model, ctx: Context, n_ctx_seq: int) -> None:
        self.model = model
        self.ctx = ctx
        self.limit = min(n_ctx_seq, ctx.n_batch)
        self.batch = Batch(ctx.n_batch)
        self._lock = threading.Lock()

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
        with self._lock:
            vectors = [v for group in self._groups(inputs) for v in self._embed_group(group)]
        return vectors, sum(len(t) for t in inputs)

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

    def _embed_group(self, group: list[list[int]]) -> list[list[float]]:
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
        return [_normalised(v) for v in vectors]

    def close(self) -> None:
        self.batch.close()


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]
