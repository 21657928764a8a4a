"""Reranking: ``POST /v1/rerank`` (also ``/rerank``, Cohere's ``/v2/rerank`` and Ollama-style ``/api/rerank``).

The request and answer are llama-server's and Jina's (which Cohere's clients, Open WebUI's external
reranker and LangChain's Jina/Cohere rerankers all speak): ``model``, ``query``, ``documents``
(strings, or objects with ``text``), ``top_n``, ``return_documents`` in; ``results`` of ``index`` and
``relevance_score`` (and ``document: {"text"}`` when asked), best first, and ``usage`` out.

``return_documents`` defaults to false, as in llama-server and Cohere. A document cut to fit the
model's context carries ``"truncated": true`` in its result, and the answer's top-level ``truncated``
lists the indices of every document that was cut (also those ``top_n`` left out).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from .api_types import KeepAlive, RequestBody
from .errors import bad_request
from .limits import check_request
from .state import state_of

router = APIRouter()


class RerankRequest(RequestBody):
    model: str
    query: Any = None  # checked by hand, so that each problem gets a sentence naming it
    documents: Any = None
    top_n: int | None = None
    return_documents: bool = False
    keep_alive: KeepAlive = None
    options: dict[str, Any] | None = None


@router.post("/v1/rerank")
@router.post("/v2/rerank")  # Cohere's v2 path (its ClientV2, LangChain's CohereRerank): the same shape
@router.post("/rerank")
@router.post("/api/rerank")
async def rerank(body: RerankRequest, request: Request) -> dict[str, Any]:
    state = state_of(request)
    query = _query(body.query)
    if not isinstance(body.documents, list) or not body.documents:
        raise bad_request("documents must be a non-empty list of strings (or of objects with a 'text' string)")
    check_request(state.settings.limits, texts=[query], documents=len(body.documents))
    documents = [_document_text(i, item) for i, item in enumerate(body.documents)]
    check_request(state.settings.limits, texts=[query, *documents])
    top_n = _top_n(body.top_n, len(documents))
    job = state.inference.job(body.model, body.options, body.keep_alive)
    answer = await state.inference.rerank(job, query, documents)
    scored = answer["results"]
    order = sorted(range(len(documents)), key=lambda i: -scored[i]["score"])  # stable: ties keep their order
    results = []
    for index in order[:top_n]:
        result: dict[str, Any] = {"index": index, "relevance_score": scored[index]["score"]}
        if body.return_documents:
            result["document"] = {"text": documents[index]}
        if scored[index]["truncated"]:
            result["truncated"] = True
        results.append(result)
    tokens = answer["prompt_eval_count"]
    return {
        "model": body.model,
        "object": "list",
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "truncated": [i for i, s in enumerate(scored) if s["truncated"]],
    }


def _query(value: Any) -> str:
    if not isinstance(value, str):
        raise bad_request("query must be a string" if value is not None else "query is required")
    if not value.strip():
        raise bad_request("query must not be empty")
    return value


def _document_text(index: int, item: Any) -> str:
    """A document's text: the string itself, or an object's ``text`` (Cohere's and Jina's object form)."""
    if isinstance(item, dict) and "text" in item:
        item = item["text"]
    if isinstance(item, str):
        return item
    kind = "null" if item is None else type(item).__name__
    raise bad_request(f"documents[{index}] must be a string or an object with a 'text' string, not {kind}")


def _top_n(value: int | None, count: int) -> int:
    """How many results to return: all by default; 1 to the number of documents when given."""
    if value is None:
        return count
    if not 1 <= value <= count:
        raise bad_request(f"top_n must be between 1 and the number of documents ({count}), got {value}")
    return value
