"""Small mixture-of-experts GGUF models written by the tests, for the GPU planner's expert split: llama.cpp loads
them like the real thing (a router, ``ffn_*_exps`` tensors of every expert a layer), with random weights and a
real tokenizer, and most of their bytes are experts, as in Qwen3-30B-A3B."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from support.gguf_builders import F32, _copy_tokenizer

HEAD_DIM = 32


def qwen3moe_model(path: Path, vocab_from: Path, n_layer: int = 6, n_expert: int = 8, n_expert_used: int = 2,
                   n_embd: int = 128, n_ff_exp: int = 1024, seed: int = 0) -> Path:
    """A ``qwen3moe`` GGUF (F32): ``n_layer`` layers, each with grouped-query attention (four query heads, two KV
    heads, q/k norms) and ``n_expert`` experts of width ``n_ff_exp`` of which the router picks ``n_expert_used``
    a token; ``vocab_from``'s tokenizer (SmolLM2's in the tests) and an output head tied to the embeddings.
    Written through a temporary file, tensor by tensor."""
    w = GGUFWriter(str(path), "qwen3moe", use_temp_file=True)
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff_exp)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_expert_used)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_file_type(F32)
    n_vocab = _copy_tokenizer(vocab_from, w)
    rng = np.random.default_rng(seed)

    def t(name: str, *shape: int, scale: float = 1.0) -> None:  # ggml's order of dimensions (numpy's reversed)
        w.add_tensor(name, (rng.standard_normal(shape[::-1]) * scale).astype(np.float32))

    def norm(name: str, size: int) -> None:
        w.add_tensor(name, np.ones(size, np.float32))

    q_dim, kv_dim = 4 * HEAD_DIM, 2 * HEAD_DIM
    t("token_embd.weight", n_embd, n_vocab)
    norm("output_norm.weight", n_embd)
    for il in range(n_layer):
        blk = f"blk.{il}."
        norm(f"{blk}attn_norm.weight", n_embd)
        t(f"{blk}attn_q.weight", n_embd, q_dim, scale=n_embd ** -0.5)
        t(f"{blk}attn_k.weight", n_embd, kv_dim, scale=n_embd ** -0.5)
        t(f"{blk}attn_v.weight", n_embd, kv_dim, scale=n_embd ** -0.5)
        norm(f"{blk}attn_q_norm.weight", HEAD_DIM)
        norm(f"{blk}attn_k_norm.weight", HEAD_DIM)
        t(f"{blk}attn_output.weight", q_dim, n_embd, scale=q_dim ** -0.5)
        norm(f"{blk}ffn_norm.weight", n_embd)
        t(f"{blk}ffn_gate_inp.weight", n_embd, n_expert)
        t(f"{blk}ffn_gate_exps.weight", n_embd, n_ff_exp, n_expert, scale=n_embd ** -0.5)
        t(f"{blk}ffn_up_exps.weight", n_embd, n_ff_exp, n_expert, scale=n_embd ** -0.5)
        t(f"{blk}ffn_down_exps.weight", n_ff_exp, n_embd, n_expert, scale=n_ff_exp ** -0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
