"""Gemma 4 and Qwen 3.6 hybrid speed on the CPU: our daemon against llama.cpp's llama-server, same files.

Synthetic models of the real shapes (support.shaped_models: random Q4_K-mix blocks, SmolLM2's tokenizer, written
once into the benchmark cache outside the repository): Gemma 4 E4B (``--e4b-layers`` of 42: per-layer embeddings,
the last layers reading earlier layers' KV), Gemma 4 26B-A4B (``--moe-layers`` of 30: 128 experts of which 8 a
token beside a dense FFN) and Qwen 3.6 35B-A3B (``--hybrid-layers`` of 40: Gated DeltaNet and gated attention,
256 experts and a shared one). A layer count left out is as many layers as the memory available now holds
twice over (our repacked copy beside the file llama-server maps), at most all; the output says how many.

One stream, the same threads, alternating rounds (the order reversed every other round), medians:

- decode and prefill: a greedy completion of a ``--prompt``-token prompt (a new one each round: no prompt cache on
  either side) and ``--tokens`` tokens, each side timed by its own report (``prompt_eval_*`` / ``eval_*``,
  llama-server's ``timings``);
- shared prompt (hybrid model): a conversation sends a new ``--system``-token system prompt, then another
  conversation with the same system prompt asks its own question; the time to its first token (one token asked,
  the whole request's wall time; ours also says how many prompt tokens it computed), with llama-server's prompt
  cache on;
- turn 10 (hybrid model, ours): the time to the first streamed token of a chat's turn ``--turns`` over its first.

    python scripts/bench/hybrid.py [--threads 2] [--rounds 4] [--tokens 64] [--prompt 512] [--json]
                                   [--only shared_prompt]

``--only shared_prompt`` measures only ``hybrid_shared_prompt_ttft_ratio`` (the Qwen 3.6 model alone).

``--json`` keys: ``gemma4_decode_ratio``, ``gemma4_prefill_ratio``, ``gemma4_moe_decode_ratio``,
``hybrid_decode_ratio``, ``hybrid_prefill_ratio``, ``hybrid_shared_prompt_ttft_ratio`` (ours ÷ llama-server:
tokens/s, or seconds for the time to first token), ``hybrid_turn10_ttft_ratio`` (ours, turn 10 ÷ turn 1), the
``cpu`` with its family and model, each model's layers, engine and rounds. A figure that could not be measured
(no llama-server build, or a model the native engine does not run: its reason) is null, ``not_measured`` saying
why.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from common import alternating, cpu_name, generate_rates, not_measured, report, round_rows
from llama_server import LlamaServer, cached_model, side_by_side
from support import fixtures
from support.shaped_models import GEMMA4_26B_A4B, GEMMA4_E4B, QWEN36_35B_A3B, gemma4, qwen35moe

from localllm.backends.native.model import available_memory

KEYS = ("gemma4_decode_ratio", "gemma4_prefill_ratio", "gemma4_moe_decode_ratio", "hybrid_decode_ratio",
        "hybrid_prefill_ratio", "hybrid_shared_prompt_ttft_ratio", "hybrid_turn10_ttft_ratio")
CTX = 8192
_SYSTEMS = itertools.count(1)  # a new system prompt each round


def _file(name: str, layers: int, build: Callable[[Path, int], Path]) -> Path:
    return cached_model(f"{name}-{layers}l-q4_k_m.gguf", lambda partial: build(partial, layers))


def _layers(asked: int | None, total: int, write_one: Callable[[Path, int], Path], name: str) -> int:
    """``asked``, or as many of ``total`` layers as twice the model's bytes fit in the memory available now (the
    bytes of a layer measured on a two-layer copy written once)."""
    if asked:
        return min(asked, total)
    probe = _file(name, 2, write_one).stat().st_size
    one = _file(name, 1, write_one).stat().st_size
    per_layer, rest = probe - one, 2 * one - probe
    return max(1, min(total, int((0.8 * available_memory() / 2 - rest) // max(per_layer, 1))))


MODELS = {  # name: (shape's layer count, writer)
    "gemma4-e4b-shaped": (GEMMA4_E4B.n_layer, lambda path, n: gemma4(path, fixtures.smollm2_gguf(), GEMMA4_E4B, n)),
    "gemma4-26b-a4b-shaped": (GEMMA4_26B_A4B.n_layer,
                              lambda path, n: gemma4(path, fixtures.smollm2_gguf(), GEMMA4_26B_A4B, n)),
    "qwen36-35b-a3b-shaped": (QWEN36_35B_A3B.n_layer,
                              lambda path, n: qwen35moe(path, fixtures.smollm2_gguf(), QWEN36_35B_A3B, n)),
}


def _system(tokens: int) -> str:
    words = "you are a careful assistant who answers in short plain sentences about the sea".split()
    return f"Rules {next(_SYSTEMS)}. " + " ".join(itertools.islice(itertools.cycle(words), tokens * 8 // 10))


def shared_prompt_ours(url: str, model: str, system_tokens: int) -> tuple[float, int]:
    """Seconds to the first token of a second conversation whose system prompt a first one just sent, and the
    prompt tokens it computed (the rest came from the cache)."""
    system = _system(system_tokens)

    def ask(question: str) -> tuple[float, int]:
        body = {"model": model, "prompt": f"{system}\n\nUser: {question}\nAssistant:", "raw": True, "stream": False,
                "keep_alive": -1, "options": {"temperature": 0, "num_predict": 1, "num_ctx": CTX}}
        start = time.perf_counter()
        answer = httpx.post(f"{url}/api/generate", json=body, timeout=3600)
        answer.raise_for_status()
        return time.perf_counter() - start, answer.json()["prompt_eval_count"]

    ask("What is the sea?")
    return ask("Why is it salty?")


def shared_prompt_theirs(server: LlamaServer, system_tokens: int) -> float:
    system = _system(system_tokens)

    def ask(question: str) -> float:
        body = {"prompt": f"{system}\n\nUser: {question}\nAssistant:", "n_predict": 1, "temperature": 0,
                "cache_prompt": True}
        start = time.perf_counter()
        httpx.post(f"{server.url}/completion", json=body, timeout=3600).raise_for_status()
        return time.perf_counter() - start

    ask("What is the sea?")
    return ask("Why is it salty?")


def turn_ttfts(url: str, model: str, turns: int) -> list[float]:
    """Seconds to the first streamed token of each turn of one greedy chat (16 tokens an answer)."""
    messages, ttfts = [{"role": "system", "content": _system(200)}], []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn + 1}: tell me one more thing about the tides."})
        body = {"model": model, "messages": messages, "stream": True, "keep_alive": -1,
                "options": {"temperature": 0, "num_predict": 16, "num_ctx": CTX}}
        start, first, answer = time.perf_counter(), None, []
        with httpx.stream("POST", f"{url}/api/chat", json=body, timeout=3600) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if first is None:
                    first = time.perf_counter() - start
                answer.append(httpx.Response(200, content=line).json().get("message", {}).get("content", ""))
        messages.append({"role": "assistant", "content": "".join(answer)})
        ttfts.append(first or 0.0)
    return ttfts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--e4b-layers", type=int)
    p.add_argument("--moe-layers", type=int)
    p.add_argument("--hybrid-layers", type=int)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens (about)")
    p.add_argument("--system", type=int, default=6000, help="shared system prompt tokens (about)")
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--only", choices=["shared_prompt"], help="measure only this figure")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    only_shared = args.only == "shared_prompt"
    asked = {"gemma4-e4b-shaped": args.e4b_layers, "gemma4-26b-a4b-shaped": args.moe_layers,
             "qwen36-35b-a3b-shaped": args.hybrid_layers}
    results: dict = {"cpu": cpu_name(), "threads": args.threads, "models": {}}
    rows: list[tuple[str, object]] = [("cpu", results["cpu"])]
    keys = {"gemma4-e4b-shaped": ("gemma4_decode_ratio", "gemma4_prefill_ratio"),
            "gemma4-26b-a4b-shaped": ("gemma4_moe_decode_ratio", None),
            "qwen36-35b-a3b-shaped": ("hybrid_decode_ratio", "hybrid_prefill_ratio")}
    for name, (total, write_one) in MODELS.items():
        hybrid = name.startswith("qwen36")
        if only_shared and not hybrid:
            continue
        layers = _layers(asked[name], total, write_one, name)
        path = _file(name, layers, write_one)
        info: dict = {"path": str(path), "layers": layers, "of": total}
        results["models"][name] = info
        with side_by_side(path, name, args.threads, CTX, ("--no-repack",)) as pair:
            info["engine"], info["engine_reason"] = pair.engine, pair.engine_reason
            url, server = pair.daemon.url, pair.server
            sides = {} if only_shared else {"ours": lambda: generate_rates(url, name, args.prompt, args.tokens, CTX)}
            if hybrid:
                sides["ours_shared"] = lambda: shared_prompt_ours(url, name, args.system)
            if server is not None:
                if not only_shared:
                    sides["llama_server"] = lambda: server.rates(args.prompt, args.tokens)
                if hybrid:
                    sides["llama_server_shared"] = lambda: (shared_prompt_theirs(server, args.system), 0.0)
            else:
                info["llama_server_error"] = pair.server_error
            samples = alternating(args.rounds, sides)
            turns = turn_ttfts(url, name, args.turns) if hybrid and not only_shared else None
        prefill = samples.medians(0)
        info["rounds"] = samples.pairs()
        native = info["engine"] == "native"
        why_not = (f"{name} runs on {info['engine']} here ({info['engine_reason']}), not the native engine"
                   if not native else f"llama-server did not run: {info.get('llama_server_error')}")
        measured = native and any(side.startswith("llama_server") for side in samples)
        rows += [(f"{name} layers", f"{layers} of {total}"), (f"{name} engine", info["engine"])]
        if not only_shared:
            decode = samples.medians(1)
            info.update({"ours_prefill_tokens_per_s": prefill["ours"], "ours_decode_tokens_per_s": decode["ours"]})
            for key, figure in zip(keys[name], (decode, prefill), strict=True):
                if key and measured:
                    results[key] = figure["ours"] / figure["llama_server"]
                elif key:
                    not_measured(results, key, why_not)
            rows += [(f"{name} ours decode tokens/s", decode["ours"]),
                     (f"{name} ours prefill tokens/s", prefill["ours"])]
        if hybrid:
            info["ours_shared_computed_tokens"] = [computed for _, computed in samples["ours_shared"]]
            rows.append((f"{name} ours second conversation's computed tokens", str(info["ours_shared_computed_tokens"])))
            if measured:
                results["hybrid_shared_prompt_ttft_ratio"] = prefill["ours_shared"] / prefill["llama_server_shared"]
            else:
                not_measured(results, "hybrid_shared_prompt_ttft_ratio", why_not)
        if turns is not None:
            info["turn_ttft_s"] = turns
            if native:
                results["hybrid_turn10_ttft_ratio"] = turns[-1] / turns[0]
            else:
                not_measured(results, "hybrid_turn10_ttft_ratio", why_not)
        rows += [*round_rows(f"{name} {'shared-prompt TTFT s' if only_shared else 'prefill, decode'}",
                             samples.pairs(lambda value: value[0] if only_shared else value))]
    rows += [(key, results.get(key)) for key in KEYS if key in results]
    report(f"Gemma 4 and Qwen 3.6 hybrid shapes, {args.threads} threads", rows, results, args.json)


if __name__ == "__main__":
    main()
