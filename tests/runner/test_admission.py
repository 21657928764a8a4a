"""Fair admission and preemption on the native engine's KV pool, through a real runner and a real daemon.

A request that does not fit the pool yet may be passed by a bounded number
of later, smaller ones, then goes first; a preempted request is counted in
its final stats and in ``/metrics``; a prompt the whole pool could never hold
is a 400 before it queues, not a request that waits forever.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from support.daemon import Daemon
from localllm.runner.engine import MAX_BYPASS
from support.runner import chat_prompt, parse_stream, running_runner, runner_threads

MODEL = "smollm2:135m"
ENDLESS = 'root ::= "la " root'  # never lets an answer end: every request makes exactly num_predict tokens


async def _stream(ac: httpx.AsyncClient, body: dict, queued: asyncio.Event | None = None,
                  running: asyncio.Event | None = None) -> dict:
    """One streamed /completion; ``queued`` is set once the runner has queued it (its headers came),
    ``running`` once its first piece came."""
    async with ac.stream("POST", "/completion", json=body) as r:
        assert r.status_code == 200, await r.aread()
        if queued is not None:
            queued.set()
        lines = []
        async for line in r.aiter_lines():
            lines.append(line)
            if running is not None:
                running.set()
        _, final = parse_stream(lines)
    assert final.get("done"), final
    return final


def test_a_big_request_is_not_starved_by_a_stream_of_small_ones(smollm2_path: Path) -> None:
    """A 194-token prompt (13 blocks) in a pool of 24 fits only while at most two small requests (3-4
    blocks each) run. It arrives while five run, with sixteen more queued behind it that would keep
    four or more running for as long as they last; it lets at most MAX_BYPASS of them start first."""
    big = {"prompt": chat_prompt("Summarise: " + "the tide rises and falls twice a day. " * 20),
           "options": {"temperature": 0, "num_predict": 1}}
    smalls = [{"prompt": chat_prompt(f"Song {i}: " + "sing la, la, la, as the chorus goes. " * 2), "grammar": ENDLESS,
               "options": {"temperature": 0, "num_predict": 18 + 2 * (i % 3)}} for i in range(21)]  # 3-4 blocks
    args = ("--engine", "native", "--ctx", "256", "--parallel", "6", "--kv-tokens", "384", "--threads",
            runner_threads())  # fmt: skip
    finished: list[str] = []  # in the order their final events arrive

    async def run(name: str, ac: httpx.AsyncClient, body: dict, **events: asyncio.Event) -> None:
        await _stream(ac, body, **events)
        finished.append(name)

    async def traffic(runner) -> None:
        async with runner.async_client(timeout=600) as ac:
            first_wave = [asyncio.Event() for _ in range(5)]
            tasks = [asyncio.create_task(run(f"small {i}", ac, smalls[i], running=first_wave[i])) for i in range(5)]
            for started in first_wave:
                await started.wait()
            big_queued = asyncio.Event()
            tasks.append(asyncio.create_task(run("big", ac, big, queued=big_queued)))
            await big_queued.wait()
            tasks += [asyncio.create_task(run(f"small {i}", ac, smalls[i])) for i in range(5, len(smalls))]
            await asyncio.gather(*tasks)

    with running_runner(smollm2_path, *args) as runner, runner.client() as c:
        tokens = c.post("/tokenize", json={"content": big["prompt"], "prompt": True}).json()["tokens"]
        assert 193 <= len(tokens) <= 208  # 13 blocks: more than the pool has beside three small requests
        asyncio.run(traffic(runner))
    ahead = finished.index("big")
    assert ahead <= 5 + MAX_BYPASS, finished  # the five running before it, and at most MAX_BYPASS after it


def test_preemptions_are_counted_per_request_and_do_not_thrash(smollm2_path: Path) -> None:
    """Six generations outgrow a pool of 24 blocks: the newest give their KV back and are recomputed,
    each only a few times (a preempted one resumes with room for the others to grow)."""
    bodies = [{"prompt": chat_prompt(f"Count sheep, round {i}."), "grammar": ENDLESS,
               "options": {"temperature": 0, "num_predict": 80}} for i in range(6)]
    args = ("--engine", "native", "--ctx", "256", "--parallel", "6", "--kv-tokens", "384", "--threads",
            runner_threads())  # fmt: skip

    async def all_(runner) -> list[dict]:
        async with runner.async_client(timeout=600) as ac:
            return await asyncio.gather(*(_stream(ac, b) for b in bodies))

    with running_runner(smollm2_path, *args) as runner:
        finals = asyncio.run(all_(runner))
        assert "preempting" in runner.stderr
    counts = [f["preemptions"] for f in finals]
    assert sum(counts) > 0 and max(counts) <= 2, counts
    assert all(f["eval_count"] == 80 for f in finals)


@pytest.fixture(scope="module")
def small_pool_daemon(tmp_path_factory, smollm2_path):
    """A daemon whose native runners get a KV pool of 256 positions, less than one default context."""
    daemon = Daemon(tmp_path_factory.mktemp("small-pool"), LOCALLLM_ENGINE="native", LOCALLLM_KV_TOKENS="256",
                    LOCALLLM_NUM_PARALLEL="2").start()
    try:
        daemon.create(MODEL, f"FROM {smollm2_path}")
        yield daemon
    finally:
        daemon.stop()


def test_a_prompt_larger_than_the_whole_pool_is_refused_at_admission(small_pool_daemon):
    url = small_pool_daemon.url
    long_prompt = "Summarise: " + "the tide rises and falls twice a day. " * 40  # ~400 tokens
    refused = httpx.post(f"{url}/api/generate", json={"model": MODEL, "prompt": long_prompt, "stream": False},
                         timeout=120)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert "the whole KV pool holds 256" in error and "LOCALLLM_KV_TOKENS" in error, error
    openai = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": long_prompt}], "max_tokens": 4})
    assert openai.status_code == 400 and "KV pool" in openai.json()["error"]["message"], openai.text
    served = httpx.post(f"{url}/api/generate", timeout=120, json={
        "model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 4, "temperature": 0}})
    assert served.status_code == 200 and served.json()["done"], served.text
    metrics = httpx.get(f"{url}/metrics", timeout=30).text
    assert f'localllm_request_preemptions_bucket{{model="{MODEL}",le="0"}} 1' in metrics, metrics
    assert f'localllm_request_preemptions_count{{model="{MODEL}"}} 1' in metrics


def test_a_negative_pool_size_stops_the_daemon_with_a_message(tmp_path):
    with pytest.raises(RuntimeError, match="daemon exited.*LOCALLLM_KV_TOKENS must not be negative"):
        Daemon(tmp_path, LOCALLLM_KV_TOKENS="-16").start(timeout=60)
