"""A GGUF model described to the C forward pass: hyperparameters and tensor pointers into the mapping.

The file is mapped by the C library; every tensor the forward pass will read
is checked here first: its type must be one the kernels know, its shape must
be what the architecture's metadata implies, and its bytes must lie inside
the mapping.  Anything else is a :class:`NativeError` naming the tensor and
suggesting the llama.cpp engine; the C code then never reads out of bounds.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from pathlib import Path

from localllm.native.lib import LAYER_TENSORS, Layer, ModelParams, NativeError, Tensor, library
from localllm.registry.gguf import GGML_TYPES, GGUFFile, InvalidGGUF, TensorInfo, read_gguf

HINT = "use the llama.cpp engine (LOCALLLM_ENGINE=llama.cpp or PARAMETER engine llama.cpp)"
ARCHITECTURES = {"llama": 0, "qwen2": 1, "qwen3": 2, "gemma3": 3, "phi3": 4}
_F32 = 0

# our layer field -> GGUF tensor name suffix
_GGUF_NAMES = {
    "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight", "wv": "attn_v.weight",
    "wo": "attn_output.weight", "bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias",
    "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
    "post_attn_norm": "post_attention_norm.weight", "ffn_norm": "ffn_norm.weight",
    "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
    "post_ffn_norm": "post_ffw_norm.weight",
}  # fmt: skip
_REQUIRED = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")
# what each architecture adds to llama's layer: all of it required, anything else refused
_ARCH_TENSORS = {
    "llama": (),
    "qwen2": ("bq", "bk", "bv"),
    "qwen3": ("q_norm", "k_norm"),
    "gemma3": ("q_norm", "k_norm", "post_attn_norm", "post_ffn_norm"),
    "phi3": (),
}
# Phi-3 keeps q, k and v in one matrix (attn_qkv) and the gate and up projections in one (ffn_up, gate
# first): the layer's fields are views of their rows
_FUSED = {"phi3": ("wq", "wk", "wv", "w_gate", "w_up")}
# keys and tensors that change a model's maths and that the native forward does not implement
_PHI3_REFUSED = ("rope_factors_long.weight", "rope_factors_short.weight")


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


def _unsupported(what: str) -> NativeError:
    return NativeError(f"{what} is not supported by the native engine; {HINT}")


def _int(g: GGUFFile, key: str, default: int | None = None) -> int:
    value = g.arch_value(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise NativeError(f"model metadata {g.architecture}.{key} is missing or invalid ({value!r})")
    return value


def hyperparameters(g: GGUFFile) -> Hyper:
    arch = g.architecture
    if arch not in ARCHITECTURES:
        raise _unsupported(f"architecture {arch!r}")
    if g.arch_value("rope.scaling.type") not in (None, "none"):
        raise _unsupported(f"rope scaling {g.arch_value('rope.scaling.type')!r}")
    if g.tensor("rope_freqs.weight") is not None and arch != "llama":
        raise _unsupported(f"rope_freqs.weight in a {arch} model")
    if arch == "phi3":
        for name in _PHI3_REFUSED:
            if g.tensor(name) is not None:
                raise _unsupported(f"Phi-3's long-context rope factors ({name})")
        if g.arch_value("rope.scaling.attn_factor") is not None:
            raise _unsupported("rope.scaling.attn_factor")
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
    eps = g.arch_value("attention.layer_norm_rms_epsilon", 1e-6)
    base = g.arch_value("rope.freq_base", 1e6 if arch == "gemma3" else 10000.0)
    return Hyper(
        arch=arch, n_embd=n_embd, n_layer=_int(g, "block_count"), n_head=n_head, n_head_kv=n_head_kv,
        head_dim=head_dim, n_ff=_int(g, "feed_forward_length"), n_vocab=embd.shape[1],
        n_ctx_train=_int(g, "context_length", 4096), eps=float(eps), rope_base=float(base), rope_dim=rope_dim,
    )  # fmt: skip


def _rows(t: Tensor, first: int, count: int) -> Tensor:
    """Rows ``first`` .. ``first + count`` of a matrix: quantized rows are independent, so a view."""
    return Tensor(t.data + first * library().llk_row_size(t.type, t.ne0), t.type, t.ne0, count)


class NativeWeights:
    """A mapped GGUF file and the :class:`ModelParams` that point into it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.gguf = read_gguf(self.path, skip_arrays_over=256)
        except InvalidGGUF as exc:
            raise NativeError(f"cannot load {self.path} with the native engine: {exc}") from None
        self.hyper = hyperparameters(self.gguf)
        lib = library()
        size = ctypes.c_int64(0)
        base = lib.llk_map_file(str(self.path).encode(), ctypes.byref(size))
        if not base:
            raise NativeError(f"cannot map {self.path}: {ctypes.get_errno() or 'mmap failed'}")
        self._base, self._size = base, size.value
        try:
            self.params = self._describe()
        except BaseException:
            self.close()
            raise

    @property
    def nbytes(self) -> int:
        """Bytes of weights a decode step streams (all tensors the forward pass reads)."""
        return self._weight_bytes

    def _tensor(self, name: str, shape: tuple[int, ...], required: bool = True, float_only: bool = False) -> Tensor:
        info = self.gguf.tensor(name)
        if info is None:
            if required:
                raise NativeError(f"the model has no tensor {name!r}, which a {self.hyper.arch} model needs")
            return Tensor()
        return self._checked(info, shape, float_only)

    def _checked(self, info: TensorInfo, shape: tuple[int, ...], float_only: bool) -> Tensor:
        lib = library()
        type_name = GGML_TYPES[info.ggml_type][0]
        if float_only and info.ggml_type != _F32:
            raise _unsupported(f"tensor {info.name!r} of type {type_name} (norms and biases must be F32)")
        if not lib.llk_type_supported(info.ggml_type):
            raise _unsupported(f"tensor {info.name!r} of type {type_name}")
        if tuple(info.shape) != shape:
            raise NativeError(
                f"tensor {info.name!r} has shape {tuple(info.shape)}, but the model's metadata implies {shape}; "
                "the file is corrupt or not a model the native engine understands"
            )
        rows = shape[1] if len(shape) > 1 else 1
        expected = lib.llk_row_size(info.ggml_type, shape[0]) * rows
        if info.nbytes != expected or info.offset < 0 or info.offset + expected > self._size:
            raise NativeError(f"tensor {info.name!r} does not lie inside the mapped file ({self._size} bytes)")
        self._weight_bytes += expected
        return Tensor(self._base + info.offset, info.ggml_type, shape[0], rows)

    def _describe(self) -> ModelParams:
        h, g = self.hyper, self.gguf
        self._weight_bytes = 0
        gemma = h.arch == "gemma3"
        q_dim, kv_dim = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
        shapes = {
            "attn_norm": (h.n_embd,), "wq": (h.n_embd, q_dim), "wk": (h.n_embd, kv_dim), "wv": (h.n_embd, kv_dim),
            "wo": (q_dim, h.n_embd), "bq": (q_dim,), "bk": (kv_dim,), "bv": (kv_dim,), "q_norm": (h.head_dim,),
            "k_norm": (h.head_dim,), "post_attn_norm": (h.n_embd,), "ffn_norm": (h.n_embd,),
            "w_gate": (h.n_embd, h.n_ff), "w_up": (h.n_embd, h.n_ff), "w_down": (h.n_ff, h.n_embd),
            "post_ffn_norm": (h.n_embd,),
        }  # fmt: skip
        fused = _FUSED.get(h.arch, ())
        required = (set(_REQUIRED) | set(_ARCH_TENSORS[h.arch])) - set(fused)
        allowed = required  # tensors of other architectures would change the maths: refuse, never ignore
        # only Gemma 3's window: llama.cpp ignores the one Phi-3 files declare ("Phi SWA is currently disabled")
        window = g.arch_value("attention.sliding_window", 0) if gemma else 0
        pattern = g.arch_value("attention.sliding_window_pattern", 6) if gemma else 0
        swa_base = float(g.arch_value("rope.freq_base_swa", 10000.0))
        self._layers = (Layer * h.n_layer)()
        for il in range(h.n_layer):
            layer = self._layers[il]
            if fused:
                self._fused_views(layer, il, q_dim, kv_dim)
            for field in LAYER_TENSORS:
                name = f"blk.{il}.{_GGUF_NAMES[field]}"
                if fused and field == "w_up":  # Phi-3's ffn_up is the fused gate-and-up matrix, read above
                    continue
                if field not in allowed:
                    if g.tensor(name) is not None:
                        raise _unsupported(f"tensor {name!r} in a {h.arch} model")
                    continue
                float_only = len(shapes[field]) == 1
                setattr(layer, field, self._tensor(name, shapes[field], field in required, float_only))
            sliding = bool(gemma and window and isinstance(pattern, int) and pattern > 0 and il % pattern < pattern - 1)
            layer.sliding = int(sliding)
            layer.rope_base = swa_base if sliding else h.rope_base
        p = ModelParams()
        p.arch = ARCHITECTURES[h.arch]
        p.n_embd, p.n_layer, p.n_head, p.n_head_kv = h.n_embd, h.n_layer, h.n_head, h.n_head_kv
        p.head_dim, p.n_ff, p.n_vocab = h.head_dim, h.n_ff, h.n_vocab
        p.rope_neox = int(h.arch != "llama")  # qwen2/qwen3/gemma3 rotate the two halves of a head (NeoX)
        p.rope_dim = h.rope_dim
        p.act_gelu = int(gemma)
        p.sliding_window = int(window or 0)
        p.eps = h.eps
        p.attn_scale = 1.0 / math.sqrt(h.head_dim)
        p.embd_scale = math.sqrt(h.n_embd) if gemma else 1.0
        p.tok_embd = self._tensor("token_embd.weight", (h.n_embd, h.n_vocab))
        p.output_norm = self._tensor("output_norm.weight", (h.n_embd,), float_only=True)
        p.output = self._tensor("output.weight", (h.n_embd, h.n_vocab), required=False)
        p.layers = ctypes.cast(self._layers, ctypes.POINTER(Layer))
        # Llama 3's rope scaling: per-pair frequency factors, one tensor for every layer
        p.rope_freqs = self._tensor("rope_freqs.weight", (h.rope_dim // 2,), required=False, float_only=True)
        if p.output.data:  # an untied output head: the embedding is looked up, not streamed
            self._weight_bytes -= p.tok_embd.ne1 * library().llk_row_size(p.tok_embd.type, p.tok_embd.ne0)
        return p

    def _fused_views(self, layer: Layer, il: int, q_dim: int, kv_dim: int) -> None:
        """Phi-3's fused matrices, seen as the q, k, v, gate and up rows the forward pass takes."""
        h = self.hyper
        qkv = self._tensor(f"blk.{il}.attn_qkv.weight", (h.n_embd, q_dim + 2 * kv_dim))
        layer.wq, layer.wk, layer.wv = _rows(qkv, 0, q_dim), _rows(qkv, q_dim, kv_dim), _rows(qkv, q_dim + kv_dim, kv_dim)
        up = self._tensor(f"blk.{il}.ffn_up.weight", (h.n_embd, 2 * h.n_ff))
        layer.w_gate, layer.w_up = _rows(up, 0, h.n_ff), _rows(up, h.n_ff, h.n_ff)

    def close(self) -> None:
        if self._base:
            library().llk_unmap_file(self._base, self._size)
            self._base = None


def native_support(path: str | Path) -> str | None:
    """None when the native forward runs the model at ``path`` exactly, else why not (one line)."""
    try:
        NativeWeights(path).close()
    except NativeError as exc:
        return str(exc).split("; use the llama.cpp engine")[0]
    return None
