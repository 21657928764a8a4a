"""Embeddings through /api/embed, /api/embeddings and /v1/embeddings with the real clients."""

from __future__ import annotations

import base64
import math
import struct
from concurrent.futures import ThreadPoolExecutor

import httpx
import ollama
import openai
import pytest
from langchain_ollama import OllamaEmbeddings

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


PASSAGES = [f"Passage {i}: " + "the quick brown fox jumps over the lazy dog. " * (1 + i % 9) for i in range(64)]


def test_a_vector_is_the_same_alone_in_a_batch_of_64_and_beside_other_clients(daemon):
    """Bit-identical: the runner packs concurrent requests into shared passes, each input pooled alone."""
    client = ollama.Client(host=daemon.url)
    probes = [PASSAGES[0], PASSAGES[5], "hello world"]
    alone = [client.embed(MODEL, input=text).embeddings[0] for text in probes]
    in_64 = client.embed(MODEL, input=PASSAGES).embeddings
    assert in_64[0] == alone[0] and in_64[5] == alone[1]

    def one_client(i: int) -> list[list[float]]:
        if i % 2:
            with httpx.Client(timeout=300) as http:
                answer = http.post(f"{daemon.url}/api/embed", json={"model": MODEL, "input": PASSAGES[i::4] + probes})
            return answer.json()["embeddings"][-3:]
        return ollama.Client(host=daemon.url, timeout=300).embed(MODEL, input=probes + PASSAGES[i::4]).embeddings[:3]

    with ThreadPoolExecutor(8) as pool:
        for vectors in pool.map(one_client, range(8)):
            assert vectors == alone


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
    assert all(abs(norm(d.embedding) - 1) < 1e-6 for d in answer.data)  # unit length, as OpenAI's
    raw = httpx.post(f"{daemon.url}/v1/embeddings",
                     json={"model": MODEL, "input": "one", "encoding_format": "base64"}).json()
    decoded = struct.unpack("<576f", base64.b64decode(raw["data"][0]["embedding"]))
    assert list(decoded) == [struct.unpack("<f", struct.pack("<f", v))[0] for v in answer.data[0].embedding]
    tokens = client.embeddings.create(model=MODEL, input=[[28, 29, 30]])
    assert len(tokens.data[0].embedding) == 576


def test_openai_client_base64_and_dimensions(daemon):
    """The openai package asks for base64 itself and decodes it; dimensions shorten and re-normalise."""
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)
    full = client.embeddings.create(model=MODEL, input="one", encoding_format="float").data[0].embedding
    via_base64 = client.embeddings.create(model=MODEL, input="one").data[0].embedding  # the client's default
    assert via_base64 == pytest.approx(full, abs=1e-7)
    short = client.embeddings.create(model=MODEL, input="one", dimensions=32, encoding_format="float").data[0].embedding
    head_norm = norm(full[:32])
    assert len(short) == 32 and short == pytest.approx([v / head_norm for v in full[:32]], abs=1e-6)


def test_langchain_ollama_embeddings(daemon):
    embeddings = OllamaEmbeddings(model=MODEL, base_url=daemon.url)
    documents = embeddings.embed_documents(["The cat sat on the mat.", "Stock markets fell."])
    query = embeddings.embed_query("The cat sat on the mat.")
    assert len(documents) == 2 and len(query) == 576
    assert query == documents[0]


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
    assert "input" in response.json()["error"] and "empty" in response.json()["error"]


BAD_BODIES = [  # (path, body's fields, what the error must name)
    ("/api/embed", {"input": "x", "dimensions": 100000}, "100000"),
    ("/v1/embeddings", {"input": "x", "dimensions": 100000}, "100000"),
    ("/api/embed", {"input": "x", "dimensions": 0}, "dimensions"),
    ("/v1/embeddings", {"input": "x", "dimensions": -3}, "dimensions"),
    ("/api/embed", {"input": "x", "dimensions": 2.5}, "dimensions"),
    ("/v1/embeddings", {"input": "x", "dimensions": "many"}, "dimensions"),
    ("/api/embed", {"input": 42}, "input"),
    ("/v1/embeddings", {"input": 42}, "input"),
    ("/api/embed", {"input": None}, "input"),
    ("/v1/embeddings", {"input": None}, "input"),
    ("/v1/embeddings", {"input": []}, "input"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, "encoding_format"),
]


@pytest.mark.parametrize(("path", "fields", "named"), BAD_BODIES)
def test_bad_embedding_requests_are_4xx_naming_the_problem(daemon, path, fields, named):
    response = httpx.post(f"{daemon.url}{path}", json={"model": MODEL, **fields}, timeout=300)
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert named in message
    if named == "100000":
        assert "576" in message  # both numbers: asked and the model's
    after = httpx.post(f"{daemon.url}{path}", json={"model": MODEL, "input": "still up"}, timeout=300)
    assert after.status_code == 200  # the runner stays up and the next request works


def test_unknown_model_is_404(daemon):
    response = httpx.post(f"{daemon.url}/v1/embeddings", json={"model": "nope", "input": "x"})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
