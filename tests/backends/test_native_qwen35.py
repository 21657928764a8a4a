"""Qwen 3.5 and 3.6 (qwen35, qwen35moe) on the native engine: llama.cpp's logits, and each sequence's recurrent state.

Tiny hybrids written here (support.arch_models.qwen_hybrid: three Gated DeltaNet layers, then a gated attention
layer; qwen35moe with 4 experts of which 2 a token and a sigmoid-gated shared expert), F32 and quantized by
llama.cpp's own quantizer (Q8_0, and Q4_K_M's mix of Q4_K/Q5_0/Q6_K/Q8_0 on a 256-wide one), against llama.cpp on
the same file. Batch invariance (random batch compositions and chunkings, states saved and restored) is a case of
test_batch_invariance.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from localllm.backends.capabilities import LLAMA_CPP, NATIVE
from localllm.backends.contract import BackendError
from localllm.backends.llama_cpp import Batch, init_backend
from localllm.backends.native import backend as native
from localllm.backends.native.model import native_support
from localllm.backends.native import kernels
from localllm.server.engine_choice import MEASURED_ISAS, choose_engine
from support.arch_models import quantized_qwen_hybrid, qwen_hybrid
from support.gguf_builders import F32, tiny_model
from support.native import against_llama_cpp, assert_matches_llama_cpp

PROMPT = "The lighthouse keeper climbed the stairs every evening and"
BLOCK = 16


@pytest.fixture(scope="module")
def first_steps(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path, qwen35_path: Path,
                qwen35moe_path: Path) -> dict[str, tuple]:
    """Each model's first-step logits in both engines and their greedy continuations."""
    directory = tmp_path_factory.mktemp("qwen35-f32")
    models = {"qwen35-f32": quantized_qwen_hybrid(directory, smollm2_path, "qwen35", F32),
              "qwen35moe-f32": quantized_qwen_hybrid(directory, smollm2_path, "qwen35moe", F32),
              "qwen35-q8_0": qwen35_path, "qwen35moe-q4_k_m": qwen35moe_path}
    return {name: against_llama_cpp(path, PROMPT) for name, path in models.items()}


@pytest.mark.parametrize("name", ["qwen35-f32", "qwen35moe-f32", "qwen35-q8_0", "qwen35moe-q4_k_m"])
def test_first_step_logits_and_greedy_continuation_match_llama_cpp(first_steps, name: str) -> None:
    assert_matches_llama_cpp(*first_steps[name], all_f32=name.endswith("f32"))


def test_qwen35_runs_natively_by_default(qwen35_path: Path, qwen35moe_path: Path) -> None:
    """The prefix cache keeps their recurrent state (tests/server/test_hybrid_prefix_cache.py): the native engine
    gets them unasked where it is measured faster, and whenever asked."""
    for path in (qwen35_path, qwen35moe_path):
        assert native_support(path) is None and native_support(path, by_default=True) is None
        assert choose_engine(path, NATIVE, adapters=False, embedding=False, gpu_layers=0).engine == NATIVE
        assert choose_engine(path, LLAMA_CPP, adapters=False, embedding=False, gpu_layers=0).engine == LLAMA_CPP
        default = choose_engine(path, None, adapters=False, embedding=False, gpu_layers=0)
        assert default.engine == (NATIVE if kernels.isa() in MEASURED_ISAS else LLAMA_CPP), default


def test_multi_token_prediction_layers_are_left_alone_as_llama_cpp_does(tmp_path: Path, smollm2_path: Path) -> None:
    """llama.cpp's converter writes Qwen 3.5's draft (MTP) layer after the trunk (nextn_predict_layers 1); neither
    engine runs it in the main pass, so the file gives the same trunk's logits as one without it."""
    with_mtp = qwen_hybrid(tmp_path / "mtp.gguf", smollm2_path, "qwen35", mtp=True)
    assert native_support(with_mtp) is None
    assert_matches_llama_cpp(*against_llama_cpp(with_mtp, PROMPT, steps=8), all_f32=True)
    plain, drafted = Sequences(qwen_hybrid(tmp_path / "plain.gguf", smollm2_path, "qwen35")), Sequences(with_mtp)
    try:
        assert drafted.model.weights.hyper.n_layer == 4
        assert np.array_equal(drafted.run(0, TOKENS, 0), plain.run(0, TOKENS, 0))
    finally:
        plain.close()
        drafted.close()


class Sequences:
    """A native context of two sequences of up to 128 positions, each its own blocks."""

    def __init__(self, path: Path) -> None:
        init_backend()
        self.model = native.Model(path)
        self.ctx = native.Context(self.model, 16, BLOCK, 128, 2, 64, 1)
        self.ctx.tables[:] = np.arange(16, dtype=np.int32).reshape(2, 8)
        self.batch = Batch(64)

    def run(self, seq: int, tokens: list[int], start: int) -> np.ndarray:
        self.batch.clear()
        for i, token in enumerate(tokens):
            row = self.batch.add(token, start + i, seq, i == len(tokens) - 1)
        assert self.ctx.decode(self.batch) == 0, self.ctx.last_error
        return self.ctx.logits(row).copy()

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


@pytest.fixture
def sequences(qwen35_path: Path):
    s = Sequences(qwen35_path)
    yield s
    s.close()


TOKENS = [40, 71, 19, 104, 28, 111, 3, 122, 9, 230, 55, 17, 200, 25, 14, 80] * 3


def test_a_saved_state_continues_exactly_in_another_sequence(sequences: Sequences) -> None:
    ctx = sequences.ctx
    sequences.run(0, TOKENS[:32], 0)
    state = ctx.read_state(0)
    for block in range(2):  # the KV of positions 0..31, as a prefix cache would share it
        ctx.copy_block(int(ctx.tables[1, block]), int(ctx.tables[0, block]))
    expected = sequences.run(0, TOKENS[32:], 32)
    ctx.write_state(1, state)
    assert np.array_equal(sequences.run(1, TOKENS[32:], 32), expected)


def test_the_state_holds_every_deltanet_layer_and_its_position_count(sequences: Sequences) -> None:
    h = sequences.model.weights.hyper
    s = h.ssm
    channels = 2 * s.n_group * s.d_state + s.dt_rank * s.d_state
    per_layer = 4 * ((s.d_conv - 1) * channels + s.dt_rank * s.d_state * s.d_state)
    assert sequences.ctx.state_bytes == 64 + sum(h.recurrent) * per_layer
    sequences.run(1, TOKENS[:20], 0)
    assert int.from_bytes(sequences.ctx.read_state(1)[:8], "little") == 20


def test_a_token_that_does_not_continue_the_state_is_refused_and_changes_nothing(sequences: Sequences) -> None:
    ctx = sequences.ctx
    expected = sequences.run(0, TOKENS[:21], 0)
    sequences.run(1, TOKENS[:20], 0)
    before = ctx.read_state(1)
    sequences.batch.clear()
    sequences.batch.add(TOKENS[10], 10, 1, True)  # back to position 10: the state cannot be cut back
    assert ctx.decode(sequences.batch) == -7
    assert "position 10 of sequence 1 does not continue its recurrent state, which holds 20 positions" in ctx.last_error
    assert ctx.read_state(1) == before
    assert np.array_equal(sequences.run(1, TOKENS[20:21], 20), expected)


def test_position_zero_and_reset_start_a_sequence_afresh(sequences: Sequences) -> None:
    ctx = sequences.ctx
    fresh = sequences.run(0, TOKENS[:8], 0)
    sequences.run(1, TOKENS[8:30], 0)
    assert np.array_equal(sequences.run(1, TOKENS[:8], 0), fresh)  # position 0 zeroes what the state held
    ctx.reset_state(1)
    assert ctx.read_state(1) == bytes(ctx.state_bytes)
    with pytest.raises(BackendError, match="recurrent state of sequence 1"):
        ctx.write_state(1, b"\0" * 10)
    with pytest.raises(BackendError, match="recurrent state of sequence 2"):
        ctx.read_state(2)


def test_a_transformer_has_no_recurrent_state(tmp_path: Path) -> None:
    init_backend()
    model = native.Model(tiny_model(tmp_path / "tiny.gguf"))
    ctx = native.Context(model, 4, BLOCK, 64, 1, 16, 1)
    try:
        assert ctx.state_bytes == 0
        ctx.reset_state(0)  # nothing to do
        with pytest.raises(BackendError, match="no state"):
            ctx.read_state(0)
    finally:
        ctx.close()
        model.close()



def test_a_convolution_wider_than_the_kernels_run_is_left_to_llama_cpp(tmp_path: Path, smollm2_path: Path) -> None:
    """The convolution's items keep up to 16 taps of their channels (Qwen 3.5 and 3.6 have 4): a wider one is
    refused by name, not run out of bounds."""
    wide = qwen_hybrid(tmp_path / "wide.gguf", smollm2_path, "qwen35", extra_keys={"@ssm.conv_kernel": 17})
    assert "ssm.conv_kernel 17 outside 1..16" in native_support(wide)
