"""The native engine as a runner backend: the contract of :mod:`localllm.backends.contract`.

:class:`Model` holds a vocab-only llama.cpp model for its tokens (tokenize,
pieces, end-of-generation tokens), and maps the weights for our own
forward pass.  :class:`Context` owns the C context (KV cache, thread pool)
and takes the runner's own :class:`~localllm.backends.llama_cpp.Batch`
(a ``llama_batch``) unchanged; its KV is a pool of blocks that
:class:`~localllm.runner.paged_engine.PagedEngine` shares between
sequences.  Logits come back as NumPy rows (:meth:`Context.logits`) for the
sampler chain to run on.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from localllm.backends.native.lib import ERROR_LEN, Memory, NativeError, library
from localllm.backends.native.model import HINT, KV_TYPES, NativeWeights, kv_type_id
from localllm.backends import llama_cpp
from localllm.backends.contract import BackendError
from localllm.backends.llama_cpp import Batch

__all__ = ["Batch", "BackendError", "Context", "Model", "KV_TYPES"]

POPULATE_SLICE = 8 << 20  # bytes of the KV pool faulted in at a time while the engine is idle (a few ms)


class Model:
    """Weights mapped for the native forward pass; the vocabulary from a vocab-only llama.cpp model it holds."""

    def __init__(self, path: str | Path, adapters: Sequence[str | Path] = (), n_gpu_layers: int = 0) -> None:
        if adapters:
            raise BackendError(f"LoRA adapters are not supported by the native engine; {HINT}")
        # llama.cpp reads the vocabulary (in C, without the GIL) while the weights are parsed and repacked:
        # a runner's start, and so the first answer after a restart, waits for the longer of the two only
        with ThreadPoolExecutor(1, thread_name_prefix="vocab-load") as loader:
            vocab = loader.submit(llama_cpp.Model, path, vocab_only=True)
            try:
                self.weights = NativeWeights(path)
            except NativeError as exc:
                with contextlib.suppress(BackendError):
                    vocab.result().close()
                raise BackendError(str(exc)) from None
            try:
                self._tokens = vocab.result()
            except BackendError:
                self.weights.close()
                raise
        self.path = Path(path)
        self.vocab = self._tokens.vocab
        hyper = self.weights.hyper
        if self.vocab.n_vocab != hyper.n_vocab:
            self.close()
            raise BackendError(f"the vocabulary has {self.vocab.n_vocab} tokens but token_embd has {hyper.n_vocab} rows")
        self.n_ctx_train: int = hyper.n_ctx_train
        self.n_embd: int = hyper.n_embd
        self.size: int = self.weights.nbytes

    def close(self) -> None:
        self._tokens.close()
        self.weights.close()


class Context:
    """The paged KV pool of ``n_blocks`` blocks of ``block_size`` positions, and the thread pool.

    Sequences are rows of :attr:`tables` (block ids, see ``kernels/model.c``):
    the batch's sequence id of a token is its row. Whoever fills the tables
    owns the blocks (:class:`localllm.runner.kv_blocks.BlockPool`); this
    class only evaluates batches and moves whole blocks. With ``window_kv``
    the sliding-window layers keep only their window, in a ring of
    :attr:`ring_blocks` blocks a sequence outside the pool, and carried in
    the sequence's state (see ``kernels/llk.h``).
    """

    def __init__(
        self, model: Model, n_blocks: int, block_size: int, max_seq_len: int, n_seq: int, n_batch: int, n_threads: int,
        kv_cache_type: str = "f16", window_kv: bool = False,
    ) -> None:
        try:
            kv_type = kv_type_id(kv_cache_type)
        except NativeError as exc:
            raise BackendError(str(exc)) from None
        params = model.weights.params  # a layer's head size of 0 is the model's (Gemma 4's layers have their own)
        head_dims = sorted({params.layers[il].head_dim or params.head_dim for il in range(params.n_layer)
                            if not params.layers[il].ssm_qkv.data})
        if kv_cache_type == "q8_0" and any(d % 32 for d in head_dims):
            raise BackendError("a q8_0 KV cache needs heads of a multiple of 32 dimensions; this model's have "
                               + " and ".join(map(str, head_dims)))
        self.model = model
        self.kv_cache_type = kv_cache_type
        self.ptr = None  # no llama_context: samplers take logits from :meth:`logits`
        self.n_blocks = n_blocks
        self.block_size = block_size
        self.max_seq_len = max_seq_len
        self.n_batch: int = n_batch
        self.tables = np.zeros((n_seq, -(-max_seq_len // block_size)), dtype=np.int32)
        self._lib = library()
        why = ctypes.create_string_buffer(ERROR_LEN)
        self._ctx = self._lib.llk_ctx_new(
            ctypes.byref(model.weights.params), n_blocks, block_size, max_seq_len, n_batch, n_threads,
            kv_type, n_seq, int(window_kv), why,
        )
        if not self._ctx:
            raise BackendError(f"cannot create a native KV pool of {n_blocks} blocks of {block_size}: "
                               f"{why.value.decode(errors='replace')}")
        self.block_bytes: int = self._lib.llk_kv_block_bytes(self._ctx)
        #: window_kv: the blocks of each sequence's ring that holds its sliding layers' window (0: they are in
        #: the pool's blocks with the other layers), and the bytes of one
        self.ring_blocks: int = self._lib.llk_kv_ring_blocks(self._ctx)
        self.ring_block_bytes: int = self._lib.llk_kv_ring_block_bytes(self._ctx)
        layout = ctypes.create_string_buffer(self._lib.llk_kv_layout(self._ctx, None, 0) + 1)
        self._lib.llk_kv_layout(self._ctx, layout, len(layout))
        #: what a block and a state's window hold, layer by layer (the disk tier's files are of this layout only)
        self.layout: str = layout.value.decode()
        #: bytes of one sequence's state: its Gated DeltaNet layers' and its sliding layers' window (window_kv),
        #: 0 for a model with neither
        self.state_bytes: int = self._lib.llk_state_bytes(self._ctx)
        #: whether a sequence can be taken back a few positions (:meth:`rewind_state`): its state is only the window
        self.rewinds: bool = bool(self.ring_blocks) and not any(
            params.layers[il].ssm_qkv.data for il in range(params.n_layer))
        self._populated = 0  # bytes of the pool faulted in from its start by populate_next
        self._logits = np.empty((0, model.vocab.n_vocab), dtype=np.float32)
        self._rows: dict[int, int] = {}  # batch row -> row of self._logits
        self._captures: list[bytearray] = []  # capture_state's buffers, which the kernels write in the next decode

    @property
    def memory(self) -> Memory:
        """What the context holds, by part (llk_ctx_memory): what :meth:`NativeMemory.context` plans."""
        held = Memory()
        self._lib.llk_ctx_memory(self._ctx, ctypes.byref(held))
        return held

    def decode(self, batch: Batch) -> int:
        """Evaluate the batch: 0 on success, <0 on bad input (:attr:`last_error` says what)."""
        n = batch.n_tokens
        raw = batch.raw
        want = [i for i in range(n) if raw.logits[i]]
        if len(want) > len(self._logits):
            self._logits = np.empty((max(len(want), len(self.tables)), self.model.vocab.n_vocab), dtype=np.float32)
        out = self._logits.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        tables = self.tables.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        n_seq, table_len = self.tables.shape
        rc = self._lib.llk_decode(self._ctx, n, raw.token, raw.pos, raw.seq_id, raw.logits, out, tables, n_seq, table_len)
        self._captures = []  # that call used up the capture requests
        self._rows = {row: i for i, row in enumerate(want)} if rc == 0 else {}
        return rc

    def decode_hidden(self, batch: Batch) -> np.ndarray:
        """Evaluate the batch without the output head, for embeddings: the final-normed hidden states of
        the rows that ask for output, ``[rows][n_embd]`` in row order (a new array)."""
        raw = batch.raw
        n_out = sum(1 for i in range(batch.n_tokens) if raw.logits[i])
        hidden = np.empty((n_out, self.model.n_embd), dtype=np.float32)
        n_seq, table_len = self.tables.shape
        rc = self._lib.llk_decode_hidden(
            self._ctx, batch.n_tokens, raw.token, raw.pos, raw.seq_id, raw.logits,
            hidden.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            self.tables.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), n_seq, table_len,
        )  # fmt: skip
        self._captures = []
        self._rows = {}  # the logits of an earlier decode are gone
        if rc != 0:
            raise BackendError(f"native decode failed: {self.last_error}")
        return hidden

    @property
    def last_error(self) -> str:
        return self._lib.llk_ctx_error(self._ctx).decode()

    def logits(self, row: int) -> np.ndarray:
        """The logits of batch row ``row`` of the last decode (a view, valid until the next decode)."""
        if row not in self._rows:
            raise BackendError(f"no logits were computed for batch row {row}")
        return self._logits[self._rows[row]]

    def populate_next(self) -> bool:
        """Fault in the next POPULATE_SLICE bytes of the pool (pages a block write already brought in are left as
        they are); whether any remain. The engine calls it when idle: a large pool's pages (hundreds of ms)
        never hold up a runner's start or a request, and are held before the blocks are used."""
        total = self.n_blocks * self.block_bytes
        if self._populated < total:
            self._lib.llk_kv_populate(self._ctx, self._populated, POPULATE_SLICE)
            self._populated += POPULATE_SLICE
        return self._populated < total

    def copy_block(self, dst: int, src: int) -> None:
        if self._lib.llk_kv_block_copy(self._ctx, dst, src) != 0:
            raise BackendError(f"cannot copy KV block {src} to {dst}: no such block")

    def read_block(self, block: int) -> bytes:
        buf = ctypes.create_string_buffer(self.block_bytes)
        if self._lib.llk_kv_block_read(self._ctx, block, buf) != 0:
            raise BackendError(f"cannot read KV block {block}: no such block")
        return buf.raw

    def write_block(self, block: int, data: bytes) -> None:
        if len(data) != self.block_bytes or self._lib.llk_kv_block_write(self._ctx, block, data) != 0:
            raise BackendError(f"cannot write KV block {block}: no such block or {len(data)} bytes")

    def read_state(self, seq: int, into: bytearray | None = None) -> bytearray:
        """Sequence ``seq``'s recurrent state (:attr:`state_bytes` bytes, with the count of positions it holds): a
        snapshot that :meth:`write_state` puts back into any sequence, which then continues from there. Copied
        once, into ``into`` where given (a buffer of the size, reused: a state can be tens of MB, and a fresh
        buffer's pages cost more than the copy) or a new buffer."""
        buf = into if into is not None and len(into) == self.state_bytes else bytearray(self.state_bytes)
        if self._lib.llk_state_read(self._ctx, seq, _address(buf)) != 0:
            raise BackendError(f"cannot read the recurrent state of sequence {seq}: no such sequence or no state")
        return buf

    def write_state(self, seq: int, data: bytes | bytearray) -> None:
        if len(data) != self.state_bytes or self._lib.llk_state_write(self._ctx, seq, _address(data)) != 0:
            raise BackendError(f"cannot write the recurrent state of sequence {seq}: no such sequence, no state, "
                               f"or {len(data)} bytes that are not one")

    def capture_state(self, seq: int, pos: int, into: bytearray) -> bool:
        """Have the next :meth:`decode` also copy ``seq``'s state right after its token at ``pos`` into ``into``
        (:attr:`state_bytes`; what :meth:`read_state` would give had the batch ended there), so that a state inside
        a batch is kept without cutting the batch there. ``into`` must stay as it is until then. False when the
        context takes no more requests for that batch."""
        if len(into) != self.state_bytes:
            raise BackendError(f"a state capture needs {self.state_bytes} bytes, not {len(into)}")
        if self._lib.llk_state_capture(self._ctx, seq, pos, _address(into)) != 0:
            return False
        self._captures.append(into)  # alive until the kernels have written it, whatever the caller drops meanwhile
        return True

    def reset_state(self, seq: int) -> None:
        """Empty ``seq``'s recurrent state (as a token at position 0 does); nothing for a model without one."""
        if self.state_bytes and self._lib.llk_state_reset(self._ctx, seq) != 0:
            raise BackendError(f"cannot reset the recurrent state of sequence {seq}: no such sequence")

    def rewind_state(self, seq: int, n: int) -> None:
        """Take ``seq`` back to its first ``n`` positions (a draft's rejected tokens dropped) without restoring a
        saved state: where :attr:`rewinds`, to no earlier than the start of the batch that last advanced it."""
        if self._lib.llk_state_rewind(self._ctx, seq, n) != 0:
            raise BackendError(f"cannot take sequence {seq} back to {n} positions: it holds fewer, or its window "
                               "there is gone (restore a saved state)")

    def close(self) -> None:
        if self._ctx:
            self._lib.llk_ctx_free(self._ctx)
            self._ctx = None


def _address(data: bytes | bytearray) -> bytes | ctypes.Array:
    """``data`` as a pointer argument, without a copy (a bytearray through its buffer)."""
    return (ctypes.c_char * len(data)).from_buffer(data) if isinstance(data, bytearray) else data
