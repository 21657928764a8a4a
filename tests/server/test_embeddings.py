"""Embeddings through /api/embed, /api/embeddings and /v1/embeddings with the real clients."""

from __future__ import annotations

import base64
import math
import struct

import httpx
import ollama
import openai
import pytest

MODEL = "smollm2:135m"


def norm(vector):
    return math.sqrt(sum(v * v for v in vector))


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))


def test_ollama_embed_batch(daemon):
    client = ollama.Client(host=daemon.url)
    answer = client.embed(MODEL, input=["The cat sat on the mat.", "A cat is sitting on a rug.", "Stock markets fell."])
    vectors = answer.embeddings
    assert len(vectors) == 3 and len(vectors[0]) == 576
    assert all(abs(norm(v) - 1) < 1e-3 for v in vectors)
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    assert answer.prompt_eval_count > 0


def test_embedding_is_deterministic_and_batch_independent(daemon):
    client = ollama.Client(host=daemon.url)
    alone = client.embed(MODEL, input="hello world").embeddings[0]
    batched = client.embed(MODEL, input=["something else", "hello world"]).embeddings[1]
    assert cosine(alone, batched) > 0.9999


def test_dimensions_shorten_and_renormalise(daemon):
    vector = ollama.Client(host=daemon.url).embed(MODEL, input="hi", dimensions=64).embeddings[0]
    assert len(vector) == 64 and abs(norm(vector) - 1) < 1e-3


def test_legacy_embeddings(daemon):
    answer = ollama.Client(host=daemon.url).embeddings(MODEL, prompt="hello")
    assert len(answer.embedding) == 576


def test_openai_embeddings(daemon):
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)
    answer = client.embeddings.create(model=MODEL, input=["one", "two"])
    assert [d.index for d in answer.data] == [0, 1]
    assert answer.usage.prompt_tokens > 0
    raw = httpx.post(f"{daemon.url}/v1/embeddings",
                     json={"model": MODEL, "input": "one", "encoding_format": "base64"}).json()
    decoded = struct.unpack("<576f", base64.b64decode(raw["data"][0]["embedding"]))
    assert cosine(decoded, answer.data[0].embedding) > 0.9999
    tokens = client.embeddings.create(model=MODEL, input=[[28, 29, 30]])
    assert len(tokens.data[0].embedding) == 576


def test_overlong_input_truncated_or_refused(daemon):
    long_text = "word " * 6000
    answer = httpx.post(f"{daemon.url}/api/embed", json={"model": MODEL, "input": long_text}, timeout=300)
    assert answer.status_code == 200
    refused = httpx.post(f"{daemon.url}/api/embed", json={"model": MODEL, "input": long_text, "truncate": False},
                         timeout=300)
    assert refused.status_code == 400
    assert "context" in refused.json()["error"] or "long" in refused.json()["error"]


@pytest.mark.parametrize("body", [{"input": ""}, {"input": []}, {"input": ["ok", ""]}])
def test_empty_input_is_400(daemon, body):
    response = httpx.post(f"{daemon.url}/api/embed", json={"model": MODEL, **body})
    assert response.status_code == 400


def test_unknown_model_is_404(daemon):
    response = httpx.post(f"{daemon.url}/v1/embeddings", json={"model": "nope", "input": "x"})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
