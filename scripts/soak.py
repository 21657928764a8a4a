"""Soak: many mixed requests against a real daemon; fails on server errors, memory growth or leaks.

    python scripts/soak.py [--requests 2000] [--minutes 10] [--concurrency 4] [--json]
    python scripts/soak.py --torture [--minutes 30] [--engine native|llama.cpp|both] [--json]

With ``--torture`` it runs the torture test (``tests/support/torture.py``) round after
round for ``--minutes``, a new seed each round, on each engine in turn: random
traffic through a real runner small enough to preempt, spill and shift, while
pollers call /health, /tokenize and /detokenize, every finished request compared
with its solo answer (text, token ids, log-probabilities). Exits 1 on any difference.

Starts ``localllm serve`` on a free loopback port with its own store holding
SmolLM2 (the test fixture), then sends a mix of chat, generate, embeddings,
OpenAI chat, streams cancelled after their first chunk and malformed bodies.
The first tenth of the requests (at least 30) is warm-up: it loads the
runners and touches their caches; then the soak waits for the runners' memory
to settle (a native runner faults its KV pool in once it is idle). Measured
against that point:

- 5xx answers other than a declared overload (503): must be 0;
- transport errors (connection refused or reset): must be 0;
- resident memory of the daemon and of the runners: growth under 5 %;
- the daemon's child processes, open files and sockets: no more than after
  the warm-up, beyond the idle connections it may keep to each runner (one
  per request that ran at once); after shutdown, no process of the soak is left.

Exits 1 on any failure (or when the requests do not fit in ``--minutes``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from localllm.runner.engine import CHORES_AFTER_IDLE_S

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.daemon / support.fixtures: start a daemon, find the model

MODEL = "smollm2:135m"
MAX_RSS_GROWTH = 0.05
TORTURE_REQUESTS = 24  # a torture round's requests


@dataclass
class Snapshot:
    """What the daemon's process tree holds at one moment (read from /proc)."""

    daemon_rss: int
    runner_rss: int
    children: list[int]
    files: int
    sockets: int


@dataclass
class Report:
    requests_sent: int = 0
    seconds: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)  # 5xx other than 503
    transport_errors: list[str] = field(default_factory=list)
    warm: Snapshot | None = None
    end: Snapshot | None = None
    leftover_processes: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return sorted(found)


def settled_snapshot(pid: int, timeout: float = 60.0) -> Snapshot:
    """A snapshot once the runners' resident memory stops growing (an idle native runner faults its KV pool
    in, slice by slice): growth after it is the soak's, not the pool's first touch. The runner starts that
    work only after CHORES_AFTER_IDLE_S without a request, so memory must hold still over a longer window:
    two reads a second apart both fell before it began, and the pool's first touch then counted as growth."""
    window = CHORES_AFTER_IDLE_S + 2.0
    previous = snapshot(pid)
    still_since = time.monotonic()
    give_up = still_since + timeout
    while time.monotonic() < give_up:
        time.sleep(0.5)
        current = snapshot(pid)
        if abs(current.runner_rss - previous.runner_rss) >= 1 << 20:
            previous, still_since = current, time.monotonic()
        elif time.monotonic() - still_since >= window:
            return current
    return previous


def snapshot(pid: int) -> Snapshot:
    children = _children(pid)
    files = sockets = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        files += 1
        sockets += target.startswith("socket:")
    return Snapshot(_rss(pid), sum(_rss(child) for child in children), children, files, sockets)


# -- the request mix -------------------------------------------------------------------

Request = Callable[[httpx.AsyncClient], Awaitable[int]]
OPTIONS = {"num_predict": 6, "temperature": 0.7}
PROMPTS = ["Name a colour.", "Say hello in French.", "What is 2+2?", "Write one word about the sea.",
           "List three fruits.", "Why is the sky blue? One sentence."]


async def chat(client: httpx.AsyncClient) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": random.choice(PROMPTS)}], "stream": False,
            "options": OPTIONS}
    return (await client.post("/api/chat", json=body)).status_code


async def chat_stream(client: httpx.AsyncClient) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": random.choice(PROMPTS)}], "options": OPTIONS}
    async with client.stream("POST", "/api/chat", json=body) as response:
        async for _line in response.aiter_lines():
            pass
        return response.status_code


async def generate(client: httpx.AsyncClient) -> int:
    body = {"model": MODEL, "prompt": random.choice(PROMPTS), "stream": random.random() < 0.5, "options": OPTIONS}
    async with client.stream("POST", "/api/generate", json=body) as response:
        await response.aread()
        return response.status_code


async def openai_chat(client: httpx.AsyncClient) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": random.choice(PROMPTS)}], "max_tokens": 6}
    return (await client.post("/v1/chat/completions", json=body)).status_code


async def embed(client: httpx.AsyncClient) -> int:
    texts = random.sample(PROMPTS, k=random.randint(1, 3))
    return (await client.post("/api/embed", json={"model": MODEL, "input": texts})).status_code


async def cancelled_stream(client: httpx.AsyncClient) -> int:
    """Read the first chunk of a long generation, then hang up: the daemon must stop the work."""
    body = {"model": MODEL, "prompt": "Tell me a long story.", "options": {"num_predict": 64}}
    async with client.stream("POST", "/api/generate", json=body) as response:
        async for _line in response.aiter_lines():
            break
        return response.status_code


MALFORMED: list[tuple[str, str, bytes | dict]] = [
    ("POST", "/api/chat", b'{"model": "smollm2:135m", "messages": ['),
    ("POST", "/api/generate", {"model": MODEL, "prompt": 7, "options": {"num_predict": "many"}}),
    ("POST", "/api/chat", {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}),
    ("POST", "/api/chat", {"model": "no-such-model:1b", "messages": []}),
    ("POST", "/api/generate", {"model": "../../etc/passwd", "prompt": "x"}),
    ("POST", "/api/embed", {"model": MODEL, "input": []}),
    ("POST", "/v1/chat/completions", {"model": MODEL, "messages": "not a list"}),
    ("POST", "/api/show", b"\xff\xfe not json"),
    ("DELETE", "/api/delete", {"model": ""}),
]


async def malformed(client: httpx.AsyncClient) -> int:
    method, path, body = random.choice(MALFORMED)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (await client.request(method, path, content=content)).status_code


MIX: list[tuple[Request, int]] = [
    (chat, 4), (chat_stream, 4), (generate, 4), (openai_chat, 2), (embed, 3), (cancelled_stream, 2), (malformed, 4),
]


def next_request() -> Request:
    requests, weights = zip(*MIX)
    return random.choices(requests, weights)[0]


async def run_requests(url: str, count: int, concurrency: int, deadline: float, report: Report) -> None:
    """Send ``count`` requests from the mix, ``concurrency`` at a time, stopping at ``deadline``."""
    remaining = iter(range(count))

    async def worker(client: httpx.AsyncClient) -> None:
        for _index in remaining:
            if time.monotonic() > deadline:
                return
            request = next_request()
            report.requests_sent += 1
            report.kinds[request.__name__] += 1
            try:
                status = await request(client)
            except httpx.TransportError as exc:
                report.transport_errors.append(f"{request.__name__}: {type(exc).__name__}: {exc}")
                continue
            report.statuses[status] += 1
            if status >= 500 and status != 503:
                report.server_errors.append(f"{request.__name__}: HTTP {status}")

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))


def check(report: Report, requested: int, concurrency: int) -> None:
    failures = report.failures
    if report.requests_sent < requested:
        failures.append(f"only {report.requests_sent} of {requested} requests fitted in the time allowed")
    if report.server_errors:
        failures.append(f"{len(report.server_errors)} server errors (non-503 5xx): {report.server_errors[:5]}")
    if report.transport_errors:
        failures.append(f"{len(report.transport_errors)} transport errors: {report.transport_errors[:5]}")
    warm, end = report.warm, report.end
    assert warm is not None and end is not None
    for label, before, after in (("daemon", warm.daemon_rss, end.daemon_rss),
                                 ("runner", warm.runner_rss, end.runner_rss)):
        if before and (after - before) / before >= MAX_RSS_GROWTH:
            failures.append(f"{label} RSS grew {100 * (after - before) / before:.1f}% ({before} -> {after} bytes)")
    if set(end.children) - set(warm.children):
        failures.append(f"new child processes after warm-up: {warm.children} -> {end.children}")
    # The daemon keeps idle connections to each runner for reuse, as many as were ever in use at
    # once: up to `concurrency` a runner more after the run than after warm-up, however many
    # requests ran. A leak grows with the requests (a socket per cancelled stream, say) past that.
    slack = concurrency * max(1, len(end.children))
    if end.files > warm.files + slack or end.sockets > warm.sockets + slack:
        failures.append(f"open files {warm.files} -> {end.files}, sockets {warm.sockets} -> {end.sockets}")
    if report.leftover_processes:
        failures.append(f"processes left after shutdown: {report.leftover_processes}")


def soak(requests: int, minutes: float, concurrency: int, model_path: Path | None) -> Report:
    from support.daemon import Daemon

    from support import fixtures

    report = Report()
    started = time.monotonic()
    deadline = started + minutes * 60
    with tempfile.TemporaryDirectory(prefix="localllm-soak-") as tmp:
        daemon = Daemon(Path(tmp), LOCALLLM_KEEP_ALIVE="30m")
        daemon.start()
        pids: list[int] = []
        try:
            daemon.create(MODEL, f"FROM {model_path or fixtures.smollm2_gguf()}")
            assert daemon.process is not None
            warmup = min(requests, max(30, requests // 10))
            for request in (chat, embed):  # both runners up before the mix
                asyncio.run(run_one(daemon.url, request))
            asyncio.run(run_requests(daemon.url, warmup, concurrency, deadline, report))
            report.warm = settled_snapshot(daemon.process.pid)
            asyncio.run(run_requests(daemon.url, requests - warmup, concurrency, deadline, report))
            time.sleep(1)  # cancelled streams finish; idle connections settle
            report.end = snapshot(daemon.process.pid)
            pids = [daemon.process.pid, *report.end.children]
        finally:
            daemon.stop()
        time.sleep(0.5)
        report.leftover_processes = [pid for pid in pids if Path(f"/proc/{pid}").exists()
                                     and "zombie" not in _state(pid)]
    report.seconds = time.monotonic() - started
    check(report, requests, concurrency)
    return report


async def run_one(url: str, request: Request) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        status = await request(client)
        if status != 200:
            raise RuntimeError(f"warm-up {request.__name__} failed with HTTP {status}")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0].lower()
    except (OSError, IndexError):
        return "zombie"


@dataclass
class TortureTotals:
    rounds: int = 0
    requests: int = 0
    finished: int = 0
    left: int = 0
    preemptions: int = 0
    shifts: int = 0
    spill_rounds: int = 0  # rounds in which evicted KV went to host RAM
    polls: int = 0
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0
    per_engine: dict[str, int] = field(default_factory=dict)  # rounds on each engine


def torture_soak(minutes: float, engines: list[str], requests: int, model_path: Path | None) -> TortureTotals:
    """Torture rounds until ``minutes`` have passed (a round started in time is finished)."""
    from support import fixtures
    from support.torture import torture

    totals = TortureTotals()
    started = time.monotonic()
    model = model_path or fixtures.smollm2_gguf()
    while time.monotonic() - started < minutes * 60:
        engine = engines[totals.rounds % len(engines)]
        report = torture(model, engine, seed=1000 + totals.rounds, n_requests=requests)
        totals.rounds += 1
        totals.per_engine[engine] = totals.per_engine.get(engine, 0) + 1
        totals.requests += report.requests
        totals.finished += report.finished
        totals.left += report.left
        totals.preemptions += report.preemptions
        totals.shifts += report.shifts
        totals.spill_rounds += bool(report.peak_spilled_blocks or report.peak_cache_ram_bytes)
        totals.polls += report.polls
        totals.differences += [f"{engine} seed {report.seed}: {d}" for d in report.differences]
        print(f"round {totals.rounds} ({engine}, seed {report.seed}): {report.finished}/{report.requests} finished, "
              f"{report.preemptions} preemptions, {report.shifts} shifts, spilled {report.peak_spilled_blocks} blocks "
              f"/ {report.peak_cache_ram_bytes} bytes, {report.polls} polls, {len(report.differences)} differences, "
              f"{report.seconds:.0f}s", file=sys.stderr, flush=True)
    totals.seconds = time.monotonic() - started
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the SmolLM2 test fixture)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--torture", action="store_true", help="torture rounds against solo answers instead")
    parser.add_argument("--engine", choices=["native", "llama.cpp", "both"], default="both", help="with --torture")
    args = parser.parse_args()
    if args.torture:
        engines = ["native", "llama.cpp"] if args.engine == "both" else [args.engine]
        totals = torture_soak(args.minutes, engines, TORTURE_REQUESTS, args.model)
        print(json.dumps(asdict(totals), indent=2) if args.json else
              f"{totals.rounds} rounds {dict(totals.per_engine)} in {totals.seconds:.0f}s: {totals.requests} requests, "
              f"{totals.finished} finished, {totals.left} left early, {totals.preemptions} preemptions, "
              f"{totals.shifts} context shifts, {totals.spill_rounds} rounds with spills, {totals.polls} polls, "
              f"{len(totals.differences)} differences" + "".join(f"\n  {d}" for d in totals.differences[:20]))
        return 1 if totals.differences else 0
    report = soak(args.requests, args.minutes, args.concurrency, args.model)
    if args.json:
        print(json.dumps(asdict(report), indent=2, default=str))
    else:
        warm, end = report.warm, report.end
        print(f"{report.requests_sent} requests in {report.seconds:.0f}s: statuses {dict(report.statuses)}")
        print(f"kinds {dict(report.kinds)}")
        if warm and end:
            print(f"daemon RSS {warm.daemon_rss >> 20} -> {end.daemon_rss >> 20} MiB, "
                  f"runners RSS {warm.runner_rss >> 20} -> {end.runner_rss >> 20} MiB")
            print(f"children {warm.children} -> {end.children}, files {warm.files} -> {end.files}, "
                  f"sockets {warm.sockets} -> {end.sockets}")
        print("FAILED:\n  " + "\n  ".join(report.failures) if report.failures else "OK")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
