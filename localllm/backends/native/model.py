"""A GGUF model described to the C forward pass: hyperparameters and tensor pointers into the mapping.

The file is mapped by the C library; every tensor the forward pass will read
is checked here first: its type must be one the kernels know, its shape must
be what the architecture's metadata implies, and its bytes must lie inside
the mapping.  Anything else is a :class:`NativeError` naming the tensor and
suggesting the llama.cpp engine; the C code then never reads out of bounds.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import math
import mmap
import os
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from localllm.backends.native.archs import ARCHITECTURES, Architecture
from localllm.backends.native.archs.base import (DENSE_FFN, EXPERT_FFN, HINT, Hyper, LayerKv, UnsupportedModel,
                                                 metadata_int)
from localllm.backends.capabilities import NATIVE_BLOCK_SIZE
from localllm.backends.native.lib import (ERROR_LEN, LAYER_TENSORS, Layer, Memory, ModelParams, NativeError, Tensor,
                                          library)
from localllm.gguf import GGML_TYPES, GGUFFile, InvalidGGUF, TensorInfo, read_gguf

log = logging.getLogger(__name__)

_F32 = 0
_EXPERT_TENSORS = frozenset((*EXPERT_FFN[1:], "ffn_gate_up_exps"))  # 3-D: one (ne0, ne1) slice per expert
_HALVED = frozenset({"ffn_gate_up_exps"})  # the forward reads each half of its rows as a matrix of its own


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
_NEUTRAL_VALUES = {
    "rope.scaling.type": ("none",),
    "rope.scaling.factor": (0.0, 1.0),  # llama.cpp reads 0 as 1
    "expert_count": (0,),
    "expert_used_count": (0,),
    "norm_top_k_prob": (True,),  # Ollama's converter writes it; llama.cpp renormalises qwen3moe's k weights always
    "attention.causal": (True,),
    "nextn_predict_layers": (0,),  # multi-token-prediction layers, which the native forward does not load
}


def _check_metadata_keys(g: GGUFFile, arch: Architecture) -> None:
    prefix = f"{g.architecture}."
    known = _READ_KEYS | arch.read_keys
    for full_key, value in g.metadata.items():
        key = full_key[len(prefix):] if full_key.startswith(prefix) else None
        if key is None or key in known:
            continue
        if key not in _NEUTRAL_VALUES:
            raise UnsupportedModel(f"model metadata key {full_key!r}")
        if value not in _NEUTRAL_VALUES[key] or isinstance(value, bool) != isinstance(_NEUTRAL_VALUES[key][0], bool):
            raise UnsupportedModel(f"model metadata {full_key} = {value!r}")


def architecture(g: GGUFFile) -> Architecture:
    """The loader half of ``g``'s architecture (archs/)."""
    arch = ARCHITECTURES.get(g.architecture or "")
    if arch is None:
        raise UnsupportedModel(f"architecture {g.architecture!r}")
    return arch


def hyperparameters(g: GGUFFile) -> Hyper:
    arch = architecture(g)
    _check_metadata_keys(g, arch)
    embd = g.tensor("token_embd.weight")
    if embd is None or len(embd.shape) != 2:
        raise NativeError("the model has no 2-D token_embd.weight tensor")
    n_embd, n_head = metadata_int(g, "embedding_length"), metadata_int(g, "attention.head_count")
    head_dim = metadata_int(g, "attention.key_length", n_embd // n_head)
    if metadata_int(g, "attention.value_length", head_dim) != head_dim:
        raise UnsupportedModel("different key and value head sizes")
    per_layer = arch.per_layer_keys
    n_head_kv = metadata_int(g, "attention.head_count_kv", n_head, "attention.head_count_kv" in per_layer)
    if n_head % n_head_kv:
        raise NativeError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")
    rope_dim = metadata_int(g, "rope.dimension_count", head_dim)
    if rope_dim > head_dim or rope_dim % 2:
        raise NativeError(f"rope.dimension_count {rope_dim} does not fit heads of {head_dim}")
    arch.check_metadata(g)
    eps = g.arch_value("attention.layer_norm_rms_epsilon", 1e-6)
    base = g.arch_value("rope.freq_base", arch.default_rope_base)
    experts = _experts(g) if arch.mixture(g) else {}
    h = Hyper(
        arch=arch.name, n_embd=n_embd, n_layer=metadata_int(g, "block_count"), n_head=n_head, n_head_kv=n_head_kv,
        head_dim=head_dim, n_vocab=embd.shape[1],
        n_ff=metadata_int(g, "feed_forward_length", experts.get("n_ff_exp"), "feed_forward_length" in per_layer),
        n_ctx_train=metadata_int(g, "context_length", 4096), eps=float(eps), rope_base=float(base), rope_dim=rope_dim,
        rope=arch.rope_scaling(g), **experts,
    )  # fmt: skip
    return dataclasses.replace(h, **arch.extra_hyper(g, h))


def _experts(g: GGUFFile) -> dict[str, int]:
    """A mixture-of-experts model's expert count, experts used a token and expert width (llama.cpp's default:
    feed_forward_length over the experts used)."""
    n_expert, n_used = metadata_int(g, "expert_count"), metadata_int(g, "expert_used_count")
    if n_used > n_expert:
        raise NativeError(f"model metadata {g.architecture}.expert_used_count {n_used} exceeds expert_count {n_expert}")
    n_ff = g.arch_value("feed_forward_length")
    default = n_ff // n_used if isinstance(n_ff, int) and not isinstance(n_ff, bool) and n_ff >= n_used else None
    return {"n_expert": n_expert, "n_expert_used": n_used,
            "n_ff_exp": metadata_int(g, "expert_feed_forward_length", default)}


def expected_tensors(g: GGUFFile, h: Hyper) -> dict[str, tuple[tuple[int, ...], bool]]:
    """Every tensor the forward pass reads for ``h``: name -> (shape, required).  A file's tensor
    outside this table would change the model (e.g. a MoE router), so it is refused."""
    arch = ARCHITECTURES[h.arch]
    expected = {
        "token_embd.weight": ((h.n_embd, h.n_vocab), True),
        "output_norm.weight": ((h.n_embd,), True),
        "output.weight": ((h.n_embd, h.n_vocab), False),
    }
    expected.update(arch.expected(g, h))
    return expected


def check_tensor(info: TensorInfo, shape: tuple[int, ...], file_size: int) -> int:
    """The bytes of ``info`` once its type, shape and extent are ones the kernels can read safely."""
    lib = library()
    type_name = GGML_TYPES[info.ggml_type][0]
    if (len(shape) == 1 or info.name.endswith(".ssm_conv1d.weight")) and info.ggml_type != _F32:
        raise UnsupportedModel(f"tensor {info.name!r} of type {type_name} (norms, biases and convolutions must be F32)")
    if not lib.llk_type_supported(info.ggml_type):
        raise UnsupportedModel(f"tensor {info.name!r} of type {type_name}")
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
    expected = expected_tensors(g, h)
    arch = ARCHITECTURES[h.arch]
    for info in g.tensors:
        if info.name not in expected and not arch.unused_tensor(g, h, info.name):
            raise UnsupportedModel(f"tensor {info.name!r} in a {h.arch} model")
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
    it does not for an architecture that is opt-in (``Architecture.opt_in`` says why)."""
    try:
        h, _ = check_model(read_gguf(Path(path), skip_arrays_over=256))
    except (InvalidGGUF, OSError) as exc:
        return f"cannot read {path}: {exc}"
    except UnsupportedModel as exc:
        return exc.reason
    except NativeError as exc:
        return str(exc)
    opt_in = ARCHITECTURES[h.arch].opt_in
    if by_default and opt_in:
        return f"the native engine runs {h.arch} only when asked: {opt_in}"
    return None


_MATRICES = ("wq", "wk", "wv", "wo", *DENSE_FFN, *EXPERT_FFN, "ffn_gate_up_exps", "per_layer_inp_gate", "per_layer_proj",
             "ssm_qkv", "ssm_z", "ssm_beta", "ssm_alpha", "ssm_out", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")


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

    def __init__(self, path: str | Path, repack: bool = True, repack_budget: int | None = None,
                 lay_out: bool = True) -> None:
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
            if lay_out:  # else mapped and described only, for :func:`native_memory` to read
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

    @property
    def trims_window(self) -> bool:
        """Whether a runner's context keeps only the window of the sliding layers (the architecture's choice)."""
        return ARCHITECTURES[self.hyper.arch].trims_window

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

    def _describe(self) -> ModelParams:
        h, g = self.hyper, self.gguf
        arch = ARCHITECTURES[h.arch]
        self._weight_bytes = self._expert_bytes = 0
        self._layers = (Layer * h.n_layer)()
        fields = [f for f in LAYER_TENSORS if f in arch.fields()]
        for il in range(h.n_layer):
            layer = self._layers[il]
            for field in fields:
                name = f"blk.{il}.{arch.gguf_name(field)}"
                if name in self._expected:
                    setattr(layer, field, self._tensor(name))
            layer.rope_base = h.rope_base
        p = ModelParams()
        p.arch = library().llk_arch_id(h.arch.encode())
        if p.arch < 0:
            raise NativeError(f"the native kernels library has no recipe for {h.arch!r}; it is older than this package")
        p.n_embd, p.n_layer, p.n_head, p.n_head_kv = h.n_embd, h.n_layer, h.n_head, h.n_head_kv
        p.head_dim, p.n_vocab = h.head_dim, h.n_vocab
        p.n_ff = h.n_ff_exp or h.n_ff  # the width of the FFN the forward runs (a dense one's scratch)
        p.n_expert, p.n_expert_used = h.n_expert, h.n_expert_used
        p.rope_dim = h.rope_dim
        p.eps = h.eps
        p.attn_scale = 1.0 / math.sqrt(h.head_dim)
        p.embd_scale = 1.0
        p.tok_embd = self._tensor("token_embd.weight")
        p.output_norm = self._tensor("output_norm.weight")
        p.output = self._tensor("output.weight")
        p.layers = ctypes.cast(self._layers, ctypes.POINTER(Layer))
        p.rope_freqs = self._tensor("rope_freqs.weight")
        if h.rope is not None:
            p.rope_freq_scale, p.yarn_ext_factor, p.yarn_attn_factor = (h.rope.freq_scale, h.rope.ext_factor,
                                                                         h.rope.attn_factor)
            p.yarn_beta_fast, p.yarn_beta_slow, p.yarn_orig_ctx = h.rope.beta_fast, h.rope.beta_slow, h.rope.orig_ctx
        arch.configure(g, h, p, self._layers, self._tensor)
        looked_up = [p.per_layer_tok_embd] + ([p.tok_embd] if p.output.data else [])
        #: bytes of the tables of which a token's row is looked up, the rest never streamed (nor paged in)
        self.lookup_bytes = sum(t.ne1 * library().llk_row_size(t.type, t.ne0) for t in looked_up if t.data)
        self._weight_bytes -= self.lookup_bytes
        return p

    def shapes(self) -> ModelParams:
        """A copy of :attr:`params` that outlives the mapping, for llk_ctx_plan: each present tensor's data a mark (1),
        not an address into the file."""
        layers = (Layer * self.hyper.n_layer).from_buffer_copy(self._layers)
        p = ModelParams.from_buffer_copy(self.params)
        p.layers = ctypes.cast(layers, ctypes.POINTER(Layer))  # the pointer keeps the copy alive
        for holder in (p, *layers):
            for name, kind in holder._fields_:
                if kind is Tensor and getattr(holder, name).data:
                    getattr(holder, name).data = 1
        return p

    def _repack_plan(self, repack: bool) -> list[tuple[Tensor, int, int]]:
        """Each matrix the forward reads, with how many matrices of its shape it holds (one, or an expert tensor's
        one per expert) and the layout it gets at this CPU's level (its own type: read in place)."""
        p, lib, h = self.params, library(), self.hyper
        # (tensor, how many matrices of its shape it holds: one, or an expert tensor's one per expert)
        matrices = [(getattr(p.layers[il], f), h.n_expert if f in _EXPERT_TENSORS else 1, f in _HALVED)
                    for il in range(h.n_layer) for f in _MATRICES]
        if not p.output.data:  # tied: the lookup reads token_embd in place, the output head its own copy
            p.output = Tensor(p.tok_embd.data, p.tok_embd.type, p.tok_embd.ne0, p.tok_embd.ne1)
        matrices += [(p.output, 1, False), (p.per_layer_model_proj, 1, False)]
        # an expert tensor is repacked as one matrix of all its rows when each expert's rows are whole groups (each
        # half's, where the forward reads the halves)
        return [(t, n, lib.llk_repack_type(t.type, t.ne0, t.ne1 // 2 if halved else t.ne1) if repack else t.type)
                for t, n, halved in matrices if t.data]

    def repack_growth(self) -> int:
        """Bytes the repacked copies of the matrices take beyond their GGUF bytes (a K-quant's 16-row groups hold
        their scales otherwise: a few percent more)."""
        lib = library()
        return sum(lib.llk_repack_size(t.type, t.ne0, t.ne1 * n) - lib.llk_row_size(t.type, t.ne0) * t.ne1 * n
                   for t, n, target in self._repack_plan(True) if target != t.type)

    def _lay_out(self, repack: bool, budget: int | None) -> None:
        """Repack the matrices that have a layout at this level, letting go of their pages in the mapping; name
        each weight type's layout."""
        lib = library()
        plan = self._repack_plan(repack)
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

        def copy(job: tuple[Tensor, int, int, int, int]) -> None:
            t, n, _, at, _ = job
            lib.llk_repack(t.type, ctypes.c_void_p(t.data), t.ne0, t.ne1 * n, ctypes.c_void_p(buffer.ctypes.data + at))
            _release_pages(t.data, lib.llk_row_size(t.type, t.ne0) * t.ne1 * n)

        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # ctypes lets go of the GIL: one matrix a core
            list(pool.map(copy, copies))
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


def _release_pages(address: int, length: int) -> None:
    """Let go of this process's mapping of the whole pages in ``[address, address + length)``: a matrix copied
    into its repacked layout is never read from the mapping again, and its pages, left mapped, would hold the
    model twice in the runner's resident memory. The file's bytes stay in the page cache (reclaimable), and
    a later read of those pages maps them again."""
    start = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (address + length) // mmap.PAGESIZE * mmap.PAGESIZE
    if end > start:
        _libc().madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), mmap.MADV_DONTNEED)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library's handle, opened once (madvise for every repacked matrix)."""
    return ctypes.CDLL(None, use_errno=True)


#: The KV cache types the native engine keeps, by name, with their ggml type ids.
KV_TYPES = {"f16": 1, "q8_0": 8}


def kv_type_id(name: str) -> int:
    """The ggml type id of the KV cache type ``name``; a :class:`NativeError` for one the native engine lacks."""
    if name not in KV_TYPES:
        raise NativeError(f"the native engine keeps its KV cache in {' or '.join(KV_TYPES)}, not {name!r}")
    return KV_TYPES[name]


@dataclasses.dataclass(frozen=True)
class NativeMemory:
    """What a native load holds that the GGUF's tensor bytes do not say, for the memory planner: each layer's KV
    a position as the context lays out its pool, the window of the sliding layers and whether a runner keeps
    only that window of them (``Architecture.trims_window``), whether it has recurrent layers, the bytes of the
    tables only looked up a row a token (embeddings that are not also the output head: paged in a row at a time),
    the bytes the repacked copies add, and the model as the C context reads it for :meth:`context`."""

    kv_layers: tuple[LayerKv, ...]
    sliding_window: int
    trims_window: bool
    recurrent: bool
    lookup_bytes: int
    repack_growth: int
    shapes: ModelParams  # the tensors' types and shapes, their data a mark of presence (the file is not mapped)

    def context(self, n_blocks: int, n_seq: int, n_batch: int, max_seq_len: int, kv_cache_type: str = "f16",
                n_threads: int | None = None) -> Memory:
        """What a runner's context of this geometry holds, by part (``kernels/llk.h``'s llk_ctx_plan: the steps of
        llk_ctx_new itself, so the plan and the context cannot differ); ``n_threads``: the runner's (its
        attention scratch is per thread), by default this machine's CPUs, the most a runner takes."""
        out, why = Memory(), ctypes.create_string_buffer(ERROR_LEN)
        if library().llk_ctx_plan(ctypes.byref(self.shapes), n_blocks, NATIVE_BLOCK_SIZE, max_seq_len, n_batch,
                                  n_threads or os.cpu_count() or 1, kv_type_id(kv_cache_type), n_seq,
                                  int(self.trims_window), ctypes.byref(out), why) != 0:
            raise NativeError(f"cannot plan a native context: {why.value.decode(errors='replace')}")
        return out


def native_memory(path: str | Path) -> NativeMemory:
    """:class:`NativeMemory` of the model at ``path``, read as the loader reads it (the file is mapped and
    described, nothing copied, then unmapped); a :class:`NativeError` for a model the native engine does not load."""
    weights = NativeWeights(path, lay_out=False)
    try:
        g, h = weights.gguf, weights.hyper
        arch = ARCHITECTURES[h.arch]
        kv_layers = arch.kv_layers(g, h)
        window = int(g.arch_value("attention.sliding_window", 0) or 0) if any(k.sliding for k in kv_layers) else 0
        return NativeMemory(kv_layers, window, weights.trims_window, any(h.recurrent), weights.lookup_bytes,
                            weights.repack_growth(), weights.shapes())
    finally:
        weights.close()
