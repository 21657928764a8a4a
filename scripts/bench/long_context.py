"""Long context: prefill of a ~7,000-token prompt and decode behind it, our daemon against llama-server.

    python scripts/bench/long_context.py [--json] [--quick] [--threads 2] [--rounds 3]

Both sides get the same raw prompt (a catalogue of numbered rules, ~7,000
SmolLM2 tokens, that the model goes on listing) with greedy decoding of 64
tokens, one sequence, a context of 8,192, the same threads; llama-server runs
with the same KV type (q8_0 needs its flash attention). Each round's prompt
starts with a line of its own, so neither side's prefix cache helps. Rounds
alternate between the four sides (ours and llama-server, f16 and q8_0 KV);
each figure is the median over the rounds, measured at the client:

- prefill tokens/s: prompt tokens over the time to the first token;
- decode tokens/s: tokens after the first over the time from it to the last.

``long_prefill_ratio`` (f16, target >= 1.5), ``long_decode_ratio_8k`` and
``long_decode_ratio_8k_q8_0`` (target >= 1.5) are ours over llama-server's.
serving.py runs this as its ``long_context`` section.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from common import MODEL, alternating, fixtures, report, round_rows, start_daemon
from llama_server import LlamaServer

HEADLINE = ("long_prefill_ratio", "long_decode_ratio_8k", "long_decode_ratio_8k_q8_0")
N_CTX = 8192
PREDICT = 64


def catalogue(lines: int, salt: str) -> str:
    rules = "".join(f"Rule {i}: answer questions about item {i} of the catalogue politely and briefly.\n"
                    for i in range(1, lines + 1))
    return f"Catalogue {salt}.\n{rules}Rule {lines + 1}:"


def _stream(url: str, body: dict[str, Any], piece: Callable[[dict], str], done: Callable[[dict], bool]) -> tuple[float, float, dict]:
    """POST a streamed completion: (first token time, end time, final event) relative to the start."""
    start, first, final = time.perf_counter(), 0.0, {}
    with httpx.stream("POST", url, json=body, timeout=1800) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url} answered {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            line = line.removeprefix("data: ").strip()
            if not line.startswith("{"):  # blank keep-alives, llama-server's closing [DONE]
                continue
            event = json.loads(line)
            if piece(event) and not first:
                first = time.perf_counter() - start
            if done(event):
                final = event
    return first, time.perf_counter() - start, final


def ours(url: str, prompt: str) -> dict[str, float]:
    body = {"model": MODEL, "prompt": prompt, "raw": True, "stream": True,
            "options": {"num_ctx": N_CTX, "num_predict": PREDICT, "temperature": 0}}
    first, end, final = _stream(f"{url}/api/generate", body, lambda e: e.get("response", ""), lambda e: e.get("done"))
    return _figures(first, end, final["prompt_eval_count"] + final.get("cached_tokens", 0), final["eval_count"])


def theirs(url: str, prompt: str) -> dict[str, float]:
    body = {"prompt": prompt, "stream": True, "n_predict": PREDICT, "temperature": 0, "cache_prompt": True}
    first, end, final = _stream(f"{url}/completion", body, lambda e: e.get("content", ""), lambda e: e.get("stop"))
    return _figures(first, end, final["timings"]["prompt_n"], final["timings"]["predicted_n"])


def _figures(first: float, end: float, prompt_tokens: int, generated: int) -> dict[str, float]:
    return {"prompt_tokens": prompt_tokens, "ttft_s": first, "prefill_tokens_per_s": prompt_tokens / first,
            "generated": generated, "decode_tokens_per_s": (generated - 1) / (end - first) if end > first else 0.0}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench(threads: int, rounds: int, quick: bool) -> dict[str, Any]:
    lines = 60 if quick else 325  # ~1,300 or ~7,000 tokens (21 a rule)
    model = fixtures.smollm2_gguf()
    env = {"LOCALLLM_NUM_PARALLEL": "1", "LOCALLLM_NUM_THREADS": str(threads)}
    servers: dict[str, Any] = {}
    try:
        servers["ours_f16"] = start_daemon(**env)
        servers["ours_q8_0"] = start_daemon(**env, LOCALLLM_KV_CACHE_TYPE="q8_0")
        servers["llama_server_f16"] = LlamaServer(model, threads, parallel=1, ctx_per_seq=N_CTX, port=_port())
        servers["llama_server_q8_0"] = LlamaServer(model, threads, parallel=1, ctx_per_seq=N_CTX, port=_port(),
                                                   extra=["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"])
        for name, server in servers.items():
            if name.startswith("llama_server"):
                server.wait_ready()
        count = iter(range(10**6))

        def side(name: str) -> Callable[[], dict[str, float]]:
            run = ours if name.startswith("ours") else theirs
            return lambda: run(servers[name].url, catalogue(lines, f"{name} {next(count)}"))

        for name in servers:  # warm-up: load the model, page in the weights
            (ours if name.startswith("ours") else theirs)(servers[name].url, catalogue(4, f"warm-up {name}"))
        samples = alternating(rounds, {name: side(name) for name in servers})
    finally:
        for server in servers.values():
            server.stop()
    result: dict[str, Any] = {"n_ctx": N_CTX, "predict": PREDICT,
                              "round_pairs": samples.pairs(lambda r: [round(r["prefill_tokens_per_s"], 1),
                                                                 round(r["decode_tokens_per_s"], 1)])}
    for name, runs in samples.items():
        result[name] = {
            "prompt_tokens": runs[0]["prompt_tokens"],
            "prefill_tokens_per_s": statistics.median(r["prefill_tokens_per_s"] for r in runs),
            "decode_tokens_per_s": statistics.median(r["decode_tokens_per_s"] for r in runs),
        }
    result["long_prefill_ratio"] = result["ours_f16"]["prefill_tokens_per_s"] / result["llama_server_f16"]["prefill_tokens_per_s"]
    for kv, key in (("f16", "long_decode_ratio_8k"), ("q8_0", "long_decode_ratio_8k_q8_0")):
        result[key] = result[f"ours_{kv}"]["decode_tokens_per_s"] / result[f"llama_server_{kv}"]["decode_tokens_per_s"]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="a ~1,300-token prompt, one round (not the targets' figures)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the children (finally)
    section = bench(args.threads, 1 if args.quick else args.rounds, args.quick)
    results = {"model": MODEL, "threads": args.threads, "quick": args.quick,
               **{key: section[key] for key in HEADLINE}, "long_context": section}
    rows = [(key, section[key]) for key in HEADLINE]
    for name in ("ours_f16", "llama_server_f16", "ours_q8_0", "llama_server_q8_0"):
        rows += [(f"{name}.{k}", v) for k, v in section[name].items()]
    rows += round_rows("prefill, decode tok/s", section["round_pairs"])
    report(f"long context, {MODEL}, {args.threads} threads{' (quick)' if args.quick else ''}", rows, results, args.json)


if __name__ == "__main__":
    main()
