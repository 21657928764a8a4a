"""gpt-oss on the native engine: llama.cpp's logits on the same file, and what it refuses.

Tiny gpt-oss models written here (support.arch_models.gpt_oss: 3 layers, 8 experts of which 2 or 4 a token,
attention sinks, q/k/v/o biases, router and expert biases, the clamped SwiGLU, even layers sliding over 16
positions, YaRN), F32 and as real files hold them (MXFP4 experts, Q8_0 matrices), against llama.cpp. Prompts
are longer than the window, so the sliding layers drop positions; as in a runner, they keep only that window
(test_native_window_kv.py: bit for bit what keeping every position gives). Batch invariance is a case of
test_batch_invariance.py.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from localllm.backends.native.model import NativeWeights, native_support
from support.arch_models import gpt_oss
from support.native import assert_matches_llama_cpp, cosine, parity_runs

MXFP4 = {"expert": GGMLQuantizationType.MXFP4, "matrix": GGMLQuantizationType.Q8_0}
F32 = {"expert": None}
YARN = (32.0, 4096)  # gpt-oss's: factor 32 over 4,096 original positions
MODELS = {  # id: builder arguments (seed 12: no token's k-th and k+1-th router logits within rounding of a tie)
    "f32-k2": {"n_expert_used": 2, "types": F32, "yarn": YARN},
    "f32-k2-no-yarn": {"n_expert_used": 2, "types": F32},
    "f32-k4-wide-window": {"n_expert_used": 4, "types": F32, "yarn": YARN, "window": 4096},
    "mxfp4-k4": {"n_expert_used": 4, "types": MXFP4, "yarn": YARN},
    "mxfp4-k2": {"n_expert_used": 2, "types": MXFP4, "yarn": YARN},
}  # fmt: skip
TOKENS = [40, 71, 19, 104, 28, 111, 3, 122, 9, 230, 55, 17, 200, 25, 14, 80, 33, 44, 99, 101, 7, 8]  # past 16


@pytest.fixture(scope="module")
def first_steps(tmp_path_factory: pytest.TempPathFactory, byte_vocab_path: Path) -> dict[str, tuple]:
    """Each model's first-step logits in both engines and their greedy continuations (ours, theirs, and
    llama.cpp's logits at each step)."""
    build = functools.partial(gpt_oss, vocab_from=byte_vocab_path, n_layer=3, seed=12, context=8192, n_expert=8)
    return parity_runs(tmp_path_factory.mktemp("gpt-oss"), MODELS, build, TOKENS, window_kv=True)


@pytest.mark.parametrize("name", MODELS)
def test_first_step_logits_and_greedy_continuation_match_llama_cpp(first_steps, name: str) -> None:
    assert_matches_llama_cpp(*first_steps[name], all_f32=MODELS[name]["types"] is F32)


def test_yarn_the_window_and_the_experts_used_change_the_logits(first_steps) -> None:
    """The same weights with and without YaRN, with a window wider than the prompt, and routed to four
    experts a token give other logits (each matching llama.cpp above): none of them is a no-op here."""
    base = first_steps["f32-k2"][0]
    for other in ("f32-k2-no-yarn", "f32-k4-wide-window"):
        assert cosine(base, first_steps[other][0]) < 0.9999


def test_a_gpt_oss_model_is_supported_and_its_mxfp4_experts_repacked(gpt_oss_path: Path) -> None:
    assert native_support(gpt_oss_path) is None
    weights = NativeWeights(gpt_oss_path)
    try:
        h = weights.hyper
        assert (h.n_expert, h.n_expert_used, h.n_ff_exp) == (8, 4, 32)
        assert h.rope is not None and (h.rope.ext_factor, h.rope.freq_scale, h.rope.orig_ctx) == (1.0, 1 / 32, 4096)
        assert weights.decode_bytes < weights.nbytes  # one step reads 4 of each layer's 8 experts
        assert "MXFP4" in weights.layouts and "Q8_0" in weights.layouts
        sliding = [weights.params.layers[il].sliding for il in range(h.n_layer)]
        assert sliding == [1, 0, 1] and weights.params.sliding_window == 16  # llama.cpp: the even layers
    finally:
        weights.close()


def test_rope_scaling_the_native_engine_does_not_compute_is_refused(tmp_path: Path, byte_vocab_path: Path) -> None:
    path = gpt_oss(tmp_path / "longrope.gguf", byte_vocab_path, yarn=YARN)
    data = path.read_bytes().replace(b"yarn", b"lrop", 1)  # the rope.scaling.type value, same length
    path.write_bytes(data)
    reason = native_support(path)
    assert reason == "model metadata gpt-oss.rope.scaling.type = 'lrop' is not supported by the native engine"


def test_a_gpt_oss_without_its_sinks_is_refused_naming_the_tensor(tmp_path: Path, byte_vocab_path: Path) -> None:
    path = gpt_oss(tmp_path / "nosinks.gguf", byte_vocab_path, drop=("blk.1.attn_sinks.weight",))
    assert native_support(path) == "the model has no tensor 'blk.1.attn_sinks.weight', which a gpt-oss model needs"
