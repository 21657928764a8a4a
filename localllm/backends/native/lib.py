"""Finding, building and binding the kernels library (``libllk.so``, C sources in ``kernels/``).

An installed wheel carries the library next to this file (CMake builds it
during ``pip install``).  In a source checkout the library may be missing or
older than the C sources; then it is compiled once with the system C compiler
into the user cache directory, keyed by a hash of the sources, so an edit to
``kernels/`` never runs against a stale build.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import platformdirs

_HERE = Path(__file__).resolve().parent
_SOURCES = _HERE.parents[2] / "kernels"
_LIB_NAME = "libllk.so"
_C_FLAGS = ["-O3", "-std=gnu11", "-shared", "-fPIC", "-fno-math-errno", "-pthread"]

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


class NativeError(RuntimeError):
    """The native engine cannot do what was asked (build failed, unsupported model, bad input)."""


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("type", ctypes.c_int32), ("ne0", ctypes.c_int64), ("ne1", ctypes.c_int64)]


_LAYER_TENSORS_FIRST = (
    "attn_norm", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "q_norm", "k_norm", "post_attn_norm",
    "ffn_norm", "w_gate", "w_up", "w_down", "post_ffn_norm",
    "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
    "bo", "attn_sinks", "ffn_gate_inp_b", "ffn_gate_exps_b", "ffn_up_exps_b", "ffn_down_exps_b",
    "ssm_qkv", "ssm_z", "ssm_beta", "ssm_alpha", "ssm_conv", "ssm_dt", "ssm_a", "ssm_norm", "ssm_out",
    "ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp",
)  # fmt: skip
_LAYER_TENSORS_GEMMA4 = (
    "out_scale", "per_layer_inp_gate", "per_layer_proj", "per_layer_post_norm",
    "ffn_post_norm_1", "ffn_pre_norm_2", "ffn_post_norm_2", "ffn_gate_inp_s", "ffn_down_exps_s", "ffn_gate_up_exps",
)  # fmt: skip
LAYER_TENSORS = _LAYER_TENSORS_FIRST + _LAYER_TENSORS_GEMMA4  # the layer fields that are tensors of the file


class Layer(ctypes.Structure):
    _fields_ = ([(name, Tensor) for name in _LAYER_TENSORS_FIRST]
                + [("sliding", ctypes.c_int32), ("rope_base", ctypes.c_float)]
                + [(name, ctypes.c_int32) for name in ("head_dim", "n_head_kv", "rope_dim", "kv_source")]
                + [("rope_freqs", Tensor)] + [(name, Tensor) for name in _LAYER_TENSORS_GEMMA4])


class ModelParams(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_int32)
        for name in (
            "arch", "n_embd", "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab",
            "rope_dim", "sliding_window", "n_expert", "n_expert_used",
        )  # fmt: skip
    ] + [
        ("eps", ctypes.c_float),
        ("attn_scale", ctypes.c_float),
        ("embd_scale", ctypes.c_float),
        ("tok_embd", Tensor),
        ("output_norm", Tensor),
        ("output", Tensor),
        ("layers", ctypes.POINTER(Layer)),
        ("rope_freqs", Tensor),
        ("rope_freq_scale", ctypes.c_float),
        ("yarn_ext_factor", ctypes.c_float),
        ("yarn_attn_factor", ctypes.c_float),
        ("yarn_beta_fast", ctypes.c_float),
        ("yarn_beta_slow", ctypes.c_float),
        ("yarn_orig_ctx", ctypes.c_int32),
        ("n_layer_kv", ctypes.c_int32),
        ("n_embd_per_layer", ctypes.c_int32),
        ("final_logit_softcap", ctypes.c_float),
        ("per_layer_tok_embd", Tensor),
        ("per_layer_model_proj", Tensor),
        ("per_layer_proj_norm", Tensor),
    ] + [
        (name, ctypes.c_int32)
        for name in ("ssm_d_conv", "ssm_d_state", "ssm_n_group", "ssm_dt_rank", "n_ff_shexp")
    ]


ERROR_LEN = 256  # llk.h's LLK_ERROR_LEN: room for llk_ctx_new's (and llk_ctx_plan's) reason


class Memory(ctypes.Structure):
    """llk_memory: what a native context holds, by part (kernels/llk.h)."""

    _fields_ = [(name, ctypes.c_size_t) for name in ("kv", "rings", "states", "scratch", "experts", "state_bytes")] + [
        ("ring_blocks", ctypes.c_int32)]


def _sources(directory: Path = _SOURCES) -> list[Path]:
    return sorted(p for p in directory.glob("*") if p.suffix in (".c", ".h", ".inc")) if directory.is_dir() else []


def _installed() -> Path | None:
    """The library a ``pip install`` put next to the package (or in site-packages, for editable installs)."""
    candidates = [_HERE / _LIB_NAME] + [Path(p) / "localllm" / "backends" / "native" / _LIB_NAME for p in sys.path if p]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        return None
    newest_source = max((p.stat().st_mtime for p in _sources()), default=0.0)
    return found if found.stat().st_mtime >= newest_source else None


def build(directory: Path = _SOURCES) -> Path:
    """Compile the C sources in ``directory`` (the checkout's ``kernels/``) into the cache, once per distinct
    source; the library's path."""
    sources = _sources(directory)
    if not sources:
        raise NativeError("the native kernels library is not installed and no kernels/ sources were found to build it")
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(" ".join(_C_FLAGS).encode())
    target = Path(platformdirs.user_cache_dir("localllm")) / "native" / f"libllk-{digest.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not compiler:
        raise NativeError("no C compiler found to build the native kernels; install gcc or use the llama.cpp engine")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        cmd = [compiler, *_C_FLAGS, "-o", str(partial), *(str(p) for p in sources if p.suffix == ".c"), "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise NativeError(f"building the native kernels failed:\n{done.stderr.strip()}")
        partial.replace(target)  # never a half-written library under the final name
    finally:
        partial.unlink(missing_ok=True)
    return target


def load(path: Path) -> ctypes.CDLL:
    """The kernels library at ``path``, its functions declared."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise NativeError(f"cannot load the native kernels library {path}: {exc}") from None
    _declare(lib)
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    c_int, c_i64, vp, fp = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float)
    i32p = ctypes.POINTER(ctypes.c_int32)
    sigs = {
        "llk_type_supported": (c_int, [c_int]),
        "llk_block_size": (c_int, [c_int]),
        "llk_row_size": (ctypes.c_size_t, [c_int, c_i64]),
        "llk_isa_best": (c_int, []),
        "llk_isa_get": (c_int, []),
        "llk_isa_set": (c_int, [c_int]),
        "llk_dequantize": (c_int, [c_int, vp, fp, c_i64]),
        "llk_act_size": (ctypes.c_size_t, [c_int, c_i64]),
        "llk_quantize_act": (c_int, [c_int, fp, vp, c_i64]),
        "llk_vec_dot": (ctypes.c_float, [c_int, vp, vp, c_i64]),
        "llk_vec_dot_ref": (ctypes.c_float, [c_int, vp, vp, c_i64]),
        "llk_vec_dot_cols": (c_int, [c_int, vp, vp, ctypes.c_size_t, c_int, c_i64, fp]),
        "llk_vec_dot_rows": (c_int, [c_int, c_int, vp, ctypes.c_size_t, vp, c_i64, fp]),
        "llk_map_file": (vp, [ctypes.c_char_p, ctypes.POINTER(c_i64)]),
        "llk_unmap_file": (None, [vp, c_i64]),
        "llk_arch_id": (c_int, [ctypes.c_char_p]),
        "llk_ctx_new": (
            vp, [ctypes.POINTER(ModelParams), c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int, ctypes.c_char_p]
        ),
        "llk_ctx_free": (None, [vp]),
        "llk_ctx_memory": (None, [vp, ctypes.POINTER(Memory)]),
        "llk_ctx_plan": (c_int, [ctypes.POINTER(ModelParams), c_int, c_int, c_int, c_int, c_int, c_int, c_int, c_int,
                                 ctypes.POINTER(Memory), ctypes.c_char_p]),
        "llk_kv_populate": (None, [vp, ctypes.c_size_t, ctypes.c_size_t]),
        "llk_ctx_error": (ctypes.c_char_p, [vp]),
        "llk_decode": (
            c_int, [vp, c_int, i32p, i32p, ctypes.POINTER(i32p), ctypes.POINTER(ctypes.c_int8), fp, i32p, c_int, c_int]
        ),
        "llk_decode_hidden": (
            c_int, [vp, c_int, i32p, i32p, ctypes.POINTER(i32p), ctypes.POINTER(ctypes.c_int8), fp, i32p, c_int, c_int]
        ),
        "llk_kv_block_bytes": (ctypes.c_size_t, [vp]),
        "llk_kv_ring_blocks": (c_int, [vp]),
        "llk_kv_layout": (c_int, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "llk_kv_ring_block_bytes": (ctypes.c_size_t, [vp]),
        "llk_kv_block_copy": (c_int, [vp, c_int, c_int]),
        "llk_kv_block_read": (c_int, [vp, c_int, vp]),
        "llk_kv_block_write": (c_int, [vp, c_int, ctypes.c_char_p]),
        "llk_state_bytes": (ctypes.c_size_t, [vp]),
        "llk_state_read": (c_int, [vp, c_int, vp]),
        "llk_state_write": (c_int, [vp, c_int, vp]),
        "llk_state_reset": (c_int, [vp, c_int]),
        "llk_state_rewind": (c_int, [vp, c_int, c_int]),
        "llk_state_capture": (c_int, [vp, c_int, c_int, vp]),
        "llk_matvec": (c_int, [vp, ctypes.POINTER(Tensor), fp, fp]),
        "llk_gemm": (c_int, [ctypes.POINTER(Tensor), fp, c_int, fp]),
        "llk_repack_type": (c_int, [c_int, c_i64, c_i64]),
        "llk_repack_size": (ctypes.c_size_t, [c_int, c_i64, c_i64]),
        "llk_repack": (c_int, [c_int, vp, c_i64, c_i64, vp]),
        "llk_type_name": (ctypes.c_char_p, [c_int]),
        "llk_read_bandwidth": (ctypes.c_double, [vp, c_i64, c_int]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def library() -> ctypes.CDLL:
    """The loaded kernels library (built first when needed)."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = load(_installed() or build())
        return _lib


def use(lib: ctypes.CDLL) -> None:
    """Make ``lib`` the library that contexts made from now on run (a benchmark's A/B of two builds; a context
    keeps the library it was made with)."""
    global _lib
    with _lock:
        _lib = lib
