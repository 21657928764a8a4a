"""One model over two loopback workers against the same model on one machine: tokens/s and bytes a token.

For SmolLM2 and Gemma 3, one daemon loads each model twice, both on the
llama.cpp engine: once here alone (``num_worker_layers 0``) and once with
every repeating layer on two ``localllm worker`` processes on loopback ports
(``num_worker_layers``; the embeddings and the output head stay here). Each
round measures, on both in turn, prefill (a fresh prompt of ``--prompt-words``
words, so no prefix cache helps) and decode (``--tokens`` greedy tokens), from
the daemon's own timings; medians over ``--rounds``.

Loopback is the best case a network can be: no bandwidth limit, ~10 µs round
trips. The bytes that crossed to and from the workers per token (summed from
the kernel's TCP counters of the runner's sockets, ``ss -ti``) say what a real
link adds: time a token ≈ loopback time + bytes ÷ bandwidth + round trips ×
RTT, with one round trip per worker a decode step (its activations come back
before the next device starts). Most of a decode step's bytes are not
activations but the computation graph ggml sends each worker whenever it
changes (every step, as the KV length grows).

    python scripts/bench/reach.py [--rounds 3] [--tokens 64] [--prompt-words 200] [--json]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import alternating, report, round_rows, start_daemon  # noqa: E402  (puts tests/ on the path)

from support import fixtures  # noqa: E402
import httpx  # noqa: E402
from support.workers import Worker  # noqa: E402

DECODE_PROMPT = "1, 2, 3, 4, 5, 6, 7, 8,"
ALL_LAYERS = 10_000  # num_worker_layers beyond the model's: every repeating layer
WORDS = ("river stone lantern harvest copper meadow thunder violet orchard compass winter ember "
         "harbor falcon granite willow").split()


COUNTERS = ("bytes_sent", "bytes_received", "data_segs_out", "data_segs_in")


def tcp_counters(ports: list[int]) -> dict[str, int]:
    """The kernel's counters (``ss -ti``) of every established socket to these loopback ports: the runner's."""
    totals = dict.fromkeys(COUNTERS, 0)
    for port in ports:
        out = subprocess.run(["ss", "-tinH", "state", "established", f"( dport = :{port} )"],
                             capture_output=True, text=True, check=True).stdout
        for name in COUNTERS:
            totals[name] += sum(int(n) for n in re.findall(rf"\b{name}:(\d+)", out))
    return totals


class Side:
    """One way of running a model: its request options, and what each measurement costs on the wire."""

    def __init__(self, daemon, model: str, options: dict, ports: list[int]) -> None:
        self.daemon, self.model, self.options, self.ports = daemon, model, options, ports
        self.round = 0

    def _generate(self, prompt: str, num_predict: int) -> tuple[dict, dict[str, int]]:
        before = tcp_counters(self.ports)
        body = {"model": self.model, "prompt": prompt, "raw": True, "stream": False, "keep_alive": -1,
                "options": {"temperature": 0, "repeat_penalty": 1.0, "num_predict": num_predict, **self.options}}
        response = httpx.post(f"{self.daemon.url}/api/generate", json=body, timeout=900)
        response.raise_for_status()
        after = tcp_counters(self.ports)
        return response.json(), {name: after[name] - before[name] for name in COUNTERS}

    def measure(self, prompt_words: int, tokens: int) -> dict:
        """Prefill of a fresh prompt; decode of ``tokens``; and what one more decode step sends and receives
        (a ``tokens`` request less a one-token one: the request's own costs, such as its prompt and the
        prefix cache's copy of its KV, cancel out)."""
        self.round += 1
        words = " ".join(WORDS[(self.round * 7 + i) % len(WORDS)] for i in range(prompt_words))
        prefill, prefill_wire = self._generate(f"Round {self.round}: {words}.", 1)
        decode, decode_wire = self._generate(DECODE_PROMPT, tokens)
        _, one_token_wire = self._generate(DECODE_PROMPT, 1)
        steps = decode["eval_count"] - 1
        step = {name: (decode_wire[name] - one_token_wire[name]) / steps for name in COUNTERS}
        return {
            "prefill_tokens_per_s": prefill["prompt_eval_count"] / prefill["prompt_eval_duration"] * 1e9,
            "decode_tokens_per_s": decode["eval_count"] / decode["eval_duration"] * 1e9,
            "prefill_bytes_per_token": (prefill_wire["bytes_sent"] + prefill_wire["bytes_received"])
            / prefill["prompt_eval_count"],
            "decode_request_bytes_per_token": (decode_wire["bytes_sent"] + decode_wire["bytes_received"])
            / decode["eval_count"],
            "decode_step_bytes_sent": step["bytes_sent"],
            "decode_step_bytes_received": step["bytes_received"],
            "decode_step_segments": step["data_segs_out"] + step["data_segs_in"],
        }


def bench_model(daemon, name: str, ports: list[int], rounds: int, prompt_words: int, tokens: int) -> dict:
    sides = {
        "one_machine": Side(daemon, name, {"engine": "llama.cpp", "num_worker_layers": 0}, ports),
        "two_workers": Side(daemon, name, {"num_worker_layers": ALL_LAYERS}, ports),
    }
    for side in sides.values():
        side.measure(prompt_words, tokens)  # warm-up: load, page in the weights
    loaded = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
    split = next(m["split"] for m in loaded if any(entry["host"] != "local" for entry in m["split"]))
    samples = alternating(rounds, {key: (lambda s=side: s.measure(prompt_words, tokens)) for key, side in
                                   sides.items()})
    medians = {key: {metric: statistics.median(s[metric] for s in ms) for metric in ms[0]}
               for key, ms in samples.items()}
    httpx.post(f"{daemon.url}/api/generate", json={"model": name, "keep_alive": 0}, timeout=60)
    one, two = medians["one_machine"], medians["two_workers"]
    return {
        "split": split,
        "one_machine": {k: round(v, 1) for k, v in one.items() if k.endswith("tokens_per_s")},
        "two_workers": {k: round(v, 1) for k, v in two.items()},
        "decode_ratio": round(two["decode_tokens_per_s"] / one["decode_tokens_per_s"], 3),
        "prefill_ratio": round(two["prefill_tokens_per_s"] / one["prefill_tokens_per_s"], 3),
        "round_pairs_prefill_decode_tok_s": samples.pairs(lambda s: [round(s["prefill_tokens_per_s"], 1),
                                                                 round(s["decode_tokens_per_s"], 1)]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64, help="greedy tokens a decode measurement")
    p.add_argument("--prompt-words", type=int, default=200, help="words of a prefill measurement's prompt")
    p.add_argument("--threads", type=int, default=1,
                   help="threads of each runner and each worker: one device computes at a time, so both sides "
                        "compute on this many")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="localllm-reach-"))
    workers = [Worker(root, args.threads), Worker(root, args.threads)]
    daemon = None
    try:
        daemon = start_daemon(LOCALLLM_WORKERS=",".join(w.address for w in workers), LOCALLLM_NUM_PARALLEL="1",
                              LOCALLLM_NUM_THREADS=str(args.threads))
        daemon.create("gemma3:270m", f"FROM {fixtures.gemma3_gguf()}")
        ports = [w.port for w in workers]
        results = {"rounds": args.rounds, "tokens": args.tokens, "prompt_words": args.prompt_words,
                   "worker_threads": args.threads, "models": {}}
        for name in ("smollm2:135m", "gemma3:270m"):
            r = results["models"][name] = bench_model(daemon, name, ports, args.rounds, args.prompt_words,
                                                      args.tokens)
            short = name.split(":")[0]  # the headline figures, at the top level
            results[f"{short}_decode_ratio"] = r["decode_ratio"]
            results[f"{short}_prefill_ratio"] = r["prefill_ratio"]
            results[f"{short}_decode_bytes_per_token"] = round(r["two_workers"]["decode_request_bytes_per_token"])
            results[f"{short}_prefill_bytes_per_token"] = round(r["two_workers"]["prefill_bytes_per_token"])
    finally:
        if daemon is not None:
            daemon.stop()
        for worker in workers:
            worker.kill()
    rows: list[tuple[str, object]] = []
    for name, r in results["models"].items():
        one, two = r["one_machine"], r["two_workers"]
        rows += [
            (f"{name} decode tok/s, one machine", one["decode_tokens_per_s"]),
            (f"{name} decode tok/s, two workers", two["decode_tokens_per_s"]),
            (f"{name} decode ratio", r["decode_ratio"]),
            (f"{name} prefill tok/s, one machine", one["prefill_tokens_per_s"]),
            (f"{name} prefill tok/s, two workers", two["prefill_tokens_per_s"]),
            (f"{name} prefill ratio", r["prefill_ratio"]),
            (f"{name} decode step: bytes sent to workers", round(two["decode_step_bytes_sent"])),
            (f"{name} decode step: bytes received", round(two["decode_step_bytes_received"])),
            (f"{name} decode step: TCP data segments", round(two["decode_step_segments"], 1)),
            (f"{name} decode request bytes/token, all in", round(two["decode_request_bytes_per_token"])),
            (f"{name} prefill bytes/token (sent+received)", round(two["prefill_bytes_per_token"])),
            *round_rows(f"{name} prefill, decode tok/s", r["round_pairs_prefill_decode_tok_s"]),
        ]
    report(f"one model over two loopback workers vs one machine (llama.cpp engine, medians of {args.rounds} rounds)",
           rows, results, args.json)


if __name__ == "__main__":
    main()
