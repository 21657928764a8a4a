"""native_support: which models the native forward runs exactly, decided from the GGUF header.

The real fixtures and the tiny models of each supported architecture are
supported; a tiny model given one key or tensor that would change the maths
is not, with a reason naming it, and forcing the native engine on it fails
at load the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from localllm.backends.native.lib import NativeError
from localllm.backends.native.model import NativeWeights, native_support
from support.gguf_builders import tiny_model


def test_fixture_models_are_supported(smollm2_path: Path, gemma3_path: Path) -> None:
    assert native_support(smollm2_path) is None
    assert native_support(str(gemma3_path)) is None


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "phi3"])
def test_tiny_models_of_each_architecture_are_supported(tmp_path: Path, arch: str) -> None:
    assert native_support(tiny_model(tmp_path / f"{arch}.gguf", arch=arch)) is None


def _key(add: str, key: str, value: object) -> Callable[[GGUFWriter], None]:
    return lambda w: getattr(w, add)(f"llama.{key}", value)


def _tensor(name: str, *shape: int) -> Callable[[GGUFWriter], None]:
    return lambda w: w.add_tensor(name, np.ones(shape[::-1], dtype=np.float32))


# each would make llama.cpp compute a different model than the native forward does
UNSUPPORTED = {
    "rope_scaling_linear": (_key("add_string", "rope.scaling.type", "linear"), "llama.rope.scaling.type = 'linear'"),
    "rope_scaling_yarn": (_key("add_string", "rope.scaling.type", "yarn"), "llama.rope.scaling.type = 'yarn'"),
    "rope_scaling_factor": (_key("add_float32", "rope.scaling.factor", 4.0), "llama.rope.scaling.factor = 4.0"),
    "attention_softcap": (_key("add_float32", "attn_logit_softcapping", 50.0), "'llama.attn_logit_softcapping'"),
    "final_softcap": (_key("add_float32", "final_logit_softcapping", 30.0), "'llama.final_logit_softcapping'"),
    "alibi": (_key("add_float32", "attention.max_alibi_bias", 8.0), "'llama.attention.max_alibi_bias'"),
    "layer_norm": (_key("add_float32", "attention.layer_norm_epsilon", 1e-5), "'llama.attention.layer_norm_epsilon'"),
    "not_causal": (_key("add_bool", "attention.causal", False), "llama.attention.causal = False"),
    "experts": (_key("add_uint32", "expert_count", 8), "llama.expert_count = 8"),
    "expert_router": (_tensor("blk.0.ffn_gate_inp.weight", 64, 4), "tensor 'blk.0.ffn_gate_inp.weight'"),
    "fused_qkv": (_tensor("blk.0.attn_qkv.weight", 64, 128), "tensor 'blk.0.attn_qkv.weight'"),
}


@pytest.mark.parametrize("case", UNSUPPORTED)
def test_a_key_or_tensor_that_changes_the_maths_is_refused_naming_it(tmp_path: Path, case: str) -> None:
    extra, named = UNSUPPORTED[case]
    path = tiny_model(tmp_path / f"{case}.gguf", extra=extra)
    reason = native_support(path)
    assert reason is not None and named in reason and "not supported by the native engine" in reason
    assert "\n" not in reason
    with pytest.raises(NativeError, match="llama.cpp engine"):  # forcing native fails at load, never runs it
        NativeWeights(path)


@pytest.mark.parametrize(
    "extra",
    [_key("add_string", "rope.scaling.type", "none"), _key("add_float32", "rope.scaling.factor", 1.0),
     _key("add_uint32", "expert_count", 0), _key("add_bool", "attention.causal", True),
     _key("add_uint32", "rope.scaling.original_context_length", 8192)],
    ids=["scaling_none", "factor_1", "no_experts", "causal", "original_context"],
)  # fmt: skip
def test_keys_at_their_neutral_value_are_supported(tmp_path: Path, extra: Callable[[GGUFWriter], None]) -> None:
    path = tiny_model(tmp_path / "neutral.gguf", extra=extra)
    assert native_support(path) is None
    NativeWeights(path).close()


def test_bad_files_give_a_reason_not_an_exception(tmp_path: Path) -> None:
    assert "cannot read" in native_support(tmp_path / "missing.gguf")
    cut = tiny_model(tmp_path / "cut.gguf")
    cut.write_bytes(cut.read_bytes()[:-1000])
    assert "truncated" in native_support(cut)
    wrong_shape = tiny_model(tmp_path / "shape.gguf", q_rows=96)
    assert "'blk.0.attn_q.weight' has shape (64, 96)" in native_support(wrong_shape)


def test_phi3_longrope_is_refused(tmp_path: Path) -> None:
    """Phi-3 128k / Phi-4-mini scale rope by context length (rope_factors_long/short): llama.cpp only."""
    path = tiny_model(tmp_path / "longrope.gguf", arch="phi3", extra=_tensor("rope_factors_long.weight", 8))
    assert "tensor 'rope_factors_long.weight'" in native_support(path)
    path = tiny_model(tmp_path / "attn_factor.gguf", arch="phi3",
                      extra=lambda w: w.add_float32("phi3.rope.scaling.attn_factor", 1.19))
    assert "'phi3.rope.scaling.attn_factor'" in native_support(path)
    sliding = tiny_model(tmp_path / "swa.gguf", arch="phi3",
                         extra=lambda w: w.add_uint32("phi3.attention.sliding_window", 2047))
    assert native_support(sliding) is None  # as llama.cpp, which disables Phi's sliding window
