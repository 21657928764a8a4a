"""Experts kept on the CPU (llama.cpp's tensor buffer overrides, as ``--n-cpu-moe`` makes them) on the real llama.cpp.

The GPU side is tested on Vulkan's software device (tests/server/test_gpu_offload.py); here, on the CPU build,
what must hold anywhere: each layer's pattern names that layer's expert tensors and nothing else, and llama.cpp
takes the NULL-terminated array (a malformed one would crash it or fail the load) and computes the same logits.
"""

from __future__ import annotations

import re

import llama_cpp as ll
import pytest
from support.moe_models import qwen3moe_model

from localllm.backends.llama_cpp import Batch, Context, Model, Offload, init_backend
from localllm.gguf import read_gguf


@pytest.fixture(scope="module")
def moe_path(smollm2_path, tmp_path_factory):
    return qwen3moe_model(tmp_path_factory.mktemp("moe") / "moe.gguf", smollm2_path, n_layer=12, n_embd=64,
                          n_ff_exp=128)


def test_each_layers_pattern_names_that_layers_experts_alone(moe_path):
    offload = Offload([], [], (), [1, 10])
    patterns = [re.compile(o.pattern.decode()) for o in offload.overrides[:2]]
    assert offload.overrides[2].pattern is None and offload.overrides[2].buft is None  # the terminator
    names = [t.name for t in read_gguf(moe_path).tensors]
    for layer, pattern in zip((1, 10), patterns):
        assert sorted(n for n in names if pattern.search(n)) == [
            f"blk.{layer}.ffn_{part}_exps.weight" for part in ("down", "gate", "up")]  # not blk.11, nor the router
    assert all(o.buft == offload.overrides[0].buft != 0 for o in offload.overrides[:2])  # the CPU's buffer type


def _logits(model: Model, prompt: str) -> list[float]:
    tokens = model.vocab.tokenize(prompt)
    ctx = Context(model, n_ctx=128, n_seq_max=1, n_batch=32, n_threads=2)
    batch = Batch(32)
    try:
        for pos, token in enumerate(tokens):
            batch.add(token, pos, 0, logits=pos == len(tokens) - 1)
        assert ctx.decode(batch) == 0
        row = ll.llama_get_logits_ith(ctx.ptr, len(tokens) - 1)
        return [row[i] for i in range(model.vocab.n_vocab)]
    finally:
        batch.close()
        ctx.close()


def test_llama_cpp_loads_the_overrides_and_computes_the_same_logits(moe_path):
    init_backend()
    plain = Model(moe_path)
    overridden = Model(moe_path, offload=Offload([], [], (), list(range(12))))
    try:
        assert _logits(overridden, "The capital of France is") == _logits(plain, "The capital of France is")
    finally:
        plain.close()
        overridden.close()
