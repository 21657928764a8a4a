"""NumPy-facing wrappers of the kernels: dequantize rows, quantize activations, dot products.

Used by the tests and the benchmark; the forward pass calls the same C
functions directly.  Types are ggml type ids (``localllm.gguf.GGML_TYPES``).
"""

from __future__ import annotations

import ctypes

import numpy as np

from localllm.backends.native.lib import NativeError, Tensor, library

ISA_NAMES = {0: "scalar", 1: "avx2", 2: "avxvnni", 3: "avx512", 4: "neon", 5: "neon_dotprod"}


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def _fptr(a: np.ndarray) -> ctypes._Pointer:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def supported(ggml_type: int) -> bool:
    return bool(library().llk_type_supported(ggml_type))


def row_size(ggml_type: int, n: int) -> int:
    """Bytes of a row of ``n`` elements (0 when the type or length is not valid)."""
    return int(library().llk_row_size(ggml_type, n))


def _check(ggml_type: int, data: np.ndarray, n: int) -> None:
    size = row_size(ggml_type, n)
    if not supported(ggml_type):
        raise NativeError(f"ggml type {ggml_type} is not supported by the native kernels")
    if size == 0:
        raise NativeError(f"{n} elements is not a whole number of blocks of ggml type {ggml_type}")
    if data.nbytes < size:
        raise NativeError(f"{data.nbytes} bytes given, a row of {n} elements of type {ggml_type} needs {size}")


def dequantize(ggml_type: int, data: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` floats that the first blocks of ``data`` (raw GGUF bytes) encode."""
    data = np.ascontiguousarray(data)
    _check(ggml_type, data, n)
    out = np.empty(n, dtype=np.float32)
    library().llk_dequantize(ggml_type, _ptr(data), _fptr(out), n)
    return out


def quantize_activations(ggml_type: int, x: np.ndarray) -> np.ndarray:
    """``x`` in the layout the dot kernel of ``ggml_type`` weights takes (8-bit blocks or floats)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.size
    if not supported(ggml_type) or row_size(ggml_type, n) == 0:
        raise NativeError(f"cannot quantize {n} activations for ggml type {ggml_type}")
    out = np.empty(library().llk_act_size(ggml_type, n), dtype=np.uint8)
    library().llk_quantize_act(ggml_type, _fptr(x), _ptr(out), n)
    return out


def vec_dot(ggml_type: int, weights: np.ndarray, act: np.ndarray, n: int, reference: bool = False) -> float:
    """dot(weights row, quantized activations) with the dispatched SIMD kernel or the scalar reference."""
    weights = np.ascontiguousarray(weights)
    _check(ggml_type, weights, n)
    if act.nbytes < library().llk_act_size(ggml_type, n):
        raise NativeError("activation buffer too small; use quantize_activations")
    fn = library().llk_vec_dot_ref if reference else library().llk_vec_dot
    return float(fn(ggml_type, _ptr(weights), _ptr(act), n))


def vec_dot_cols(ggml_type: int, weights: np.ndarray, acts: list[np.ndarray], n: int) -> list[float]:
    """One weights row against several quantized activation rows, as matmul does for a batch."""
    weights = np.ascontiguousarray(weights)
    _check(ggml_type, weights, n)
    row = library().llk_act_size(ggml_type, n)
    packed = np.concatenate([a[:row] for a in acts])
    out = np.zeros(len(acts), dtype=np.float32)
    if library().llk_vec_dot_cols(ggml_type, _ptr(weights), _ptr(packed), row, len(acts), n, _fptr(out)) != 0:
        raise NativeError(f"vec_dot_cols refused {len(acts)} rows of {n} values")
    return [float(v) for v in out]


def vec_dot_rows(ggml_type: int, rows: list[np.ndarray], act: np.ndarray, n: int) -> list[float]:
    """Two or eight weight rows against one activation row, as decode takes them."""
    packed = np.concatenate([np.ascontiguousarray(r) for r in rows])
    _check(ggml_type, packed, len(rows) * n)
    out = np.zeros(len(rows), dtype=np.float32)
    row_bytes = packed.nbytes // len(rows)
    if library().llk_vec_dot_rows(ggml_type, len(rows), _ptr(packed), row_bytes, _ptr(act), n, _fptr(out)) != 0:
        raise NativeError(f"vec_dot_rows refused {len(rows)} rows of {n} values")
    return [float(v) for v in out]


def type_name(ggml_type: int) -> str:
    """The kernels' name of a type id, repacked layouts included (``Q4_K_R16``)."""
    return library().llk_type_name(ggml_type).decode()


def repacked_type(ggml_type: int, ne0: int, ne1: int) -> int:
    """The layout a ``ne1`` x ``ne0`` matrix of ``ggml_type`` gets at load at the current level (the type
    itself where it keeps its GGUF layout)."""
    return int(library().llk_repack_type(ggml_type, ne0, ne1))


def repack(ggml_type: int, data: np.ndarray, ne0: int, ne1: int) -> tuple[int, np.ndarray]:
    """The repacked copy of a ``ne1`` x ``ne0`` matrix (raw GGUF bytes) and its type id, whatever the level."""
    data = np.ascontiguousarray(data)
    _check(ggml_type, data, ne0 * ne1)
    size = library().llk_repack_size(ggml_type, ne0, ne1)
    if size == 0:
        raise NativeError(f"a {ne1} x {ne0} matrix of type {type_name(ggml_type)} has no repacked layout")
    out = np.empty(size, dtype=np.uint8)
    library().llk_repack(ggml_type, _ptr(data), ne0, ne1, _ptr(out))
    return repacked_type_of(ggml_type), out


def repacked_type_of(ggml_type: int) -> int:
    """The id of a type's repacked layout (kernels/llk.h: 100 + the GGUF id)."""
    return ggml_type + 100


def gemm(ggml_type: int, data: np.ndarray, ne0: int, ne1: int, x: np.ndarray) -> np.ndarray:
    """``x @ W.T`` for a ``ne1`` x ``ne0`` matrix W (GGUF or repacked bytes) and rows ``x``, on one thread
    through the forward pass's path: the batch is one call, as prefill gives it."""
    data = np.ascontiguousarray(data)
    x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
    if x.shape[1] != ne0 or data.nbytes < row_size_any(ggml_type, ne0) * ne1:
        raise NativeError(f"gemm of a {ne1} x {ne0} matrix with {data.nbytes} bytes and rows of {x.shape[1]}")
    out = np.empty((x.shape[0], ne1), dtype=np.float32)
    tensor = Tensor(data.ctypes.data, ggml_type, ne0, ne1)
    if library().llk_gemm(ctypes.byref(tensor), _fptr(x), x.shape[0], _fptr(out)) != 0:
        raise NativeError(f"gemm refused a {ne1} x {ne0} matrix of type {type_name(ggml_type)}")
    return out


def row_size_any(ggml_type: int, n: int) -> int:
    """Bytes of a row, repacked layouts included (a repacked row's share of its group)."""
    return int(library().llk_row_size(ggml_type, n))


def isa() -> str:
    """The instruction set the dispatcher uses now."""
    return ISA_NAMES[library().llk_isa_get()]


def set_isa(name: str) -> str:
    """Use an instruction-set level (a name of ``ISA_NAMES``) if the CPU has it; returns the level in use."""
    levels = {v: k for k, v in ISA_NAMES.items()}
    if name not in levels:
        raise ValueError(f"unknown instruction set {name!r}; choose from {', '.join(levels)}")
    return ISA_NAMES[library().llk_isa_set(levels[name])]


def best_isa() -> str:
    return ISA_NAMES[library().llk_isa_best()]


def available_isas() -> list[str]:
    """The levels this CPU can run, lowest first."""
    current, found = isa(), []
    for name in ISA_NAMES.values():
        if set_isa(name) == name:
            found.append(name)
    set_isa(current)
    return found
