"""The torture run: random traffic through a real runner, every finished request checked against its solo answer.

A request's output must never depend on what else happens in the runner. One
run starts a runner whose KV is small enough to force preemption, spills,
restores and context shifts, and sends it a random mix: prompts of many
lengths over a few shared prefixes, streams and whole answers, greedy and
seeded sampling, some with log-probabilities, clients that leave at random
points. Meanwhile other clients hammer ``/health`` (what the daemon reads for
``/api/ps`` and ``/metrics``), ``/tokenize`` and ``/detokenize``. Then a fresh
runner answers every request that finished, alone and one at a time; text,
token ids and log-probabilities must be the same, and so must every poll's
answer. Afterwards the runner holds no block and no queued request, and its
KV books passed their own checks after every step (``--check-kv``).

Used by ``tests/runner/test_torture.py`` (short runs) and ``scripts/soak.py --torture`` (long ones).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from support.runner import RunnerProcess, running_runner, runner_threads

CTX = 256
# The runner under torture: a context small enough that long answers shift it; on the native engine a
# pool of 25 blocks for 8 sequences (preemption) and 2 MiB of host RAM for evicted prefixes (spills).
ENGINE_ARGS: dict[str, tuple[str, ...]] = {
    "native": ("--engine", "native", "--parallel", "8", "--kv-tokens", "400", "--cache-ram-mb", "2"),
    "llama.cpp": ("--engine", "llama.cpp", "--parallel", "1", "--cache-ram-mb", "2"),
}
SYSTEM = "You are a patient assistant who answers questions about the sea, the sky and the stars. "
TOPICS = ["tides", "comets", "lighthouses", "coral reefs", "the Moon", "storms at sea", "coffee", "deserts"]
POLLERS = 2
STOPS = ["<|im_start|>", "<|im_end|>"]  # smollm2:135m's stop words in the catalog
# Texts whose tokens the pollers send through /tokenize and /detokenize: words and special tokens.
POLL_TEXTS = ["<|im_start|>user\nHello<|im_end|>", "Tides refer to the rise and fall of the sea.",
              "the most inhospitable land on Earth", "<|endoftext|>", "Coffee is a versatile beverage."]


@dataclass(frozen=True)
class Job:
    """One request of the traffic: its ``/completion`` body, and when its client leaves."""

    index: int
    body: dict[str, Any]
    hang_up_after: int | None  # stream events read before the client leaves; None: it reads the answer


@dataclass
class Answer:
    """What a finished request produced."""

    text: str
    context: list[int]  # the prompt's token ids, then the answer's
    done_reason: str
    logprobs: list[Any]  # (id, logprob, top) of each answer token; streams only

    @classmethod
    def of_stream(cls, events: list[dict[str, Any]]) -> Answer | None:
        final = events[-1] if events else {}
        if not final.get("done"):
            return None
        text = "".join(e.get("content", "") for e in events[:-1])
        logprobs = [(lp["id"], lp["logprob"], [(t["id"], t["logprob"]) for t in lp.get("top_logprobs", ())])
                    for e in events for lp in e.get("logprobs", ())]  # fmt: skip
        return cls(text, final["context"], final["done_reason"], logprobs)


@dataclass
class Report:
    """One torture run, in figures."""

    engine: str
    seed: int
    requests: int = 0
    finished: int = 0
    left: int = 0  # clients that hung up before the end
    preemptions: int = 0
    shifts: int = 0
    peak_spilled_blocks: int = 0
    peak_cache_ram_bytes: int = 0
    polls: int = 0
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0


def make_jobs(rng: random.Random, n: int) -> list[Job]:
    """``n`` random requests over a few shared prefixes, 20 to 230 prompt tokens."""
    heads = [f"<|im_start|>system\n{SYSTEM * rng.randint(1, 7)}<|im_end|>\n" for _ in range(3)]
    jobs = []
    for i in range(n):
        question = f"Question {i}: tell me about {rng.choice(TOPICS)}." + " Be precise." * rng.randint(0, 8)
        prompt = rng.choice([*heads, ""]) + f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
        options: dict[str, Any] = {"num_predict": rng.choice([4, 16, 32, 64, 128]), "num_keep": 8}
        if rng.random() < 0.5:
            options["temperature"] = 0
        else:
            options.update(temperature=0.8, top_k=40, seed=rng.randrange(1 << 16))
        if rng.random() < 0.5:
            options["stop"] = STOPS
        stream = rng.random() < 0.7
        if stream and rng.random() < 0.4:
            options.update(logprobs=True, top_logprobs=3)
        hang_up_after = rng.choice([None, None, None, 0, 2, 6]) if stream else None
        jobs.append(Job(i, {"prompt": prompt, "options": options, "stream": stream}, hang_up_after))
    rng.shuffle(jobs)
    return jobs


async def _send(client: httpx.AsyncClient, job: Job) -> Answer | None:
    """The job's answer, or None when its client left first."""
    if not job.body["stream"]:
        response = await client.post("/completion", json=job.body)
        body = response.json()
        if response.status_code != 200:
            raise AssertionError(f"request {job.index}: HTTP {response.status_code}: {body}")
        return Answer(body["content"], body["context"], body["done_reason"], [])
    events: list[dict[str, Any]] = []
    async with client.stream("POST", "/completion", json=job.body) as response:
        if response.status_code != 200:
            raise AssertionError(f"request {job.index}: HTTP {response.status_code}: {await response.aread()}")
        async for line in response.aiter_lines():
            if job.hang_up_after is not None and len(events) >= job.hang_up_after:
                return None
            if line.strip():
                events.append(json.loads(line))
    if "error" in events[-1]:
        raise AssertionError(f"request {job.index} failed: {events[-1]['error']}")
    return Answer.of_stream(events)


def _poll_call(rng: random.Random, n_vocab: int) -> tuple[str, dict[str, Any]]:
    """A tokenize call of a text with special tokens, or a detokenize call of random token ids."""
    if rng.random() < 0.3:
        return "/tokenize", {"content": rng.choice(POLL_TEXTS)}
    return "/detokenize", {"tokens": [rng.randrange(n_vocab) for _ in range(32)] + [rng.randrange(16)]}


async def _poll(runner: RunnerProcess, fresh: RunnerProcess, seed: int, done: asyncio.Event, report: Report) -> None:
    """Call ``/health``, ``/tokenize`` and ``/detokenize`` until ``done``: every answer must be the one
    that ``fresh``, an idle runner of the same model, gives."""
    rng = random.Random(seed)
    async with runner.async_client() as client, fresh.async_client() as reference:
        at_rest = (await reference.get("/health")).json()
        while not done.is_set():
            path, body = _poll_call(rng, at_rest["n_vocab"])
            got = (await client.post(path, json=body)).json()
            expected = (await reference.post(path, json=body)).json()
            if got != expected:
                report.differences.append(f"{path} {body}: {got} while an idle runner says {expected}")
            health = (await client.get("/health")).json()
            for key in ("bos", "eos", "n_vocab"):
                if health[key] != at_rest[key]:
                    report.differences.append(f"/health {key}: {health[key]!r} while an idle runner says "
                                              f"{at_rest[key]!r}")
            blocks = health.get("kv_blocks") or {}
            report.peak_spilled_blocks = max(report.peak_spilled_blocks, blocks.get("spilled", 0))
            report.peak_cache_ram_bytes = max(report.peak_cache_ram_bytes, health["cache_ram_bytes"])
            report.polls += 2


async def _traffic(runner: RunnerProcess, fresh: RunnerProcess, jobs: list[Job], report: Report) -> dict[int, Answer]:
    done = asyncio.Event()
    async with runner.async_client(timeout=None) as client:  # a slow machine is not a fault
        pollers = [asyncio.create_task(_poll(runner, fresh, report.seed + i, done, report)) for i in range(POLLERS)]
        try:
            answers = await asyncio.gather(*(_send(client, job) for job in jobs))
        finally:
            done.set()
            await asyncio.gather(*pollers)
    return {job.index: answer for job, answer in zip(jobs, answers) if answer is not None}


async def _alone(runner: RunnerProcess, jobs: list[Job]) -> dict[int, Answer]:
    """Each job answered with nothing else running, its client reading to the end."""
    answers: dict[int, Answer] = {}
    async with runner.async_client(timeout=None) as client:
        for job in jobs:
            answer = await _send(client, Job(job.index, job.body, None))
            assert answer is not None
            answers[job.index] = answer
    return answers


def _idle(runner: RunnerProcess, timeout: float = 60.0) -> dict[str, Any]:
    """``/health`` once nothing runs or waits (cancelled requests are reaped at the next step)."""
    deadline = time.monotonic() + timeout
    with runner.client() as client:
        while True:
            health = client.get("/health").json()
            busy = health["queue_depth"] or (health["kv_blocks"] or {}).get("in_use", 0)
            if not busy or time.monotonic() > deadline:
                return health
            time.sleep(0.05)


def compare(jobs: list[Job], got: dict[int, Answer], alone: dict[int, Answer]) -> list[str]:
    """Each finished request's differences from its solo answer."""
    differences = []
    for job in sorted(jobs, key=lambda j: j.index):
        mine, solo = got.get(job.index), alone.get(job.index)
        if mine is None or solo is None:
            continue
        for name in ("text", "context", "done_reason", "logprobs"):
            if getattr(mine, name) != getattr(solo, name):
                differences.append(f"request {job.index} {job.body['options']}: {name} differs: "
                                   f"{getattr(mine, name)!r} alone {getattr(solo, name)!r}")
    return differences


def torture(model: Path, engine: str, seed: int, n_requests: int) -> Report:
    """One run (see the module docstring); the report's ``differences`` say what went wrong."""
    started = time.monotonic()
    report = Report(engine, seed, requests=n_requests)
    rng = random.Random(seed)
    jobs = make_jobs(rng, n_requests)
    common = ("--ctx", str(CTX), "--threads", runner_threads())
    with running_runner(model, *common, "--engine", engine, "--parallel", "1") as fresh:
        with running_runner(model, *common, "--check-kv", *ENGINE_ARGS[engine]) as runner:
            got = asyncio.run(_traffic(runner, fresh, jobs, report))
            after = _idle(runner)
            stderr = runner.stderr
        if after["queue_depth"] or (after["kv_blocks"] or {}).get("in_use", 0):
            report.differences.append(f"not every block came back: {after}")
        if "Traceback" in stderr or "ERROR" in stderr:
            report.differences.append(f"the runner logged errors:\n{stderr[-3000:]}")
        report.preemptions = len(re.findall("preempting", stderr))
        report.shifts = len(re.findall("context shift", stderr))
        report.finished = len(got)
        report.left = n_requests - len(got)
        finished = [job for job in jobs if job.index in got]
        alone = asyncio.run(_alone(fresh, finished))
    report.differences += compare(finished, got, alone)
    report.seconds = time.monotonic() - started
    return report
