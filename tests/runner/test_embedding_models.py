"""Decoder embedding models (SmolLM2-style llama, Qwen3-Embedding, embeddinggemma) written by the tests,
embedded by a real ``--embedding`` runner on the engine the daemon would pick, against llama.cpp's own
pooled output of the same file (llama-cpp-python, ``Llama(embedding=True)``).

Tolerance: 1e-5 per component of the unit vector.  The native forward and llama.cpp's differ only in
float rounding (measured: at most 2.1e-7 on these models); a wrong pooling, mask or projection
differs by more than 1e-2."""

from __future__ import annotations

import math
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from support import encoder_models
from support.gguf_builders import embedding_model
from support.runner import running_runner, runner_threads

from localllm.backends.pooling import Pooling, model_pooling
from localllm.server.engine_choice import choose_engine

TEXTS = ["hello world", "The cat sat on the mat, and then it slept all afternoon long.", "Stock markets fell."]
TOLERANCE = 1e-5

# name -> (arch, pooling in the metadata, dense projections, the engine that runs it)
MODELS = {
    "smollm2-style": ("llama", None, False, "native"),
    "qwen3-embedding": ("qwen3", Pooling.LAST, False, "native"),
    "embeddinggemma": ("gemma-embedding", Pooling.MEAN, True, "llama.cpp"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm2_path: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("embedding-models")
    return {name: embedding_model(root / f"{name}.gguf", arch, smollm2_path, pooling, dense)
            for name, (arch, pooling, dense, _) in MODELS.items()}


def llama_cpp_vectors(path: Path, texts: list[str]) -> list[np.ndarray]:
    """llama.cpp's pooled, normalised vectors of ``texts``, one call each."""
    llm = llama_cpp.Llama(str(path), embedding=True, pooling_type=int(model_pooling(path)), n_ctx=256,
                          n_threads=2, verbose=False)
    try:
        return [np.array(llm.embed(text, normalize=True)) for text in texts]
    finally:
        llm.close()


def runner_vectors(path: Path, engine: str, texts: list[str]) -> list[np.ndarray]:
    with running_runner(path, "--embedding", "--engine", engine, "--ctx", "256",
                        "--threads", runner_threads()) as r, r.client() as c:
        answer = c.post("/embedding", json={"content": texts})
        assert answer.status_code == 200, answer.text
        return [np.array(v) for v in answer.json()["embeddings"]]


@pytest.mark.parametrize("name", list(MODELS))
def test_vectors_match_llama_cpp(models: dict[str, Path], name: str) -> None:
    path, engine = models[name], MODELS[name][3]
    choice = choose_engine(path, forced=None, adapters=False, embedding=True, gpu_layers=0)
    assert choice.engine == engine, choice.reason
    ours = runner_vectors(path, engine, TEXTS)
    for text, mine, theirs in zip(TEXTS, ours, llama_cpp_vectors(path, TEXTS)):
        assert len(mine) == 64 and math.isclose(float(mine @ mine), 1.0, rel_tol=1e-6)
        assert np.abs(mine - theirs).max() < TOLERANCE, (name, text)


def test_pooling_and_projections_change_the_vector(models: dict[str, Path], tmp_path: Path,
                                                   smollm2_path: Path) -> None:
    """The checks above can fail: the same weights pooled otherwise, or without the dense projections,
    give vectors far outside the tolerance."""
    mean_qwen3 = embedding_model(tmp_path / "qwen3-mean.gguf", "qwen3", smollm2_path, Pooling.MEAN)
    plain_gemma = embedding_model(tmp_path / "gemma-plain.gguf", "gemma-embedding", smollm2_path, Pooling.MEAN)
    last = runner_vectors(models["qwen3-embedding"], "native", TEXTS[1:2])[0]
    mean = runner_vectors(mean_qwen3, "native", TEXTS[1:2])[0]
    assert np.abs(last - mean).max() > 1e-2
    dense = runner_vectors(models["embeddinggemma"], "llama.cpp", TEXTS[1:2])[0]
    plain = runner_vectors(plain_gemma, "llama.cpp", TEXTS[1:2])[0]
    assert np.abs(dense - plain).max() > 1e-2


def test_rank_pooling_goes_to_llama_cpp(tmp_path: Path, smollm2_path: Path) -> None:
    """A pooling the native engine does not do is llama.cpp's, said in the reason."""
    reranker = embedding_model(tmp_path / "rank.gguf", "qwen3", smollm2_path, Pooling.RANK)
    choice = choose_engine(reranker, forced=None, adapters=False, embedding=True, gpu_layers=0)
    assert choice.engine == "llama.cpp" and "rank pooling" in choice.reason


def test_vectors_do_not_depend_on_the_pass(models: dict[str, Path]) -> None:
    """On each engine, a text's vector is bit-identical alone, among 40 others, and in another order."""
    others = [f"passage {i} " * (i % 7 + 1) for i in range(40)]
    for name in ("smollm2-style", "embeddinggemma"):
        path, engine = models[name], MODELS[name][3]
        with running_runner(path, "--embedding", "--engine", engine, "--ctx", "256",
                            "--threads", runner_threads()) as r, r.client() as c:
            alone = [c.post("/embedding", json={"content": [t]}).json()["embeddings"][0] for t in TEXTS]
            mixed = c.post("/embedding", json={"content": TEXTS + others}).json()["embeddings"][:3]
            backwards = c.post("/embedding", json={"content": (TEXTS + others)[::-1]}).json()["embeddings"][-3:]
        assert alone == mixed == backwards[::-1], name


def test_a_reranker_shares_the_path_and_answers_no_documents_at_once(tmp_path: Path) -> None:
    """A reranker's pairs go through the same passes (llama.cpp, one pair a pass: scores alone equal scores
    among others); a call with no documents is answered, not left waiting for a pass that never comes."""
    reranker = encoder_models.bert(tmp_path / "reranker.gguf", reranker=True)
    documents = ["a cat on a mat", "stock markets fell", "the cat sat"]
    with running_runner(reranker, "--embedding", "--engine", "llama.cpp", "--ctx", "128",
                        "--threads", runner_threads()) as r, r.client(timeout=60) as c:
        assert c.post("/rerank", json={"query": "cat", "documents": []}).json()["results"] == []
        together = [d["score"] for d in c.post("/rerank", json={"query": "cat", "documents": documents}).json()["results"]]
        alone = [c.post("/rerank", json={"query": "cat", "documents": [d]}).json()["results"][0]["score"]
                 for d in documents]
    assert together == alone
