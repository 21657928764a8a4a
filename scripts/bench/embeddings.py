"""Embedding throughput with SmolLM2-135M: requests of several clients packed into shared passes.

    python scripts/bench/embeddings.py [--json] [--rounds 3] [--threads 2] [--clients 8] [--passages 64]
        [--only embeddings,rerank]

A RAG indexer's load: ``--clients`` clients at once, each embedding its
``--passages`` passages of mixed length (10 to 150 words, fixed by a seed), one
request per passage, as an indexing loop sends them. Measured in
``--rounds`` alternating rounds, medians of passages per second:

- **ours, concurrent**: our daemon's ``/api/embed`` (the embedding runner on
  the native engine, which packs concurrent requests into shared passes);
- **llama-server**: ``llama-server --embedding --pooling mean -np 8`` (built
  once from the llama.cpp in llama-cpp-python's sdist, see llama_server.py),
  its ``/v1/embeddings``, the same clients and passages, threads and context;
- **ours, one at a time**: the same passages, one request after another.

``embed_throughput_ratio_c8`` is ours concurrent ÷ llama-server (target >= 1.5),
``embed_batching_gain`` ours concurrent ÷ ours one at a time (target >= 2.0).
The rerank section is scripts/bench/rerank.py's (100 documents against
``llama-server --reranking``): ``rerank_ratio`` (target >= 1.0) and its details.
The sides run one after the other, never at once (they would share the CPU).
``--json`` puts each key at the top level, with ``cpu`` naming the processor.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from common import MODEL, alternating, cpu_name, fixtures, report, round_rows, start_daemon  # noqa: E402
from llama_server import LlamaServer  # noqa: E402
from support.daemon import free_port  # noqa: E402

WORDS = ("local models embed documents so that a question finds the passages that answer it; the index "
         "holds one vector per passage, and the runner computes them in batches while clients wait").split()


def passages(clients: int, per_client: int, seed: int = 28) -> list[list[str]]:
    """Each client's passages: 10 to 150 words of the fixed text, lengths drawn from ``seed``."""
    rng = random.Random(seed)
    return [[" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 150))) for _ in range(per_client)]
            for _ in range(clients)]


def passages_per_second(work: list[list[str]], embed: Callable[[httpx.Client, str], None], concurrent: bool) -> float:
    """Every client's passages embedded one request each, the clients at once (or one after another)."""
    def one_client(texts: list[str]) -> None:
        with httpx.Client(timeout=600) as client:
            for text in texts:
                embed(client, text)

    started = time.perf_counter()
    if concurrent:
        with ThreadPoolExecutor(len(work)) as pool:
            list(pool.map(one_client, work))
    else:
        for texts in work:
            one_client(texts)
    return sum(map(len, work)) / (time.perf_counter() - started)


def ours(url: str) -> Callable[[httpx.Client, str], None]:
    def embed(client: httpx.Client, text: str) -> None:
        response = client.post(f"{url}/api/embed", json={"model": MODEL, "input": text})
        response.raise_for_status()
    return embed


def llama_servers(url: str) -> Callable[[httpx.Client, str], None]:
    def embed(client: httpx.Client, text: str) -> None:
        response = client.post(f"{url}/v1/embeddings", json={"input": text})
        response.raise_for_status()
    return embed


def embeddings(args: argparse.Namespace) -> dict:
    """The embedding sections' figures and keys."""
    work = passages(args.clients, args.passages)
    daemon = start_daemon(LOCALLLM_NUM_THREADS=str(args.threads), LOCALLLM_KEEP_ALIVE="2h")  # loaded across rounds
    peer = LlamaServer(fixtures.smollm2_gguf(), args.threads, parallel=args.clients, ctx_per_seq=2048,
                       port=free_port(), extra=["--embedding", "--pooling", "mean", "-ub", "2048", "-b", "2048"])
    try:
        peer.wait_ready()
        warm = [texts[:2] for texts in work]  # loads our runner, touches both sides' weights
        passages_per_second(warm, ours(daemon.url), concurrent=True)
        passages_per_second(warm, llama_servers(peer.url), concurrent=True)
        samples = alternating(args.rounds, {
            "ours": lambda: passages_per_second(work, ours(daemon.url), concurrent=True),
            "llama_server": lambda: passages_per_second(work, llama_servers(peer.url), concurrent=True),
            "ours_one_at_a_time": lambda: passages_per_second(work, ours(daemon.url), concurrent=False),
        })
        engine = next(m["engine"] for m in httpx.get(f"{daemon.url}/api/ps").json()["models"])
    finally:
        peer.stop()
        daemon.stop()
    median = {side: statistics.median(values) for side, values in samples.items()}
    return {
        "embed_throughput_ratio_c8": median["ours"] / median["llama_server"],
        "embed_batching_gain": median["ours"] / median["ours_one_at_a_time"],
        "embeddings": {"passages_per_s": median, "round_pairs": samples.pairs(lambda rate: round(rate, 1)),
                       "clients": args.clients, "passages_per_client": args.passages, "our_engine": engine},
    }


def rerank(args: argparse.Namespace) -> dict:
    from rerank import bench

    return bench(args.threads, args.rounds)


# Each section: a function of the arguments returning its keys (top level) and details.
SECTIONS: dict[str, Callable[[argparse.Namespace], dict]] = {"embeddings": embeddings, "rerank": rerank}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per side (default 3)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--passages", type=int, default=64, help="passages per client (default 64)")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {', '.join(SECTIONS)}")
    args = p.parse_args()
    results: dict = {"cpu": cpu_name(), "threads": args.threads, "rounds": args.rounds}
    for name in args.only.split(","):
        results.update(SECTIONS[name](args))
    rows = [("cpu", results["cpu"])] + [(key, value) for key, value in results.items()
                                        if isinstance(value, float)]
    for side, value in results.get("embeddings", {}).get("passages_per_s", {}).items():
        rows.append((f"passages/s, {side}", value))
    rows += round_rows("passages/s", results.get("embeddings", {}).get("round_pairs", []))
    report(f"embedding benchmark, {MODEL}, {args.clients} clients x {args.passages} passages, {args.threads} threads",
           rows, results, args.json)


if __name__ == "__main__":
    main()
