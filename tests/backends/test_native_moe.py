"""Mixture-of-experts models (qwen3moe) on the native engine: llama.cpp's logits, and files that lie refused.

Tiny qwen3moe models written here (support.moe_models.tiny_qwen3moe: 3 layers, 16 experts of which 2 or 4 a
token, SmolLM2's vocabulary), F32 and quantized by llama.cpp's own quantizer to Q8_0 and to the Q4_K/Q6_K mix
of Q4_K_M, against llama.cpp on the same file. Batch invariance and exact speculation on qwen3moe are cases of
test_batch_invariance.py and runner/test_speculative.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import quantize

from localllm.backends.native.lib import NativeError
from localllm.backends.native.model import NativeWeights, native_support
from support.gguf_builders import F32
from support.moe_models import (MOSTLY_Q4_K_M, MOSTLY_Q8_0, TINY, MoeShape, cache_folder, qwen3moe_model,
                                tiny_qwen3moe)
from support.native import Side, against_llama_cpp, assert_matches_llama_cpp, cosine

PROMPT = "The lighthouse keeper climbed the stairs every evening and"
TOP2 = replace(TINY, n_expert_used=2)  # the same weights (one generator, drawn in the same order), two experts a token
MODELS = {  # id: (llama_ftype, shape)
    "f32-k4": (F32, TINY), "f32-k2": (F32, TOP2), "q8_0": (MOSTLY_Q8_0, TINY), "q4_k_m": (MOSTLY_Q4_K_M, TOP2),
}  # fmt: skip


@pytest.fixture(scope="module")
def moe_dir() -> Path:
    return cache_folder()  # llama.cpp's quantizer takes seconds over them: kept from one run to the next


@pytest.fixture(scope="module")
def first_steps(moe_dir: Path, smollm2_path: Path) -> dict[str, tuple]:
    """Each model's first-step logits in both engines and their greedy continuations (ours, theirs, and
    llama.cpp's logits at each step)."""
    results = {}
    for name, (ftype, shape) in MODELS.items():
        path = tiny_qwen3moe(moe_dir, smollm2_path, ftype, shape)
        results[name] = against_llama_cpp(path, PROMPT)
    return results


@pytest.mark.parametrize("name", MODELS)
def test_first_step_logits_and_greedy_continuation_match_llama_cpp(first_steps, name: str) -> None:
    assert_matches_llama_cpp(*first_steps[name], all_f32=MODELS[name][0] == F32)


def test_the_experts_a_token_uses_change_its_logits(first_steps) -> None:
    """The same weights routed to two or to four experts a token give other logits (the experts' outputs count),
    and each matches llama.cpp above."""
    assert cosine(first_steps["f32-k2"][0], first_steps["f32-k4"][0]) < 0.9999


def test_a_qwen3moe_model_is_supported_and_its_experts_repacked(moe_dir: Path, smollm2_path: Path) -> None:
    path = tiny_qwen3moe(moe_dir, smollm2_path, MOSTLY_Q4_K_M, TOP2)
    assert native_support(path) is None
    weights = NativeWeights(path)
    try:
        h = weights.hyper
        assert (h.n_expert, h.n_expert_used, h.n_ff_exp) == (16, 2, 256)
        # one decode step reads the dense weights and 2 of each layer's 16 experts
        assert weights.decode_bytes < weights.nbytes
        assert "Q4_K" in weights.layouts  # every expert a matrix of its own, repacked where this CPU has a layout
    finally:
        weights.close()


SMALL = MoeShape(n_layer=2, n_expert=8, n_expert_used=2, n_embd=64, n_ff_exp=64, n_head=2, n_head_kv=1, head_dim=32)
_E, _F, _N = SMALL.n_embd, SMALL.n_ff_exp, SMALL.n_expert
# each tensor disagrees with the metadata (expert_count 8, expert_feed_forward_length 64, embedding_length 64)
LYING_TENSORS = {
    "fewer_experts": ("blk.1.ffn_up_exps.weight", np.zeros((_N - 1, _F, _E), np.float32), "has shape (64, 64, 7)"),
    "narrower_experts": ("blk.0.ffn_down_exps.weight", np.zeros((_N, _E, _F // 2), np.float32),
                         "has shape (32, 64, 8)"),
    "no_expert_axis": ("blk.0.ffn_gate_exps.weight", np.zeros((_F, _E), np.float32), "has shape (64, 64)"),
    "router_of_more_experts": ("blk.1.ffn_gate_inp.weight", np.zeros((_N + 1, _E), np.float32), "has shape (64, 9)"),
    "integer_experts": ("blk.0.ffn_gate_exps.weight", np.zeros((_N, _F, _E), np.int8), "of type I8"),
}  # fmt: skip


@pytest.mark.parametrize("case", LYING_TENSORS)
def test_expert_tensors_that_disagree_with_the_metadata_are_refused_naming_them(
        tmp_path: Path, byte_vocab_path: Path, case: str) -> None:
    name, data, says = LYING_TENSORS[case]
    path = qwen3moe_model(tmp_path / f"{case}.gguf", byte_vocab_path, SMALL, replace={name: data})
    reason = native_support(path)
    assert reason is not None and f"tensor {name!r} {says}" in reason and "\n" not in reason
    with pytest.raises(NativeError, match=f"tensor '{name}'"):  # forcing the native engine fails at load
        NativeWeights(path)


def test_experts_whose_gate_and_up_differ_in_type_match_llama_cpp(tmp_path: Path, byte_vocab_path: Path) -> None:
    """F32 gate and Q8_0 up matrices take their activations in two forms, each gathered by expert."""
    rng, q8_0 = np.random.default_rng(5), GGMLQuantizationType.Q8_0
    up = {f"blk.{il}.ffn_up_exps.weight": (quantize((rng.standard_normal((_N, _F, _E)) * _E ** -0.5)
                                                    .astype(np.float32), q8_0), q8_0) for il in range(SMALL.n_layer)}
    path = qwen3moe_model(tmp_path / "mixed.gguf", byte_vocab_path, SMALL, replace=up)
    native, reference = Side("native", path, n_ctx=64), Side("llama.cpp", path, n_ctx=64)
    try:
        tokens = [40, 71, 19, 104, 28, 111, 3, 122, 9, 230, 55, 17, 200, 25, 14, 80]
        ours, theirs = native.eval(tokens, 0), reference.eval(tokens, 0)
        assert cosine(ours, theirs) > 0.99999
        assert native.greedy(tokens, 16)[0] == reference.greedy(tokens, 16)[0]
    finally:
        native.close()
        reference.close()


def test_ollama_s_expert_keys_are_read_as_llama_cpp_reads_them(tmp_path: Path, byte_vocab_path: Path) -> None:
    """Ollama's qwen3moe files (qwen3:30b, qwen3-coder:30b) have norm_top_k_prob and no
    expert_feed_forward_length: the experts' width is feed_forward_length over the experts used."""
    path = qwen3moe_model(tmp_path / "ollama.gguf", byte_vocab_path, SMALL, ollama_keys=True)
    assert native_support(path) is None
    weights = NativeWeights(path)
    try:
        assert (weights.hyper.n_ff, weights.hyper.n_ff_exp) == (_F * SMALL.n_expert_used, _F)
    finally:
        weights.close()


def test_more_experts_used_than_there_are_is_refused(tmp_path: Path, byte_vocab_path: Path) -> None:
    path = qwen3moe_model(tmp_path / "k9.gguf", byte_vocab_path, replace(SMALL, n_expert_used=9))
    assert "qwen3moe.expert_used_count 9 exceeds expert_count 8" in native_support(path)


def test_a_truthful_small_file_is_supported(tmp_path: Path, byte_vocab_path: Path) -> None:
    """The refusals above come from the lying tensor, not from the small shape."""
    assert native_support(qwen3moe_model(tmp_path / "ok.gguf", byte_vocab_path, SMALL)) is None
