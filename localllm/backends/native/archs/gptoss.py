"""gpt-oss: biased attention with a learned sink per head, a sliding window on the layers the file names,
YaRN, and a mixture of experts with router and expert biases; its FFN norm is named post_attention_norm."""

from __future__ import annotations

from collections.abc import Callable

from localllm.backends.native.archs.base import (EXPERT_KEYS, Architecture, Hyper, RopeScaling, metadata_int,
                                                 read_rope_scaling, slide)
from localllm.backends.native.lib import Layer, ModelParams, NativeError, Tensor
from localllm.gguf import GGUFFile


def _sliding(g: GGUFFile, n_layer: int) -> list[bool]:
    """Which layers slide, as llama.cpp reads it: a per-layer array, or a pattern of n (default 2) whose first
    n - 1 layers slide (gpt-oss: the even ones)."""
    pattern = g.arch_value("attention.sliding_window_pattern", 2)
    if isinstance(pattern, list):
        if len(pattern) < n_layer:
            raise NativeError(f"model metadata {g.architecture}.attention.sliding_window_pattern has "
                              f"{len(pattern)} entries for {n_layer} layers")
        return [bool(v) for v in pattern[:n_layer]]
    if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern < 0:
        raise NativeError(f"model metadata {g.architecture}.attention.sliding_window_pattern is invalid ({pattern!r})")
    return [pattern == 0 or il % pattern < pattern - 1 for il in range(n_layer)]


class GptOss(Architecture):
    name = "gpt-oss"
    read_keys = EXPERT_KEYS | {"attention.sliding_window", "attention.sliding_window_pattern", "rope.scaling.type",
                               "rope.scaling.factor", "rope.scaling.attn_factor", "rope.freq_base_swa"}
    extra_tensors = ("bq", "bk", "bv", "bo", "attn_sinks", "ffn_gate_inp_b", "ffn_gate_exps_b", "ffn_up_exps_b",
                     "ffn_down_exps_b")
    gguf_names = {"ffn_norm": "post_attention_norm.weight"}
    experts = True
    trims_window = True

    def check_metadata(self, g: GGUFFile) -> None:
        metadata_int(g, "attention.sliding_window")

    def rope_scaling(self, g: GGUFFile) -> RopeScaling | None:
        return read_rope_scaling(g)

    def sliding_layers(self, g: GGUFFile, h: Hyper) -> list[bool]:
        return _sliding(g, h.n_layer)

    def configure(self, g: GGUFFile, h: Hyper, p: ModelParams, layers: Layer, tensor: Callable[[str], Tensor]) -> None:
        # its sliding layers rotate as the others unless rope.freq_base_swa says
        slide(p, layers, h, g.arch_value("attention.sliding_window"), self.sliding_layers(g, h),
              float(g.arch_value("rope.freq_base_swa", h.rope_base)))


ARCHITECTURE = GptOss()
