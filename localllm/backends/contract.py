"""What the runner may rely on from either engine: one error type and three small protocols.

Both :mod:`localllm.backends.llama_cpp` and :mod:`localllm.backends.native`
implement :class:`Model` and :class:`Context` by composition: the native model
holds a vocabulary-only llama.cpp model for its tokens rather than inheriting
one. Batches are llama.cpp's (:class:`localllm.backends.llama_cpp.Batch`) for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from localllm.backends.llama_cpp import Batch


class BackendError(RuntimeError):
    """An engine refused an operation (load, context creation, decode); the message says why."""


class Vocabulary(Protocol):
    """A model's tokens: text to ids and back, and which ids end a generation."""

    n_vocab: int
    bos: int
    eos: int
    bos_text: str  # the BOS and EOS tokens' texts, rendered once at load (chat templates need them)
    eos_text: str

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...
    def tokenize_prompt(self, text: str) -> list[int]: ...
    def piece(self, token: int) -> bytes: ...
    def token_text(self, token: int) -> str: ...
    def detokenize(self, tokens: Sequence[int]) -> str: ...
    def is_eog(self, token: int) -> bool: ...


class Model(Protocol):
    """Loaded weights and their vocabulary."""

    path: Path
    vocab: Vocabulary
    n_ctx_train: int
    n_embd: int
    size: int  # bytes of weights

    def close(self) -> None: ...


class Context(Protocol):
    """A KV cache over a model that evaluates batches."""

    model: Model
    n_batch: int

    def decode(self, batch: Batch) -> int: ...
    def close(self) -> None: ...
