"""Exact speculative decoding: decode tokens/s with speculation against without, ``Llama.generate`` and llama-server.

Four tasks, greedy, on SmolLM2 and Gemma 3: three grounded in their input
(rewrite a given paragraph, fix a bug in a given 60-line function, extract
fields from a given document), where prompt lookup finds long drafts, and one
open-ended (write a story), where it finds few and ``auto`` must cost nothing.
Each round measures every side in turn (never two at once): our runner with
``speculative: auto`` (the default) and with ``off``, llama-cpp-python's
``Llama.generate``, and llama-server with its own n-gram speculation
(``--spec-type ngram-simple``) where the built llama.cpp has it, the order
reversed every other round. Tokens/s is the decode phase, timed the same way
for every side: wall time at the client from the first streamed token to the
last (``timing`` in the output says so); the two servers' own figures (our
runner's ``eval_duration``, llama-server's ``predicted_ms``) are reported
beside it as ``server_tokens_per_s``. Medians over rounds; each task lists
its rounds. Speculation's text must equal plain decoding's, or the run fails.

    python scripts/bench/speculative.py [--models smollm2,gemma3] [--tokens 128] [--rounds 5] [--threads 2]
        [--llama-server] [--json]

``--json`` prints, per model M: ``grounded_M_ratio`` and ``open_M_ratio``
(speculation ÷ without; the grounded figure is the geometric mean of the
three tasks), ``grounded_M_vs_llama_cpp`` / ``open_M_vs_llama_cpp`` (÷
``Llama.generate``), ``grounded_M_vs_llama_server`` (÷ llama-server's n-gram
speculation; null when llama-server was not run, ``not_measured`` says why),
the acceptance rates, and every task's figures under ``tasks``.
``--llama-server`` builds llama-server first if it is not cached (minutes), and
makes its figures required: the run fails (status 1) if it cannot measure them.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import alternating, cpu_name, fixtures, not_measured, report, round_rows  # noqa: E402

TIMING = ("client wall time from the first streamed token to the last, every side; "
          "server_tokens_per_s: each server's own figure (eval_duration, predicted_ms)")

PARAGRAPH = (
    "The old lighthouse stood on the northern cliff for two hundred years. Its keeper, a quiet man named Tomas, "
    "climbed the spiral stairs every evening to light the lamp, and every morning he wrote the weather in a thick "
    "leather book. Ships passing in the night trusted the beam, and fishermen's wives watched it from the village "
    "below. When the new electric light came, Tomas stayed on, polishing brass that no longer needed polish and "
    "telling visitors about the storm of 1911, when the lamp burned for three nights without rest."
)

FUNCTION = '''def summarize_orders(orders, discounts, tax_rate):
    """Total, per-customer spend and the largest order of a list of orders."""
    totals = {}
    largest = None
    count = 0
    for order in orders:
        customer = order["customer"]
        items = order["items"]
        subtotal = 0.0
        for item in items:
            price = item["price"]
            quantity = item["quantity"]
            if quantity <= 0:
                continue
            subtotal += price * quantity
        code = order.get("discount")
        if code is not None:
            rate = discounts.get(code, 0.0)
            if rate < 0 or rate > 1:
                raise ValueError("bad discount rate")
            subtotal = subtotal * (1 - rate)
        tax = subtotal * tax_rate
        total = subtotal + tax
        if customer not in totals:
            totals[customer] = 0.0
        totals[customer] += total
        if largest is None or total > largest["total"]:
            largest = {"customer": customer, "total": total}
        count += 1
    average = 0.0
    if count > 0:
        average = sum(totals.values()) / (count - 1)
    ranking = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)
    top = []
    for customer, spend in ranking:
        if len(top) == 3:
            break
        top.append(customer)
    report = {
        "orders": count,
        "customers": len(totals),
        "average": round(average, 2),
        "largest": largest,
        "top_customers": top,
    }
    for customer, spend in totals.items():
        report[customer] = round(spend, 2)
    return report


def print_report(report):
    """Print a report made by summarize_orders."""
    print("orders:", report["orders"])
    print("customers:", report["customers"])
    print("average:", report["average"])
    if report["largest"] is not None:
        print("largest:", report["largest"]["customer"])
    for name in report["top_customers"]:
        print("top:", name)
    return None
'''

DOCUMENT = (
    "INVOICE No. 2024-0117\nDate: 14 March 2024\nFrom: Harbour Supplies Ltd, 12 Quay Street, Bristol BS1 4DJ\n"
    "To: Northfield Bakery, 3 Mill Lane, Bath BA2 6TE\nContact: Anna Reeves, anna.reeves@northfield.example\n"
    "Items: 40 kg rye flour at 1.20 per kg; 25 kg cane sugar at 0.95 per kg; 6 boxes of baking paper at 4.50 each\n"
    "Subtotal: 98.75 GBP\nVAT (20%): 19.75 GBP\nTotal due: 118.50 GBP\nPayment terms: 30 days, bank transfer to "
    "account 40-11-62 / 73196024\n"
)

TASKS = {  # name: (grounded, instruction, the text it works on)
    "rewrite": (True, "Rewrite this paragraph, keeping every sentence but changing the name Tomas to Peter:", PARAGRAPH),
    "bugfix": (True, "This function divides by the wrong count when it computes the average. "
                     "Reply with the whole corrected code.", FUNCTION),
    "extract": (True, "Extract the invoice number, date, sender, recipient, contact, email, items, subtotal, VAT, "
                      "total and payment terms from this document, one per line as 'field: value':", DOCUMENT),
    "story": (False, "Write a story about a fox who becomes a lighthouse keeper.", ""),
}


def prompt_for(model: str, task: str) -> str:
    """SmolLM2 gets its chat format; Gemma 3 270M is a base model and gets a plain completion prompt."""
    _, instruction, text = TASKS[task]
    body = f"{instruction}\n\n{text}".rstrip()
    if model == "smollm2":
        return f"<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"
    return f"{body}\n\nAnswer:\n"


class Ours:
    """Our runner (native engine) over its unix socket: one side per speculative mode."""

    def __init__(self, model: Path, threads: int) -> None:
        from support.runner import RunnerProcess

        self.runner = RunnerProcess(model, "--engine", "native", "--threads", str(threads), "--parallel", "4",
                                    "--ctx", "2048")
        atexit.register(self.runner.cleanup)
        self.runner.wait_ready()
        self.client = self.runner.client(timeout=1800)

    def side(self, prompt: str, tokens: int, mode: str) -> Callable[[], dict]:
        body = {"prompt": prompt, "options": {"temperature": 0, "repeat_penalty": 1.0, "num_predict": tokens,
                                              "speculative": mode}}

        def measure() -> dict:
            pieces, first, last, final = [], 0.0, 0.0, {}
            with self.client.stream("POST", "/completion", json=body) as r:
                for line in r.iter_lines():
                    if not line:
                        continue
                    item = json.loads(line)
                    if "error" in item:
                        raise RuntimeError(item["error"])
                    if item.get("done"):
                        final = item
                        break
                    now = time.perf_counter()
                    first, last = first or now, now
                    pieces.append(item["content"])
            return {"text": "".join(pieces), "tokens_per_s": (final["eval_count"] - 1) / (last - first),
                    "server_tokens_per_s": (final["eval_count"] - 1) / (final["eval_duration"] / 1e9),
                    "drafted": final.get("draft_count", 0), "accepted": final.get("draft_accepted_count", 0)}

        return measure


class LlamaGenerate:
    """llama-cpp-python's ``Llama.generate`` in this process."""

    def __init__(self, model: Path, threads: int) -> None:
        import llama_cpp

        self.llm = llama_cpp.Llama(str(model), n_threads=threads, n_ctx=2048, verbose=False)

    def side(self, prompt: str, tokens: int) -> Callable[[], dict]:
        ids = self.llm.tokenize(prompt.encode(), special=True)

        def measure() -> dict:
            out, first = [], 0.0
            for token in self.llm.generate(ids, temp=0.0, repeat_penalty=1.0, reset=True):
                if self.llm.token_eos() == token or len(out) >= tokens:
                    break
                out.append(token)
                first = first or time.perf_counter()
            seconds = time.perf_counter() - first
            return {"text": self.llm.detokenize(out).decode(errors="replace"), "tokens_per_s": (len(out) - 1) / seconds}

        return measure


class NgramLlamaServer:
    """llama-server with its own n-gram speculation (no draft model); None where the build lacks it."""

    @staticmethod
    def available(build: bool) -> tuple[bool, str]:
        import llama_server

        binary = llama_server.binary() if build else llama_server.CACHE.glob("llama-server-*/llama-server")
        found = [binary] if build else list(binary)
        if not found:
            return False, "llama-server is not built (run with --llama-server to build it)"
        help_text = subprocess.run([str(found[0]), "--help"], capture_output=True, text=True).stdout
        if "ngram-simple" not in help_text:
            return False, f"the llama.cpp built ({found[0].parent.name}) has no n-gram speculation (--spec-type)"
        return True, ""

    def __init__(self, model: Path, threads: int) -> None:
        from common import PeerServer
        from support.daemon import free_port
        from llama_server import binary

        port = free_port()
        cmd = [str(binary()), "-m", str(model), "-t", str(threads), "-tb", str(threads), "-np", "1", "-c", "2048",
               "--host", "127.0.0.1", "--port", str(port), "--no-webui", "--spec-type", "ngram-simple"]
        self.server = PeerServer("llama-server", cmd, f"http://127.0.0.1:{port}", "/health")
        atexit.register(self.server.stop)
        self.server.wait_ready()

    def side(self, prompt: str, tokens: int) -> Callable[[], dict]:
        import httpx

        body = {"prompt": prompt, "n_predict": tokens, "temperature": 0, "repeat_penalty": 1.0, "cache_prompt": False,
                "stream": True}

        def measure() -> dict:
            pieces, first, last, timings = [], 0.0, 0.0, {}
            with httpx.stream("POST", self.server.url + "/completion", json=body, timeout=1800) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    item = json.loads(line[6:])
                    if item.get("content"):
                        now = time.perf_counter()
                        first, last = first or now, now
                        pieces.append(item["content"])
                    if item.get("stop"):
                        timings = item["timings"]
                        break
            return {"text": "".join(pieces), "tokens_per_s": (timings["predicted_n"] - 1) / (last - first),
                    "server_tokens_per_s": timings["predicted_n"] / (timings["predicted_ms"] / 1000)}

        return measure


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def bench_model(name: str, path: Path, args: argparse.Namespace, peer: bool, peer_note: str) -> dict:
    ours, generate = Ours(path, args.threads), LlamaGenerate(path, args.threads)
    server = NgramLlamaServer(path, args.threads) if peer else None
    tasks = {}
    for task, (grounded, _, _) in TASKS.items():
        prompt = prompt_for(name, task)
        sides = {"speculative": ours.side(prompt, args.tokens, "auto"), "plain": ours.side(prompt, args.tokens, "off"),
                 "llama_generate": generate.side(prompt, args.tokens)}
        if server is not None:
            sides["llama_server_ngram"] = server.side(prompt, args.tokens)
        for measure in sides.values():
            measure()  # warm-up: weights paged in, prompt cached alike for every round
        samples = alternating(args.rounds, sides)
        texts = {s["text"] for s in samples["speculative"] + samples["plain"]}
        if len(texts) != 1:
            raise AssertionError(f"{name}/{task}: speculation changed the output:\n" + "\n---\n".join(texts))
        median = {side: statistics.median(s["tokens_per_s"] for s in ms) for side, ms in samples.items()}
        servers = [side for side in samples if "server_tokens_per_s" in samples[side][0]]
        last = samples["speculative"][-1]
        tasks[task] = {
            "grounded": grounded,
            "tokens_per_s": {side: round(v, 2) for side, v in median.items()},
            "server_tokens_per_s": {side: round(statistics.median(s["server_tokens_per_s"] for s in samples[side]), 2)
                                    for side in servers},
            "round_pairs": samples.pairs(lambda s: round(s["tokens_per_s"], 2)),
            "ratio": median["speculative"] / median["plain"],
            "vs_llama_cpp": median["speculative"] / median["llama_generate"],
            "acceptance": last["accepted"] / last["drafted"] if last["drafted"] else None,
            "drafted": last["drafted"],
            "same_text_as_llama_generate": samples["llama_generate"][-1]["text"] == last["text"],
        }
        if server is not None:
            tasks[task]["vs_llama_server"] = median["speculative"] / median["llama_server_ngram"]
        else:
            not_measured(tasks[task], "vs_llama_server", peer_note)
        print(f"{name}/{task}: {tasks[task]['tokens_per_s']}", file=sys.stderr)  # progress: a run takes long
    ours.runner.cleanup()
    if server is not None:
        server.server.stop()
    result: dict = {}
    for kind, grounded in (("grounded", True), ("open", False)):
        chosen = [t for t in tasks.values() if t["grounded"] == grounded]
        result[f"{kind}_{name}_ratio"] = round(geomean([t["ratio"] for t in chosen]), 3)
        result[f"{kind}_{name}_vs_llama_cpp"] = round(geomean([t["vs_llama_cpp"] for t in chosen]), 3)
        if kind == "grounded" and server is not None:
            result[f"grounded_{name}_vs_llama_server"] = round(geomean([t["vs_llama_server"] for t in chosen]), 3)
        elif kind == "grounded":
            not_measured(result, f"grounded_{name}_vs_llama_server", peer_note)
        accepted = [t["acceptance"] for t in chosen if t["acceptance"] is not None]
        if accepted:
            result[f"{kind}_{name}_acceptance"] = round(statistics.mean(accepted), 3)
        else:
            not_measured(result, f"{kind}_{name}_acceptance", "speculation drafted nothing in these tasks")
    for t in tasks.values():
        for key in ("ratio", "vs_llama_cpp", "vs_llama_server", "acceptance"):
            if t[key] is not None:
                t[key] = round(t[key], 3)
    result[f"{name}_tasks"] = tasks
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="smollm2,gemma3", help="comma-separated: smollm2, gemma3")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--llama-server", action="store_true", help="build llama-server if it is not cached")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the runner (atexit) when killed
    paths = {"smollm2": fixtures.smollm2_gguf, "gemma3": fixtures.gemma3_gguf}
    models = args.models.split(",")
    peer, note = NgramLlamaServer.available(args.llama_server)
    results: dict = {"cpu": cpu_name(), "threads": args.threads, "tokens": args.tokens, "rounds": args.rounds,
                     "timing": TIMING}
    for name in models:
        section = bench_model(name, paths[name](), args, peer, note)
        results.setdefault("not_measured", {}).update(section.pop("not_measured", {}))
        results.update(section)
    if not results["not_measured"]:
        del results["not_measured"]
    rows = [(key, value) for key, value in results.items() if not key.endswith("_tasks") and key != "not_measured"]
    for name in models:
        for task, figures in results[f"{name}_tasks"].items():
            rows += round_rows(f"{name}/{task} tokens/s", figures["round_pairs"])
    required = [f"grounded_{name}_vs_llama_server" for name in models] if args.llama_server else []
    report(f"speculative decoding, {args.threads} threads, {args.tokens} tokens, {args.rounds} rounds", rows,
           results, args.json, required=required)


if __name__ == "__main__":
    main()
