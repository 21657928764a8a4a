"""Phi-3: llama's layer, its ffn_up holding the gate's rows then the up rows, and q/k/v in one attn_qkv in
some files; both are split into row ranges of the one matrix at load."""

from __future__ import annotations

from collections.abc import Callable

from localllm.backends.native.archs.base import Architecture, Hyper, Shape
from localllm.backends.native.lib import Layer, ModelParams, Tensor, library
from localllm.gguf import GGUFFile

_FUSED_QKV = "attn_qkv.weight"


def _fused_qkv(g: GGUFFile) -> bool:
    return g.tensor(f"blk.0.{_FUSED_QKV}") is not None


def _rows(t: Tensor, first: int, count: int) -> Tensor:
    """``count`` rows of ``t`` from row ``first``: a view into the same mapping."""
    return Tensor(t.data + first * library().llk_row_size(t.type, t.ne0), t.type, t.ne0, count)


class Phi3(Architecture):
    name = "phi3"
    read_keys = frozenset({"attention.sliding_window"})  # llama.cpp disables Phi's sliding window (its PR 13676)

    def layer_tensors(self, g: GGUFFile, h: Hyper) -> dict[str, Shape]:
        tensors = super().layer_tensors(g, h)
        del tensors[self.gguf_name("w_gate")]
        tensors[self.gguf_name("w_up")] = (h.n_embd, 2 * h.n_ff)
        if _fused_qkv(g):
            q_dim, kv_dim = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
            for field in ("wq", "wk", "wv"):
                del tensors[self.gguf_name(field)]
            tensors[_FUSED_QKV] = (h.n_embd, q_dim + 2 * kv_dim)
        return tensors

    def configure(self, g: GGUFFile, h: Hyper, p: ModelParams, layers: Layer, tensor: Callable[[str], Tensor]) -> None:
        """The fused tensors as the separate ones the forward reads (ffn_up's first n_ff rows are the gate, as
        llama.cpp's swiglu takes them)."""
        q_dim, kv_dim = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
        fused = _fused_qkv(g)
        for il in range(h.n_layer):
            layer = layers[il]
            fused_up = layer.w_up
            layer.w_gate, layer.w_up = _rows(fused_up, 0, h.n_ff), _rows(fused_up, h.n_ff, h.n_ff)
            if fused:
                qkv = tensor(f"blk.{il}.{_FUSED_QKV}")
                layer.wq, layer.wk = _rows(qkv, 0, q_dim), _rows(qkv, q_dim, kv_dim)
                layer.wv = _rows(qkv, q_dim + kv_dim, kv_dim)


ARCHITECTURE = Phi3()
