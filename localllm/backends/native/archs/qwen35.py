"""Qwen 3.5 and 3.6 (``qwen35``, and ``qwen35moe`` with a sigmoid-gated shared expert beside its routed ones): Gated
DeltaNet layers (a recurrent state per sequence) and, every ``full_attention_interval``-th layer, attention whose
query carries an output gate per head (wq twice as tall), with q/k norms; the FFN norm is named
post_attention_norm. Multi-section rope gives a text token every section the same position, so it rotates as
NeoX rope over ``rope.dimension_count`` dimensions whatever ``rope.dimension_sections`` says."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from localllm.backends.native.archs.base import (ATTENTION, DENSE_FFN, EXPERT_FFN, EXPERT_KEYS, Architecture,
                                                 DeltaNet, Hyper, Shape, UnsupportedModel, layer_shapes, metadata_int)
from localllm.backends.native.lib import Layer, ModelParams, NativeError, Tensor
from localllm.gguf import GGUFFile

DELTANET = ("ssm_qkv", "ssm_z", "ssm_beta", "ssm_alpha", "ssm_conv", "ssm_dt", "ssm_a", "ssm_norm", "ssm_out")
SHARED_EXPERT = ("ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
MAX_CONV_KERNEL = 16  # the widest convolution the kernels run (Qwen 3.5 and 3.6 have 4)
_KEYS = frozenset({"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size",
                   "full_attention_interval", "attention.recurrent_layers", "rope.dimension_sections",
                   "nextn_predict_layers"})
_LAYER = re.compile(r"blk\.(\d+)\.")


def recurrent_layers(g: GGUFFile, n_layer: int) -> tuple[bool, ...]:
    """Which of the first ``n_layer`` layers are Gated DeltaNet layers, as llama.cpp's Qwen hybrids (qwen35,
    qwen35moe, qwen3next) read it: attention.recurrent_layers, else all but every full_attention_interval-th
    (default 4). The loader and the memory planner both ask this."""
    layers = g.arch_value("attention.recurrent_layers")
    if layers is not None:
        if not isinstance(layers, list) or len(layers) < n_layer:
            raise NativeError(f"model metadata {g.architecture}.attention.recurrent_layers is invalid")
        return tuple(bool(v) for v in layers[:n_layer])
    interval = metadata_int(g, "full_attention_interval", 4)
    return tuple((il + 1) % interval != 0 for il in range(n_layer))


class Qwen35(Architecture):
    name = "qwen35"
    read_keys = _KEYS
    gguf_names = {"ffn_norm": "post_attention_norm.weight"}  # its residual is taken before that norm

    def extra_hyper(self, g: GGUFFile, h: Hyper) -> dict:
        """The Gated DeltaNet and which layers have one, as llama.cpp's qwen35 loader reads them (the recurrent
        layers from attention.recurrent_layers, else all but every full_attention_interval-th), and the trunk's
        layers: block_count less the multi-token-prediction layers after them (nextn_predict_layers), which the
        forward does not run (llama.cpp loads them only to draft with)."""
        nextn = g.arch_value("nextn_predict_layers", 0)
        if not isinstance(nextn, int) or isinstance(nextn, bool) or not 0 <= nextn < h.n_layer:
            raise NativeError(f"model metadata {g.architecture}.nextn_predict_layers is invalid ({nextn!r})")
        h = dataclasses.replace(h, n_layer=h.n_layer - nextn)
        ssm = DeltaNet(metadata_int(g, "ssm.conv_kernel"), metadata_int(g, "ssm.state_size"),
                       metadata_int(g, "ssm.group_count"), metadata_int(g, "ssm.time_step_rank"))
        if not 1 <= ssm.d_conv <= MAX_CONV_KERNEL:  # kernels/deltanet.h's DELTANET_MAX_CONV
            raise UnsupportedModel(f"{g.architecture}.ssm.conv_kernel {ssm.d_conv} outside 1..{MAX_CONV_KERNEL}")
        if metadata_int(g, "ssm.inner_size") != ssm.d_state * ssm.dt_rank:
            raise UnsupportedModel(f"{g.architecture}.ssm.inner_size other than ssm.state_size x ssm.time_step_rank")
        if ssm.dt_rank % ssm.n_group:
            raise NativeError(f"model metadata {g.architecture}.ssm.time_step_rank {ssm.dt_rank} is not a multiple of "
                              f"ssm.group_count {ssm.n_group}")
        return {"ssm": ssm, "recurrent": recurrent_layers(g, h.n_layer), "n_layer": h.n_layer}

    def unused_tensor(self, g: GGUFFile, h: Hyper, name: str) -> bool:
        """The multi-token-prediction layers' tensors (blk.N. past the trunk)."""
        layer = _LAYER.match(name)
        return layer is not None and h.n_layer <= int(layer.group(1)) < metadata_int(g, "block_count")

    def fields(self) -> tuple[str, ...]:
        """Both kinds of layer's fields (layer_tensors_at says which a layer has)."""
        return ATTENTION + (EXPERT_FFN if self.experts else DENSE_FFN) + ("q_norm", "k_norm") + DELTANET + (
            SHARED_EXPERT if self.experts else ())

    def layer_tensors_at(self, g: GGUFFile, h: Hyper, il: int) -> dict[str, Shape]:
        shapes = layer_shapes(h)
        shapes["wq"] = (h.n_embd, 2 * h.n_head * h.head_dim)  # each head's query, then its output gate
        s = h.ssm
        inner, channels = s.d_state * s.dt_rank, 2 * s.d_state * s.n_group + s.d_state * s.dt_rank
        shapes.update({
            "ssm_qkv": (h.n_embd, channels), "ssm_z": (h.n_embd, inner), "ssm_beta": (h.n_embd, s.dt_rank),
            "ssm_alpha": (h.n_embd, s.dt_rank), "ssm_conv": (s.d_conv, channels), "ssm_dt": (s.dt_rank,),
            "ssm_a": (s.dt_rank,), "ssm_norm": (s.d_state,), "ssm_out": (inner, h.n_embd),
            "ffn_gate_inp_shexp": (h.n_embd,), "ffn_gate_shexp": (h.n_embd, h.n_ff_shexp),
            "ffn_up_shexp": (h.n_embd, h.n_ff_shexp), "ffn_down_shexp": (h.n_ff_shexp, h.n_embd)})  # fmt: skip
        mixer = DELTANET if h.recurrent[il] else ("wq", "wk", "wv", "wo", "q_norm", "k_norm")
        ffn = EXPERT_FFN + SHARED_EXPERT if self.experts else DENSE_FFN
        return {self.gguf_name(field): shapes[field] for field in ("attn_norm", "ffn_norm", *mixer, *ffn)}

    def configure(self, g: GGUFFile, h: Hyper, p: ModelParams, layers: Layer, tensor: Callable[[str], Tensor]) -> None:
        p.ssm_d_conv, p.ssm_d_state, p.ssm_n_group, p.ssm_dt_rank = (h.ssm.d_conv, h.ssm.d_state, h.ssm.n_group,
                                                                      h.ssm.dt_rank)
        p.n_ff_shexp = h.n_ff_shexp


class Qwen35Moe(Qwen35):
    name = "qwen35moe"
    read_keys = _KEYS | EXPERT_KEYS | {"expert_shared_feed_forward_length"}
    experts = True

    def extra_hyper(self, g: GGUFFile, h: Hyper) -> dict:
        """And the shared expert's width (llama.cpp's default: feed_forward_length)."""
        n_ff = g.arch_value("feed_forward_length")
        return super().extra_hyper(g, h) | {
            "n_ff_shexp": metadata_int(g, "expert_shared_feed_forward_length", n_ff if isinstance(n_ff, int) else None)}


ARCHITECTURE = Qwen35()
MOE_ARCHITECTURE = Qwen35Moe()
