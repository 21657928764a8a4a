"""The native engine as a runner backend: the same surface as :mod:`localllm.runner.backend`.

:class:`Model` keeps llama.cpp for the vocabulary only (a vocab-only load:
tokenize, pieces, end-of-generation tokens), and maps the weights for our own
forward pass.  :class:`Context` owns the C context (KV cache, thread pool)
and takes the runner's own :class:`~localllm.runner.backend.Batch`
(a ``llama_batch``) unchanged, so the engine loop, batching and prefix
sharing work as with llama.cpp.  Logits come back as NumPy rows
(:meth:`Context.logits`) for the sampler chain to run on.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import llama_cpp as ll
import numpy as np

from localllm.native.lib import NativeError, library
from localllm.native.model import HINT, NativeWeights
from localllm.runner import backend as llama_backend
from localllm.runner.backend import Batch, BackendError, captured_errors

__all__ = ["Batch", "BackendError", "Context", "Model"]


class Model(llama_backend.Model):
    """Vocabulary from llama.cpp (vocab-only), weights mapped for the native forward pass."""

    def __init__(self, path: str | Path, adapters: Sequence[str | Path] = (), n_gpu_layers: int = 0) -> None:
        if adapters:
            raise BackendError(f"LoRA adapters are not supported by the native engine; {HINT}")
        try:
            self.weights = NativeWeights(path)
        except NativeError as exc:
            raise BackendError(str(exc)) from None
        params = ll.llama_model_default_params()
        params.vocab_only = True
        with captured_errors() as errors:
            ptr = ll.llama_model_load_from_file(str(path).encode(), params)
        if not ptr:
            self.weights.close()
            raise BackendError(f"cannot load the vocabulary of {path}: {'; '.join(errors) or 'not a GGUF model'}")
        self.ptr = ptr
        self.path = Path(path)
        self.vocab = ll.llama_model_get_vocab(ptr)
        self.n_vocab: int = ll.llama_vocab_n_tokens(self.vocab)
        hyper = self.weights.hyper
        if self.n_vocab != hyper.n_vocab:
            self.close()
            raise BackendError(f"the vocabulary has {self.n_vocab} tokens but token_embd has {hyper.n_vocab} rows")
        self.n_ctx_train: int = hyper.n_ctx_train
        self.n_embd: int = hyper.n_embd
        self.size: int = self.weights.nbytes
        self.bos: int = ll.llama_vocab_bos(self.vocab)
        self.eos: int = ll.llama_vocab_eos(self.vocab)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._pieces: dict[int, bytes] = {}
        self._eog = frozenset(t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self.vocab, t))
        self.adapters = []

    def close(self) -> None:
        super().close()
        self.weights.close()


class Context:
    """KV cache of ``n_seq_max`` sequences of ``n_ctx / n_seq_max`` cells each, and the thread pool."""

    def __init__(
        self, model: Model, n_ctx: int, n_seq_max: int, n_batch: int, n_threads: int, embeddings: bool = False
    ) -> None:
        if embeddings:
            raise BackendError(f"embeddings are not supported by the native engine; {HINT}")
        self.model = model
        self.ptr = None  # no llama_context: samplers take logits from :meth:`logits`
        self.n_seq_max = n_seq_max
        self.n_ctx_seq = max(1, n_ctx // n_seq_max)
        self.n_ctx: int = self.n_ctx_seq * n_seq_max
        self.n_batch: int = n_batch
        self.can_shift = True
        self.pooling = ll.LLAMA_POOLING_TYPE_NONE
        self._lib = library()
        self._ctx = self._lib.llk_ctx_new(
            ctypes.byref(model.weights.params), n_seq_max, self.n_ctx_seq, n_batch, n_threads
        )
        if not self._ctx:
            raise BackendError(f"cannot create a native context of {self.n_ctx} tokens: out of memory")
        self._logits = np.empty((0, model.n_vocab), dtype=np.float32)
        self._rows: dict[int, int] = {}  # batch row -> row of self._logits

    def decode(self, batch: Batch) -> int:
        """Evaluate the batch: 0 on success, 1 when a sequence has no free cells, <0 on bad input."""
        n = batch.n_tokens
        raw = batch.raw
        want = [i for i in range(n) if raw.logits[i]]
        if len(want) > len(self._logits):
            self._logits = np.empty((max(len(want), self.n_seq_max), self.model.n_vocab), dtype=np.float32)
        out = self._logits.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        rc = self._lib.llk_decode(self._ctx, n, raw.token, raw.pos, raw.seq_id, raw.logits, out)
        self._rows = {row: i for i, row in enumerate(want)} if rc == 0 else {}
        return rc

    @property
    def last_error(self) -> str:
        return self._lib.llk_ctx_error(self._ctx).decode()

    def logits(self, row: int) -> np.ndarray:
        """The logits of batch row ``row`` of the last decode (a view, valid until the next decode)."""
        if row not in self._rows:
            raise BackendError(f"no logits were computed for batch row {row}")
        return self._logits[self._rows[row]]

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        return bool(self._lib.llk_seq_rm(self._ctx, seq_id, p0, p1))

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        self._lib.llk_seq_add(self._ctx, seq_id, p0, p1, delta)

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        if not self._lib.llk_seq_cp(self._ctx, src, dst, p0, p1):
            raise BackendError(f"cannot copy sequence {src} to {dst}: no room or bad sequence id")

    def seq_pos_max(self, seq_id: int) -> int:
        return self._lib.llk_seq_pos_max(self._ctx, seq_id)

    def embedding(self, seq_id: int, row: int) -> list[float]:
        raise BackendError(f"embeddings are not supported by the native engine; {HINT}")

    def close(self) -> None:
        if self._ctx:
            self._lib.llk_ctx_free(self._ctx)
            self._ctx = None
