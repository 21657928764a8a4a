"""Qwen2: llama's layer with biases on q, k and v."""

from __future__ import annotations

from localllm.backends.native.archs.base import Architecture


class Qwen2(Architecture):
    name = "qwen2"
    extra_tensors = ("bq", "bk", "bv")


ARCHITECTURE = Qwen2()
