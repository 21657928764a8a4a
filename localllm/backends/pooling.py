"""How an embedding model pools its hidden states into one vector per input, as its GGUF names it."""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path

from localllm.backends.contract import BackendError
from localllm.gguf import read_gguf


class Pooling(IntEnum):
    """llama.cpp's ``llama_pooling_type``, the numbering ``<arch>.pooling_type`` stores."""

    NONE = 0
    MEAN = 1
    CLS = 2
    LAST = 3
    RANK = 4


NATIVE_POOLINGS = (Pooling.MEAN, Pooling.CLS, Pooling.LAST)  # what the native engine's embeddings pool


def model_pooling(path: str | Path) -> Pooling:
    """The pooling the model's metadata names; mean where it names none (a decoder model: one vector per
    input, as ``llama-server --pooling mean`` gives it)."""
    value = read_gguf(Path(path), skip_arrays_over=256).arch_value("pooling_type", 0)
    try:
        pooling = Pooling(value)
    except ValueError:
        raise BackendError(f"the model's pooling_type {value!r} is not one llama.cpp knows") from None
    return Pooling.MEAN if pooling == Pooling.NONE else pooling
