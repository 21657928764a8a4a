"""Gemma 4 on the native engine: llama.cpp's logits on the same file, and the KV its shared layers do not hold.

Tiny Gemma 4 models written here (support.arch_models.gemma4), F32 and Q8_0/Q4_0: the 26B-A4B shape (a dense FFN
beside routed experts, the router on a scaled norm of the residual, per-expert output scales, each expert's gate
and up rows in one tensor), its global layers with wider heads, fewer KV heads, no V matrix and proportional RoPE;
and the E2B/E4B shape (per-layer token embeddings, the last layers reading earlier layers' KV). Sliding layers
attend over 8 positions and the prompt is longer, so they drop positions; as in a runner, they keep only that
window (test_native_window_kv.py: bit for bit what keeping every position gives). Batch invariance is a case of
test_batch_invariance.py.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType

from localllm.backends.contract import BackendError
from localllm.backends.native import backend as native
from localllm.backends.native.model import NativeWeights, native_support
from support.arch_models import gemma4
from support.native import assert_matches_llama_cpp, cosine, parity_runs

Q8_0, Q4_0 = GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0
MOE = {"n_layer": 3, "global_head": 32, "global_kv": 1, "k_eq_v": True}
E_STYLE = {"n_layer": 6, "moe": False, "per_layer": 32, "shared_kv": 2, "global_head": 32, "global_kv": 1}
MODELS = {  # id: builder arguments
    "moe-f32": MOE,
    "moe-q8_0": MOE | {"matrix_type": Q8_0},
    "moe-q4_0": MOE | {"matrix_type": Q4_0},  # repacked where the CPU has a layout: each half of gate_up a matrix
    "moe-split-experts-f32": MOE | {"split_experts": True},  # gate and up experts apart
    "e-style-f32": E_STYLE,
    "e-style-q8_0": E_STYLE | {"matrix_type": Q8_0},
    "dense-two-layers-f32": {"moe": False},
}  # fmt: skip
TOKENS = [40, 71, 19, 104, 28, 111, 3, 122, 9, 230, 55, 17, 200, 25, 14, 80, 33, 44, 99, 101, 7, 8]  # past 8


@pytest.fixture(scope="module")
def first_steps(tmp_path_factory: pytest.TempPathFactory, byte_vocab_path: Path) -> dict[str, tuple]:
    """Each model's first-step logits in both engines and their greedy continuations (ours, theirs, and
    llama.cpp's logits at each step)."""
    return parity_runs(tmp_path_factory.mktemp("gemma4"), MODELS, functools.partial(gemma4, vocab_from=byte_vocab_path),
                       TOKENS, window_kv=True)


@pytest.mark.parametrize("name", MODELS)
def test_first_step_logits_and_greedy_continuation_match_llama_cpp(first_steps, name: str) -> None:
    assert_matches_llama_cpp(*first_steps[name], all_f32="matrix_type" not in MODELS[name])


def test_experts_gate_and_up_apart_give_the_same_model(first_steps) -> None:
    """Each expert's gate and up matrices apart (as Ollama's files hold them) or as one tensor: the same logits."""
    np.testing.assert_array_equal(first_steps["moe-f32"][0], first_steps["moe-split-experts-f32"][0])


def test_shared_layers_hold_no_kv_and_the_layers_their_own_geometry(tmp_path: Path, byte_vocab_path: Path) -> None:
    """A KV block holds the 4 layers with KV of their own (two sliding ones of 2 KV heads of 16, two global ones
    of 1 KV head of 32), not the 2 that read theirs; the model's figures are its widest layer's."""
    path = gemma4(tmp_path / "e.gguf", byte_vocab_path, **E_STYLE)
    weights = NativeWeights(path)
    try:
        p = weights.params
        layers = [p.layers[il] for il in range(6)]
        assert [la.sliding for la in layers] == [0, 1, 1, 0, 1, 0]
        assert [(la.head_dim, la.n_head_kv) for la in layers] == [(32, 1), (16, 2), (16, 2), (32, 1), (16, 2), (32, 1)]
        assert p.n_layer_kv == 4 and [la.kv_source for la in layers[4:]] == [2, 3]
        assert not layers[4].wk.data and p.attn_scale == 1.0 and p.final_logit_softcap == 30.0
        assert [bool(la.rope_freqs.data) for la in layers] == [True, False, False, True, False, True]
    finally:
        weights.close()
    model = native.Model(path)
    try:
        ctx = native.Context(model, 4, 16, 64, 1, 16, 1)
        per_layer = 2 * 16 * 32 * 2  # K and V, 16 cells of 32 half floats each (2 x 16 or 1 x 32)
        assert ctx.block_bytes == 4 * per_layer
        ctx.close()
    finally:
        model.close()


def test_a_q8_0_kv_cache_is_refused_naming_a_layer_head_size_it_cannot_hold(tmp_path: Path, byte_vocab_path: Path) -> None:
    """The sliding layers' heads of 16 (the global ones' of 32 pass) cannot be kept in q8_0: said, not "out of
    memory"."""
    model = native.Model(gemma4(tmp_path / "e.gguf", byte_vocab_path, **E_STYLE))
    try:
        with pytest.raises(BackendError, match="multiple of 32 dimensions; this model's have 16 and 32"):
            native.Context(model, 4, 16, 64, 1, 16, 1, kv_cache_type="q8_0")
    finally:
        model.close()


def test_the_experts_the_per_layer_embeddings_and_shared_kv_change_the_logits(first_steps) -> None:
    """Each feature is in the maths (every variant matches llama.cpp above): none is a no-op here."""
    assert cosine(first_steps["moe-f32"][0], first_steps["dense-two-layers-f32"][0]) < 0.9999
    assert cosine(first_steps["e-style-f32"][0], first_steps["dense-two-layers-f32"][0]) < 0.9999



@pytest.mark.parametrize(("keys", "named"), [
    ({"@attn_logit_softcapping": 50.0}, "model metadata key 'gemma4.attn_logit_softcapping'"),
    ({"@attention.sliding_window_pattern": 6}, "sliding_window_pattern must name each of the 2 layers"),
    ({"@attention.shared_kv_layers": 1}, "shared_kv_layers is invalid"),  # two layers: none can share
], ids=["attention-softcap", "pattern-not-per-layer", "too-many-shared"])
def test_a_gemma4_the_native_forward_would_not_compute_exactly_is_refused_naming_why(
        tmp_path: Path, byte_vocab_path: Path, keys: dict, named: str) -> None:
    reason = native_support(gemma4(tmp_path / "bad.gguf", byte_vocab_path, moe=False, extra_keys=keys))
    assert reason is not None and named in reason
