"""Rerank of 100 documents: our daemon's ``/v1/rerank`` against ``llama-server --reranking`` on the same file.

The reranker is the tests' BERT cross-encoder at the size of the most used small one
(ms-marco-MiniLM-L-6: 384 wide, 6 layers, feed-forward 1,536, 512 positions; random weights, F32;
``tests/support/encoder_models.py``), cached with the test models. The query and the 100 documents
(20 to 160 words each) are drawn from the builders' vocabulary with a fixed seed. Each round sends
the same request to each side in turn (alternating); a side's figure is its median wall time.
``rerank_ratio`` is llama-server's time ÷ ours (above 1.0: ours is faster).

llama-server gets ``--reranking -np 8`` (eight slots of 512 positions, so it works on eight pairs
at a time), the same thread count, batch and micro-batch of 2,048 tokens. Ours scores one pair a
pass (runner/embed.py: llama.cpp's scores vary with the batch's shape, ours do not), so the two
sides' scores differ by llama-server's batching (``rerank_max_score_difference``).

    python scripts/bench/rerank.py [--rounds 5] [--threads 2] [--json]

``--json`` prints ``rerank_ms``, ``rerank_ms_llama_server``, ``rerank_ratio``, ``rerank_documents``,
``rerank_tokens``, ``rerank_max_score_difference``, ``rerank_round_pairs_ms`` (each round, in the order
its sides ran), ``rounds`` and ``cpu``. ``bench`` is what
``embeddings.py`` calls for its rerank section.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import Daemon, alternating, cpu_name, report, round_rows  # noqa: E402
from llama_server import LlamaServer  # noqa: E402

import httpx  # noqa: E402
from support import encoder_models as em  # noqa: E402

MODEL = "minilm-reranker"
DOCUMENTS = 100


def reranker_file() -> Path:
    """The benchmark's reranker GGUF (built once into the test cache)."""
    return em.cached("bench-minilm-l6-reranker",
                     lambda p: em.bert(p, reranker=True, n_embd=384, n_layer=6, n_ff=1536))


def request(seed: int = 0) -> dict[str, Any]:
    """A query and ``DOCUMENTS`` passages of mixed length from the builders' words."""
    rng = random.Random(seed)
    documents = [" ".join(rng.choices(em.WORDS, k=rng.randint(20, 160))) for _ in range(DOCUMENTS)]
    return {"model": MODEL, "query": "what is the capital of france", "documents": documents,
            "top_n": DOCUMENTS}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed(url: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    httpx.post(url, json=body, timeout=600).raise_for_status()
    return time.perf_counter() - started


def _scores(url: str, body: dict[str, Any]) -> dict[int, float]:
    answer = httpx.post(url, json=body, timeout=600)
    answer.raise_for_status()
    return {r["index"]: r["relevance_score"] for r in answer.json()["results"]}


def bench(threads: int, rounds: int) -> dict[str, Any]:
    """Median times of one 100-document rerank on each side, their ratio, and how far the scores differ."""
    path = reranker_file()
    body = request()
    daemon = Daemon(Path(tempfile.mkdtemp(prefix="localllm-bench-")), LOCALLLM_NUM_THREADS=str(threads)).start()
    server = LlamaServer(path, threads, parallel=8, ctx_per_seq=512, port=_free_port(),
                         extra=["--reranking", "-b", "2048", "-ub", "2048"])
    try:
        daemon.create(MODEL, f"FROM {path}")
        server.wait_ready()
        ours_url, peer_url = f"{daemon.url}/v1/rerank", f"{server.url}/v1/rerank"
        ours, peer = _scores(ours_url, body), _scores(peer_url, body)  # also the warm-up: loads the model
        usage = httpx.post(ours_url, json=body, timeout=600).json()["usage"]["prompt_tokens"]
        times = alternating(rounds, {"ours": lambda: _timed(ours_url, body),
                                     "llama-server": lambda: _timed(peer_url, body)})
    finally:
        server.stop()
        daemon.stop()
    ours_s, peer_s = statistics.median(times["ours"]), statistics.median(times["llama-server"])
    return {
        "rerank_ms": round(ours_s * 1000, 1),
        "rerank_ms_llama_server": round(peer_s * 1000, 1),
        "rerank_ratio": round(peer_s / ours_s, 3),
        "rerank_documents": DOCUMENTS,
        "rerank_tokens": usage,
        "rerank_max_score_difference": max(abs(ours[i] - peer[i]) for i in range(DOCUMENTS)),
        "rerank_round_pairs_ms": times.pairs(lambda seconds: round(seconds * 1000, 1)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    results = {**bench(args.threads, args.rounds), "rounds": args.rounds, "threads": args.threads, "cpu": cpu_name()}
    rows = [(key, value) for key, value in results.items() if key != "rerank_round_pairs_ms"]
    rows += round_rows("ms", results["rerank_round_pairs_ms"])
    report(f"rerank of {DOCUMENTS} documents, {MODEL}, {args.threads} threads", rows, results, args.json)


if __name__ == "__main__":
    main()
