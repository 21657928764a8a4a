"""A GGUF model described to the C forward pass: hyperparameters and tensor pointers into the mapping.

The file is mapped by the C library; every tensor the forward pass will read
is checked here first: its type must be one the kernels know, its shape must
be what the architecture's metadata implies, and its bytes must lie inside
the mapping.  Anything else is a :class:`NativeError` naming the tensor and
suggesting the llama.cpp engine; the C code then never reads out of bounds.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localllm.backends.native.lib import LAYER_TENSORS, Layer, ModelParams, NativeError, Tensor, library
from localllm.gguf import GGML_TYPES, GGUFFile, InvalidGGUF, TensorInfo, read_gguf

log = logging.getLogger(__name__)

HINT = "use the llama.cpp engine (LOCALLLM_ENGINE=llama.cpp or PARAMETER engine llama.cpp)"
ARCHITECTURES = {"llama": 0, "qwen2": 1, "qwen3": 2, "gemma3": 3, "phi3": 4, "qwen3moe": 5, "gpt-oss": 6, "qwen35": 7,
                 "qwen35moe": 8}
# Architectures the native forward runs exactly but that it gets only when asked (the engine setting), with the
# reason; none now (qwen35 and qwen35moe came off it when the prefix cache took their recurrent state).
OPT_IN_ARCHITECTURES: dict[str, str] = {}
_F32 = 0

# our layer field -> GGUF tensor name suffix
_GGUF_NAMES = {
    "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight", "wv": "attn_v.weight",
    "wo": "attn_output.weight", "bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias",
    "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
    "post_attn_norm": "post_attention_norm.weight", "ffn_norm": "ffn_norm.weight",
    "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
    "post_ffn_norm": "post_ffw_norm.weight", "ffn_gate_inp": "ffn_gate_inp.weight",
    "ffn_gate_exps": "ffn_gate_exps.weight", "ffn_up_exps": "ffn_up_exps.weight",
    "ffn_down_exps": "ffn_down_exps.weight", "bo": "attn_output.bias", "attn_sinks": "attn_sinks.weight",
    "ffn_gate_inp_b": "ffn_gate_inp.bias", "ffn_gate_exps_b": "ffn_gate_exps.bias",
    "ffn_up_exps_b": "ffn_up_exps.bias", "ffn_down_exps_b": "ffn_down_exps.bias",
    "ssm_qkv": "attn_qkv.weight", "ssm_z": "attn_gate.weight", "ssm_beta": "ssm_beta.weight",
    "ssm_alpha": "ssm_alpha.weight", "ssm_conv": "ssm_conv1d.weight", "ssm_dt": "ssm_dt.bias", "ssm_a": "ssm_a",
    "ssm_norm": "ssm_norm.weight", "ssm_out": "ssm_out.weight", "ffn_gate_inp_shexp": "ffn_gate_inp_shexp.weight",
    "ffn_gate_shexp": "ffn_gate_shexp.weight", "ffn_up_shexp": "ffn_up_shexp.weight",
    "ffn_down_shexp": "ffn_down_shexp.weight",
}  # fmt: skip
# where an architecture names a field's tensor otherwise: gpt-oss's FFN norm is its "post-attention" norm
# (and Qwen 3.5's, whose residual is taken before it)
_ARCH_GGUF_NAMES = {"gpt-oss": {"ffn_norm": "post_attention_norm.weight"},
                    "qwen35": {"ffn_norm": "post_attention_norm.weight"},
                    "qwen35moe": {"ffn_norm": "post_attention_norm.weight"}}
_ATTENTION = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm")
_DENSE_FFN = ("w_gate", "w_up", "w_down")
_EXPERT_FFN = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")  # a router and every expert's matrices
_EXPERT_TENSORS = frozenset(_EXPERT_FFN[1:])  # 3-D: one (ne0, ne1) slice per expert
_MOE_ARCHITECTURES = frozenset({"qwen3moe", "gpt-oss", "qwen35moe"})
_HYBRID_ARCHITECTURES = frozenset({"qwen35", "qwen35moe"})  # Gated DeltaNet layers between gated attention layers
_DELTANET = ("ssm_qkv", "ssm_z", "ssm_beta", "ssm_alpha", "ssm_conv", "ssm_dt", "ssm_a", "ssm_norm", "ssm_out")
_SHARED_EXPERT = ("ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
_F32_ONLY = frozenset({"ssm_conv"})  # read as floats by the forward (as ggml_ssm_conv reads it)
# what each architecture adds to its attention and feed-forward: all of it required, anything else refused
_ARCH_TENSORS = {
    "llama": (),
    "qwen2": ("bq", "bk", "bv"),
    "qwen3": ("q_norm", "k_norm"),
    "gemma3": ("q_norm", "k_norm", "post_attn_norm", "post_ffn_norm"),
    "phi3": (),  # but its ffn_up holds the gate's rows and then the up rows, and q/k/v may be one attn_qkv
    "qwen3moe": ("q_norm", "k_norm"),
    "gpt-oss": ("bq", "bk", "bv", "bo", "attn_sinks", "ffn_gate_inp_b", "ffn_gate_exps_b", "ffn_up_exps_b",
                "ffn_down_exps_b"),
    "qwen35": ("q_norm", "k_norm"),  # on its attention layers (its DeltaNet layers: _DELTANET)
    "qwen35moe": ("q_norm", "k_norm", *_SHARED_EXPERT),
}


@dataclass(frozen=True)
class RopeScaling:
    """How llama.cpp scales the rotary angles: YaRN (ext_factor 1) or linear (0) by 1/freq_scale."""

    freq_scale: float
    ext_factor: float
    attn_factor: float
    orig_ctx: int
    beta_fast: float = 32.0  # llama.cpp's defaults (only grok's files set them)
    beta_slow: float = 1.0


@dataclass(frozen=True)
class DeltaNet:
    """A hybrid model's Gated DeltaNet: convolution taps, state (head) size, K heads, V heads."""

    d_conv: int
    d_state: int
    n_group: int
    dt_rank: int


@dataclass(frozen=True)
class Hyper:
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    eps: float
    rope_base: float
    rope_dim: int
    rope: RopeScaling | None = None  # gpt-oss: the rope scaling llama.cpp applies
    n_expert: int = 0  # a mixture-of-experts model: experts a layer, of which n_expert_used a token, n_ff_exp wide
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0  # qwen35moe's shared expert
    ssm: DeltaNet | None = None  # a hybrid model's Gated DeltaNet, and which layers have one
    recurrent: tuple[bool, ...] = ()


class UnsupportedModel(NativeError):
    """A model the native forward would not run exactly; ``reason`` names the key, tensor or type."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason} is not supported by the native engine; {HINT}")
        self.reason = f"{reason} is not supported by the native engine"


def _unsupported(what: str) -> NativeError:
    return UnsupportedModel(what)


# Every <arch>.* metadata key the native forward may meet.  Keys it reads (checked in
# hyperparameters) and keys that only describe the model may hold any value; keys that
# change the maths are accepted only at the value that leaves llama's maths unchanged.
# A key in neither table (soft-capping, ALiBi, experts, ...) refuses the model.
_READ_KEYS = frozenset({
    "context_length", "embedding_length", "block_count", "feed_forward_length", "vocab_size",
    "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
    "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count",
    "rope.scaling.original_context_length", "rope.scaling.finetuned",
    "pooling_type",  # how an embedding runner pools the hidden states (runner/embed.py); the forward is the same
})  # fmt: skip
_ARCH_READ_KEYS = {
    "gemma3": frozenset({"attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa"}),
    "phi3": frozenset({"attention.sliding_window"}),  # llama.cpp disables Phi's sliding window (its PR 13676)
    "qwen3moe": frozenset({"expert_count", "expert_used_count", "expert_feed_forward_length"}),
    "gpt-oss": frozenset({"expert_count", "expert_used_count", "expert_feed_forward_length", "attention.sliding_window",
                          "attention.sliding_window_pattern", "rope.scaling.type", "rope.scaling.factor",
                          "rope.scaling.attn_factor", "rope.freq_base_swa"}),
    # rope.dimension_sections: multi-section rope gives a text token every section the same position, so it
    # rotates as NeoX rope over rope.dimension_count dimensions whatever the sections
    "qwen35": frozenset({"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank",
                         "ssm.inner_size", "full_attention_interval", "attention.recurrent_layers",
                         "rope.dimension_sections"}),
}
_ARCH_READ_KEYS["qwen35moe"] = _ARCH_READ_KEYS["qwen35"] | {
    "expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length"}
_NEUTRAL_VALUES = {
    "rope.scaling.type": ("none",),
    "rope.scaling.factor": (0.0, 1.0),  # llama.cpp reads 0 as 1
    "expert_count": (0,),
    "expert_used_count": (0,),
    "norm_top_k_prob": (True,),  # Ollama's converter writes it; llama.cpp renormalises qwen3moe's k weights always
    "attention.causal": (True,),
    "nextn_predict_layers": (0,),  # multi-token-prediction layers, which the native forward does not load
}


def _check_metadata_keys(g: GGUFFile) -> None:
    prefix = f"{g.architecture}."
    known = _READ_KEYS | _ARCH_READ_KEYS.get(g.architecture or "", frozenset())
    for full_key, value in g.metadata.items():
        key = full_key[len(prefix):] if full_key.startswith(prefix) else None
        if key is None or key in known:
            continue
        if key not in _NEUTRAL_VALUES:
            raise _unsupported(f"model metadata key {full_key!r}")
        if value not in _NEUTRAL_VALUES[key] or isinstance(value, bool) != isinstance(_NEUTRAL_VALUES[key][0], bool):
            raise _unsupported(f"model metadata {full_key} = {value!r}")


def _int(g: GGUFFile, key: str, default: int | None = None) -> int:
    value = g.arch_value(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise NativeError(f"model metadata {g.architecture}.{key} is missing or invalid ({value!r})")
    return value


def hyperparameters(g: GGUFFile) -> Hyper:
    arch = g.architecture
    if arch not in ARCHITECTURES:
        raise _unsupported(f"architecture {arch!r}")
    _check_metadata_keys(g)
    embd = g.tensor("token_embd.weight")
    if embd is None or len(embd.shape) != 2:
        raise NativeError("the model has no 2-D token_embd.weight tensor")
    n_embd, n_head = _int(g, "embedding_length"), _int(g, "attention.head_count")
    head_dim = _int(g, "attention.key_length", n_embd // n_head)
    if _int(g, "attention.value_length", head_dim) != head_dim:
        raise _unsupported("different key and value head sizes")
    n_head_kv = _int(g, "attention.head_count_kv", n_head)
    if n_head % n_head_kv:
        raise NativeError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")
    rope_dim = _int(g, "rope.dimension_count", head_dim)
    if rope_dim > head_dim or rope_dim % 2:
        raise NativeError(f"rope.dimension_count {rope_dim} does not fit heads of {head_dim}")
    if arch == "gpt-oss":
        _int(g, "attention.sliding_window")
    if arch == "gemma3":
        _int(g, "attention.sliding_window")
        _int(g, "attention.sliding_window_pattern", 6)  # a per-layer array would place windows we do not
    eps = g.arch_value("attention.layer_norm_rms_epsilon", 1e-6)
    base = g.arch_value("rope.freq_base", 1e6 if arch == "gemma3" else 10000.0)
    experts = _experts(g) if arch in _MOE_ARCHITECTURES else {}
    if arch in _HYBRID_ARCHITECTURES:
        experts.update(_hybrid(g, head_dim))
    return Hyper(
        arch=arch, n_embd=n_embd, n_layer=_int(g, "block_count"), n_head=n_head, n_head_kv=n_head_kv,
        head_dim=head_dim, n_ff=_int(g, "feed_forward_length", experts.get("n_ff_exp")), n_vocab=embd.shape[1],
        n_ctx_train=_int(g, "context_length", 4096), eps=float(eps), rope_base=float(base), rope_dim=rope_dim,
        rope=_rope_scaling(g) if arch == "gpt-oss" else None, **experts,
    )  # fmt: skip


def _hybrid(g: GGUFFile, head_dim: int) -> dict:
    """A Qwen 3.5 model's Gated DeltaNet (as llama.cpp's qwen35 loader reads it: recurrent layers from
    attention.recurrent_layers, else all but every full_attention_interval-th) and shared expert width."""
    n_layer = _int(g, "block_count")
    ssm = DeltaNet(_int(g, "ssm.conv_kernel"), _int(g, "ssm.state_size"), _int(g, "ssm.group_count"),
                   _int(g, "ssm.time_step_rank"))
    if _int(g, "ssm.inner_size") != ssm.d_state * ssm.dt_rank:
        raise _unsupported(f"{g.architecture}.ssm.inner_size other than ssm.state_size x ssm.time_step_rank")
    if ssm.dt_rank % ssm.n_group:
        raise NativeError(f"model metadata {g.architecture}.ssm.time_step_rank {ssm.dt_rank} is not a multiple of "
                          f"ssm.group_count {ssm.n_group}")
    if g.arch_value("rope.dimension_count", head_dim) > head_dim:
        raise NativeError(f"rope.dimension_count does not fit heads of {head_dim}")
    layers = g.arch_value("attention.recurrent_layers")
    if layers is not None:
        if not isinstance(layers, list) or len(layers) < n_layer:
            raise NativeError(f"model metadata {g.architecture}.attention.recurrent_layers is invalid")
        recurrent = tuple(bool(v) for v in layers[:n_layer])
    else:
        interval = _int(g, "full_attention_interval", 4)
        recurrent = tuple((il + 1) % interval != 0 for il in range(n_layer))
    extra: dict = {"ssm": ssm, "recurrent": recurrent}
    if g.architecture == "qwen35moe":
        n_ff = g.arch_value("feed_forward_length")
        extra["n_ff_shexp"] = _int(g, "expert_shared_feed_forward_length", n_ff if isinstance(n_ff, int) else None)
    return extra


def _rope_scaling(g: GGUFFile) -> RopeScaling:
    """The rope scaling of ``g`` as llama.cpp's context computes it (in single precision, as it does): the type
    (default linear) and factor, and for YaRN the attention factor that cancels the one ggml's rope multiplies
    in (so cos and sin are scaled by 1 + 0.1 ln factor, times rope.scaling.attn_factor)."""
    kind = g.arch_value("rope.scaling.type", "linear")
    if kind not in ("none", "linear", "yarn"):
        raise _unsupported(f"model metadata {g.architecture}.rope.scaling.type = {kind!r}")
    factor = np.float32(g.arch_value("rope.scaling.factor", 0.0) or 1.0)
    freq_scale = np.float32(1.0) if kind == "none" else np.float32(1.0) / factor
    attn = np.float32(1.0)
    ext = 1.0 if kind == "yarn" else 0.0
    if ext:
        factor = np.float32(1.0) / freq_scale
        log = np.float32(np.log(factor))
        attn = np.float32(1.0) if factor <= 1 else np.float32(0.1) * log + np.float32(1.0)
        attn = attn * (np.float32(1.0) / (np.float32(1.0) + np.float32(0.1) * log))
    attn = attn * np.float32(g.arch_value("rope.scaling.attn_factor", 1.0))
    orig = g.arch_value("rope.scaling.original_context_length") or _int(g, "context_length", 4096)
    return RopeScaling(float(freq_scale), ext, float(attn), int(orig))


def _experts(g: GGUFFile) -> dict[str, int]:
    """A mixture-of-experts model's expert count, experts used a token and expert width (llama.cpp's default:
    feed_forward_length over the experts used)."""
    n_expert, n_used = _int(g, "expert_count"), _int(g, "expert_used_count")
    if n_used > n_expert:
        raise NativeError(f"model metadata {g.architecture}.expert_used_count {n_used} exceeds expert_count {n_expert}")
    n_ff = g.arch_value("feed_forward_length")
    default = n_ff // n_used if isinstance(n_ff, int) and not isinstance(n_ff, bool) and n_ff >= n_used else None
    return {"n_expert": n_expert, "n_expert_used": n_used,
            "n_ff_exp": _int(g, "expert_feed_forward_length", default)}


def _layer_fields(h: Hyper, il: int = 0) -> tuple[str, ...]:
    """Our layer fields layer ``il`` of an ``h`` model has (each a tensor of its own, but for phi3's fused ones)."""
    ffn = _EXPERT_FFN if h.n_expert else _DENSE_FFN
    if h.recurrent and h.recurrent[il]:  # a Gated DeltaNet layer: no attention of its own
        return ("attn_norm", "ffn_norm", *_DELTANET, *ffn, *(f for f in _ARCH_TENSORS[h.arch] if f in _SHARED_EXPERT))
    return _ATTENTION + ffn + _ARCH_TENSORS[h.arch]


def expected_tensors(h: Hyper, fused_qkv: bool = False) -> dict[str, tuple[tuple[int, ...], bool]]:
    """Every tensor the forward pass reads for ``h``: name -> (shape, required).  A file's tensor
    outside this table would change the model (e.g. a MoE router), so it is refused.  ``fused_qkv``:
    a phi3 model's q, k and v rows are one attn_qkv tensor."""
    q_dim, kv_dim = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
    gated_q = 2 if h.arch in _HYBRID_ARCHITECTURES else 1  # each head's query, then its output gate
    shapes = {
        "attn_norm": (h.n_embd,), "wq": (h.n_embd, gated_q * q_dim), "wk": (h.n_embd, kv_dim), "wv": (h.n_embd, kv_dim),
        "wo": (q_dim, h.n_embd), "bq": (q_dim,), "bk": (kv_dim,), "bv": (kv_dim,), "q_norm": (h.head_dim,),
        "k_norm": (h.head_dim,), "post_attn_norm": (h.n_embd,), "ffn_norm": (h.n_embd,),
        "w_gate": (h.n_embd, h.n_ff), "w_up": (h.n_embd, h.n_ff), "w_down": (h.n_ff, h.n_embd),
        "post_ffn_norm": (h.n_embd,), "ffn_gate_inp": (h.n_embd, h.n_expert),
        "ffn_gate_exps": (h.n_embd, h.n_ff_exp, h.n_expert), "ffn_up_exps": (h.n_embd, h.n_ff_exp, h.n_expert),
        "ffn_down_exps": (h.n_ff_exp, h.n_embd, h.n_expert), "bo": (h.n_embd,), "attn_sinks": (h.n_head,),
        "ffn_gate_inp_b": (h.n_expert,), "ffn_gate_exps_b": (h.n_ff_exp, h.n_expert),
        "ffn_up_exps_b": (h.n_ff_exp, h.n_expert), "ffn_down_exps_b": (h.n_embd, h.n_expert),
        "ffn_gate_inp_shexp": (h.n_embd,), "ffn_gate_shexp": (h.n_embd, h.n_ff_shexp),
        "ffn_up_shexp": (h.n_embd, h.n_ff_shexp), "ffn_down_shexp": (h.n_ff_shexp, h.n_embd),
    }  # fmt: skip
    if h.ssm is not None:
        s = h.ssm
        inner, channels = s.d_state * s.dt_rank, 2 * s.d_state * s.n_group + s.d_state * s.dt_rank
        shapes.update({
            "ssm_qkv": (h.n_embd, channels), "ssm_z": (h.n_embd, inner), "ssm_beta": (h.n_embd, s.dt_rank),
            "ssm_alpha": (h.n_embd, s.dt_rank), "ssm_conv": (s.d_conv, channels), "ssm_dt": (s.dt_rank,),
            "ssm_a": (s.dt_rank,), "ssm_norm": (s.d_state,), "ssm_out": (inner, h.n_embd)})  # fmt: skip
    fields = _layer_fields(h)
    if h.arch == "phi3":
        shapes["w_up"] = (h.n_embd, 2 * h.n_ff)
        fields = tuple(f for f in fields if f != "w_gate" and not (fused_qkv and f in ("wq", "wk", "wv")))
    expected = {
        "token_embd.weight": ((h.n_embd, h.n_vocab), True),
        "output_norm.weight": ((h.n_embd,), True),
        "output.weight": ((h.n_embd, h.n_vocab), False),
    }
    if h.arch == "llama":  # Llama 3.x's rope scaling: one divisor per rotary pair, as llama.cpp reads it
        expected["rope_freqs.weight"] = ((h.rope_dim // 2,), False)
    for il in range(h.n_layer):
        fields = _layer_fields(h, il) if h.recurrent else fields
        expected.update({f"blk.{il}.{gguf_name(h.arch, field)}": (shapes[field], True) for field in fields})
        if fused_qkv:
            expected[f"blk.{il}.attn_qkv.weight"] = ((h.n_embd, q_dim + 2 * kv_dim), True)
    return expected


def gguf_name(arch: str, field: str) -> str:
    """The GGUF tensor name (after ``blk.N.``) of our layer ``field`` in an ``arch`` model."""
    return _ARCH_GGUF_NAMES.get(arch, {}).get(field) or _GGUF_NAMES[field]


def check_tensor(info: TensorInfo, shape: tuple[int, ...], file_size: int) -> int:
    """The bytes of ``info`` once its type, shape and extent are ones the kernels can read safely."""
    lib = library()
    type_name = GGML_TYPES[info.ggml_type][0]
    if (len(shape) == 1 or info.name.endswith(".ssm_conv1d.weight")) and info.ggml_type != _F32:
        raise _unsupported(f"tensor {info.name!r} of type {type_name} (norms, biases and convolutions must be F32)")
    if not lib.llk_type_supported(info.ggml_type):
        raise _unsupported(f"tensor {info.name!r} of type {type_name}")
    if tuple(info.shape) != shape:
        raise NativeError(
            f"tensor {info.name!r} has shape {tuple(info.shape)}, but the model's metadata implies {shape}; "
            "the file is corrupt or not a model the native engine understands"
        )
    rows = math.prod(shape[1:])
    expected = lib.llk_row_size(info.ggml_type, shape[0]) * rows
    if info.nbytes != expected or info.offset < 0 or info.offset + expected > file_size:
        raise NativeError(f"tensor {info.name!r} does not lie inside the file ({file_size} bytes)")
    return expected


def check_model(g: GGUFFile) -> tuple[Hyper, dict[str, tuple[tuple[int, ...], bool]]]:
    """The hyperparameters and tensor table of a model the native forward runs exactly;
    otherwise a :class:`NativeError` (an :class:`UnsupportedModel` when the file is sound)."""
    h = hyperparameters(g)
    expected = expected_tensors(h, fused_qkv=h.arch == "phi3" and g.tensor("blk.0.attn_qkv.weight") is not None)
    for info in g.tensors:
        if info.name not in expected:
            raise _unsupported(f"tensor {info.name!r} in a {h.arch} model")
    for name, (shape, required) in expected.items():
        info = g.tensor(name)
        if info is None and required:
            raise NativeError(f"the model has no tensor {name!r}, which a {h.arch} model needs")
        if info is not None:
            check_tensor(info, shape, g.file_size)
    return h, expected


def native_support(path: str | Path, by_default: bool = False) -> str | None:
    """None when the native engine runs the model at ``path`` exactly, else a one-line reason
    naming the key, tensor or type it lacks.  Reads only the GGUF header, so the scheduler
    can ask on every load.  ``by_default``: whether the engine should get the model unasked, which
    it does not for the architectures of :data:`OPT_IN_ARCHITECTURES` (the reason says why)."""
    try:
        h, _ = check_model(read_gguf(Path(path), skip_arrays_over=256))
    except (InvalidGGUF, OSError) as exc:
        return f"cannot read {path}: {exc}"
    except UnsupportedModel as exc:
        return exc.reason
    except NativeError as exc:
        return str(exc)
    if by_default and h.arch in OPT_IN_ARCHITECTURES:
        return f"the native engine runs {h.arch} only when asked: {OPT_IN_ARCHITECTURES[h.arch]}"
    return None


def _oss_sliding(g: GGUFFile, n_layer: int) -> list[bool]:
    """Which layers of a gpt-oss model slide, as llama.cpp reads it: a per-layer array, or a pattern of n
    (default 2) whose first n - 1 layers slide (gpt-oss: the even ones)."""
    pattern = g.arch_value("attention.sliding_window_pattern", 2)
    if isinstance(pattern, list):
        if len(pattern) < n_layer:
            raise NativeError(f"model metadata {g.architecture}.attention.sliding_window_pattern has "
                              f"{len(pattern)} entries for {n_layer} layers")
        return [bool(v) for v in pattern[:n_layer]]
    if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern < 0:
        raise NativeError(f"model metadata {g.architecture}.attention.sliding_window_pattern is invalid ({pattern!r})")
    return [pattern == 0 or il % pattern < pattern - 1 for il in range(n_layer)]


def _rows(t: Tensor, first: int, count: int) -> Tensor:
    """``count`` rows of ``t`` from row ``first``: a view into the same mapping."""
    return Tensor(t.data + first * library().llk_row_size(t.type, t.ne0), t.type, t.ne0, count)


_MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", *_EXPERT_FFN, "ssm_qkv", "ssm_z", "ssm_beta",
             "ssm_alpha", "ssm_out", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")


def available_memory() -> int:
    """What a new allocation may take without swapping: MemAvailable of /proc/meminfo, in bytes."""
    found = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    if found is None:
        raise NativeError("cannot read MemAvailable from /proc/meminfo")
    return int(found.group(1)) * 1024


class NativeWeights:
    """A mapped GGUF file and the :class:`ModelParams` that point into it.

    Matrices whose type has a repacked layout at this CPU's level (``kernels/repack.c``) are copied
    into it at load, within ``repack_budget`` bytes (default: the memory available now); the rest
    are read in place from the mapping. :attr:`layouts` says which layout each weight type got.
    """

    def __init__(self, path: str | Path, repack: bool = True, repack_budget: int | None = None) -> None:
        self.path = Path(path)
        try:
            self.gguf = read_gguf(self.path, skip_arrays_over=256)
        except InvalidGGUF as exc:
            raise NativeError(f"cannot load {self.path} with the native engine: {exc}") from None
        self.hyper, self._expected = check_model(self.gguf)
        lib = library()
        size = ctypes.c_int64(0)
        base = lib.llk_map_file(str(self.path).encode(), ctypes.byref(size))
        if not base:
            raise NativeError(f"cannot map {self.path}: {ctypes.get_errno() or 'mmap failed'}")
        self._base, self._size = base, size.value
        self._repacked: np.ndarray | None = None  # the one buffer the repacked tensors point into
        self.layouts: dict[str, str] = {}
        self.repack_seconds = 0.0
        try:
            self.params = self._describe()
            self._lay_out(repack, repack_budget)
        except BaseException:
            self.close()
            raise

    @property
    def nbytes(self) -> int:
        """Bytes of weights the forward pass reads (every expert of a mixture-of-experts model)."""
        return self._weight_bytes

    @property
    def decode_bytes(self) -> int:
        """Bytes of weights one token's decode step streams: all of a dense model; of a mixture-of-experts
        model all but the experts, and expert_used_count of each layer's experts."""
        return self._weight_bytes - self._expert_bytes + self._expert_bytes * self.hyper.n_expert_used // max(
            self.hyper.n_expert, 1)

    def _tensor(self, name: str) -> Tensor:
        """A checked tensor of the model (a null Tensor for an absent optional one)."""
        info = self.gguf.tensor(name)
        if info is None:
            return Tensor()
        shape = self._expected[name][0]
        nbytes = check_tensor(info, shape, self._size)  # the mapping, not the header's size
        self._weight_bytes += nbytes
        self._expert_bytes += nbytes if len(shape) == 3 else 0
        return Tensor(self._base + info.offset, info.ggml_type, shape[0], shape[1] if len(shape) > 1 else 1)

    def _split_fused(self, layer: Layer, il: int) -> None:
        """phi3's fused tensors as the separate ones the forward reads: row ranges of one matrix
        (ffn_up's first n_ff rows are the gate, as llama.cpp's swiglu takes them)."""
        h = self.hyper
        q_dim, kv_dim = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
        fused_up = layer.w_up
        layer.w_gate, layer.w_up = _rows(fused_up, 0, h.n_ff), _rows(fused_up, h.n_ff, h.n_ff)
        name = f"blk.{il}.attn_qkv.weight"
        if name in self._expected:
            qkv = self._tensor(name)
            layer.wq, layer.wk = _rows(qkv, 0, q_dim), _rows(qkv, q_dim, kv_dim)
            layer.wv = _rows(qkv, q_dim + kv_dim, kv_dim)

    def _describe(self) -> ModelParams:
        h, g = self.hyper, self.gguf
        self._weight_bytes = self._expert_bytes = 0
        gemma = h.arch == "gemma3"
        window = g.arch_value("attention.sliding_window") if gemma else 0
        pattern = g.arch_value("attention.sliding_window_pattern", 6) if gemma else 0
        oss = h.arch == "gpt-oss"  # its sliding layers rotate as the others unless rope.freq_base_swa says
        swa_base = float(g.arch_value("rope.freq_base_swa", h.rope_base if oss else 10000.0))
        oss_sliding = _oss_sliding(g, h.n_layer) if oss else []
        window = g.arch_value("attention.sliding_window") if oss else window
        self._layers = (Layer * h.n_layer)()
        for il in range(h.n_layer):
            layer = self._layers[il]
            for field in [f for f in LAYER_TENSORS if f in _layer_fields(h, il)]:  # two may share a name across archs
                name = f"blk.{il}.{gguf_name(h.arch, field)}"
                if name in self._expected:
                    setattr(layer, field, self._tensor(name))
            if h.arch == "phi3":
                self._split_fused(layer, il)
            sliding = bool(gemma and il % pattern < pattern - 1) or bool(oss and oss_sliding[il])
            layer.sliding = int(sliding)
            layer.rope_base = swa_base if sliding else h.rope_base
        p = ModelParams()
        p.arch = ARCHITECTURES[h.arch]
        p.n_embd, p.n_layer, p.n_head, p.n_head_kv = h.n_embd, h.n_layer, h.n_head, h.n_head_kv
        p.head_dim, p.n_vocab = h.head_dim, h.n_vocab
        p.n_ff = h.n_ff_exp or h.n_ff  # the width of the FFN the forward runs (a dense one's scratch)
        p.n_expert, p.n_expert_used = h.n_expert, h.n_expert_used
        p.rope_neox = int(h.arch != "llama")  # qwen2/qwen3/gemma3/phi3 rotate the two halves of a head (NeoX)
        p.rope_dim = h.rope_dim
        p.act_gelu = int(gemma)
        p.sliding_window = int(window or 0)
        p.eps = h.eps
        p.attn_scale = 1.0 / math.sqrt(h.head_dim)
        p.embd_scale = math.sqrt(h.n_embd) if gemma else 1.0
        if h.ssm is not None:
            p.ssm_d_conv, p.ssm_d_state, p.ssm_n_group, p.ssm_dt_rank = (h.ssm.d_conv, h.ssm.d_state, h.ssm.n_group,
                                                                          h.ssm.dt_rank)
            p.attn_output_gate = 1
        p.n_ff_shexp = h.n_ff_shexp
        p.tok_embd = self._tensor("token_embd.weight")
        p.output_norm = self._tensor("output_norm.weight")
        p.output = self._tensor("output.weight")
        p.layers = ctypes.cast(self._layers, ctypes.POINTER(Layer))
        p.rope_freqs = self._tensor("rope_freqs.weight")
        if h.rope is not None:
            p.rope_freq_scale, p.yarn_ext_factor, p.yarn_attn_factor = (h.rope.freq_scale, h.rope.ext_factor,
                                                                         h.rope.attn_factor)
            p.yarn_beta_fast, p.yarn_beta_slow, p.yarn_orig_ctx = h.rope.beta_fast, h.rope.beta_slow, h.rope.orig_ctx
        if p.output.data:  # an untied output head: the embedding is looked up, not streamed
            self._weight_bytes -= p.tok_embd.ne1 * library().llk_row_size(p.tok_embd.type, p.tok_embd.ne0)
        return p

    def _lay_out(self, repack: bool, budget: int | None) -> None:
        """Repack the matrices that have a layout at this level; name each weight type's layout."""
        p, lib, h = self.params, library(), self.hyper
        # (tensor, how many matrices of its shape it holds: one, or an expert tensor's one per expert)
        matrices = [(getattr(p.layers[il], f), h.n_expert if f in _EXPERT_TENSORS else 1)
                    for il in range(h.n_layer) for f in _MATRICES]
        if not p.output.data:  # tied: the lookup reads token_embd in place, the output head its own copy
            p.output = Tensor(p.tok_embd.data, p.tok_embd.type, p.tok_embd.ne0, p.tok_embd.ne1)
        matrices.append((p.output, 1))
        # an expert tensor is repacked as one matrix of all its rows when each expert's rows are whole groups
        plan = [(t, n, lib.llk_repack_type(t.type, t.ne0, t.ne1) if repack else t.type) for t, n in matrices if t.data]
        need = sum(lib.llk_repack_size(t.type, t.ne0, t.ne1 * n) for t, n, target in plan if target != t.type)
        budget = available_memory() if need and budget is None else budget
        if need and need > budget:
            raise NativeError(
                f"repacking the weights of {self.path.name} for this CPU needs {need >> 20} MiB of memory "
                f"but only {budget >> 20} MiB is available; free memory or use the llama.cpp engine"
            )
        counts: Counter[tuple[str, str]] = Counter()
        copies = []  # (tensor, its layout, offset and size of its copy in the one buffer)
        offset = 0
        for t, n, target in plan:
            name = lib.llk_type_name(t.type).decode()
            counts[name, lib.llk_type_name(target).decode() if target != t.type else "GGUF in place"] += n
            if target != t.type:
                size = lib.llk_repack_size(t.type, t.ne0, t.ne1 * n)
                copies.append((t, n, target, offset, size))
                offset += -(-size // 64) * 64  # cache-line aligned
        # One allocation for all copies: NumPy asks for huge pages for large ones, and decode streams every
        # matrix each token (with 4 KiB pages, a model of small matrices costs a page walk every 4 KiB).
        self._repacked = buffer = np.empty(offset, dtype=np.uint8)
        start = time.perf_counter()
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # ctypes lets go of the GIL: one matrix a core
            list(pool.map(lambda job: lib.llk_repack(job[0].type, ctypes.c_void_p(job[0].data), job[0].ne0,
                                                     job[0].ne1 * job[1], ctypes.c_void_p(buffer.ctypes.data + job[3])),
                          copies))
        self.repack_seconds = time.perf_counter() - start
        for t, n, target, at, size in copies:
            grown = size - lib.llk_row_size(t.type, t.ne0) * t.ne1 * n
            self._weight_bytes += grown
            self._expert_bytes += grown if n > 1 else 0
            t.data, t.type = buffer.ctypes.data + at, target
        for (name, layout), n in sorted(counts.items()):
            entry = f"{layout} ({n} {'matrix' if n == 1 else 'matrices'})"
            self.layouts[name] = f"{self.layouts[name]}, {entry}" if name in self.layouts else entry
        log.info("native weight layouts of %s: %s; repacked in %.2f s", self.path.name,
                 "; ".join(f"{k}: {v}" for k, v in self.layouts.items()), self.repack_seconds)

    def close(self) -> None:
        self._repacked = None
        if self._base:
            library().llk_unmap_file(self._base, self._size)
            self._base = None
