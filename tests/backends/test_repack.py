"""Weights repacked at load (kernels/repack.c): matrices of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
Q5_K, Q6_K and MXFP4 in 16-row interleaved groups.

A repacked matrix gives the same bits at every ISA level (the scalar one included, forced), agrees
with its GGUF layout to rounding, and gives each row a result that does not depend on which tokens
share the call. Shapes without a repacked layout (rows not a multiple of 16) keep the GGUF layout and
run through the per-row kernels; a repack over the memory budget is refused at load with the figure.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from support.gguf_builders import quantized, tiny_model
from localllm.backends.native import kernels
from localllm.backends.native.lib import NativeError
from localllm.backends.native.model import NativeWeights
from localllm.gguf import GGML_TYPES
from support.native import Side, cosine

SCALE_FIELDS = {  # byte offsets of the half-float scales in a block
    Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,), Q.Q2_K: (80, 82), Q.Q3_K: (108,),
    Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.MXFP4: (),
}  # fmt: skip
E8M0_FIELDS = {Q.MXFP4: 0}  # byte offsets of the power-of-two scale bytes in a block
ISAS = kernels.available_isas()
REPACKING = kernels.repacked_type(int(Q.Q4_K), 256, 16) != int(Q.Q4_K)  # this CPU's best level has the kernels
Q8_0_LAYOUT = "Q8_0_R16" if kernels.repacked_type(int(Q.Q8_0), 256, 16) != int(Q.Q8_0) else "GGUF in place"


@pytest.fixture(autouse=True)
def _restore_isa():
    best = kernels.isa()
    yield
    kernels.set_isa(best)


def random_matrix(t: Q, rows: int, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Raw GGUF bytes of a ``rows`` x ``n_blocks * 256`` matrix: random codes, sane half-float scales."""
    n_blocks *= 256 // GGML_TYPES[int(t)][1]
    size = GGML_TYPES[int(t)][2]
    raw = rng.integers(0, 256, size=(rows * n_blocks, size), dtype=np.uint8)
    for offset in SCALE_FIELDS[t]:
        scales = (rng.uniform(0.001, 0.05, len(raw)) * rng.choice([-1, 1], len(raw))).astype(np.float16)
        raw[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    if t in E8M0_FIELDS:
        raw[:, E8M0_FIELDS[t]] = rng.integers(119, 125, len(raw))
    return raw.reshape(-1)


@pytest.mark.parametrize("t", SCALE_FIELDS, ids=lambda t: t.name)
def test_repacked_matrix_gives_the_same_bits_at_every_level(t: Q) -> None:
    rng = np.random.default_rng(int(t))
    ne0, ne1 = 3 * 256, 48
    raw = random_matrix(t, ne1, 3, rng)
    x = (rng.standard_normal((5, ne0)) * rng.choice([1e-3, 1.0, 300.0], (5, 1))).astype(np.float32)
    packed_type, packed = kernels.repack(int(t), raw, ne0, ne1)
    in_place = kernels.gemm(int(t), raw, ne0, ne1, x)
    results = []
    for isa in ISAS:
        assert kernels.set_isa(isa) == isa
        results.append(kernels.gemm(packed_type, packed, ne0, ne1, x))
    assert all(np.array_equal(results[0], r) for r in results[1:]), "levels differ"
    w = quants.dequantize(raw, t).reshape(ne1, ne0).astype(np.float64)
    scale = np.abs(x.astype(np.float64)) @ np.abs(w).T
    assert np.all(np.abs(results[0] - in_place) <= 1e-5 * scale)  # the GGUF layout's kernels, to rounding
    assert np.all(np.abs(results[0] - x @ w.T) <= 0.01 * scale)  # 8-bit activations


def test_repacked_mxfp4_takes_every_scale_byte_exactly() -> None:
    """Row r of 256 has the scale byte r, so its result is its integer sum times 2^(r-128) and the activations'
    scale alone: the group kernels' vector conversion of the byte (to a subnormal for 0 and 1, overflowing the
    result for the largest) gives the reference's bits (the scalar level's) at every level, and the per-row
    kernels' result to rounding."""
    rng = np.random.default_rng(139)
    ne0, ne1 = 32, 256
    raw = rng.integers(0, 256, size=(ne1, 17), dtype=np.uint8)
    raw[:, 0] = np.arange(ne1)
    raw = raw.reshape(-1)
    x = rng.standard_normal((3, ne0)).astype(np.float32)
    packed_type, packed = kernels.repack(int(Q.MXFP4), raw, ne0, ne1)
    with np.errstate(over="ignore"):
        in_place = kernels.gemm(int(Q.MXFP4), raw, ne0, ne1, x)
        results = {}
        for isa in ISAS:
            assert kernels.set_isa(isa) == isa
            results[isa] = kernels.gemm(packed_type, packed, ne0, ne1, x)
    for isa, result in results.items():
        np.testing.assert_array_equal(result, results["scalar"], err_msg=isa)
    finite = slice(8, 240)  # scales whose products with the activations' stay in floats' normal range
    np.testing.assert_allclose(results["scalar"][:, finite], in_place[:, finite], rtol=1e-6)
    assert np.isinf(results["scalar"][:, -1]).all() and np.all(np.abs(results["scalar"][:, :2]) < 1e-36)


@pytest.mark.parametrize("t", SCALE_FIELDS, ids=lambda t: t.name)
@pytest.mark.parametrize("isa", ISAS)
def test_a_repacked_row_does_not_depend_on_the_batch(t: Q, isa: str) -> None:
    """Prefill takes up to eight tokens per unpacking of the codes (nine: a run of eight and one, or two of four and
    one): each token's row is its result alone."""
    rng = np.random.default_rng(10 + int(t))
    ne0, ne1 = 2 * 256, 32
    packed_type, packed = kernels.repack(int(t), random_matrix(t, ne1, 2, rng), ne0, ne1)
    x = rng.standard_normal((9, ne0)).astype(np.float32)
    assert kernels.set_isa(isa) == isa
    alone = np.stack([kernels.gemm(packed_type, packed, ne0, ne1, x[i : i + 1])[0] for i in range(9)])
    assert np.array_equal(kernels.gemm(packed_type, packed, ne0, ne1, x), alone)
    assert np.array_equal(kernels.gemm(packed_type, packed, ne0, ne1, x[2:7]), alone[2:7])


@pytest.mark.parametrize("t", SCALE_FIELDS, ids=lambda t: t.name)
def test_shapes_without_a_repacked_layout_run_in_place_exactly(t: Q) -> None:
    """40 rows (not whole groups of 16): the GGUF layout stays, and its rows are the per-row dots."""
    rng = np.random.default_rng(20 + int(t))
    ne0, ne1 = 256, 40
    raw = random_matrix(t, ne1, 1, rng)
    assert kernels.repacked_type(int(t), ne0, ne1) == int(t)
    with pytest.raises(NativeError, match="has no repacked layout"):
        kernels.repack(int(t), raw, ne0, ne1)
    x = rng.standard_normal(ne0).astype(np.float32)
    act = kernels.quantize_activations(int(t), x)
    row = kernels.row_size(int(t), ne0)
    per_row = [np.float32(kernels.vec_dot(int(t), raw[r * row : (r + 1) * row], act, ne0)) for r in range(ne1)]
    assert list(kernels.gemm(int(t), raw, ne0, ne1, x)[0]) == per_row


@pytest.mark.skipif(not REPACKING, reason="this CPU's level has no repacked kernels (NEON or scalar)")
def test_gemma3_layouts_are_named_and_logged(gemma3_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="localllm.backends.native.model"):
        weights = NativeWeights(gemma3_path)
    try:
        assert weights.layouts == {
            "Q4_K": "Q4_K_R16 (27 matrices)", "Q5_0": "Q5_0_R16 (81 matrices)",
            "Q6_K": "Q6_K_R16 (9 matrices)", "Q8_0": f"{Q8_0_LAYOUT} (10 matrices)",
        }  # fmt: skip
        assert "Q4_K: Q4_K_R16 (27 matrices)" in caplog.text
    finally:
        weights.close()


def test_forced_scalar_level_keeps_the_gguf_layout(gemma3_path: Path) -> None:
    """A CPU without AVX2 (forced here) reads every matrix in place through the scalar kernels."""
    kernels.set_isa("scalar")
    weights = NativeWeights(gemma3_path)
    try:
        assert all(layout.startswith("GGUF in place") for layout in weights.layouts.values())
    finally:
        weights.close()


@pytest.mark.skipif(not REPACKING, reason="this CPU's level has no repacked kernels (NEON or scalar)")
def test_a_repack_over_the_budget_is_refused_with_the_figure(gemma3_path: Path) -> None:
    with pytest.raises(NativeError, match=r"needs [1-9][0-9]+ MiB of memory but only 1 MiB is available"):
        NativeWeights(gemma3_path, repack_budget=1 << 20)


def test_a_q4_k_m_model_with_a_matrix_that_does_not_fit_matches_llama_cpp(tmp_path: Path) -> None:
    """llama.cpp's own Q4_K_M quantization of a small llama: its tied output head has 40 rows, so it stays
    in place while the other matrices are repacked; the model runs and agrees with llama.cpp."""
    source = tiny_model(tmp_path / "f32.gguf", n_embd=256, n_ff=512, n_vocab=40, head_dim=64)
    path = quantized(source, tmp_path / "q4_k_m.gguf")
    native, reference = Side("native", path, n_ctx=64), Side("llama.cpp", path, n_ctx=64)
    try:
        layouts = native.model.weights.layouts
        assert layouts["Q6_K"].startswith("GGUF in place (1 matrix)")
        if REPACKING:
            assert layouts["Q4_K"] == "Q4_K_R16 (5 matrices)"
        tokens = [1, 7, 19, 4, 28, 11, 3, 22, 9, 30, 5, 17, 2, 25, 14, 8]
        assert cosine(native.eval(tokens, 0), reference.eval(tokens, 0)) > 0.999
        assert native.greedy(tokens, 16)[0] == reference.greedy(tokens, 16)[0]
    finally:
        native.close()
        reference.close()


def _mapped_rss(path: Path) -> int:
    """Bytes of this process's mappings of ``path`` that are resident (its smaps)."""
    rss, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:  # a mapping's header line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            rss += int(line.split()[1]) * 1024
    return rss


def test_a_repacked_matrixs_pages_in_the_file_are_let_go(gemma3_path: Path) -> None:
    """The copy is what the forward reads: the matrix's pages in the mapping, read to repack it, are not held too
    (the runner would hold those weights twice; the plan counts them once)."""
    weights = NativeWeights(gemma3_path)
    try:
        repacked = weights._repacked.nbytes
        assert repacked > 50 << 20
        assert _mapped_rss(gemma3_path.resolve()) < repacked // 20
    finally:
        weights.close()
