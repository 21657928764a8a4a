"""What every architecture module shares: the hyperparameters it reads into, the metadata readers, and
:class:`Architecture`, whose defaults are the plain pre-norm decoder (llama) that each module adjusts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from localllm.backends.native.lib import NativeError

if TYPE_CHECKING:
    from collections.abc import Callable

    from localllm.backends.native.lib import Layer, ModelParams, Tensor
    from localllm.gguf import GGUFFile

HINT = "use the llama.cpp engine (LOCALLLM_ENGINE=llama.cpp or PARAMETER engine llama.cpp)"
Shape = tuple[int, ...]

# our layer field -> GGUF tensor name suffix
GGUF_NAMES = {
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
ATTENTION = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm")
DENSE_FFN = ("w_gate", "w_up", "w_down")
EXPERT_FFN = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")  # a router and every expert's matrices


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
    n_ff_shexp: int = 0  # a shared expert's width (qwen35moe)
    ssm: DeltaNet | None = None  # a hybrid model's Gated DeltaNet, and which of its layers have one
    recurrent: tuple[bool, ...] = ()


@dataclass(frozen=True)
class LayerKv:
    """What a layer keeps for each position in the native KV pool (``kernels/model.c``'s place_kv): K and V of
    ``width`` elements each (its KV heads x head size), 0 for a layer without KV of its own (a recurrent layer, or
    one that reads an earlier layer's); ``sliding``: it attends over the last ``sliding_window`` positions only."""

    width: int
    sliding: bool = False


class UnsupportedModel(NativeError):
    """A model the native forward would not run exactly; ``reason`` names the key, tensor or type."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason} is not supported by the native engine; {HINT}")
        self.reason = f"{reason} is not supported by the native engine"


def metadata_int(g: GGUFFile, key: str, default: int | None = None, per_layer: bool = False) -> int:
    """The positive integer ``<arch>.key`` of ``g`` (``default`` where absent); ``per_layer``: the key may be one
    value a layer (as Gemma 4's head counts), and the largest is meant."""
    value = g.arch_value(key, default)
    if per_layer and isinstance(value, list) and value:
        value = max(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise NativeError(f"model metadata {g.architecture}.{key} is missing or invalid ({value!r})")
    return value


def read_rope_scaling(g: GGUFFile) -> RopeScaling:
    """The rope scaling of ``g`` as llama.cpp's context computes it (in single precision, as it does): the type
    (default linear) and factor, and for YaRN the attention factor that cancels the one ggml's rope multiplies
    in (so cos and sin are scaled by 1 + 0.1 ln factor, times rope.scaling.attn_factor)."""
    kind = g.arch_value("rope.scaling.type", "linear")
    if kind not in ("none", "linear", "yarn"):
        raise UnsupportedModel(f"model metadata {g.architecture}.rope.scaling.type = {kind!r}")
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
    orig = g.arch_value("rope.scaling.original_context_length") or metadata_int(g, "context_length", 4096)
    return RopeScaling(float(freq_scale), ext, float(attn), int(orig))


def layer_shapes(h: Hyper) -> dict[str, Shape]:
    """The shape of each layer field for ``h`` (GGUF order: row length first; an expert tensor's last)."""
    q_dim, kv_dim = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
    return {
        "attn_norm": (h.n_embd,), "wq": (h.n_embd, q_dim), "wk": (h.n_embd, kv_dim), "wv": (h.n_embd, kv_dim),
        "wo": (q_dim, h.n_embd), "bq": (q_dim,), "bk": (kv_dim,), "bv": (kv_dim,), "q_norm": (h.head_dim,),
        "k_norm": (h.head_dim,), "post_attn_norm": (h.n_embd,), "ffn_norm": (h.n_embd,),
        "w_gate": (h.n_embd, h.n_ff), "w_up": (h.n_embd, h.n_ff), "w_down": (h.n_ff, h.n_embd),
        "post_ffn_norm": (h.n_embd,), "ffn_gate_inp": (h.n_embd, h.n_expert),
        "ffn_gate_exps": (h.n_embd, h.n_ff_exp, h.n_expert), "ffn_up_exps": (h.n_embd, h.n_ff_exp, h.n_expert),
        "ffn_down_exps": (h.n_ff_exp, h.n_embd, h.n_expert), "bo": (h.n_embd,), "attn_sinks": (h.n_head,),
        "ffn_gate_inp_b": (h.n_expert,), "ffn_gate_exps_b": (h.n_ff_exp, h.n_expert),
        "ffn_up_exps_b": (h.n_ff_exp, h.n_expert), "ffn_down_exps_b": (h.n_embd, h.n_expert),
    }  # fmt: skip


class Architecture:
    """One architecture's loader half (its forward half: ``kernels/arch_<name>.c``). The defaults are the plain
    pre-norm decoder; a module overrides what its architecture adds or does otherwise."""

    name: ClassVar[str]  # general.architecture, and the name of the C recipe
    read_keys: ClassVar[frozenset[str]] = frozenset()  # <arch>.* metadata keys it reads beyond the common ones
    # common keys that may hold one value a layer (the model's figure is then the largest; configure reads them)
    per_layer_keys: ClassVar[frozenset[str]] = frozenset()
    extra_tensors: ClassVar[tuple[str, ...]] = ()  # layer fields beyond attention and the FFN: all required
    gguf_names: ClassVar[dict[str, str]] = {}  # where it names a field's tensor otherwise than GGUF_NAMES
    experts: ClassVar[bool] = False  # its FFN is a mixture of experts
    default_rope_base: ClassVar[float] = 10000.0  # rope.freq_base where the file has none
    # its sliding-window layers keep only their window in a runner (the Context's window_kv): their memory stays
    # bounded, and the prefix cache resumes at snapshots of that window (Gemma 3's do not yet: it caches as before)
    trims_window: ClassVar[bool] = False
    # why the native engine gets this architecture only when asked (the engine setting), never by default; None:
    # it gets it wherever it runs the model exactly
    opt_in: ClassVar[str | None] = None

    def mixture(self, g: GGUFFile) -> bool:
        """Whether ``g``'s layers route to experts (read expert_count and the rest)."""
        return self.experts

    def check_metadata(self, g: GGUFFile) -> None:
        """Refuse a file that lacks or misstates a key this architecture needs (beyond the common ones)."""

    def rope_scaling(self, g: GGUFFile) -> RopeScaling | None:
        """The scaling of the rotary angles llama.cpp applies to this architecture (None: none)."""
        return None

    def extra_hyper(self, g: GGUFFile, h: Hyper) -> dict:
        """Hyperparameters beyond the common ones (``Hyper`` fields), read once those are: none by default."""
        return {}

    def gguf_name(self, field: str) -> str:
        """The GGUF tensor name (after ``blk.N.``) of our layer ``field``."""
        return self.gguf_names.get(field) or GGUF_NAMES[field]

    def fields(self) -> tuple[str, ...]:
        """Our layer fields its layers have (each a tensor of its own, unless :meth:`layer_tensors` fuses some)."""
        return ATTENTION + (EXPERT_FFN if self.experts else DENSE_FFN) + self.extra_tensors

    def layer_tensors(self, g: GGUFFile, h: Hyper) -> dict[str, Shape]:
        """Each layer's tensors, all required: GGUF name after ``blk.N.`` -> shape."""
        shapes = layer_shapes(h)
        return {self.gguf_name(field): shapes[field] for field in self.fields()}

    def layer_tensors_at(self, g: GGUFFile, h: Hyper, il: int) -> dict[str, Shape]:
        """Layer ``il``'s tensors, where an architecture's layers differ by kind (a hybrid's); by default every
        layer has :meth:`layer_tensors`."""
        return self.layer_tensors(g, h)

    def unused_tensor(self, g: GGUFFile, h: Hyper, name: str) -> bool:
        """Whether a tensor of the file that no layer reads is one llama.cpp's graph leaves alone too (so the
        model is the same without it); by default none is, and any tensor the forward does not read refuses
        the model."""
        return False

    def model_tensors(self, h: Hyper) -> dict[str, Shape]:
        """Optional tensors outside the layers beyond the embedding, output norm and head: name -> shape."""
        return {}

    def expected(self, g: GGUFFile, h: Hyper) -> dict[str, tuple[Shape, bool]]:
        """Its tensors beyond the embedding, output norm and head: name -> (shape, required); by default the
        optional :meth:`model_tensors` and each layer's :meth:`layer_tensors_at`, all required."""
        expected = {name: (shape, False) for name, shape in self.model_tensors(h).items()}
        for il in range(h.n_layer):
            expected.update({f"blk.{il}.{name}": (shape, True) for name, shape in self.layer_tensors_at(g, h, il).items()})
        return expected

    def sliding_layers(self, g: GGUFFile, h: Hyper) -> list[bool]:
        """Which layers attend over the last ``attention.sliding_window`` positions only: none by default."""
        return [False] * h.n_layer

    def kv_layers(self, g: GGUFFile, h: Hyper) -> tuple[LayerKv, ...]:
        """Each layer's KV a position, as the native context lays out its pool: every layer but the recurrent ones
        (``h.recurrent``) K and V of its KV heads, sliding where :meth:`sliding_layers` says."""
        sliding = self.sliding_layers(g, h)
        recurrent = h.recurrent or (False,) * h.n_layer
        return tuple(LayerKv(0 if recurrent[il] else h.n_head_kv * h.head_dim, sliding[il]) for il in range(h.n_layer))

    def configure(self, g: GGUFFile, h: Hyper, p: ModelParams, layers: Layer, tensor: Callable[[str], Tensor]) -> None:
        """Set what the architecture changes in ``p`` and ``layers`` after the common fields (every layer global
        at rope.freq_base, no window, the embedding unscaled); ``tensor`` maps a checked tensor's name to its
        Tensor."""


EXPERT_KEYS = frozenset({"expert_count", "expert_used_count", "expert_feed_forward_length"})


def slide(p: ModelParams, layers: Layer, h: Hyper, window: int, sliding: list[bool], swa_base: float) -> None:
    """Layers whose ``sliding`` entry is true attend over the last ``window`` positions, rotating at ``swa_base``."""
    p.sliding_window = window
    for il, slides in enumerate(sliding):
        layers[il].sliding = int(slides)
        layers[il].rope_base = swa_base if slides else h.rope_base
