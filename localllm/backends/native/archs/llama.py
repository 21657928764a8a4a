"""Llama (SmolLM2, Mistral...): the plain pre-norm decoder; Llama 3's per-pair rope divisors where the file has them."""

from __future__ import annotations

from localllm.backends.native.archs.base import Architecture, Hyper, Shape


class Llama(Architecture):
    name = "llama"

    def model_tensors(self, h: Hyper) -> dict[str, Shape]:
        return {"rope_freqs.weight": (h.rope_dim // 2,)}  # one divisor per rotary pair, as llama.cpp reads it


ARCHITECTURE = Llama()
