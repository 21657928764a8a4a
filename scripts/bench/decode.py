"""Single-stream decode speed: our streamed tokens/s against llama-cpp-python's ``Llama.generate``.

Both sides run greedy decoding of the same prompt on the same model with the
same number of threads, one after the other (never at the same time: they
would share the CPU), alternating for ``--rounds`` rounds, the order reversed
every other round; the median of each side is compared, and ``round_pairs``
lists each round's pair in the order it ran. Tokens/s counts the decode phase
only: from the first generated token to the last, so prompt processing and
model loading do not blur the figure.

    python scripts/bench/decode.py [--model GGUF] [--threads 2] [--tokens 128] [--engine native] [--json]

"ours" is the daemon's streamed ``/api/generate`` (``--side daemon``, the
default) or the bare runner process's ``/completion`` (``--side runner``), on
the engine the daemon chooses (native for SmolLM2 on x86 AVX2 and up), or the
one ``--engine`` forces (``PARAMETER engine``). ``--json`` prints
``decode_ratio`` (ours ÷ ``Llama.generate``) and the ``engine`` that ran.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # support.runner / support.fixtures: start a runner, find the model

PROMPT = "<|im_start|>user\nWrite a long story about a dragon who learns to bake bread.<|im_end|>\n<|im_start|>assistant\n"


@dataclass(frozen=True)
class BenchConfig:
    model: Path
    threads: int
    tokens: int
    engine: str | None = None  # None: the daemon's choice (the runner side then runs native)
    prompt: str = PROMPT


@dataclass(frozen=True)
class Measurement:
    tokens: int  # generated tokens timed (after the first)
    seconds: float
    engine: str = ""  # the engine that ran (the daemon side says)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


Side = Callable[[BenchConfig], Callable[[], Measurement]]
"""Prepares a side once (load the model) and returns the function that measures one round."""


def runner_side(cfg: BenchConfig) -> Callable[[], Measurement]:
    """Our runner process: stream ``/completion`` over its unix socket."""
    import atexit

    from support.runner import RunnerProcess

    runner = RunnerProcess(cfg.model, "--threads", str(cfg.threads), "--parallel", "1", "--ctx", "2048",
                           "--engine", cfg.engine or "native")
    atexit.register(runner.cleanup)
    runner.wait_ready()
    client = runner.client()
    body = {"prompt": cfg.prompt, "options": {"temperature": 0, "repeat_penalty": 1.0, "num_predict": cfg.tokens}}

    def measure() -> Measurement:
        with client.stream("POST", "/completion", json=body) as r:
            return stream_measurement(r.iter_lines())

    return measure


def daemon_side(cfg: BenchConfig) -> Callable[[], Measurement]:
    """The whole product: the daemon's streamed ``/api/generate`` (raw prompt), runner behind it."""
    import atexit

    import httpx

    sys.path.insert(0, str(Path(__file__).parent))
    from common import start_daemon

    daemon = start_daemon(LOCALLLM_NUM_THREADS=str(cfg.threads))
    atexit.register(daemon.stop)
    daemon.create("bench", f"FROM {cfg.model}\n" + (f"PARAMETER engine {cfg.engine}\n" if cfg.engine else ""))
    body = {"model": "bench", "prompt": cfg.prompt, "raw": True, "keep_alive": -1,
            "options": {"temperature": 0, "repeat_penalty": 1.0, "num_predict": cfg.tokens, "num_ctx": 2048}}

    def measure() -> Measurement:
        with httpx.stream("POST", f"{daemon.url}/api/generate", json=body, timeout=600) as r:
            measured = stream_measurement(r.iter_lines())
        models = httpx.get(f"{daemon.url}/api/ps", timeout=10).json()["models"]
        return Measurement(measured.tokens, measured.seconds, next(m["engine"] for m in models if m["name"] == "bench:latest"))

    return measure


def stream_measurement(lines: Iterable[str]) -> Measurement:
    """Decode speed of an NDJSON token stream: first piece to last, tokens from the final event."""
    first = last = 0.0
    for line in lines:
        if not line:
            continue
        now = time.perf_counter()
        item = json.loads(line)
        if "error" in item:
            raise RuntimeError(item["error"])
        if item.get("done"):
            return Measurement(tokens=item["eval_count"] - 1, seconds=last - first)
        first = first or now
        last = now
    raise RuntimeError("the stream ended without a final event")


def llama_cpp_side(cfg: BenchConfig) -> Callable[[], Measurement]:
    """llama-cpp-python's high-level ``Llama.generate`` in this process."""
    import llama_cpp

    llm = llama_cpp.Llama(str(cfg.model), n_threads=cfg.threads, n_ctx=2048, verbose=False)
    tokens = llm.tokenize(cfg.prompt.encode(), special=True)

    def measure() -> Measurement:
        first = 0.0
        count = 0
        for token in llm.generate(tokens, temp=0.0, repeat_penalty=1.0, reset=True):
            count += 1
            if count == 1:
                first = time.perf_counter()
            if count >= cfg.tokens or llm.token_eos() == token:
                break
        return Measurement(tokens=count - 1, seconds=time.perf_counter() - first)

    return measure


def run(cfg: BenchConfig, ours: Side, rounds: int) -> dict:
    """Alternate the two sides for ``rounds`` rounds; medians and their ratio."""
    sides = {"ours": ours(cfg), "llama_cpp_python": llama_cpp_side(cfg)}
    from common import alternating

    for measure in sides.values():
        measure()  # warm-up: page in the weights, fill caches
    results = alternating(rounds, sides)
    medians = {name: statistics.median(m.tokens_per_second for m in ms) for name, ms in results.items()}
    return {
        "model": str(cfg.model),
        "threads": cfg.threads,
        "tokens": cfg.tokens,
        "rounds": rounds,
        "ours_tokens_per_s": round(medians["ours"], 2),
        "llama_cpp_python_tokens_per_s": round(medians["llama_cpp_python"], 2),
        "decode_ratio": round(medians["ours"] / medians["llama_cpp_python"], 3),
        "engine": results["ours"][-1].engine or cfg.engine or "native",
        "samples": {name: [asdict(m) for m in ms] for name, ms in results.items()},
        "round_pairs": results.pairs(lambda m: round(m.tokens_per_second, 2)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None, help="GGUF file (default: the SmolLM2 test model)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--engine", choices=["llama.cpp", "native"], default=None,
                   help="force our side's engine (default: the daemon's choice)")
    p.add_argument("--side", choices=["daemon", "runner"], default="daemon",
                   help="ours: the daemon's /api/generate (default) or the bare runner process")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the runner (atexit) when killed
    if args.model is None:
        from support import fixtures

        args.model = fixtures.smollm2_gguf()
    ours = daemon_side if args.side == "daemon" else runner_side
    cfg = BenchConfig(model=args.model, threads=args.threads, tokens=args.tokens, engine=args.engine)
    report = run(cfg, ours, args.rounds)
    report["side"] = args.side
    if args.json:
        print(json.dumps(report))
        return
    print(f"model {report['model']}, {report['threads']} threads, {report['tokens']} tokens, {report['rounds']} rounds,"
          f" engine {report['engine']}")
    print(f"{'side':<20} {'tokens/s':>10}")
    print(f"{'ours (' + args.side + ')':<20} {report['ours_tokens_per_s']:>10.1f}")
    print(f"{'Llama.generate':<20} {report['llama_cpp_python_tokens_per_s']:>10.1f}")
    print(f"{'ratio':<20} {report['decode_ratio']:>10.3f}")
    from common import round_rows

    for label, pair in round_rows("tokens/s", report["round_pairs"]):
        print(f"{label}: {pair}")


if __name__ == "__main__":
    main()
