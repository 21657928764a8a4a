"""Prefill and decode speed with layers on a GPU against the same engine on the CPU.

One daemon, llama.cpp engine on both sides, alternating rounds: ``num_gpu 0``
(every layer on the CPU) and ``num_gpu N`` (``--layers``, default all of
them); the medians of Ollama's own timings (``prompt_eval_*``, ``eval_*``)
are compared. ``--vulkan`` runs the daemon on the test suite's Vulkan build
with Mesa's software device (``tests/support/engine_builds.py``): the figure
that shows why such a device is never chosen by default. Without it, the
installed llama-cpp-python's GPU backend is measured (CUDA, Metal, Vulkan).

    python scripts/bench/gpu_offload.py [--vulkan] [--layers 31] [--rounds 3] [--tokens 64] [--json]
    python scripts/bench/gpu_offload.py --moe [--cap 8G] [--rounds 3] [--tokens 64] [--json]

``--json`` prints ``prefill_ratio`` and ``decode_ratio`` (GPU ÷ CPU tokens/s)
and the ``device`` the layers went to.

``--moe`` measures what a mixture-of-experts model too large for the GPU gets:
a full-size synthetic Qwen3-30B-A3B-shaped model (48 layers, 128 experts of
which 8 a token, Q4_0 with random codes, SmolLM2's tokenizer; about 17 GB,
written once into the test cache) under a VRAM cap (``--cap``, as
LOCALLLM_GPU_MEMORY, on the first GPU alone), one stream, three sides in turn:
the daemon's own plan (the expert split: everything but the experts on the GPU,
then the experts that fit), the same daemon with the whole-layer split at that
cap (``num_gpu`` = the layers the planner fits whole, as before the expert
split), and llama.cpp's own llama-server (``llama_server.py``'s CUDA build) with
``-ngl 99 --n-cpu-moe K``, K the smallest its own buffers (as its log states
them, with every expert on the CPU) leave room for under the cap: what a user
finds by lowering K until the load runs out of memory, without our 256 MiB
margin. ``--json`` prints ``moe_offload_decode_gain`` and
``moe_offload_prefill_gain`` (expert split ÷ whole layers), and
``moe_offload_vs_llama_server_decode`` / ``_prefill`` (expert split ÷
llama-server), with ``measured``; where there is no GPU (or no llama-server
for it) those figures are null and ``not_measured`` says why.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from pathlib import Path

import httpx
from common import MODEL, alternating, not_measured, report, round_rows, start_daemon
from llama_server import LlamaServer
from support import fixtures
from support.daemon import free_port
from support.engine_builds import vulkan_env, vulkan_site
from support.moe_models import QWEN3_30B_A3B, qwen3moe_model

from localllm.config import parse_size
from localllm.gguf import read_gguf
from localllm.server.memory import ModelFootprint, footprint, gpu_devices, plan_gpu_layers

PROMPT = "Write a long story about a dragon who learns to bake bread. " * 8
MOE_PROMPT = PROMPT * 5  # about 500 tokens: a prompt's batches are where offloaded experts cost most
MOE_CTX = 4096
MOE_KEYS = ("moe_offload_decode_gain", "moe_offload_prefill_gain", "moe_offload_vs_llama_server_decode",
            "moe_offload_vs_llama_server_prefill")
_FIRST_WORDS = itertools.count(1)  # a new first token each call: no prompt cache hit on either side


def measure(url: str, tokens: int, model: str = MODEL, prompt: str = PROMPT, **options) -> tuple[float, float]:
    """(prefill, decode) tokens/s of one greedy completion on the llama.cpp engine with ``options`` (num_gpu...),
    after a short one on the same load.

    Each side's ``num_gpu`` reloads the model, and a fresh load's first pass pays one-time costs (a GPU
    backend's kernel loading and library handles, the weights' first touch): the warm-up takes them."""
    def generate(num_predict: int) -> dict:
        body = {"model": model, "prompt": f"{next(_FIRST_WORDS)}. {prompt}", "raw": True, "stream": False,
                "options": {"temperature": 0, "num_predict": num_predict, "engine": "llama.cpp", **options}}
        answer = httpx.post(f"{url}/api/generate", json=body, timeout=1800)
        answer.raise_for_status()
        return answer.json()

    generate(4)
    answer = generate(tokens)
    return (answer["prompt_eval_count"] / answer["prompt_eval_duration"] * 1e9,
            answer["eval_count"] / answer["eval_duration"] * 1e9)


def measure_llama_server(server: LlamaServer, tokens: int) -> tuple[float, float]:
    """(prefill, decode) tokens/s of one greedy completion, as llama-server times it."""
    body = {"prompt": f"{next(_FIRST_WORDS)}. {MOE_PROMPT}", "n_predict": tokens, "temperature": 0,
            "cache_prompt": False}
    timings = httpx.post(f"{server.url}/completion", json=body, timeout=1800).json()["timings"]
    return timings["prompt_per_second"], timings["predicted_per_second"]


def moe(args: argparse.Namespace) -> None:
    """The ``--moe`` benchmark (see the module's docstring); without a GPU, a plain statement that it did not run."""
    try:
        gpus = [d for d in gpu_devices() if not d.on_request_only]
    except (ImportError, OSError, AttributeError) as exc:
        gpus, why = [], f"ggml's devices cannot be listed ({exc})"
    else:
        why = "no GPU here: this llama.cpp build lists no hardware GPU device"
    if not gpus:
        results: dict = {"measured": False}
        for key in MOE_KEYS:
            not_measured(results, key, why)
        report("MoE expert split on a GPU: NOT MEASURED", [("not measured", why)], results, args.json)
        return
    cap, gpu = parse_size(args.cap), gpus[0]
    model = moe_model()
    need = footprint(read_gguf(model), MOE_CTX, 1)
    capped = next(d for d in gpu_devices(caps={gpu.name: cap}) if d.name == gpu.name)
    whole_layers = plan_gpu_layers(need, [capped], split_experts=False).n_gpu_layers  # the plan before the split
    caps = ",".join([f"{gpu.name}={cap}"] + [f"{d.name}=0" for d in gpus[1:]])  # the first GPU alone, capped
    daemon = start_daemon(LOCALLLM_GPU_MEMORY=caps, LOCALLLM_NUM_PARALLEL="1", LOCALLLM_MAX_LOADED_MODELS="1",
                          LOCALLLM_NUM_THREADS=str(args.threads))
    server, peer_missing = None, ""
    try:
        daemon.create("moe", f"FROM {model}")
        try:
            n_cpu_moe = llama_server_n_cpu_moe(model, gpu.name, cap, need, args.threads)
            server = LlamaServer(model, args.threads, 1, MOE_CTX, free_port(), variant="cuda",
                                 extra=["-ngl", "99", "--n-cpu-moe", str(n_cpu_moe), "-dev", gpu.name])
            server.wait_ready(600)
            measure_llama_server(server, 4)  # its first pass pays the one-time costs, as measure()'s warm-up
        except Exception as exc:  # noqa: BLE001 - no CUDA toolkit, a failed build or load: the peer is not measured
            peer_missing, n_cpu_moe = f"llama-server: {exc}"[:500], None
        sides = {
            "split": lambda: measure(daemon.url, args.tokens, "moe", MOE_PROMPT, num_ctx=MOE_CTX, num_gpu=-1),
            "whole": lambda: measure(daemon.url, args.tokens, "moe", MOE_PROMPT, num_ctx=MOE_CTX,
                                     num_gpu=whole_layers),
        }
        if server is not None:
            sides["llama_server"] = lambda: measure_llama_server(server, args.tokens)
        samples = alternating(args.rounds, sides)
        measure(daemon.url, 1, "moe", MOE_PROMPT, num_ctx=MOE_CTX, num_gpu=-1)  # the split loaded, to read its plan
        (loaded,) = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
    finally:
        daemon.stop()
        if server is not None:
            server.stop()
    median = {side: [statistics.median(s[i] for s in runs) for i in (0, 1)] for side, runs in samples.items()}
    peer = median.get("llama_server")
    results = {
        "measured": True,
        "moe_offload_decode_gain": median["split"][1] / median["whole"][1],
        "moe_offload_prefill_gain": median["split"][0] / median["whole"][0],
        "moe_offload_vs_llama_server_decode": median["split"][1] / peer[1] if peer else None,
        "moe_offload_vs_llama_server_prefill": median["split"][0] / peer[0] if peer else None,
        "device": f"{gpu.name} ({gpu.description}), capped at {args.cap}",
        "split_placement": loaded.get("placement", ""),
        "whole_num_gpu": whole_layers,
        "llama_server_n_cpu_moe": n_cpu_moe,
        "split_prefill_tok_s": median["split"][0], "split_decode_tok_s": median["split"][1],
        "whole_prefill_tok_s": median["whole"][0], "whole_decode_tok_s": median["whole"][1],
        "llama_server_prefill_tok_s": peer[0] if peer else None, "llama_server_decode_tok_s": peer[1] if peer else None,
        "rounds": args.rounds, "tokens": args.tokens, "threads": args.threads,
    }
    results["round_pairs_prefill_decode_tok_s"] = samples.pairs()
    if peer_missing:
        for key in MOE_KEYS[2:]:
            not_measured(results, key, peer_missing)
    report(f"MoE expert split (Qwen3-30B-A3B-shaped, Q4_0) on {results['device']}, llama.cpp engine",
           list(results.items()), results, args.json, required=MOE_KEYS[:2])


def moe_model() -> Path:
    """The full-size synthetic Qwen3-30B-A3B-shaped model, written once into the test cache."""
    path = Path(fixtures.cache_dir()) / "qwen3moe-30b-a3b-shaped-q4_0.gguf"
    if not path.exists():
        partial = path.with_suffix(".partial")
        qwen3moe_model(partial, fixtures.smollm2_gguf(), QWEN3_30B_A3B, quantized=True)
        partial.replace(path)  # never a half-written model under the final name
    return path


def llama_server_n_cpu_moe(model: Path, device: str, cap: int, need: ModelFootprint, threads: int) -> int:
    """The ``--n-cpu-moe`` a user would settle on under ``cap``: the fewest layers with their experts on the CPU
    for which llama-server's own buffers on ``device`` (model, KV, compute: its log, every expert on the CPU)
    and the experts of the other layers fit."""
    from localllm.backends.llama_cpp import BUFFER_LINE

    probe = LlamaServer(model, threads, 1, MOE_CTX, free_port(), variant="cuda",
                        extra=["-ngl", "99", "--n-cpu-moe", str(need.n_layers), "-dev", device])
    try:
        probe.wait_ready(600)
        probe.log.seek(0)
        log = probe.log.read().decode(errors="replace")
    finally:
        probe.stop()
    base = sum(float(mib) for name, mib in BUFFER_LINE.findall(log) if name == device) * (1 << 20)
    if not base:
        raise RuntimeError(f"llama-server's log names no {device} buffer: {log[-1000:]}")
    per_layer = max(need.expert_weights)
    return max(0, need.n_layers - int((cap - base) // per_layer))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vulkan", action="store_true", help="the Vulkan build on Mesa's software device")
    p.add_argument("--layers", type=int, default=31, help="num_gpu of the GPU side (default: every layer)")
    p.add_argument("--moe", action="store_true", help="a MoE model under a VRAM cap: the expert split's gain")
    p.add_argument("--cap", default="8G", help="--moe: the VRAM cap (LOCALLLM_GPU_MEMORY) of the first GPU")
    p.add_argument("--threads", type=int, default=None, help="--moe: CPU threads of every side (default: cores)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    if args.moe:
        from localllm.backends.llama_cpp import physical_cores

        args.threads = args.threads or physical_cores()
        moe(args)
        return
    daemon = start_daemon(LOCALLLM_MAX_LOADED_MODELS="1", **(vulkan_env(vulkan_site()) if args.vulkan else {}))
    try:
        samples = alternating(args.rounds, {
            "cpu": lambda: measure(daemon.url, args.tokens, num_gpu=0),
            "gpu": lambda: measure(daemon.url, args.tokens, num_gpu=args.layers),
        })
        measure(daemon.url, 1, num_gpu=args.layers)  # the GPU side loaded, to read where its layers are
        (loaded,) = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
    finally:
        daemon.stop()
    median = {side: [statistics.median(s[i] for s in runs) for i in (0, 1)] for side, runs in samples.items()}
    device = ", ".join(f"{e['device']} {e['layers']}" for e in loaded["split"] if e["layers"])
    results = {
        "prefill_ratio": median["gpu"][0] / median["cpu"][0],
        "decode_ratio": median["gpu"][1] / median["cpu"][1],
        "device": device,
        "cpu_prefill_tok_s": median["cpu"][0], "gpu_prefill_tok_s": median["gpu"][0],
        "cpu_decode_tok_s": median["cpu"][1], "gpu_decode_tok_s": median["gpu"][1],
        "rounds": args.rounds, "tokens": args.tokens,
        "round_pairs_prefill_decode_tok_s": samples.pairs(lambda rates: [round(rate, 1) for rate in rates]),
    }
    rows = [(key, value) for key, value in results.items() if key != "round_pairs_prefill_decode_tok_s"]
    rows += round_rows("prefill, decode tok/s", results["round_pairs_prefill_decode_tok_s"])
    report(f"GPU offload ({device}) against the CPU, llama.cpp engine", rows, results, args.json)


if __name__ == "__main__":
    main()
