"""Gemma 4 (llama.cpp's src/models/gemma4.cpp): sliding and global layers as the file's per-layer pattern says,
each kind with its own head size, KV heads and rotary dimensions (the global ones rotating part of each head by
``rope_freqs``); the last ``attention.shared_kv_layers`` layers without KV of their own (each reads the last
earlier layer of its kind); attention scores unscaled; the final logits soft-capped; per-layer token embeddings
(E2B/E4B); and in 26B-A4B a dense FFN beside routed experts in every layer that has a router."""

from __future__ import annotations

import math
from collections.abc import Callable

from localllm.backends.native.archs.base import (EXPERT_KEYS, Architecture, Hyper, LayerKv, Shape,
                                                 UnsupportedModel, metadata_int, slide)
from localllm.backends.native.lib import Layer, ModelParams, NativeError, Tensor, library
from localllm.gguf import GGUFFile

_SWA_KEYS = frozenset({"attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa",
                       "attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count_swa"})


def _per_layer(g: GGUFFile, key: str, n_layer: int, default: int) -> list[int]:
    """``<arch>.key`` for each layer: one value for all, or a per-layer array."""
    value = g.arch_value(key, default)
    values = value if isinstance(value, list) else [value] * n_layer
    if len(values) < n_layer or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise NativeError(f"model metadata {g.architecture}.{key} is invalid ({value!r})")
    return values[:n_layer]


class _Layout:
    """What differs between ``g``'s layers: which slide, their head sizes, KV heads, rotary dimensions and FFN
    widths, and which have KV of their own (the first ``n_layer_kv``)."""

    def __init__(self, g: GGUFFile, h: Hyper) -> None:
        n = h.n_layer
        pattern = g.arch_value("attention.sliding_window_pattern")
        if not isinstance(pattern, list) or len(pattern) < n:
            raise NativeError(f"model metadata {g.architecture}.attention.sliding_window_pattern must name each of "
                              f"the {n} layers ({pattern!r})")
        self.sliding = [bool(v) for v in pattern[:n]]
        head_swa = metadata_int(g, "attention.key_length_swa", h.head_dim)
        if metadata_int(g, "attention.value_length_swa", head_swa) != head_swa:
            raise NativeError("Gemma 4 needs equal key and value head sizes on its sliding layers")
        rope_swa = metadata_int(g, "rope.dimension_count_swa", h.rope_dim)
        if rope_swa > head_swa or rope_swa % 2:
            raise NativeError(f"rope.dimension_count_swa {rope_swa} does not fit heads of {head_swa}")
        self.head_dim = [head_swa if s else h.head_dim for s in self.sliding]
        self.rope_dim = [rope_swa if s else h.rope_dim for s in self.sliding]
        self.n_head_kv = _per_layer(g, "attention.head_count_kv", n, h.n_head)
        self.n_ff = _per_layer(g, "feed_forward_length", n, h.n_ff)
        for il, kv in enumerate(self.n_head_kv):
            if h.n_head % kv:
                raise NativeError(f"head_count {h.n_head} is not a multiple of layer {il}'s head_count_kv {kv}")
        shared = g.arch_value("attention.shared_kv_layers", 0)
        if not isinstance(shared, int) or isinstance(shared, bool) or not (shared == 0 or 0 < shared <= n - 2):
            raise NativeError(f"model metadata {g.architecture}.attention.shared_kv_layers is invalid ({shared!r})")
        self.n_layer_kv = n - shared
        # as llama.cpp: a shared layer reads the last layer with KV if it is global, the one before if it slides
        self.kv_source = [il if il < self.n_layer_kv else self.n_layer_kv - (2 if self.sliding[il] else 1)
                          for il in range(n)]
        for il in range(self.n_layer_kv, n):
            if self.sliding[self.kv_source[il]] != self.sliding[il]:
                raise NativeError(f"layer {il} would read the KV of layer {self.kv_source[il]}, a layer of the "
                                  "other kind (sliding or global)")
        if len({(self.head_dim[il], self.n_head_kv[il]) for il in range(n)}) > 2:
            raise NativeError("Gemma 4 layers of more than two head geometries")
        self.per_layer = g.arch_value("embedding_length_per_layer_input", 0) or 0


class Gemma4(Architecture):
    name = "gemma4"
    trims_window = True
    read_keys = EXPERT_KEYS | _SWA_KEYS | {"attention.shared_kv_layers", "embedding_length_per_layer_input",
                                           "final_logit_softcapping"}
    per_layer_keys = frozenset({"attention.head_count_kv", "feed_forward_length"})
    default_rope_base = 1e6

    def mixture(self, g: GGUFFile) -> bool:
        return bool(g.arch_value("expert_count", 0))

    def check_metadata(self, g: GGUFFile) -> None:
        metadata_int(g, "attention.sliding_window")

    def fields(self) -> tuple[str, ...]:
        return ("attn_norm", "wq", "wk", "wv", "wo", "q_norm", "k_norm", "post_attn_norm", "ffn_norm", "w_gate",
                "w_up", "w_down", "post_ffn_norm", "out_scale", "per_layer_inp_gate", "per_layer_proj",
                "per_layer_post_norm", "ffn_gate_inp", "ffn_gate_inp_s", "ffn_gate_exps", "ffn_up_exps",
                "ffn_gate_up_exps", "ffn_down_exps", "ffn_down_exps_s", "ffn_post_norm_1", "ffn_pre_norm_2",
                "ffn_post_norm_2")

    gguf_names = {
        "out_scale": "layer_output_scale.weight", "per_layer_inp_gate": "inp_gate.weight",
        "per_layer_proj": "proj.weight", "per_layer_post_norm": "post_norm.weight",
        "ffn_gate_inp_s": "ffn_gate_inp.scale", "ffn_gate_up_exps": "ffn_gate_up_exps.weight",
        "ffn_down_exps_s": "ffn_down_exps.scale", "ffn_post_norm_1": "post_ffw_norm_1.weight",
        "ffn_pre_norm_2": "pre_ffw_norm_2.weight", "ffn_post_norm_2": "post_ffw_norm_2.weight",
    }  # fmt: skip

    def expected(self, g: GGUFFile, h: Hyper) -> dict[str, tuple[Shape, bool]]:
        layout = _Layout(g, h)
        e, pl, n_exp, ff_exp = h.n_embd, layout.per_layer, h.n_expert, h.n_ff_exp
        expected: dict[str, tuple[Shape, bool]] = {"rope_freqs.weight": ((h.head_dim // 2,), False)}
        if pl:
            if pl > e:
                raise NativeError(f"per-layer embeddings of {pl} wider than the model's {e}")
            table = g.tensor("per_layer_token_embd.weight")  # each layer's part of a row is looked up on its own
            block = library().llk_block_size(table.ggml_type) if table is not None else 0
            if block and pl % block:
                raise UnsupportedModel(f"per-layer embeddings of {pl} in a tensor of blocks of {block}")
            expected |= {"per_layer_token_embd.weight": ((pl * h.n_layer, h.n_vocab), True),
                         "per_layer_model_proj.weight": ((e, pl * h.n_layer), True),
                         "per_layer_proj_norm.weight": ((pl,), True)}
        for il in range(h.n_layer):
            hd, kv, ff = layout.head_dim[il], layout.n_head_kv[il] * layout.head_dim[il], layout.n_ff[il]
            own = il < layout.n_layer_kv  # a shared layer may hold K and V matrices it never uses
            b = f"blk.{il}."
            table: dict[str, tuple[Shape, bool]] = {
                "attn_norm": ((e,), True), "wq": ((e, h.n_head * hd), True), "wk": ((e, kv), own),
                "wv": ((e, kv), False), "wo": ((h.n_head * hd, e), True), "q_norm": ((hd,), True),
                "k_norm": ((hd,), own), "post_attn_norm": ((e,), True), "ffn_norm": ((e,), True),
                "w_gate": ((e, ff), True), "w_up": ((e, ff), True), "w_down": ((ff, e), True),
                "post_ffn_norm": ((e,), True), "out_scale": ((1,), False),
            }  # fmt: skip
            if pl:
                table |= {"per_layer_inp_gate": ((e, pl), True), "per_layer_proj": ((pl, e), True),
                          "per_layer_post_norm": ((e,), True)}
            if n_exp:
                routed = g.tensor(b + "ffn_gate_inp.weight") is not None
                fused = g.tensor(b + "ffn_gate_up_exps.weight") is not None
                table |= {"ffn_gate_inp": ((e, n_exp), False), "ffn_gate_inp_s": ((e,), routed),
                          "ffn_gate_up_exps": ((e, 2 * ff_exp, n_exp), False),
                          "ffn_gate_exps": ((e, ff_exp, n_exp), routed and not fused),
                          "ffn_up_exps": ((e, ff_exp, n_exp), routed and not fused),
                          "ffn_down_exps": ((ff_exp, e, n_exp), routed), "ffn_down_exps_s": ((n_exp,), False),
                          "ffn_post_norm_1": ((e,), routed), "ffn_pre_norm_2": ((e,), routed),
                          "ffn_post_norm_2": ((e,), routed)}
            expected |= {b + self.gguf_name(field): entry for field, entry in table.items()}
        return expected

    def sliding_layers(self, g: GGUFFile, h: Hyper) -> list[bool]:
        return _Layout(g, h).sliding

    def kv_layers(self, g: GGUFFile, h: Hyper) -> tuple[LayerKv, ...]:
        """Each layer's own KV at its kind's geometry; none for the shared layers at the end."""
        layout = _Layout(g, h)
        return tuple(LayerKv(layout.n_head_kv[il] * layout.head_dim[il] if il < layout.n_layer_kv else 0,
                             layout.sliding[il]) for il in range(h.n_layer))

    def configure(self, g: GGUFFile, h: Hyper, p: ModelParams, layers: Layer, tensor: Callable[[str], Tensor]) -> None:
        layout = _Layout(g, h)
        slide(p, layers, h, g.arch_value("attention.sliding_window"), layout.sliding,
              float(g.arch_value("rope.freq_base_swa", 10000.0)))
        rope_freqs = Tensor.from_buffer_copy(p.rope_freqs)  # proportional rope: the global layers' only
        p.rope_freqs = Tensor()
        for il in range(h.n_layer):
            layer = layers[il]
            layer.head_dim, layer.n_head_kv, layer.rope_dim = (layout.head_dim[il], layout.n_head_kv[il],
                                                               layout.rope_dim[il])
            layer.kv_source = layout.kv_source[il]
            if not layout.sliding[il] and rope_freqs.data:
                if rope_freqs.ne0 != layout.rope_dim[il] // 2:
                    raise NativeError(f"rope_freqs.weight has {rope_freqs.ne0} factors for {layout.rope_dim[il]} "
                                      "rotary dimensions")
                layer.rope_freqs = rope_freqs
            if il >= layout.n_layer_kv:  # never read: a shared layer attends over its source's KV
                layer.wk = layer.wv = layer.k_norm = Tensor()
        p.head_dim = max(layout.head_dim)
        p.n_head_kv = max(layout.n_head_kv)
        p.rope_dim = max(layout.rope_dim)
        p.n_ff = max(layout.n_ff)  # the dense FFN's scratch (the experts have their own)
        p.n_layer_kv = layout.n_layer_kv
        p.attn_scale = 1.0  # Gemma 4 scales neither Q nor the scores
        p.embd_scale = math.sqrt(h.n_embd)
        p.final_logit_softcap = float(g.arch_value("final_logit_softcapping", 0.0) or 0.0)
        if layout.per_layer:
            p.n_embd_per_layer = layout.per_layer
            p.per_layer_tok_embd = tensor("per_layer_token_embd.weight")
            p.per_layer_model_proj = tensor("per_layer_model_proj.weight")
            p.per_layer_proj_norm = tensor("per_layer_proj_norm.weight")


ARCHITECTURE = Gemma4()
