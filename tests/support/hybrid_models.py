"""Tiny models whose memory llama.cpp cannot cut back to an earlier position, with random weights.

``lfm2``: Liquid's LFM2 in llama.cpp's layout, a hybrid of gated short-convolution layers (a rolling state
per sequence) and grouped-query attention layers (a KV cache); ``mamba``: a pure state-space model. Both
carry SmolLM2's tokenizer and chat template (``vocab_from``), so the daemon chats with them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from localllm.gguf import read_gguf
from support.gguf_builders import _copy_tokenizer

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2


class _Weights:
    """Random tensors for a writer, named and shaped as llama.cpp reads them (ggml order: innermost first)."""

    def __init__(self, w: GGUFWriter, seed: int) -> None:
        self.w, self.rng = w, np.random.default_rng(seed)

    def __call__(self, name: str, *shape: int, scale: float = 1.0) -> None:
        self.w.add_tensor(name, (self.rng.standard_normal(shape[::-1]) * scale).astype(np.float32))

    def negative(self, name: str, *shape: int) -> None:
        """A state-space model's decay (A = -exp(A_log)): negative, or the state grows without bound."""
        self.w.add_tensor(name, -np.abs(self.rng.standard_normal(shape[::-1])).astype(np.float32) - 0.5)


def _writer(path: Path, arch: str, vocab_from: Path, n_layer: int, context_length: int) -> tuple[GGUFWriter, int]:
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layer)
    w.add_context_length(context_length)
    w.add_embedding_length(N_EMBD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    n_vocab = _copy_tokenizer(vocab_from, w)
    template = read_gguf(vocab_from).metadata.get("tokenizer.chat_template")
    if template is not None:
        w.add_chat_template(template)
    return w, n_vocab


def _finish(w: GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def lfm2(path: Path, vocab_from: Path, layers: str = "cac", context_length: int = 4096, seed: int = 0) -> Path:
    """An LFM2 model whose layers are ``layers``: ``c`` a short-convolution layer, ``a`` an attention layer
    (four query heads, two KV heads of 16 dimensions, q/k norms); each with a gated FFN of 128."""
    n_ff, l_cache, head_dim = 128, 3, N_EMBD // N_HEAD
    w, n_vocab = _writer(path, "lfm2", vocab_from, len(layers), context_length)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv([N_HEAD_KV if kind == "a" else 0 for kind in layers])  # no KV heads: a convolution layer
    w.add_rope_freq_base(1_000_000.0)
    w.add_uint32("lfm2.shortconv.l_cache", l_cache)
    t = _Weights(w, seed)
    t("token_embd.weight", N_EMBD, n_vocab)
    t("token_embd_norm.weight", N_EMBD)  # LFM2's final norm goes by this name in llama.cpp
    for il, kind in enumerate(layers):
        blk = f"blk.{il}."
        t(blk + "attn_norm.weight", N_EMBD)
        if kind == "a":
            t(blk + "attn_q.weight", N_EMBD, N_EMBD)
            t(blk + "attn_k.weight", N_EMBD, N_HEAD_KV * head_dim)
            t(blk + "attn_v.weight", N_EMBD, N_HEAD_KV * head_dim)
            t(blk + "attn_q_norm.weight", head_dim)
            t(blk + "attn_k_norm.weight", head_dim)
            t(blk + "attn_output.weight", N_EMBD, N_EMBD)
        else:
            t(blk + "shortconv.conv.weight", l_cache, N_EMBD)
            t(blk + "shortconv.in_proj.weight", N_EMBD, 3 * N_EMBD)
            t(blk + "shortconv.out_proj.weight", N_EMBD, N_EMBD)
        t(blk + "ffn_norm.weight", N_EMBD)
        t(blk + "ffn_gate.weight", N_EMBD, n_ff)
        t(blk + "ffn_up.weight", N_EMBD, n_ff)
        t(blk + "ffn_down.weight", n_ff, N_EMBD)
    _finish(w)
    return path


def mamba(path: Path, vocab_from: Path, n_layer: int = 2, context_length: int = 4096, seed: int = 0) -> Path:
    """A Mamba (v1) model: every layer a selective state-space block (inner size 128, state 16, conv 4)."""
    d_inner, d_state, d_conv, dt_rank = 2 * N_EMBD, 16, 4, 4
    w, n_vocab = _writer(path, "mamba", vocab_from, n_layer, context_length)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(dt_rank)
    t = _Weights(w, seed)
    t("token_embd.weight", N_EMBD, n_vocab)
    t("output_norm.weight", N_EMBD)
    for il in range(n_layer):
        blk = f"blk.{il}."
        t(blk + "attn_norm.weight", N_EMBD)
        t(blk + "ssm_in.weight", N_EMBD, 2 * d_inner, scale=0.2)
        t(blk + "ssm_conv1d.weight", d_conv, d_inner, scale=0.5)
        t(blk + "ssm_conv1d.bias", d_inner, scale=0.1)
        t(blk + "ssm_x.weight", d_inner, dt_rank + 2 * d_state, scale=0.2)
        t(blk + "ssm_dt.weight", dt_rank, d_inner, scale=0.2)
        t(blk + "ssm_dt.bias", d_inner, scale=0.1)
        t.negative(blk + "ssm_a", d_state, d_inner)
        t(blk + "ssm_d", d_inner)
        t(blk + "ssm_out.weight", d_inner, N_EMBD, scale=0.2)
    _finish(w)
    return path
