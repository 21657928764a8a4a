"""Gemma 3: sandwich norms, q/k norms, a sliding window on all but every sixth layer (rotating at
rope.freq_base_swa), and the embedding scaled by sqrt(n_embd)."""

from __future__ import annotations

import math
from collections.abc import Callable

from localllm.backends.native.archs.base import Architecture, Hyper, metadata_int, slide
from localllm.backends.native.lib import Layer, ModelParams, Tensor
from localllm.gguf import GGUFFile


class Gemma3(Architecture):
    name = "gemma3"
    read_keys = frozenset({"attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa"})
    extra_tensors = ("q_norm", "k_norm", "post_attn_norm", "post_ffn_norm")
    default_rope_base = 1e6

    def check_metadata(self, g: GGUFFile) -> None:
        metadata_int(g, "attention.sliding_window")
        metadata_int(g, "attention.sliding_window_pattern", 6)  # a per-layer array would place windows we do not

    def sliding_layers(self, g: GGUFFile, h: Hyper) -> list[bool]:
        pattern = g.arch_value("attention.sliding_window_pattern", 6)
        return [il % pattern < pattern - 1 for il in range(h.n_layer)]

    def configure(self, g: GGUFFile, h: Hyper, p: ModelParams, layers: Layer, tensor: Callable[[str], Tensor]) -> None:
        slide(p, layers, h, g.arch_value("attention.sliding_window"), self.sliding_layers(g, h),
              float(g.arch_value("rope.freq_base_swa", 10000.0)))
        p.embd_scale = math.sqrt(h.n_embd)


ARCHITECTURE = Gemma3()
