"""Embeddings for a runner started with ``--embedding``.

Embedding requests are short and have no streaming, so they do not go through
the batching engine: each call runs on a worker thread that holds the
context's lock, one input after another.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

from localllm.runner.backend import Batch, BackendError, Context, Model


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
            tokens = self.model.tokenize_prompt(text)
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
            return [self._embed_one(t) for t in inputs], sum(len(t) for t in inputs)

    def _embed_one(self, tokens: list[int]) -> list[float]:
        batch = self.batch
        batch.clear()
        for pos, token in enumerate(tokens):
            row = batch.add(token, pos, 0, True)
        try:
            rc = self.ctx.decode(batch)
            if rc != 0:
                raise BackendError(f"llama_decode returned {rc}")
            vector = self.ctx.embedding(0, row)
        finally:
            self.ctx.seq_rm(0)
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    def close(self) -> None:
        self.batch.close()
