"""Mixture-of-experts GGUF models written by the tests and the GPU benchmark, for the GPU planner's expert split:
llama.cpp loads them like the real thing (a router, ``ffn_*_exps`` tensors holding every expert of a layer), with
random weights and a real tokenizer, and most of their bytes are experts, as in Qwen3-30B-A3B."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from localllm.server.memory import SAFETY_MARGIN_BYTES, ModelFootprint
from support.gguf_builders import F32, _copy_tokenizer

MOSTLY_Q4_0, MOSTLY_Q8_0, MOSTLY_Q4_K_M = 2, 7, 15  # general.file_type (llama_ftype)
# weights a block and its bytes: Q4_0 an f16 scale and 16 bytes of 4-bit codes; Q8_0 an f16 scale and 32 int8 codes;
# MXFP4 an E8M0 scale byte and 16 bytes of E2M1 codes; Q4_K (f16 d and dmin, 12 bytes of 6-bit scales and mins, 128
# of 4-bit codes) and Q6_K (128 bytes of low nibbles, 64 of high bits, 16 int8 scales, f16 d) super-blocks of 256
_BLOCKS = {GGMLQuantizationType.Q4_0: (32, 18), GGMLQuantizationType.Q8_0: (32, 34),
           GGMLQuantizationType.MXFP4: (32, 17), GGMLQuantizationType.Q4_K: (256, 144),
           GGMLQuantizationType.Q6_K: (256, 210)}


@dataclass(frozen=True)
class MoeShape:
    """A qwen3moe model's dimensions (grouped-query attention with q/k norms, then a routed expert FFN)."""

    n_layer: int = 6
    n_expert: int = 8
    n_expert_used: int = 2
    n_embd: int = 128
    n_ff_exp: int = 1024
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32


#: Qwen3-30B-A3B's shape (its config.json): 48 layers, 128 experts of which 8 a token, 32 query heads, 4 KV heads.
QWEN3_30B_A3B = MoeShape(n_layer=48, n_expert=128, n_expert_used=8, n_embd=2048, n_ff_exp=768, n_head=32,
                         n_head_kv=4, head_dim=128)


Blocks = tuple[np.ndarray, GGMLQuantizationType]  # a quantized tensor's blocks (numpy's shape in bytes) and type


def qwen3moe_model(path: Path, vocab_from: Path, shape: MoeShape | None = None, quantized: bool = False,
                   seed: int = 0, replace: dict[str, np.ndarray | Blocks] | None = None, k_quants: bool = False,
                   ollama_keys: bool = False, sparse: bool = False, **dims: int) -> Path:
    """A ``qwen3moe`` GGUF of ``shape`` (or :class:`MoeShape`'s defaults with ``dims`` replaced): random weights
    scaled so that activations keep their size through the layers, ``vocab_from``'s tokenizer (SmolLM2's in the
    tests) and an output head tied to the embeddings. F32, or with ``quantized`` every matrix Q4_0 (random 4-bit
    codes under one scale: a full-size model is written in the time its bytes take, never held in memory), or with
    ``k_quants`` too in llama.cpp's Q4_K_M mix (Q4_K; Q6_K for the tied embeddings and, in the layers its
    use_more_bits picks, attn_v and the experts' down matrices). ``replace``: tensors written as these arrays
    instead, whatever their shape and type (a file that disagrees with its metadata), or as these blocks of a
    quantized type (numpy's shape in bytes). ``ollama_keys``: the expert keys as Ollama's converter writes them
    (``norm_top_k_prob``, and no ``expert_feed_forward_length``: llama.cpp takes feed_forward_length, the dense
    width, over the experts used). ``sparse``: the tensors' bytes left a hole (a sparse file of the full size:
    the header of a full-size model for what reads only headers, such as the memory planner, in no disk space)."""
    replace = {name: value if isinstance(value, tuple) else (value, None) for name, value in (replace or {}).items()}
    shape = shape or MoeShape(**dims)
    s = shape
    w = GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(s.n_layer)
    w.add_context_length(40960)
    w.add_embedding_length(s.n_embd)
    if ollama_keys:
        w.add_feed_forward_length(s.n_ff_exp * s.n_expert_used)
        w.add_bool("qwen3moe.norm_top_k_prob", True)
    else:
        w.add_feed_forward_length(s.n_ff_exp)
        w.add_expert_feed_forward_length(s.n_ff_exp)
    w.add_expert_count(s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_file_type((MOSTLY_Q4_K_M if k_quants else MOSTLY_Q4_0) if quantized else F32)
    n_vocab = _copy_tokenizer(vocab_from, w)

    q_dim, kv_dim = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    tensors: list[tuple[str, tuple[int, ...], float | None]] = [  # ggml's dimension order; None: a norm (ones)
        ("token_embd.weight", (s.n_embd, n_vocab), 1.0), ("output_norm.weight", (s.n_embd,), None)]
    for il in range(s.n_layer):
        blk = f"blk.{il}."
        tensors += [
            (f"{blk}attn_norm.weight", (s.n_embd,), None),
            (f"{blk}attn_q.weight", (s.n_embd, q_dim), s.n_embd ** -0.5),
            (f"{blk}attn_k.weight", (s.n_embd, kv_dim), s.n_embd ** -0.5),
            (f"{blk}attn_v.weight", (s.n_embd, kv_dim), s.n_embd ** -0.5),
            (f"{blk}attn_q_norm.weight", (s.head_dim,), None),
            (f"{blk}attn_k_norm.weight", (s.head_dim,), None),
            (f"{blk}attn_output.weight", (q_dim, s.n_embd), q_dim ** -0.5),
            (f"{blk}ffn_norm.weight", (s.n_embd,), None),
            # the router, F32 as in real files: logits of a few units, so that the chosen experts share the weight
            (f"{blk}ffn_gate_inp.weight", (s.n_embd, s.n_expert), 2 * s.n_embd ** -0.5),
            (f"{blk}ffn_gate_exps.weight", (s.n_embd, s.n_ff_exp, s.n_expert), s.n_embd ** -0.5),
            (f"{blk}ffn_up_exps.weight", (s.n_embd, s.n_ff_exp, s.n_expert), s.n_embd ** -0.5),
            (f"{blk}ffn_down_exps.weight", (s.n_ff_exp, s.n_embd, s.n_expert), s.n_ff_exp ** -0.5),
        ]

    def block_type(name: str, dims: tuple[int, ...]) -> GGMLQuantizationType | None:
        """The quantized type ``name`` is written in, or None for F32."""
        if not quantized or len(dims) == 1 or "ffn_gate_inp" in name:
            return None
        if not k_quants:
            return GGMLQuantizationType.Q4_0
        if name == "token_embd.weight" or (name.endswith(("attn_v.weight", "ffn_down_exps.weight"))
                                           and _more_bits(int(name.split(".")[1]), s.n_layer)):
            return GGMLQuantizationType.Q6_K
        return GGMLQuantizationType.Q4_K

    for name, dims, _ in tensors:
        numpy_shape = dims[::-1]
        if name in replace:
            data, qtype = replace[name]
            w.add_tensor_info(name, data.shape, data.dtype, data.nbytes, qtype)
        elif (qtype := block_type(name, dims)) is not None:
            per, size = _BLOCKS[qtype]
            byte_shape = (*numpy_shape[:-1], numpy_shape[-1] // per * size)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), qtype)
        else:
            w.add_tensor_info(name, numpy_shape, np.dtype(np.float32), 4 * int(np.prod(numpy_shape)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    if sparse:
        start = GGUFWriter.ggml_pad(w.fout[0].tell(), w.data_alignment)
        end = start + sum(GGUFWriter.ggml_pad(info.nbytes, w.data_alignment) for info in w.tensors[0].values())
        w.close()
        os.truncate(path, end)
        return path
    rng = np.random.default_rng(seed)
    for name, dims, scale in tensors:
        if name in replace:
            w.write_tensor_data(replace[name][0])
        elif scale is None:
            w.write_tensor_data(np.ones(dims[::-1], np.float32))
        elif (qtype := block_type(name, dims)) is not None:
            w.write_tensor_data(_random_blocks(rng, dims[::-1], scale, qtype))
        else:
            w.write_tensor_data((rng.standard_normal(dims[::-1]) * scale).astype(np.float32))
    w.close()
    return path


TINY = MoeShape(n_layer=3, n_expert=16, n_expert_used=4, n_embd=256, n_ff_exp=256, n_head=4, n_head_kv=2, head_dim=64)


def tiny_qwen3moe(directory: Path, vocab_from: Path, ftype: int = F32, shape: MoeShape = TINY, seed: int = 0) -> Path:
    """A small ``qwen3moe`` (:data:`TINY`: widths that every K-format's blocks divide) in ``directory``: F32, or
    quantized to ``ftype`` by llama.cpp's own quantizer (Q8_0 everywhere, or the Q4_K/Q6_K mix of Q4_K_M; the
    router stays F32 as in real files). Written once per directory and arguments, atomically (``directory`` may be
    the test cache's, :func:`support.fixtures.builds_dir`, shared by runs side by side)."""
    from support.fixtures import written_atomically
    from support.gguf_builders import quantized

    stem = (f"qwen3moe-{shape.n_layer}x{shape.n_expert}e{shape.n_expert_used}-{shape.n_embd}-{shape.n_ff_exp}"
            f"-s{seed}")
    source = directory / f"{stem}-f32.gguf"
    if not source.exists():
        written_atomically(source, lambda partial: qwen3moe_model(partial, vocab_from, shape, seed=seed))
    if ftype == F32:
        return source
    path = directory / f"{stem}-ftype{ftype}.gguf"
    return path if path.exists() else written_atomically(path, lambda partial: quantized(source, partial, ftype))


def cache_folder() -> Path:
    """The test cache's folder for :func:`tiny_qwen3moe`'s models with SmolLM2's vocabulary, kept from one run to
    the next while this module's and the builders' code stay the same (:func:`support.fixtures.builds_dir`)."""
    import sys

    from support import gguf_builders
    from support.fixtures import builds_dir

    return builds_dir("qwen3moe", sys.modules[__name__], gguf_builders)


def _more_bits(layer: int, n_layer: int) -> bool:
    """llama.cpp's use_more_bits: the layers whose attn_v and ffn_down Q4_K_M gives Q6_K."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def _random_blocks(rng: np.random.Generator, numpy_shape: tuple[int, ...], scale: float,
                   qtype: GGMLQuantizationType) -> np.ndarray:
    """Blocks of ``qtype`` (numpy's shape in bytes) of uniform random codes, scales and mins, their block scales
    set so that the weights' standard deviation is about ``scale`` (Q4_K's offsets about cancel its codes' mean)."""
    per, size = _BLOCKS[qtype]
    blocks = rng.integers(0, 256, (int(np.prod(numpy_shape)) // per, size), dtype=np.uint8)

    def f16(value: float) -> np.ndarray:
        return np.frombuffer(np.float16(value).tobytes(), np.uint8)

    if qtype == GGMLQuantizationType.Q4_0:
        blocks[:, :2] = f16(scale / 4.6)  # the codes' std is about 4.6
    elif qtype == GGMLQuantizationType.Q8_0:
        blocks[:, :2] = f16(scale / 74)  # int8 codes' std is about 74
    elif qtype == GGMLQuantizationType.MXFP4:
        # a code's value is kvalues_mxfp4[code] (std about 5.85) times 2^(scale byte - 128)
        blocks[:, 0] = round(128 + np.log2(scale / 5.85))
    elif qtype == GGMLQuantizationType.Q4_K:
        d = scale / (31.5 * 4.6)  # 6-bit scales of mean 31.5 times codes of std 4.6
        blocks[:, 0:2], blocks[:, 2:4] = f16(d), f16(7.5 * d)  # mins times 7.5 d: the mean code (7.5) times d
    else:  # Q6_K: int8 scales (std about 74) times codes of std about 18.5
        blocks[:, 208:210] = f16(scale / (74 * 18.5))
    return blocks.reshape(*numpy_shape[:-1], numpy_shape[-1] // per * size)


def room_for(need: ModelFootprint, expert_layers: float) -> int:
    """Free GPU memory that holds all of a MoE model but its experts (every layer's attention, norms, router and KV,
    the output head, the compute buffer with its copy of one layer's experts, the margin) and ``expert_layers``
    layers' experts more, as the planner counts them."""
    rest = sum(need.dense_weights(i) for i in range(need.n_layers)) + need.kv_per_layer * need.n_layers
    experts = max(need.expert_weights)
    return int(SAFETY_MARGIN_BYTES + need.compute_buffer + experts + rest + need.other_weights
               + expert_layers * experts)
