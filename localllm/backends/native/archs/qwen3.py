"""Qwen3: llama's layer with per-head RMS norms on q and k."""

from __future__ import annotations

from localllm.backends.native.archs.base import Architecture


class Qwen3(Architecture):
    name = "qwen3"
    extra_tensors = ("q_norm", "k_norm")


ARCHITECTURE = Qwen3()
