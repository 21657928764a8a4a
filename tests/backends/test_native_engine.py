"""The native engine against llama.cpp on the fixture models, its KV operations, and bad input.

Parity is a stated tolerance, not bit for bit (batch invariance is the promise, see
test_batch_invariance.py): first-step logits cosine >= 0.995 with llama.cpp, and greedy
continuations that agree for 64 tokens, a divergence allowed only where llama.cpp's top two logits
are within 0.25 of each other (attention sums in its own tiles and segments, not in ggml's lanes, so
near ties may fall either way on any ISA).

The native engine repacks its matrices at load (kernels/repack.c) and sums each row in that layout's
order, where llama.cpp sums in ggml's (or in its own repacked layouts'). The integers are the same
and the float roundings differ in the last place, yet that moves a few 8-bit activation codes by one
step, and the logits follow. Measured on AMD EPYC family 26 (AVX-512 VNNI): first-step cosines
0.9988-0.9998 on SmolLM2 (1.0, bit for bit, when it kept ggml's order), 0.9994-0.9998 on Gemma 3,
greedy divergences only where llama.cpp's top two logits were at most 0.043 apart. On an AMD EPYC
(Zen 3, AVX2 only) llama.cpp's forward pass rounds differently again (its own batched and one-token
logits differ by as much, cosine 0.99967): measured first-step cosines 0.99795-1.0 and divergences
where llama.cpp's top two logits were up to 0.161 apart. On another Zen 3 (family 25, model 1, llama.cpp
built there with -march=native) SmolLM2's "Once upon a time..." prompt measured 0.99551, at this commit
and at b7b1725 alike, and 0.99466 with our kernels forced to the scalar reference level: the gap is
llama.cpp's rounding on that CPU, not one of our SIMD paths, hence 0.995.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType

from localllm.backends.native import kernels
from localllm.backends.native.backend import BackendError, Context, Model
from localllm.backends.native.lib import NativeError
from localllm.backends.native.model import NativeWeights
from support.gguf_builders import tiny_model
from support.native import MAX_GAP, MIN_COSINE, Side, cosine, top2_gap

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little dragon who",
    "def fibonacci(n):\n    ",
    "In 1492, Columbus",
]


@pytest.fixture(scope="module", params=["smollm2_path", "gemma3_path"])
def sides(request: pytest.FixtureRequest):
    path = request.getfixturevalue(request.param)
    native, reference = Side("native", path), Side("llama.cpp", path)
    yield native, reference
    native.close()
    reference.close()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_first_step_logits_match_llama_cpp(sides, prompt: str) -> None:
    native, reference = sides
    tokens = reference.model.vocab.tokenize_prompt(prompt)
    native.reset()
    reference.reset()
    assert cosine(native.eval(tokens, 0), reference.eval(tokens, 0)) >= MIN_COSINE


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_continuation_agrees_with_llama_cpp(sides, prompt: str) -> None:
    native, reference = sides
    tokens = reference.model.vocab.tokenize_prompt(prompt)
    ours, _ = native.greedy(tokens, 64)
    theirs, their_logits = reference.greedy(tokens, 64)
    first = next((i for i in range(64) if ours[i] != theirs[i]), None)
    if first is not None:
        gap = top2_gap(their_logits[first])
        assert gap < MAX_GAP, f"diverged at token {first} where llama.cpp's top two logits differ by {gap:.3f}"


def assert_tiny_model_matches_llama_cpp(path: Path) -> np.ndarray:
    """A tiny F32 model's prompt logits and greedy continuation in both engines, which differ only
    by the order of float sums and the half-precision KV cache; returns the native prompt logits."""
    native, reference = Side("native", path, n_ctx=64), Side("llama.cpp", path, n_ctx=64)
    try:
        tokens = [1, 7, 19, 4, 28, 11, 3, 22, 9, 30, 5, 17, 2, 25, 14, 8]
        ours, theirs = native.eval(tokens, 0), reference.eval(tokens, 0)
        assert cosine(ours, theirs) > 0.99999
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-3 * np.abs(theirs).max())
        assert native.greedy(tokens, 24)[0] == reference.greedy(tokens, 24)[0]
        return ours
    finally:
        native.close()
        reference.close()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "phi3"])
def test_tiny_architectures_match_llama_cpp(tmp_path: Path, arch: str) -> None:
    """llama, qwen2 (q/k/v biases, NeoX rotation), qwen3 (q/k norms) and phi3 (fused attn_qkv and
    gate+up, Q scaled before the dot product)."""
    assert_tiny_model_matches_llama_cpp(tiny_model(tmp_path / f"{arch}.gguf", arch))


def test_heads_wider_than_embedding_over_heads_match_llama_cpp(tmp_path: Path) -> None:
    """Mistral Nemo / Small's llama shape: attention.key_length 32 with a 64-wide embedding and 4 heads."""
    assert_tiny_model_matches_llama_cpp(tiny_model(tmp_path / "wide_heads.gguf", head_dim=32))


def test_llama3_rope_freqs_match_llama_cpp(tmp_path: Path) -> None:
    """Llama 3.x's rope scaling: each rotary pair's angle divided by its rope_freqs entry."""
    factors = np.array([1.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0], dtype=np.float32)  # the low frequencies stretched
    scaled = tiny_model(tmp_path / "llama3.gguf", extra=lambda w: w.add_tensor("rope_freqs.weight", factors))
    with_factors = assert_tiny_model_matches_llama_cpp(scaled)
    without = assert_tiny_model_matches_llama_cpp(tiny_model(tmp_path / "plain.gguf"))
    assert cosine(with_factors, without) < 0.9999  # the factors are applied, not skipped


@pytest.mark.parametrize("isa", kernels.available_isas())
def test_mxfp4_ffn_weights_match_llama_cpp(tmp_path: Path, isa: str) -> None:
    """gpt-oss's expert format in a dense model: FFN matrices in MXFP4 (power-of-two scale per 32 weights, E2M1
    codes), dotted against 8-bit activations as ggml does; repacked at load where the level has the kernels,
    read in place through the per-row ones where it has not (scalar)."""
    mxfp4 = {name: GGMLQuantizationType.MXFP4 for name in ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")}
    path = tiny_model(tmp_path / "mxfp4.gguf", n_layer=2, quantize=mxfp4)
    best = kernels.isa()
    assert kernels.set_isa(isa) == isa
    try:
        weights = NativeWeights(path)
        try:
            repacked = kernels.repacked_type(int(GGMLQuantizationType.MXFP4), 64, 128) != int(GGMLQuantizationType.MXFP4)
            assert weights.layouts["MXFP4"] == ("MXFP4_R16" if repacked else "GGUF in place") + " (6 matrices)"
        finally:
            weights.close()
        assert_tiny_model_matches_llama_cpp(path)
    finally:
        kernels.set_isa(best)


def test_batched_sequences_match_each_alone_bit_for_bit(smollm2_path: Path) -> None:
    """Two sequences prefilled in one batch get exactly the logits each gets alone."""
    side = Side("native", smollm2_path, n_seq=2)
    try:
        a = side.model.vocab.tokenize_prompt("The sky is")
        b = side.model.vocab.tokenize_prompt("Fish live in the")
        alone_a = side.eval(a, 0, seq=0)
        alone_b = side.eval(b, 0, seq=1)
        batch = side.batch
        batch.clear()
        for i, t in enumerate(a):
            row_a = batch.add(t, i, 0, i == len(a) - 1)
        for i, t in enumerate(b):
            row_b = batch.add(t, i, 1, i == len(b) - 1)
        assert side.ctx.decode(batch) == 0
        assert np.array_equal(side.logits(row_a), alone_a)
        assert np.array_equal(side.logits(row_b), alone_b)
    finally:
        side.close()


def test_kv_block_operations(smollm2_path: Path) -> None:
    """A copied block, or one written back from its bytes, continues a sequence bit for bit."""
    side = Side("native", smollm2_path, n_ctx=64, n_seq=2)
    ctx = side.ctx
    try:
        prompt = side.model.vocab.tokenize_prompt("A list of fruits: apple, banana, cherry, grape, mango, peach, plum,")
        assert 17 < len(prompt) < 32
        full = side.eval(prompt, 0)
        ctx.copy_block(int(ctx.tables[1, 0]), int(ctx.tables[0, 0]))  # sequence 1 gets block 0's 16 positions
        assert np.array_equal(side.eval(prompt[16:], 16, seq=1), full)
        saved = ctx.read_block(int(ctx.tables[0, 1]))
        side.eval(prompt[:20], 0)  # overwrite positions 16..19 with what they held: nothing changes
        side.eval([5, 6, 7, 8], 16)  # now other tokens there
        ctx.write_block(int(ctx.tables[0, 1]), saved)
        assert np.array_equal(side.eval(prompt[-1:], len(prompt) - 1), full)
        with pytest.raises(BackendError, match="no such block"):
            ctx.copy_block(0, ctx.n_blocks)
        with pytest.raises(BackendError, match="cannot write KV block"):
            ctx.write_block(0, saved[:-1])
    finally:
        side.close()


def test_faulting_the_pool_in_keeps_what_its_blocks_hold(smollm2_path: Path) -> None:
    """The idle engine's chore (populate_next, slice by slice to the pool's end) leaves written blocks as
    they were, and the rest of the pool zero."""
    side = Side("native", smollm2_path, n_ctx=64, n_seq=2)
    ctx = side.ctx
    try:
        prompt = side.model.vocab.tokenize_prompt("A list of fruits: apple, banana, cherry, grape, mango, peach, plum,")
        full = side.eval(prompt, 0)
        written = [ctx.read_block(int(block)) for block in ctx.tables[0, :2]]
        while ctx.populate_next():
            pass
        assert not ctx.populate_next()  # done, and stays done
        assert [ctx.read_block(int(block)) for block in ctx.tables[0, :2]] == written
        assert not any(ctx.read_block(int(ctx.tables[1, 0])))  # a block nobody wrote: zero pages
        assert np.array_equal(side.eval(prompt[-1:], len(prompt) - 1), full)
    finally:
        side.close()


@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_a_q8_0_cache_stays_close_to_f16_in_about_half_the_bytes(request: pytest.FixtureRequest, model: str) -> None:
    """The same prompt over 700 positions (two attention segments) with either cache."""
    path = request.getfixturevalue(model)
    f16, q8 = Side("native", path, n_ctx=768), Side("native", path, n_ctx=768, kv_cache_type="q8_0")
    try:
        assert q8.ctx.block_bytes * 64 == f16.ctx.block_bytes * 34  # ggml's Q8_0: 34 bytes for 32 values
        text = "A lighthouse keeper counts the ships that pass his rock each night and writes their names. " * 60
        tokens = f16.model.vocab.tokenize_prompt(text)[:700]
        for side in (f16, q8):
            side.eval(tokens[:400], 0)
        ours, theirs = q8.eval(tokens[400:], 400), f16.eval(tokens[400:], 400)
        assert cosine(ours, theirs) >= 0.99
        for i in range(4):  # greedy steps agree
            assert np.argmax(ours) == np.argmax(theirs)
            token = int(np.argmax(ours))
            ours, theirs = q8.eval([token], 700 + i), f16.eval([token], 700 + i)
            assert cosine(ours, theirs) >= 0.99
    finally:
        f16.close()
        q8.close()


def test_kv_cache_types_the_native_engine_cannot_keep_are_refused(tmp_path: Path, smollm2_path: Path) -> None:
    model = Model(smollm2_path)
    narrow = Model(tiny_model(tmp_path / "narrow.gguf", head_dim=16))
    try:
        with pytest.raises(BackendError, match="f16 or q8_0, not 'q4_0'"):
            Context(model, 8, 16, 64, 1, 64, 1, "q4_0")
        with pytest.raises(BackendError, match="multiple of 32 dimensions; this model's have 16"):
            Context(narrow, 8, 16, 64, 1, 64, 1, "q8_0")
    finally:
        model.close()
        narrow.close()


def test_decode_refuses_bad_batches(smollm2_path: Path) -> None:
    side = Side("native", smollm2_path, n_ctx=32)
    try:
        side.batch.clear()
        side.batch.add(10**6, 0, 0, True)
        assert side.ctx.decode(side.batch) < 0
        assert "token id 1000000 out of range" in side.ctx.last_error
        side.batch.clear()
        side.batch.add(1, 0, 5, True)
        assert side.ctx.decode(side.batch) < 0
        assert "sequence id 5" in side.ctx.last_error
        side.batch.clear()
        side.batch.add(1, 32, 0, True)
        assert side.ctx.decode(side.batch) < 0
        assert "position 32 outside [0, 32)" in side.ctx.last_error
        side.ctx.tables[0, 1] = 99
        side.batch.clear()
        side.batch.add(1, 16, 0, True)
        assert side.ctx.decode(side.batch) < 0
        assert "block table entry 99 names no block" in side.ctx.last_error
        with pytest.raises(BackendError, match="no logits"):
            side.ctx.logits(0)
    finally:
        side.close()


# ---- bad files ---------------------------------------------------------------


def test_a_well_formed_tiny_model_loads(tmp_path: Path) -> None:
    weights = NativeWeights(tiny_model(tmp_path / "ok.gguf"))
    assert weights.hyper.n_embd == 64 and weights.hyper.head_dim == 16
    weights.close()


def test_tensor_shape_that_does_not_match_metadata(tmp_path: Path) -> None:
    with pytest.raises(NativeError, match=r"'blk.0.attn_q.weight' has shape \(64, 96\).*implies \(64, 64\)"):
        NativeWeights(tiny_model(tmp_path / "bad.gguf", q_rows=96))


def test_truncated_file(tmp_path: Path) -> None:
    path = tiny_model(tmp_path / "cut.gguf")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    with pytest.raises(NativeError, match="truncated"):
        NativeWeights(path)


def _type_at(data: bytes, tensor: str) -> int:
    """Where a tensor's type id lies in the header (name, n_dims, dims..., type, offset)."""
    name = tensor.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    return at + 4 + 8 * struct.unpack_from("<I", data, at)[0]


def _retype(path: Path, tensor: str, ggml_type: int) -> None:
    """Overwrite a tensor's type id in the header."""
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, _type_at(data, tensor), ggml_type)
    path.write_bytes(bytes(data))


def test_tensor_offset_past_the_end_is_refused_at_load(tmp_path: Path) -> None:
    """A corrupted header (one tensor's data moved past the file's end) fails the load, not a decode."""
    path = tiny_model(tmp_path / "moved.gguf")
    data = bytearray(path.read_bytes())
    offset_at = _type_at(data, "blk.0.ffn_down.weight") + 4
    struct.pack_into("<Q", data, offset_at, struct.unpack_from("<Q", data, offset_at)[0] + 32)
    path.write_bytes(bytes(data))
    with pytest.raises(BackendError, match=r"'blk.0.ffn_down.weight' .* extends beyond the end of the file"):
        Model(path)


def test_unknown_tensor_type(tmp_path: Path) -> None:
    path = tiny_model(tmp_path / "unknown.gguf")
    _retype(path, "blk.0.ffn_up.weight", 99)
    with pytest.raises(NativeError, match="unknown ggml type 99"):
        NativeWeights(path)


def test_type_the_kernels_do_not_have_suggests_llama_cpp(tmp_path: Path) -> None:
    path = tiny_model(tmp_path / "iq.gguf")
    _retype(path, "blk.0.attn_norm.weight", 24)  # I8: a real ggml type, same byte size per element
    with pytest.raises(NativeError, match=r"type I8.*not supported by the native engine.*llama.cpp engine"):
        NativeWeights(path)


def test_unsupported_architecture_suggests_llama_cpp(tmp_path: Path) -> None:
    path = tiny_model(tmp_path / "arch.gguf")
    data = path.read_bytes().replace(b"\x05\x00\x00\x00\x00\x00\x00\x00llama", b"\x05\x00\x00\x00\x00\x00\x00\x00mamba", 1)
    path.write_bytes(data)
    with pytest.raises(NativeError, match="architecture 'mamba' is not supported.*llama.cpp engine"):
        NativeWeights(path)


def test_backend_model_reports_bad_files_as_backend_errors(tmp_path: Path, smollm2_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(5 << 20))
    with pytest.raises(BackendError, match="truncated"):
        Model(path)
    with pytest.raises(BackendError, match="adapters are not supported"):
        Model(smollm2_path, adapters=[path])


def test_native_engine_through_the_daemon(daemon, smollm2_path: Path) -> None:
    """``PARAMETER engine native`` runs a model on our kernels behind the same API."""
    import httpx

    daemon.create("native-smollm2", f"FROM {smollm2_path}\nPARAMETER engine native\n")
    body = {"model": "native-smollm2", "messages": [{"role": "user", "content": "Name a colour."}], "stream": False,
            "options": {"temperature": 0, "num_predict": 12}}
    answer = httpx.post(f"{daemon.url}/api/chat", json=body, timeout=300).json()
    assert answer["eval_count"] > 0 and answer["message"]["content"].strip()
    constrained = httpx.post(f"{daemon.url}/api/chat", json={**body, "format": "json",
                                                             "options": {"num_predict": 30}}, timeout=300).json()
    assert constrained["message"]["content"].lstrip().startswith("{")
    bad = httpx.post(f"{daemon.url}/api/chat", json={**body, "options": {"engine": "turbo"}}, timeout=30)
    assert bad.status_code == 400 and "engine" in bad.json()["error"]
