"""The kernels library against gguf-py's NumPy reference, and its SIMD paths against its scalar one.

Weights are random blocks (scale fields set to sane half floats) and real
tensors of the two fixture models; activations are random floats quantized
the way the dot kernels take them.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants
from hypothesis import given, settings
from hypothesis import strategies as st

from localllm.backends.native import kernels
from localllm.backends.native.lib import NativeError
from localllm.gguf import GGML_TYPES, read_gguf

# type -> byte offsets of the half-float scale fields inside one block
SCALE_FIELDS = {
    Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,),
    Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,),
}  # fmt: skip
E8M0_FIELDS = {Q.MXFP4: 0}  # type -> byte offset of the power-of-two scale byte inside one block
FLOAT_TYPES = (Q.F32, Q.F16, Q.BF16)
ALL_TYPES = tuple(SCALE_FIELDS) + tuple(E8M0_FIELDS) + FLOAT_TYPES
ISAS = kernels.available_isas()  # every level this CPU can run


def block_shape(t: Q) -> tuple[int, int]:
    _, block, size = GGML_TYPES[int(t)]
    return block, size


def random_row(t: Q, n_blocks: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Raw bytes of a row of ``n_blocks`` blocks of type ``t``, and its element count."""
    block, size = block_shape(t)
    if t in FLOAT_TYPES:  # 13 per "block": lengths that leave SIMD tails
        values = rng.standard_normal(n_blocks * 13).astype(np.float32)
        if t == Q.F32:
            return values.view(np.uint8), values.size
        if t == Q.F16:
            return values.astype(np.float16).view(np.uint8), values.size
        return (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8), values.size
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for offset in SCALE_FIELDS.get(t, ()):
        scales = (rng.uniform(0.001, 0.05, n_blocks) * rng.choice([-1, 1], n_blocks)).astype(np.float16)
        raw[:, offset : offset + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    if t in E8M0_FIELDS:  # 2^-9 .. 2^-4 times values up to 6: weights of the others' size
        raw[:, E8M0_FIELDS[t]] = rng.integers(119, 125, n_blocks)
    return raw.reshape(-1), n_blocks * block


@pytest.fixture(autouse=True)
def _restore_isa():
    best = kernels.isa()
    yield
    kernels.set_isa(best)


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_dequantize_matches_gguf_py(t: Q) -> None:
    rng = np.random.default_rng(int(t))
    row, n = random_row(t, 24, rng)
    ours = kernels.dequantize(int(t), row, n)
    theirs = quants.dequantize(row, t).reshape(-1)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("isa", ISAS)
def test_dot_agrees_with_scalar_reference_and_float_math(t: Q, isa: str) -> None:
    rng = np.random.default_rng(100 + int(t))
    row, n = random_row(t, 16, rng)
    x = rng.standard_normal(n).astype(np.float32)
    assert kernels.set_isa(isa) == isa
    act = kernels.quantize_activations(int(t), x)
    simd = kernels.vec_dot(int(t), row, act, n)
    ref = kernels.vec_dot(int(t), row, act, n, reference=True)
    w = quants.dequantize(row, t).reshape(-1).astype(np.float64)
    exact = float(w @ x)
    scale = float(np.abs(w) @ np.abs(x))
    assert simd == pytest.approx(ref, rel=1e-4, abs=1e-5 * scale)
    # 8-bit activations cost about 1/254 of each product's magnitude at worst
    tolerance = 1e-6 * scale if t in FLOAT_TYPES else 0.01 * scale
    assert abs(simd - exact) <= tolerance


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("isa", ISAS)
def test_batched_dot_equals_one_row_at_a_time_bit_for_bit(t: Q, isa: str) -> None:
    """What prefill and batches use (several activation rows per weight row) gives each row exactly
    its single-row result, so a sequence's output does not depend on what it is batched with."""
    rng = np.random.default_rng(300 + int(t))
    row, n = random_row(t, 9, rng)  # an odd number of blocks: the kernels' tail paths too
    assert kernels.set_isa(isa) == isa
    acts = [kernels.quantize_activations(int(t), rng.standard_normal(n).astype(np.float32)) for _ in range(4)]
    alone = [np.float32(kernels.vec_dot(int(t), row, act, n)) for act in acts]
    for cols in (1, 2, 3, 4):
        assert kernels.vec_dot_cols(int(t), row, acts[:cols], n) == alone[:cols]


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("count", [2, 8])
def test_multi_row_dot_equals_each_row_alone_bit_for_bit(t: Q, isa: str, count: int) -> None:
    """Decode takes weight rows two or eight at a time: each result must be exactly that row's single-row dot."""
    assert_rows_match_alone(t, count, 9, np.random.default_rng(400 + int(t) + count), [isa])


def assert_rows_match_alone(t: Q, count: int, n_blocks: int, rng: np.random.Generator, isas: list[str],
                            magnitude: float = 1.0) -> None:
    """``count`` random rows of ``n_blocks`` blocks through the multi-row kernel of each of ``isas``:
    every result exactly that row's single-row dot at the same level."""
    rows = [random_row(t, n_blocks, rng)[0] for _ in range(count)]
    n = random_row(t, n_blocks, rng)[1]
    act = kernels.quantize_activations(int(t), (rng.standard_normal(n) * magnitude).astype(np.float32))
    for isa in isas:
        assert kernels.set_isa(isa) == isa
        alone = [np.float32(kernels.vec_dot(int(t), row, act, n)) for row in rows]
        assert kernels.vec_dot_rows(int(t), rows, act, n) == alone, isa


def test_quantized_activations_are_identical_across_isas() -> None:
    x = np.random.default_rng(7).standard_normal(4096).astype(np.float32)
    for t in (Q.Q8_0, Q.Q4_K):
        layouts = []
        for isa in ISAS:
            kernels.set_isa(isa)
            layouts.append(kernels.quantize_activations(int(t), x))
        for other in layouts[1:]:
            np.testing.assert_array_equal(layouts[0], other)


@settings(max_examples=60, deadline=None)
@given(
    t=st.sampled_from(ALL_TYPES),
    n_blocks=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    magnitude=st.sampled_from([1e-3, 1.0, 300.0]),
)
def test_odd_shapes_and_magnitudes(t: Q, n_blocks: int, seed: int, magnitude: float) -> None:
    rng = np.random.default_rng(seed)
    row, n = random_row(t, n_blocks, rng)
    x = (rng.standard_normal(n) * magnitude).astype(np.float32)
    np.testing.assert_allclose(
        kernels.dequantize(int(t), row, n), quants.dequantize(row, t).reshape(-1)[:n], rtol=1e-6, atol=1e-7
    )
    act = kernels.quantize_activations(int(t), x)
    simd = kernels.vec_dot(int(t), row, act, n)
    ref = kernels.vec_dot(int(t), row, act, n, reference=True)
    scale = float(np.abs(quants.dequantize(row, t).reshape(-1)[:n].astype(np.float64)) @ np.abs(x))
    assert abs(simd - ref) <= 1e-4 * scale + 1e-30


@settings(max_examples=40, deadline=None)
@given(
    t=st.sampled_from(ALL_TYPES),
    n_blocks=st.integers(1, 40),
    count=st.sampled_from([2, 8]),
    seed=st.integers(0, 2**32 - 1),
    magnitude=st.sampled_from([1e-3, 1.0, 300.0]),
)
def test_multi_row_dots_on_odd_shapes(t: Q, n_blocks: int, count: int, seed: int, magnitude: float) -> None:
    """Decode's multi-row kernels (at every level) on any block count and scale: each row exactly its own dot."""
    assert_rows_match_alone(t, count, n_blocks, np.random.default_rng(seed), ISAS, magnitude)


def test_mxfp4_every_scale_byte_dequantizes_as_gguf_py() -> None:
    """The E8M0 byte's whole range: the subnormal scales of 0 and 1, and the overflow of the largest to
    infinity, as ggml has them; each value the code's E2M1 value times 2^(e - 127)."""
    rng = np.random.default_rng(39)
    raw = rng.integers(0, 256, size=(256, 17), dtype=np.uint8)
    raw[:, 0] = np.arange(256)
    with np.errstate(over="ignore"):
        ours = kernels.dequantize(int(Q.MXFP4), raw.reshape(-1), 256 * 32)
        theirs = quants.dequantize(raw.reshape(-1), Q.MXFP4).reshape(-1)
    np.testing.assert_array_equal(ours, theirs)
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    codes = np.concatenate([raw[:, 1:] & 0xF, raw[:, 1:] >> 4], axis=1)
    with np.errstate(over="ignore"):
        exact = (e2m1[codes] * np.exp2(np.arange(256) - 127.0)[:, None]).astype(np.float32)
    np.testing.assert_array_equal(ours.reshape(256, 32), exact)


def test_rows_that_are_not_whole_blocks_are_refused() -> None:
    row, _ = random_row(Q.Q4_K, 1, np.random.default_rng(0))
    with pytest.raises(NativeError, match="not a whole number of blocks"):
        kernels.dequantize(int(Q.Q4_K), row, 200)
    with pytest.raises(NativeError, match="needs 288"):
        kernels.dequantize(int(Q.Q4_K), row, 512)
    with pytest.raises(NativeError, match="not supported"):
        kernels.dequantize(16, row, 256)  # IQ2_XXS


@pytest.mark.parametrize("which", ["smollm2_path", "gemma3_path"])
def test_real_tensors_of_the_fixture_models(which: str, request: pytest.FixtureRequest) -> None:
    """Every weight type in the file: a few rows dequantized and dotted, against gguf-py."""
    path = request.getfixturevalue(which)
    gguf = read_gguf(path, skip_arrays_over=1000)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    seen: set[int] = set()
    rng = np.random.default_rng(1)
    for info in gguf.tensors:
        if info.ggml_type in seen or len(info.shape) < 2:
            continue
        seen.add(info.ggml_type)
        t = Q(info.ggml_type)
        n = info.shape[0]
        size = kernels.row_size(info.ggml_type, n)
        for r in (0, info.shape[1] // 2, info.shape[1] - 1):
            row = np.array(data[info.offset + r * size : info.offset + (r + 1) * size])
            theirs = quants.dequantize(row, t).reshape(-1)
            np.testing.assert_allclose(kernels.dequantize(info.ggml_type, row, n), theirs, rtol=1e-6, atol=1e-7)
            x = rng.standard_normal(n).astype(np.float32)
            got = kernels.vec_dot(info.ggml_type, row, kernels.quantize_activations(info.ggml_type, x), n)
            scale = float(np.abs(theirs.astype(np.float64)) @ np.abs(x))
            assert abs(got - float(theirs.astype(np.float64) @ x)) <= 0.01 * scale
    assert seen >= ({Q.Q4_1, Q.Q8_0} if which == "smollm2_path" else {Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q8_0})


# ---- against ggml itself ----------------------------------------------------------------------------

GGML_DOTS = {  # weight type -> (ggml's vec_dot, ggml's activation quantizer, its activation block bytes)
    Q.Q4_0: ("ggml_vec_dot_q4_0_q8_0", "quantize_row_q8_0", 34), Q.Q4_1: ("ggml_vec_dot_q4_1_q8_1", "quantize_row_q8_1", 36),
    Q.Q5_0: ("ggml_vec_dot_q5_0_q8_0", "quantize_row_q8_0", 34), Q.Q5_1: ("ggml_vec_dot_q5_1_q8_1", "quantize_row_q8_1", 36),
    Q.Q8_0: ("ggml_vec_dot_q8_0_q8_0", "quantize_row_q8_0", 34), Q.MXFP4: ("ggml_vec_dot_mxfp4_q8_0", "quantize_row_q8_0", 34),
}  # fmt: skip
BIT_EXACT_DOTS = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0)  # MXFP4's sums run in another order (see quants_x86.inc)


@pytest.fixture(scope="module")
def ggml_cpu():
    """llama-cpp-python's own libggml-cpu, initialised: the vec_dot kernels llama.cpp runs on this CPU."""
    import ctypes
    from pathlib import Path

    import llama_cpp

    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so"))
    lib.ggml_cpu_init()
    for dot, quantize, _ in GGML_DOTS.values():
        getattr(lib, dot).argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_void_p,
                                      ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        getattr(lib, dot).restype = None
        getattr(lib, quantize).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        getattr(lib, quantize).restype = None
    return lib


def ggml_dot(ggml_cpu, t: Q, row: np.ndarray, x: np.ndarray) -> float:
    """ggml's vec_dot of a row of weights type ``t`` against ``x``, quantized by ggml as its kernel takes it."""
    import ctypes

    dot_name, quantize_name, act_block = GGML_DOTS[t]
    act = np.empty(x.size // 32 * act_block, dtype=np.uint8)
    getattr(ggml_cpu, quantize_name)(x.ctypes.data, act.ctypes.data, x.size)
    result = ctypes.c_float()
    getattr(ggml_cpu, dot_name)(x.size, ctypes.byref(result), 0, row.ctypes.data, 0, act.ctypes.data, 0, 1)
    return result.value


@pytest.mark.parametrize("t", BIT_EXACT_DOTS, ids=lambda t: t.name)
def test_dot_equals_ggmls_vec_dot_bit_for_bit(ggml_cpu, t: Q) -> None:
    """At this CPU's best level, the 32-formats' dot of a row is ggml's vec_dot of it, bit for bit: where the
    two engines' logits differ, it is in which kernel llama.cpp's matrix multiplication chose, not in these."""
    rng = np.random.default_rng(11)
    for n_blocks in (1, 18, 48):
        row, n = random_row(t, n_blocks, rng)
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        ours = kernels.vec_dot(int(t), row, kernels.quantize_activations(int(t), x), n)
        assert ours == ggml_dot(ggml_cpu, t, row, x), n_blocks


@pytest.mark.parametrize("isa", ISAS)
def test_mxfp4_dot_equals_ggmls_vec_dot_to_rounding(ggml_cpu, isa: str) -> None:
    """MXFP4 read as llama.cpp reads it: its kernel's result on the same row and activations, to the rounding of
    summing the blocks in another order (even and odd block counts: ggml takes blocks in pairs)."""
    rng = np.random.default_rng(12)
    assert kernels.set_isa(isa) == isa
    for n_blocks in (1, 17, 48):
        row, n = random_row(Q.MXFP4, n_blocks, rng)
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        ours = kernels.vec_dot(int(Q.MXFP4), row, kernels.quantize_activations(int(Q.MXFP4), x), n)
        scale = float(np.abs(quants.dequantize(row, Q.MXFP4).reshape(-1).astype(np.float64)) @ np.abs(x))
        assert abs(ours - ggml_dot(ggml_cpu, Q.MXFP4, row, x)) <= 1e-6 * scale, n_blocks
