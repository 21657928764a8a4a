"""Our in-place penalties against llama.cpp's own penalties sampler, on the real model: same tokens."""

from __future__ import annotations

from pathlib import Path

import llama_cpp as ll
import pytest

from localllm.backends.llama_cpp import Batch, Context, Model, init_backend
from localllm.options import CompletionOptions
from localllm.runner.sampling import Sampler

PROMPT = "<|im_start|>user\nList the colours of the rainbow, again and again.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def model_and_context(smollm2_path: Path):
    init_backend()
    model = Model(smollm2_path)
    ctx = Context(model, 512, 1, 512, 2)
    yield model, ctx
    ctx.close()
    model.close()


def _llama_cpp_chain(model: Model, o: CompletionOptions) -> ll.llama_sampler_p:
    """The chain llama.cpp's common sampler builds: its penalties sampler first."""
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_penalties(
        model.vocab.n_vocab, o.repeat_last_n, o.repeat_penalty, o.frequency_penalty, o.presence_penalty))
    if o.temperature <= 0:
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
    else:
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(o.top_k))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(o.top_p, 1))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(o.temperature))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(o.seed))
    return chain


def _generate(ctx: Context, prompt: list[int], pick, n: int = 48) -> list[int]:
    batch = Batch(512)
    ctx.seq_rm(0)
    for i, token in enumerate(prompt):
        row = batch.add(token, i, 0, i == len(prompt) - 1)
    assert ctx.decode(batch) == 0
    out = []
    for step in range(n):
        out.append(pick(row))
        batch.clear()
        row = batch.add(out[-1], len(prompt) + step, 0, True)
        assert ctx.decode(batch) == 0
    batch.close()
    return out


@pytest.mark.parametrize("options", [
    {"temperature": 0, "repeat_penalty": 1.3, "repeat_last_n": 16, "frequency_penalty": 1.0, "presence_penalty": 2.5},
    {"temperature": 0, "repeat_penalty": 1.1},  # Ollama's defaults otherwise
    {"temperature": 0, "repeat_penalty": 1.0, "presence_penalty": 5.0, "repeat_last_n": 32},
    {"temperature": 0, "repeat_penalty": 1.0, "frequency_penalty": 3.0},
    {"temperature": 0.9, "top_k": 40, "top_p": 0.9, "seed": 7, "repeat_penalty": 1.5, "repeat_last_n": 8},
])
def test_penalties_pick_what_llama_cpps_sampler_picks(model_and_context, options: dict) -> None:
    model, ctx = model_and_context
    o = CompletionOptions.from_dict(options)
    prompt = model.vocab.tokenize_prompt(PROMPT)
    ours = Sampler(model, o, 512)
    ours.accept_prompt(prompt)
    theirs = _llama_cpp_chain(model, o)
    for token in prompt[-o.repeat_last_n:]:
        ll.llama_sampler_accept(theirs, token)
    try:
        expected = _generate(ctx, prompt, lambda row: ll.llama_sampler_sample(theirs, ctx.ptr, row))
        got = _generate(ctx, prompt, lambda row: ours.sample(ctx, row))
    finally:
        ours.close()
        ll.llama_sampler_free(theirs)
    assert got == expected
    unpenalised = Sampler(model, CompletionOptions.from_dict({**options, "repeat_penalty": 1.0,
                                                              "frequency_penalty": 0, "presence_penalty": 0}), 512)
    try:
        assert _generate(ctx, prompt, lambda row: unpenalised.sample(ctx, row)) != got  # the penalties bite
    finally:
        unpenalised.close()
