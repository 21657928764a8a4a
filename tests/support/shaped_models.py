"""Synthetic models of real architectures' full shapes for the speed benchmarks (scripts/bench/hybrid.py and
moe.py): Gemma 4 E4B and 26B-A4B, Qwen 3.6 35B-A3B (``qwen35moe``), gpt-oss-20b, and the dense Llama 3.2 3B and
Qwen3 8B, as many of their layers as asked.

Random quantized blocks (moe_models' generator: written in the time their bytes take, never held in memory) in a
Q4_K mix (Q4_K where a row is whole super-blocks, else Q4_0; Q6_K embeddings tied to the output head), llama.cpp's
Q4_K_M mix for the dense models, or as the real gpt-oss files (MXFP4 experts, Q8_0 matrices); F32 norms of ones,
routers, biases and small per-layer vectors; SmolLM2's tokenizer. Tensor names, shapes and keys are llama.cpp's, as
its converter writes these families (the tiny test models of support.arch_models lay them out the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

from support.gguf_builders import _copy_tokenizer
from support.moe_models import _BLOCKS, MOSTLY_Q4_K_M, _more_bits, _random_blocks

Q4_0, Q4_K, Q6_K = GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K
Q8_0, MXFP4 = GGMLQuantizationType.Q8_0, GGMLQuantizationType.MXFP4
MOSTLY_MXFP4_MOE = 38  # general.file_type (llama_ftype) of the gpt-oss files
# (name, ggml shape, scale of the random weights; None: ones; an array: these values)
Spec = tuple[str, tuple[int, ...], "float | None | np.ndarray"]
# the type a tensor (name, ggml shape) is written in; None: F32
TypeOf = Callable[[str, tuple[int, ...]], "GGMLQuantizationType | None"]


def _type(name: str, dims: tuple[int, ...]) -> GGMLQuantizationType | None:
    """The type ``name`` is written in (None: F32, as real files hold vectors, routers and convolutions)."""
    if len(dims) == 1 or "ffn_gate_inp" in name or name.endswith("ssm_conv1d.weight"):
        return None
    if name == "token_embd.weight":
        return Q6_K
    return Q4_K if dims[0] % 256 == 0 else Q4_0


def write(path: Path, arch: str, vocab_from: Path, keys: dict[str, object], tensors: Sequence[Spec],
          seed: int = 0, type_of: TypeOf = _type, file_type: int = MOSTLY_Q4_K_M) -> Path:
    """A GGUF of ``arch`` with ``keys`` (``@`` for ``<arch>.``; lists of bools or ints as arrays), the tokenizer of
    ``vocab_from`` (the vocabulary's size standing in for ``-1`` in shapes) and random ``tensors`` in the types
    ``type_of`` gives them."""
    w = GGUFWriter(str(path), arch)
    for key, value in keys.items():
        key = key.replace("@", f"{arch}.", 1)
        if isinstance(value, list):
            item = GGUFValueType.BOOL if isinstance(value[0], bool) else GGUFValueType.INT32  # as the converter
            w.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=item)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_float32(key, float(value))
    w.add_file_type(file_type)
    n_vocab = _copy_tokenizer(vocab_from, w)
    specs = [(name, tuple(n_vocab if d == -1 else d for d in dims), scale) for name, dims, scale in tensors]
    for name, dims, _ in specs:
        numpy_shape = dims[::-1]
        qtype = type_of(name, dims)
        if qtype is None:
            w.add_tensor_info(name, numpy_shape, np.dtype(np.float32), 4 * int(np.prod(numpy_shape)))
        else:
            per, size = _BLOCKS[qtype]
            byte_shape = (*numpy_shape[:-1], numpy_shape[-1] // per * size)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, dims, scale in specs:
        if isinstance(scale, np.ndarray):
            w.write_tensor_data(scale.astype(np.float32).reshape(dims[::-1]))
        elif scale is None:
            w.write_tensor_data(np.ones(dims[::-1], np.float32))
        elif (qtype := type_of(name, dims)) is not None:
            w.write_tensor_data(_random_blocks(rng, dims[::-1], scale, qtype))
        else:
            w.write_tensor_data((rng.standard_normal(dims[::-1]) * scale).astype(np.float32))
    w.close()
    return path


@dataclass(frozen=True)
class Gemma4Shape:
    """A Gemma 4's dimensions: five sliding layers to one global (and the last global), the global ones with
    wider heads rotating a quarter of their pairs; ``per_layer`` embeddings and the last ``shared_kv`` layers
    reading earlier layers' KV (E2B/E4B), or ``n_expert`` experts beside the dense FFN (26B-A4B)."""

    n_layer: int
    n_embd: int
    n_head: int
    n_kv: int
    n_kv_global: int
    head: int
    head_global: int
    n_ff: int
    window: int
    per_layer: int = 0
    shared_kv: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    k_eq_v: bool = False  # the global layers' V is their K (no attn_v)


#: Gemma 4 E4B's and 26B-A4B's shapes (their config.json)
GEMMA4_E4B = Gemma4Shape(n_layer=42, n_embd=2560, n_head=8, n_kv=2, n_kv_global=2, head=256, head_global=512,
                         n_ff=10240, window=512, per_layer=256, shared_kv=18)
GEMMA4_26B_A4B = Gemma4Shape(n_layer=30, n_embd=2816, n_head=16, n_kv=8, n_kv_global=2, head=256, head_global=512,
                             n_ff=2112, window=1024, n_expert=128, n_expert_used=8, n_ff_exp=704, k_eq_v=True)


def gemma4(path: Path, vocab_from: Path, s: Gemma4Shape, n_layer: int) -> Path:
    """``s`` with ``n_layer`` layers (the shared-KV layers cut in proportion, the layers with KV a whole number of
    the pattern's six so that the last of them is global, as in the real files)."""
    shared = 0
    if s.shared_kv and n_layer >= 8:
        with_kv = max(6, (n_layer - n_layer * s.shared_kv // s.n_layer) // 6 * 6)
        shared = n_layer - with_kv
    sliding = [il % 6 != 5 and il != n_layer - 1 for il in range(n_layer)]
    e, pl = s.n_embd, s.per_layer
    keys: dict[str, object] = {
        "@block_count": n_layer, "@context_length": 131072, "@embedding_length": e, "@feed_forward_length": s.n_ff,
        "@attention.head_count": s.n_head, "@attention.head_count_kv": [s.n_kv if w else s.n_kv_global for w in sliding],
        "@attention.key_length": s.head_global, "@attention.value_length": s.head_global,
        "@attention.key_length_swa": s.head, "@attention.value_length_swa": s.head,
        "@attention.layer_norm_rms_epsilon": 1e-6, "@rope.freq_base": 1e6, "@rope.freq_base_swa": 1e4,
        "@rope.dimension_count": s.head_global, "@rope.dimension_count_swa": s.head,
        "@attention.sliding_window": s.window, "@attention.sliding_window_pattern": sliding,
        "@final_logit_softcapping": 30.0, "@embedding_length_per_layer_input": pl, "@attention.shared_kv_layers": shared}
    if s.n_expert:
        keys |= {"@expert_count": s.n_expert, "@expert_used_count": s.n_expert_used,
                 "@expert_feed_forward_length": s.n_ff_exp}
    pairs = s.head_global // 2
    factors = np.array([1.0] * (pairs // 4) + [1e30] * (pairs - pairs // 4))
    tensors: list[Spec] = [("token_embd.weight", (e, -1), 1.0), ("output_norm.weight", (e,), None),
                           ("rope_freqs.weight", (pairs,), factors)]
    if pl:
        tensors += [("per_layer_token_embd.weight", (pl * n_layer, -1), 1.0),
                    ("per_layer_model_proj.weight", (e, pl * n_layer), e ** -0.5),
                    ("per_layer_proj_norm.weight", (pl,), None)]
    for il in range(n_layer):
        b, hd = f"blk.{il}.", s.head if sliding[il] else s.head_global
        q, kv = s.n_head * hd, (s.n_kv if sliding[il] else s.n_kv_global) * hd
        tensors += [(b + "attn_norm.weight", (e,), None), (b + "attn_q.weight", (e, q), e ** -0.5),
                    (b + "attn_k.weight", (e, kv), e ** -0.5)]
        if sliding[il] or not s.k_eq_v:
            tensors.append((b + "attn_v.weight", (e, kv), e ** -0.5))
        tensors += [(b + "attn_q_norm.weight", (hd,), None), (b + "attn_k_norm.weight", (hd,), None),
                    (b + "attn_output.weight", (q, e), q ** -0.5), (b + "post_attention_norm.weight", (e,), None),
                    (b + "ffn_norm.weight", (e,), None), (b + "ffn_gate.weight", (e, s.n_ff), e ** -0.5),
                    (b + "ffn_up.weight", (e, s.n_ff), e ** -0.5), (b + "ffn_down.weight", (s.n_ff, e), s.n_ff ** -0.5),
                    (b + "post_ffw_norm.weight", (e,), None), (b + "layer_output_scale.weight", (1,), None)]
        if s.n_expert:
            n, ff = s.n_expert, s.n_ff_exp
            tensors += [(b + "ffn_gate_inp.weight", (e, n), 2 * e ** -0.5), (b + "ffn_gate_inp.scale", (e,), None),
                        (b + "ffn_gate_up_exps.weight", (e, 2 * ff, n), e ** -0.5),
                        (b + "ffn_down_exps.weight", (ff, e, n), ff ** -0.5), (b + "ffn_down_exps.scale", (n,), None),
                        (b + "pre_ffw_norm_2.weight", (e,), None), (b + "post_ffw_norm_1.weight", (e,), None),
                        (b + "post_ffw_norm_2.weight", (e,), None)]
        if pl:
            tensors += [(b + "inp_gate.weight", (e, pl), e ** -0.5), (b + "proj.weight", (pl, e), pl ** -0.5),
                        (b + "post_norm.weight", (e,), None)]
    return write(path, "gemma4", vocab_from, keys, tensors)


@dataclass(frozen=True)
class Qwen35MoeShape:
    """A Qwen 3.5/3.6 MoE's dimensions: three Gated DeltaNet layers before each gated full-attention layer, every
    FFN routed experts plus a sigmoid-gated shared expert."""

    n_layer: int = 40
    n_embd: int = 2048
    n_head: int = 16
    n_kv: int = 2
    head: int = 256
    k_head: int = 128
    n_k: int = 16
    v_head: int = 128
    n_v: int = 32
    conv: int = 4
    n_expert: int = 256
    n_expert_used: int = 8
    n_ff_exp: int = 512
    n_ff_shared: int = 512


#: Qwen 3.6 35B-A3B's shape (its config.json)
QWEN36_35B_A3B = Qwen35MoeShape()


def qwen35moe(path: Path, vocab_from: Path, s: Qwen35MoeShape, n_layer: int) -> Path:
    """``s`` with ``n_layer`` layers (every fourth full attention)."""
    e, qkv = s.n_embd, 2 * s.k_head * s.n_k + s.v_head * s.n_v
    keys: dict[str, object] = {
        "@block_count": n_layer, "@context_length": 262144, "@embedding_length": e, "@attention.head_count": s.n_head,
        "@attention.head_count_kv": s.n_kv, "@attention.key_length": s.head, "@attention.value_length": s.head,
        "@attention.layer_norm_rms_epsilon": 1e-6, "@rope.freq_base": 1e7, "@rope.dimension_count": s.head // 4,
        "@rope.dimension_sections": [11, 11, 10, 0], "@ssm.conv_kernel": s.conv, "@ssm.state_size": s.k_head,
        "@ssm.group_count": s.n_k, "@ssm.time_step_rank": s.n_v, "@ssm.inner_size": s.v_head * s.n_v,
        "@full_attention_interval": 4, "@expert_count": s.n_expert, "@expert_used_count": s.n_expert_used,
        "@expert_feed_forward_length": s.n_ff_exp, "@expert_shared_feed_forward_length": s.n_ff_shared}
    tensors: list[Spec] = [("token_embd.weight", (e, -1), 1.0), ("output_norm.weight", (e,), None)]
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (e,), None), (b + "post_attention_norm.weight", (e,), None)]
        if il % 4 == 3:
            q, kv = s.n_head * s.head, s.n_kv * s.head
            tensors += [(b + "attn_q.weight", (e, 2 * q), e ** -0.5), (b + "attn_k.weight", (e, kv), e ** -0.5),
                        (b + "attn_v.weight", (e, kv), e ** -0.5), (b + "attn_output.weight", (q, e), q ** -0.5),
                        (b + "attn_q_norm.weight", (s.head,), None), (b + "attn_k_norm.weight", (s.head,), None)]
        else:
            inner = s.v_head * s.n_v
            tensors += [(b + "attn_qkv.weight", (e, qkv), e ** -0.5), (b + "attn_gate.weight", (e, inner), e ** -0.5),
                        (b + "ssm_beta.weight", (e, s.n_v), e ** -0.5), (b + "ssm_alpha.weight", (e, s.n_v), e ** -0.5),
                        (b + "ssm_conv1d.weight", (s.conv, qkv), 0.5), (b + "ssm_dt.bias", (s.n_v,), 0.1),
                        (b + "ssm_a", (s.n_v,), -np.exp(np.linspace(-1.0, 1.0, s.n_v))),
                        (b + "ssm_norm.weight", (s.v_head,), None), (b + "ssm_out.weight", (inner, e), inner ** -0.5)]
        n, ff = s.n_expert, s.n_ff_exp
        tensors += [(b + "ffn_gate_inp.weight", (e, n), 2 * e ** -0.5),
                    (b + "ffn_gate_exps.weight", (e, ff, n), e ** -0.5), (b + "ffn_up_exps.weight", (e, ff, n), e ** -0.5),
                    (b + "ffn_down_exps.weight", (ff, e, n), ff ** -0.5), (b + "ffn_gate_inp_shexp.weight", (e,), e ** -0.5),
                    (b + "ffn_gate_shexp.weight", (e, s.n_ff_shared), e ** -0.5),
                    (b + "ffn_up_shexp.weight", (e, s.n_ff_shared), e ** -0.5),
                    (b + "ffn_down_shexp.weight", (s.n_ff_shared, e), s.n_ff_shared ** -0.5)]
    return write(path, "qwen35moe", vocab_from, keys, tensors)


@dataclass(frozen=True)
class GptOssShape:
    """gpt-oss's dimensions: grouped-query attention with biases and a learned sink per head, every even layer
    sliding (llama.cpp's pattern of two for the architecture), YaRN, and routed experts with biases."""

    n_layer: int = 24
    n_embd: int = 2880
    n_head: int = 64
    n_kv: int = 8
    head: int = 64
    n_expert: int = 32
    n_expert_used: int = 4
    n_ff_exp: int = 2880
    window: int = 128


#: gpt-oss-20b's shape (its config.json)
GPT_OSS_20B = GptOssShape()


def _gpt_oss_type(name: str, dims: tuple[int, ...]) -> GGMLQuantizationType | None:
    """As the released gpt-oss files: MXFP4 experts, Q8_0 for every other matrix, F32 vectors, biases, router."""
    if len(dims) == 1 or name.endswith(".bias") or "ffn_gate_inp" in name:
        return None
    return MXFP4 if "_exps." in name else Q8_0


def gpt_oss(path: Path, vocab_from: Path, s: GptOssShape, n_layer: int) -> Path:
    """``s`` with ``n_layer`` layers, upstream's names (``gpt-oss``) and keys (YaRN 32 over 4,096 positions)."""
    e, q, kv, n, ff = s.n_embd, s.n_head * s.head, s.n_kv * s.head, s.n_expert, s.n_ff_exp
    keys: dict[str, object] = {
        "@block_count": n_layer, "@context_length": 131072, "@embedding_length": e, "@feed_forward_length": ff,
        "@expert_feed_forward_length": ff, "@attention.head_count": s.n_head, "@attention.head_count_kv": s.n_kv,
        "@attention.key_length": s.head, "@attention.value_length": s.head, "@attention.layer_norm_rms_epsilon": 1e-5,
        "@rope.freq_base": 150000.0, "@rope.scaling.type": "yarn", "@rope.scaling.factor": 32.0,
        "@rope.scaling.original_context_length": 4096, "@expert_count": n, "@expert_used_count": s.n_expert_used,
        "@attention.sliding_window": s.window}
    tensors: list[Spec] = [("token_embd.weight", (e, -1), 1.0), ("output_norm.weight", (e,), None),
                           ("output.weight", (e, -1), e ** -0.5)]
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (e,), None), (b + "attn_q.weight", (e, q), e ** -0.5),
                    (b + "attn_q.bias", (q,), 0.1), (b + "attn_k.weight", (e, kv), e ** -0.5),
                    (b + "attn_k.bias", (kv,), 0.1), (b + "attn_v.weight", (e, kv), e ** -0.5),
                    (b + "attn_v.bias", (kv,), 0.1), (b + "attn_output.weight", (q, e), q ** -0.5),
                    (b + "attn_output.bias", (e,), 0.1), (b + "attn_sinks.weight", (s.n_head,), None),
                    (b + "post_attention_norm.weight", (e,), None),
                    (b + "ffn_gate_inp.weight", (e, n), 2 * e ** -0.5), (b + "ffn_gate_inp.bias", (n,), 0.1),
                    (b + "ffn_gate_exps.weight", (e, ff, n), e ** -0.5), (b + "ffn_gate_exps.bias", (ff, n), 0.1),
                    (b + "ffn_up_exps.weight", (e, ff, n), e ** -0.5), (b + "ffn_up_exps.bias", (ff, n), 0.1),
                    (b + "ffn_down_exps.weight", (ff, e, n), ff ** -0.5), (b + "ffn_down_exps.bias", (e, n), 0.1)]
    return write(path, "gpt-oss", vocab_from, keys, tensors, type_of=_gpt_oss_type, file_type=MOSTLY_MXFP4_MOE)


@dataclass(frozen=True)
class DenseShape:
    """A dense llama-style model's dimensions: grouped-query attention (with q/k norms: Qwen3), a SwiGLU FFN."""

    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_kv: int
    head: int
    rope_base: float
    eps: float
    tied: bool  # the output head is the token embeddings
    llama3_rope: tuple[float, float, float, int] | None = None  # factor, low and high frequency factors, context


#: Llama 3.2 3B's and Qwen3 8B's shapes (their config.json)
LLAMA32_3B = DenseShape("llama", n_layer=28, n_embd=3072, n_ff=8192, n_head=24, n_kv=8, head=128, rope_base=500000.0,
                        eps=1e-5, tied=True, llama3_rope=(32.0, 1.0, 4.0, 8192))
QWEN3_8B = DenseShape("qwen3", n_layer=36, n_embd=4096, n_ff=12288, n_head=32, n_kv=8, head=128, rope_base=1e6,
                      eps=1e-6, tied=False)


def _q4_k_m_type(n_layer: int, tied: bool) -> TypeOf:
    """llama.cpp's Q4_K_M choice: Q6_K for the output head (the embeddings when tied) and, in the layers its
    use_more_bits picks, attn_v and ffn_down; Q4_K for every other matrix; F32 vectors."""

    def type_of(name: str, dims: tuple[int, ...]) -> GGMLQuantizationType | None:
        if len(dims) == 1:
            return None
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            return Q6_K
        if name.endswith(("attn_v.weight", "ffn_down.weight")) and _more_bits(int(name.split(".")[1]), n_layer):
            return Q6_K
        return Q4_K

    return type_of


def _llama3_rope_factors(s: DenseShape) -> np.ndarray:
    """The ``rope_freqs`` a Llama 3.x file holds: each rotation's wavelength stretched as its rope_scaling says."""
    factor, low, high, context = s.llama3_rope
    wavelengths = 2 * np.pi * s.rope_base ** (np.arange(0, s.head, 2) / s.head)
    smooth = (context / wavelengths - low) / (high - low)
    return np.where(wavelengths < context / high, 1.0,
                    np.where(wavelengths > context / low, factor, 1 / ((1 - smooth) / factor + smooth)))


def dense(path: Path, vocab_from: Path, s: DenseShape, n_layer: int) -> Path:
    """``s`` with ``n_layer`` layers in llama.cpp's Q4_K_M mix."""
    e, q, kv = s.n_embd, s.n_head * s.head, s.n_kv * s.head
    keys: dict[str, object] = {
        "@block_count": n_layer, "@context_length": 131072 if s.llama3_rope else 40960, "@embedding_length": e,
        "@feed_forward_length": s.n_ff, "@attention.head_count": s.n_head, "@attention.head_count_kv": s.n_kv,
        "@attention.key_length": s.head, "@attention.value_length": s.head, "@attention.layer_norm_rms_epsilon": s.eps,
        "@rope.freq_base": s.rope_base, "@rope.dimension_count": s.head}
    tensors: list[Spec] = [("token_embd.weight", (e, -1), 1.0), ("output_norm.weight", (e,), None)]
    if not s.tied:
        tensors.append(("output.weight", (e, -1), e ** -0.5))
    if s.llama3_rope:
        tensors.append(("rope_freqs.weight", (s.head // 2,), _llama3_rope_factors(s)))
    for il in range(n_layer):
        b = f"blk.{il}."
        tensors += [(b + "attn_norm.weight", (e,), None), (b + "attn_q.weight", (e, q), e ** -0.5),
                    (b + "attn_k.weight", (e, kv), e ** -0.5), (b + "attn_v.weight", (e, kv), e ** -0.5),
                    (b + "attn_output.weight", (q, e), q ** -0.5)]
        if s.arch == "qwen3":
            tensors += [(b + "attn_q_norm.weight", (s.head,), None), (b + "attn_k_norm.weight", (s.head,), None)]
        tensors += [(b + "ffn_norm.weight", (e,), None), (b + "ffn_gate.weight", (e, s.n_ff), e ** -0.5),
                    (b + "ffn_up.weight", (e, s.n_ff), e ** -0.5), (b + "ffn_down.weight", (s.n_ff, e), s.n_ff ** -0.5)]
    return write(path, s.arch, vocab_from, keys, tensors, type_of=_q4_k_m_type(n_layer, s.tied))
