"""Reranking through /v1/rerank, /rerank and /api/rerank: scores of small reranker GGUFs of each kind
(BERT and XLM-RoBERTa cross-encoders, a Qwen3-Reranker-style decoder) against llama.cpp's own
rank-pooled output on the same file, the request shapes real clients send, and bad input."""

from __future__ import annotations

import httpx
import llama_cpp
import pytest

from support import encoder_models as em
from support.fixtures import smollm2_gguf

# Our runner packs up to 16 pairs into one decode, with flash attention as llama-server runs rerankers;
# llama.cpp's reference scores each pair alone. llama.cpp's flash attention and matrix products round
# differently per batch shape (measured: a few thousandths); scores are of order one to ten.
TOLERANCE = 1e-2

QUERY = "what is the capital of france"
DOCUMENTS = [
    "the cat sat on the mat",
    "paris is the capital of france",
    "stock markets fell and prices rose",
    "london is a city in england",
    "a dog runs in the garden",
]


def _rerankers() -> dict[str, tuple]:
    """name → (file, how llama.cpp lays out a query/document pair for it)."""
    bert = em.cached("bert-reranker", lambda p: em.bert(p, reranker=True))
    xlmr = em.cached("xlmr-reranker", lambda p: em.xlm_roberta(p, reranker=True))
    qwen3 = em.cached("qwen3-reranker", lambda p: em.qwen3_reranker(p, smollm2_gguf()))
    return {
        # [BOS=CLS] query [EOS=SEP] [SEP] document [EOS=SEP]: the vocabulary adds BOS, EOS and SEP
        "bert-reranker": (bert, lambda tok, q, d: [em.CLS, *tok(q), em.SEP, em.SEP, *tok(d), em.SEP]),
        # <s> query </s> </s> document </s>: XLM-R's pair encoding
        "xlmr-reranker": (xlmr, lambda tok, q, d: [0, *tok(q), 2, 2, *tok(d), 2]),
        # the GGUF's rerank template, filled in
        "qwen3-reranker": (qwen3, lambda tok, q, d: tok(em.RERANK_TEMPLATE.replace("{query}", q)
                                                        .replace("{document}", d), special=True)),
    }


@pytest.fixture(scope="module")
def rerankers(daemon):
    models = _rerankers()
    for name, (path, _) in models.items():
        daemon.create(name, f"FROM {path}")
    return models


class LlamaCppReference:
    """llama.cpp's rank-pooled score of one pair, decoded alone through llama-cpp-python (flash attention on,
    as llama-server's default resolves on CPU)."""

    def __init__(self, path, n_ctx: int = 512) -> None:
        self.llm = llama_cpp.Llama(str(path), embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK,
                                   n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, flash_attn=True, verbose=False)

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=special)

    def score(self, tokens: list[int]) -> float:
        llm = self.llm
        llm._ctx.kv_cache_clear()
        llm._batch.reset()
        llm._batch.add_sequence(tokens, 0, True)
        llm._ctx.decode(llm._batch)
        return llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)[0]


def post(daemon, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{daemon.url}{path}", json=body, timeout=300)


def error(answer: httpx.Response) -> str:
    """The error's sentence: OpenAI's shape on /v1 paths, Ollama's elsewhere."""
    body = answer.json()["error"]
    return body["message"] if isinstance(body, dict) else body


@pytest.mark.parametrize("name", ["bert-reranker", "xlmr-reranker", "qwen3-reranker"])
def test_scores_match_llama_cpp(daemon, rerankers, name):
    path, layout = rerankers[name]
    reference = LlamaCppReference(path)
    pairs = [layout(reference.tokenize, QUERY, d) for d in DOCUMENTS]
    expected = [reference.score(tokens) for tokens in pairs]
    answer = post(daemon, "/v1/rerank", {"model": name, "query": QUERY, "documents": DOCUMENTS})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    results = body["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCUMENTS)))
    assert [r["relevance_score"] for r in results] == sorted((r["relevance_score"] for r in results), reverse=True)
    for r in results:
        assert r["relevance_score"] == pytest.approx(expected[r["index"]], abs=TOLERANCE)
        assert "document" not in r  # return_documents defaults to false, as llama-server's and Cohere's
    tokens = sum(len(p) for p in pairs)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert body["model"] == name and body["object"] == "list" and body["truncated"] == []
    if name == "qwen3-reranker":  # softmax over "yes"/"no": a probability
        assert all(0 < r["relevance_score"] < 1 for r in results)
    assert len({round(r["relevance_score"], 6) for r in results}) == len(DOCUMENTS)  # the documents told apart


def test_show_lists_rerank_capability(daemon, rerankers):
    show = post(daemon, "/api/show", {"model": "bert-reranker"}).json()
    assert show["capabilities"] == ["rerank"]
    assert "rerank" not in post(daemon, "/api/show", {"model": "smollm2:135m"}).json()["capabilities"]


def test_open_webui_external_reranker_shape(daemon, rerankers):
    """Open WebUI's ExternalReranker: POST {model, query, documents, top_n: len(documents)}, then reads
    ``results[].index`` and ``relevance_score`` and puts the scores back in document order."""
    answer = httpx.post(f"{daemon.url}/v1/rerank", headers={"Authorization": "Bearer x"}, timeout=300,
                        json={"model": "xlmr-reranker", "query": QUERY, "documents": DOCUMENTS,
                              "top_n": len(DOCUMENTS)})
    answer.raise_for_status()
    scores = [r["relevance_score"] for r in sorted(answer.json()["results"], key=lambda r: r["index"])]
    assert len(scores) == len(DOCUMENTS)
    again = post(daemon, "/rerank", {"model": "xlmr-reranker", "query": QUERY, "documents": DOCUMENTS}).json()
    assert {r["index"]: r["relevance_score"] for r in again["results"]} == dict(enumerate(scores))


def test_cohere_and_jina_shapes(daemon, rerankers):
    """Cohere's (LangChain's CohereRerank): strings, ``top_n``, ``return_documents``; Jina's (LangChain's
    JinaRerank): the same on /rerank, documents as objects with ``text``; Ollama-style /api/rerank."""
    full = post(daemon, "/v1/rerank", {"model": "bert-reranker", "query": QUERY, "documents": DOCUMENTS}).json()
    best_two = [r["index"] for r in full["results"][:2]]
    cohere = post(daemon, "/v1/rerank", {"model": "bert-reranker", "query": QUERY, "documents": DOCUMENTS,
                                         "top_n": 2, "return_documents": True}).json()
    assert [r["index"] for r in cohere["results"]] == best_two
    assert [r["document"]["text"] for r in cohere["results"]] == [DOCUMENTS[i] for i in best_two]
    jina = post(daemon, "/rerank", {"model": "bert-reranker", "query": QUERY, "top_n": 2,
                                    "documents": [{"text": d} for d in DOCUMENTS]}).json()
    assert [r["index"] for r in jina["results"]] == best_two
    ollama = post(daemon, "/api/rerank", {"model": "bert-reranker", "query": QUERY, "documents": DOCUMENTS}).json()
    assert ollama["results"] == full["results"]


def test_cohere_client(daemon, rerankers):
    """Cohere's SDK pointed at the daemon: v1 (``Client``) and v2 (``ClientV2``, LangChain's CohereRerank)."""
    import cohere

    full = post(daemon, "/v1/rerank", {"model": "xlmr-reranker", "query": QUERY, "documents": DOCUMENTS}).json()
    v1 = cohere.Client(api_key="x", base_url=daemon.url).rerank(
        model="xlmr-reranker", query=QUERY, documents=DOCUMENTS, top_n=3, return_documents=True)
    assert [(r.index, r.relevance_score) for r in v1.results] == [
        (r["index"], r["relevance_score"]) for r in full["results"][:3]]
    assert [r.document.text for r in v1.results] == [DOCUMENTS[r.index] for r in v1.results]
    v2 = cohere.ClientV2(api_key="x", base_url=daemon.url).rerank(
        model="xlmr-reranker", query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [r.index for r in v2.results] == [r["index"] for r in full["results"][:2]]


def test_long_document_cut_to_the_context_and_reported(daemon, rerankers):
    path, layout = rerankers["bert-reranker"]
    reference = LlamaCppReference(path)
    long_document = " ".join(em.WORDS * 8)  # far more than the model's 512 positions
    answer = post(daemon, "/v1/rerank", {"model": "bert-reranker", "query": QUERY,
                                         "documents": ["the cat sat on the mat", long_document]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["truncated"] == [1]
    cut = next(r for r in body["results"] if r["index"] == 1)
    assert cut["truncated"] is True
    assert "truncated" not in next(r for r in body["results"] if r["index"] == 0)
    pair = layout(reference.tokenize, QUERY, long_document)
    fitted = pair[:511] + [em.SEP]  # the document's tail cut, the closing separator kept: 512 tokens
    assert cut["relevance_score"] == pytest.approx(reference.score(fitted), abs=TOLERANCE)
    assert body["usage"]["prompt_tokens"] == 512 + len(layout(reference.tokenize, QUERY, "the cat sat on the mat"))


def test_reranker_gives_no_embeddings(daemon, rerankers):
    answer = post(daemon, "/api/embed", {"model": "bert-reranker", "input": "hello"})
    assert answer.status_code == 400 and "reranker" in error(answer)


@pytest.mark.parametrize(("body", "named"), [
    ({"query": "", "documents": DOCUMENTS}, "query"),
    ({"documents": DOCUMENTS}, "query"),
    ({"query": QUERY, "documents": []}, "documents"),
    ({"query": QUERY}, "documents"),
    ({"query": QUERY, "documents": ["x"] * 100_000}, "LOCALLLM_MAX_MESSAGES"),
    ({"query": QUERY, "documents": ["a cat", 42]}, "documents[1]"),
    ({"query": QUERY, "documents": ["a cat", None]}, "documents[1]"),
    ({"query": QUERY, "documents": DOCUMENTS, "top_n": 0}, "top_n"),
    ({"query": QUERY, "documents": DOCUMENTS, "top_n": len(DOCUMENTS) + 1}, "top_n"),
    ({"query": " ".join(em.WORDS * 8), "documents": DOCUMENTS}, "query"),
])
def test_bad_input_is_a_400_naming_it(daemon, rerankers, body, named):
    answer = post(daemon, "/v1/rerank", {"model": "bert-reranker", **body})
    assert answer.status_code == 400, answer.text
    assert named in error(answer)
    after = post(daemon, "/v1/rerank", {"model": "bert-reranker", "query": QUERY, "documents": DOCUMENTS[:2]})
    assert after.status_code == 200 and len(after.json()["results"]) == 2


def test_chat_model_cannot_rerank(daemon, rerankers):
    answer = post(daemon, "/v1/rerank", {"model": "smollm2:135m", "query": QUERY, "documents": DOCUMENTS})
    assert answer.status_code == 400
    assert "cannot rerank" in error(answer) and "smollm2:135m" in error(answer)
    assert post(daemon, "/api/generate", {"model": "smollm2:135m", "prompt": "hi", "stream": False,
                                          "options": {"num_predict": 2}}).status_code == 200
