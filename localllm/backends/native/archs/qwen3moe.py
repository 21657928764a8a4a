"""Qwen3-MoE: Qwen3's attention (q/k norms) and a mixture of experts for its FFN."""

from __future__ import annotations

from localllm.backends.native.archs.base import EXPERT_KEYS, Architecture


class Qwen3Moe(Architecture):
    name = "qwen3moe"
    read_keys = EXPERT_KEYS
    extra_tensors = ("q_norm", "k_norm")
    experts = True


ARCHITECTURE = Qwen3Moe()
