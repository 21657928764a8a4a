"""Encoder embedding models (BERT as all-minilm and mxbai-embed-large ship, nomic-BERT as
nomic-embed-text, XLM-RoBERTa as bge-m3) load and embed through the daemon, pooled as their GGUF's
``pooling_type`` says, and match llama.cpp's own pooled, normalised output on the same file."""

from __future__ import annotations

import math

import httpx
import llama_cpp
import pytest

from support import encoder_models as em

# Our runner embeds the texts of a request in one batch, llama.cpp's reference each text alone;
# batched and single matrix products round differently (measured: 2e-5 at most). Vectors are unit length.
TOLERANCE = 1e-4

TEXTS = ["the cat sat on the mat", "Paris is the capital of France.", "stock markets fell", "a dog"]

ENCODERS = {  # name → (builder, pooling llama.cpp reads from the GGUF)
    "bert-mean": (lambda p: em.bert(p), llama_cpp.LLAMA_POOLING_TYPE_MEAN),
    "bert-cls": (lambda p: em.bert(p, pooling=em.PoolingType.CLS), llama_cpp.LLAMA_POOLING_TYPE_CLS),
    "nomic-bert": (lambda p: em.nomic_bert(p), llama_cpp.LLAMA_POOLING_TYPE_MEAN),
    "xlm-roberta": (lambda p: em.xlm_roberta(p), llama_cpp.LLAMA_POOLING_TYPE_CLS),
}


@pytest.fixture(scope="module")
def encoders(daemon):
    paths = {name: em.cached(name, build) for name, (build, _) in ENCODERS.items()}
    for name, path in paths.items():
        daemon.create(name, f"FROM {path}")
    return paths


@pytest.mark.parametrize("name", list(ENCODERS))
def test_embeddings_match_llama_cpp(daemon, encoders, name):
    reference = llama_cpp.Llama(str(encoders[name]), embedding=True, n_ctx=512, verbose=False)
    assert reference.pooling_type() == ENCODERS[name][1]  # the pooling the file names, as llama.cpp reads it
    expected = [reference.embed(text, normalize=True) for text in TEXTS]
    answer = httpx.post(f"{daemon.url}/api/embed", json={"model": name, "input": TEXTS}, timeout=300)
    assert answer.status_code == 200, answer.text
    vectors = answer.json()["embeddings"]
    assert [len(v) for v in vectors] == [64] * len(TEXTS)
    for got, want in zip(vectors, expected):
        assert math.sqrt(sum(x * x for x in got)) == pytest.approx(1.0, abs=1e-5)
        assert got == pytest.approx(want, abs=TOLERANCE)
    assert max(abs(a - b) for a, b in zip(vectors[0], vectors[1])) > 0.01  # texts told apart
    show = httpx.post(f"{daemon.url}/api/show", json={"model": name}).json()
    assert show["capabilities"] == ["embedding"]
