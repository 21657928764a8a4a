"""Serving benchmark: batching, prefix cache and decode speed of the daemon, SmolLM2-135M.

    python scripts/bench/serving.py [--json] [--quick] [--threads 2] [--rounds 3] [--only concurrency,multiturn,...]

- ``concurrency``: 8 clients stream chat completions at once (fixed prompts, 128
  tokens each) from our daemon (its default engine), from llama-cpp-python's
  bundled OpenAI server (``python -m llama_cpp.server``) and from llama.cpp's
  own ``llama-server -np 8`` (built once from the llama.cpp in
  llama-cpp-python's sdist, see llama_server.py), same model, threads and
  context per sequence, in ``--rounds`` alternating rounds: ratios of the
  median aggregate tokens/s → ``throughput_ratio_c8`` (over llama_cpp.server,
  target >= 4.0) and ``throughput_ratio_c8_llama_server`` (target >= 1.5), and
  of the median time to first token → ``ttft_p50_c8_llama_server_ratio`` (ours
  over llama-server's, target <= 1.0).
- ``multiturn``: ``--rounds`` 10-turn chats growing to ~1,500 tokens, each its own system prompt; our time
  to first token at turn 10 over turn 1, the median over the chats → ``ttft_growth_turn10`` (target <= 1.3).
- ``shared_prefix``: 8 concurrent requests with one ~1,000-token system prompt;
  prompt tokens we evaluate over what a cache-less server evaluates (all of
  them) → ``prefill_work_ratio`` (target <= 0.15); and the KV held while they
  run (the peak of ``/api/ps``'s ``kv_blocks.in_use``) over the blocks of 8
  unshared copies of their prompts → ``shared_prefix_kv_ratio`` (target <= 0.25;
  null, and the run fails, where the engine reports no blocks: llama.cpp's).
- ``single``: one stream's decode tokens/s over ``Llama.generate``
  (scripts/bench/decode.py) → ``single_stream_ratio`` (target >= 1.8).
- ``daemon_cost``: one stream's decode tokens/s through the daemon (streamed ``/api/generate``, native
  engine) over the bare native loop's (one ``Context.decode`` and an argmax a token, in this process), same
  model, prompt and threads, alternating → ``daemon_share`` (target >= 0.97).
- ``restart``: a ~7,000-token prompt on the native engine, cold (a fresh daemon, the disk cache cleared)
  and again after the daemon restarted (its runner wrote the prompt's KV blocks to the disk tier when it
  stopped), alternating: median time to first token after the restart over cold, the runner's start
  included on both sides → ``restart_ttft_ratio`` (target <= 0.05); the answers must be identical.
- ``long_context``: a ~7,000-token prompt against llama-server, f16 and q8_0 KV
  (scripts/bench/long_context.py) → ``long_prefill_ratio``,
  ``long_decode_ratio_8k`` and ``long_decode_ratio_8k_q8_0`` (targets >= 1.5).

The sides run one after the other, never at once (they would share the CPU),
the order reversed every other round; ``round_pairs`` lists each round's
figures in the order its sides ran. ``--json`` puts each of those keys at the
top level, beside each section's detail. A figure that could not be measured
is null, its reason under ``not_measured``, and the run exits with status 1.
``--quick`` shortens everything for a smoke run; its figures are not the targets'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode  # noqa: E402
import long_context  # noqa: E402
from common import (  # noqa: E402
    MODEL, PeerServer, alternating, fixtures, not_measured, report, round_rows, start_daemon
)
from llama_server import LlamaServer  # noqa: E402

SECTIONS = ("concurrency", "multiturn", "shared_prefix", "single", "daemon_cost", "restart", "long_context")
HEADLINE = ("throughput_ratio_c8", "throughput_ratio_c8_llama_server", "ttft_p50_c8_llama_server_ratio",
            "ttft_growth_turn10", "prefill_work_ratio", "shared_prefix_kv_ratio", "single_stream_ratio",
            "daemon_share", "restart_ttft_ratio", *long_context.HEADLINE)
TOPICS = ["dragons", "the ocean", "a lighthouse", "robots", "a small village", "the moon", "trains", "a forest"]


@dataclass(frozen=True)
class Settings:
    threads: int
    tokens: int  # per client in ``concurrency``
    rounds: int  # alternating rounds per side; chats in ``multiturn``
    turns: int
    quick: bool


@dataclass
class StreamResult:
    ttft: float  # seconds from sending to the first content
    tokens: int  # content chunks received (one token each on both servers)
    end: float  # perf_counter when the stream ended


async def stream_chat(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[StreamResult, str]:
    """One streamed /v1/chat/completions: timing, chunk count and the text."""
    start = time.perf_counter()
    ttft, count, text = 0.0, 0, []
    async with client.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url} answered {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            piece = choices[0].get("delta", {}).get("content")
            if piece:
                ttft = ttft or time.perf_counter() - start
                count += 1
                text.append(piece)
    return StreamResult(ttft, count, time.perf_counter()), "".join(text)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaCppServer(PeerServer):
    """llama-cpp-python's bundled OpenAI server (``pip install 'llama-cpp-python[server]'``)."""

    def __init__(self, model: Path, threads: int, n_ctx: int = 4096) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--n_threads", str(threads),
               "--n_threads_batch", str(threads), "--n_ctx", str(n_ctx), "--host", "127.0.0.1", "--port", str(port),
               # by default a new request aborts the running one; queue them instead, as a user would want
               "--interrupt_requests", "False"]
        super().__init__("llama_cpp.server", cmd, f"http://127.0.0.1:{port}", "/v1/models")


def story_body(model: str, topic: str, tokens: int) -> dict[str, Any]:
    return {"model": model, "max_tokens": tokens, "temperature": 0,
            "messages": [{"role": "user", "content": f"Write a long story about {topic}."}]}


async def eight_clients(url: str, model: str, tokens: int) -> dict[str, float]:
    """Aggregate tokens/s and median TTFT of 8 concurrent streams."""
    async with httpx.AsyncClient(timeout=900) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(stream_chat(client, url, story_body(model, t, tokens)) for t in TOPICS))
    streams = [r for r, _ in results]
    wall = max(r.end for r in streams) - start
    total = sum(r.tokens for r in streams)
    return {"tokens": total, "seconds": wall, "tokens_per_s": total / wall,
            "ttft_median_s": statistics.median(r.ttft for r in streams)}


def bench_concurrency(s: Settings) -> dict[str, Any]:
    """Both servers up (idle while the other runs), their rounds alternating: medians per side.

    The peer's throughput swings by more than 2x between runs minutes apart on
    this shared machine; alternating rounds puts both sides in the same weather.
    """
    daemon = start_daemon(LOCALLLM_NUM_PARALLEL="8", LOCALLLM_NUM_THREADS=str(s.threads))
    server = LlamaCppServer(fixtures.smollm2_gguf(), s.threads)
    native_server = LlamaServer(fixtures.smollm2_gguf(), s.threads, parallel=8, ctx_per_seq=4096, port=free_port())
    try:
        server.wait_ready()
        native_server.wait_ready()
        sides = {"ours": (daemon.url, MODEL), "llama_cpp_server": (server.url, "smollm2"),
                 "llama_server": (native_server.url, "smollm2")}
        for url, model in sides.values():  # warm-up: load, page in the weights
            asyncio.run(eight_clients(url, model, 8))

        def clients(url: str, model: str) -> Callable[[], dict[str, float]]:
            return lambda: asyncio.run(eight_clients(url, model, s.tokens))

        rounds = alternating(s.rounds, {name: clients(*side) for name, side in sides.items()})
    finally:
        native_server.stop()
        server.stop()
        daemon.stop()
    result: dict[str, Any] = {"round_pairs": rounds.pairs(lambda r: round(r["tokens_per_s"], 1))}
    for name, runs in rounds.items():
        median = sorted(runs, key=lambda r: r["tokens_per_s"])[len(runs) // 2]  # a whole round: its TTFT too
        result[name] = median
    result["throughput_ratio_c8"] = result["ours"]["tokens_per_s"] / result["llama_cpp_server"]["tokens_per_s"]
    result["throughput_ratio_c8_llama_server"] = result["ours"]["tokens_per_s"] / result["llama_server"]["tokens_per_s"]
    result["ttft_p50_c8_llama_server_ratio"] = result["ours"]["ttft_median_s"] / result["llama_server"]["ttft_median_s"]
    return result


def bench_multiturn(s: Settings) -> dict[str, Any]:
    """Chats whose history grows each turn (~150 tokens a turn), ``--rounds`` of them, each with its own system
    prompt (nothing cached from the one before): TTFT per turn, and turn 10 over turn 1 per chat (median, spread)."""
    daemon = start_daemon(LOCALLLM_NUM_THREADS=str(s.threads))
    facts = ("Our club meets on Fridays, owns two telescopes, keeps a logbook of every session, "
             "and photographs the moon, Jupiter and Saturn whenever the sky is clear. ") * 2
    chats: list[list[float]] = []
    try:
        async def chat(client: httpx.AsyncClient, club: int) -> list[float]:
            messages = [{"role": "system", "content": f"Club {club}. You are a helpful astronomy club assistant."}]
            ttfts = []
            for turn in range(s.turns):
                messages.append({"role": "user", "content": f"Turn {turn + 1}. {facts}What should we observe next?"})
                body = {"model": MODEL, "messages": messages, "max_tokens": 48, "temperature": 0}
                result, text = await stream_chat(client, daemon.url, body)
                ttfts.append(result.ttft)
                messages.append({"role": "assistant", "content": text})
            return ttfts

        async def run() -> None:
            async with httpx.AsyncClient(timeout=900) as client:
                await stream_chat(client, daemon.url, story_body(MODEL, "a cat", 4))  # load the model
                for club in range(s.rounds):
                    chats.append(await chat(client, club))

        asyncio.run(run())
    finally:
        daemon.stop()
    growth = [ttfts[-1] / ttfts[0] for ttfts in chats]
    return {"ttft_s": [statistics.median(turn) for turn in zip(*chats)], "rounds_ttft_growth": growth,
            "ttft_growth_turn10": statistics.median(growth)}


def bench_shared_prefix(s: Settings) -> dict[str, Any]:
    daemon = start_daemon(LOCALLLM_NUM_PARALLEL="8", LOCALLLM_NUM_THREADS=str(s.threads))
    rules = " ".join(f"Rule {i}: answer questions about item {i} of the catalogue politely and briefly." for i in range(60))
    system = f"You are the support assistant of a telescope shop. {rules}"
    if s.quick:
        system = system[: len(system) // 3]
    try:
        async def run() -> list[dict[str, Any]]:
            async with httpx.AsyncClient(timeout=900) as client:
                await stream_chat(client, daemon.url, story_body(MODEL, "a cat", 4))  # load the model
                bodies = [{"model": MODEL, "max_tokens": 16, "temperature": 0, "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"Question {i}: is item {i * 7} in stock?"}]} for i in range(8)]
                watcher = asyncio.create_task(peak_blocks(client, daemon.url, peak))
                answers = await asyncio.gather(*(client.post(f"{daemon.url}/v1/chat/completions", json=b) for b in bodies))
                watcher.cancel()
                return [a.json()["usage"] for a in answers]

        peak = PeakBlocks()
        usages = asyncio.run(run())
    finally:
        daemon.stop()
    total = sum(u["prompt_tokens"] for u in usages)
    cached = sum(u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usages)
    result = {"prompt_tokens": total, "cached_tokens": cached, "evaluated_tokens": total - cached,
              "prefill_work_ratio": (total - cached) / total, "engine": peak.engine}
    if peak.block_size is None:
        not_measured(result, "shared_prefix_kv_ratio", f"the {peak.engine} engine reports no KV blocks in /api/ps")
    elif peak.in_use == 0:
        not_measured(result, "shared_prefix_kv_ratio", "/api/ps showed no KV block in use while the requests ran")
    else:
        unshared_blocks = sum(-(-u["prompt_tokens"] // peak.block_size) for u in usages)
        result.update(peak_kv_blocks_in_use=peak.in_use, unshared_kv_blocks=unshared_blocks,
                      shared_prefix_kv_ratio=peak.in_use / unshared_blocks)
    return result


@dataclass
class PeakBlocks:
    """The most KV blocks the model held at once, as ``/api/ps`` showed them; block_size None: it showed none."""

    in_use: int = 0
    block_size: int | None = None
    engine: str = "unknown"


async def peak_blocks(client: httpx.AsyncClient, url: str, peak: PeakBlocks) -> None:
    """Record the most KV blocks the model held at once (``/api/ps``), until cancelled."""
    while True:
        for model in (await client.get(f"{url}/api/ps")).json()["models"]:
            peak.engine = model.get("engine", peak.engine)
            blocks = model.get("kv_blocks")
            if blocks:
                peak.block_size = blocks["block_size"]
                peak.in_use = max(peak.in_use, blocks["in_use"])
        await asyncio.sleep(0.05)


def bench_single(s: Settings) -> dict[str, Any]:
    cfg = decode.BenchConfig(model=fixtures.smollm2_gguf(), threads=s.threads, tokens=32 if s.quick else 128)
    result = decode.run(cfg, decode.daemon_side, rounds=1 if s.quick else 3)
    return {"ours_tokens_per_s": result["ours_tokens_per_s"],
            "llama_cpp_python_tokens_per_s": result["llama_cpp_python_tokens_per_s"],
            "single_stream_ratio": result["decode_ratio"], "engine": result["engine"]}


def bench_daemon_cost(s: Settings) -> dict[str, Any]:
    """What the daemon, the runner process and the stream cost a decode step: daemon tokens/s over the bare loop's."""
    from support.native import Side

    cfg = decode.BenchConfig(model=fixtures.smollm2_gguf(), threads=s.threads, tokens=32 if s.quick else 128,
                             engine="native")
    bare = Side("native", cfg.model, n_ctx=2048, threads=s.threads)
    prompt = bare.model.vocab.tokenize_prompt(cfg.prompt)  # as the runner tokenizes a raw prompt

    def bare_loop() -> decode.Measurement:
        token = int(bare.eval(prompt, 0).argmax())
        start = time.perf_counter()
        for i in range(cfg.tokens - 1):  # as the daemon side counts: the tokens after the first
            token = int(bare.eval([token], len(prompt) + i).argmax())
        return decode.Measurement(cfg.tokens - 1, time.perf_counter() - start, "native")

    sides = {"daemon": decode.daemon_side(cfg), "bare_loop": bare_loop}
    for measure in sides.values():
        measure()  # warm-up: page in the weights, fill caches
    results = alternating(s.rounds, sides)
    rates = {name: statistics.median(m.tokens_per_second for m in ms) for name, ms in results.items()}
    return {"daemon_tokens_per_s": rates["daemon"], "bare_loop_tokens_per_s": rates["bare_loop"],
            "daemon_share": rates["daemon"] / rates["bare_loop"],
            "round_pairs": results.pairs(lambda m: round(m.tokens_per_second, 2))}


def bench_restart(s: Settings) -> dict[str, Any]:
    """TTFT of a long prompt after a daemon restart (KV from the disk tier) over the same prompt cold."""
    daemon = start_daemon(LOCALLLM_ENGINE="native", LOCALLLM_NUM_THREADS=str(s.threads))
    daemon.stop()
    rules = " ".join(f"Rule {i}: item {i} of the catalogue ships within {i % 7 + 1} days and is kept in aisle "
                     f"{i % 13}." for i in range(40 if s.quick else 280))
    body = {"model": MODEL, "prompt": f"{rules}\nQuestion: where is item 42 kept?\nAnswer:", "raw": True,
            "options": {"temperature": 0, "num_predict": 8, "num_ctx": 8192}}

    def first_token() -> tuple[float, str, int]:
        start = time.perf_counter()
        ttft, pieces = 0.0, []
        with httpx.stream("POST", f"{daemon.url}/api/generate", json=body, timeout=900) as r:
            for line in r.iter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if "error" in event:
                    raise RuntimeError(event["error"])
                ttft = ttft or time.perf_counter() - start
                pieces.append(event.get("response", ""))
                if event.get("done"):
                    return ttft, "".join(pieces), event["prompt_eval_count"]
        raise RuntimeError("the stream ended without a done object")

    cold, warm, answers, prompt_tokens = [], [], set(), 0
    try:
        for _ in range(s.rounds):
            daemon.start()
            httpx.request("DELETE", f"{daemon.url}/api/cache", json={}, timeout=60).raise_for_status()
            ttft, text, prompt_tokens = first_token()
            cold.append(ttft)
            answers.add(text)
            daemon.stop()  # its runner writes the prompt's blocks to disk
            daemon.start()
            ttft, text, _ = first_token()
            warm.append(ttft)
            answers.add(text)
            daemon.stop()
    finally:
        daemon.stop()
    if len(answers) != 1:
        raise RuntimeError(f"the answers after a restart differ from the cold ones: {sorted(answers)}")
    return {"prompt_tokens": prompt_tokens, "cold_ttft_s": cold, "restart_ttft_s": warm,
            "restart_ttft_ratio": statistics.median(warm) / statistics.median(cold), "same_answer": True}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="a short smoke run (figures not comparable to the targets)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per side (default 3); chats in multiturn")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {', '.join(SECTIONS)}")
    args = p.parse_args()
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        p.error(f"unknown section(s): {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the children (atexit, finally)
    settings = Settings(threads=args.threads, tokens=32 if args.quick else 128, rounds=1 if args.quick else args.rounds,
                        turns=4 if args.quick else 10, quick=args.quick)
    runs = {"concurrency": bench_concurrency, "multiturn": bench_multiturn,
            "shared_prefix": bench_shared_prefix, "single": bench_single, "daemon_cost": bench_daemon_cost,
            "restart": bench_restart,
            "long_context": lambda s: long_context.bench(s.threads, s.rounds, s.quick)}
    results: dict[str, Any] = {"model": MODEL, "threads": args.threads, "quick": args.quick}
    rows: list[tuple[str, Any]] = []
    for name in chosen:
        section = runs[name](settings)
        results[name] = section
        results.update({key: value for key, value in section.items() if key in HEADLINE})
        results.setdefault("not_measured", {}).update(section.get("not_measured", {}))
        for key, value in section.items():
            if key == "round_pairs":
                rows += round_rows(name, value)
            elif key == "not_measured":
                continue
            elif value is None or isinstance(value, (int, float, str)):
                rows.append((f"{name}.{key}", value))
            elif isinstance(value, dict):
                rows += [(f"{name}.{key}.{k}", v) for k, v in value.items()]
            else:
                rows.append((f"{name}.{key}", ", ".join(f"{v:.3f}" for v in value)))
    if not results["not_measured"]:
        del results["not_measured"]
    report(f"serving benchmark, {MODEL}, {args.threads} threads{' (quick)' if args.quick else ''}", rows, results,
           args.json, required=[key for key in HEADLINE if key in results])


if __name__ == "__main__":
    main()
