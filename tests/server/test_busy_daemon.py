"""What happens around a generation must not change it: a dashboard polling the daemon, another model's
runner dying. Real daemon, real runners, answers compared token id for token id with solo ones."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.daemon import Daemon

STOPS = 'PARAMETER stop "<|im_start|>"\nPARAMETER stop "<|im_end|>"'  # as the catalog's smollm2:135m
QUESTIONS = ["What are tides?", "Describe the most inhospitable land on Earth.", "Why do people like coffee?",
             "What is a lighthouse for?", "Name three comets.", "How do coral reefs grow?"]
GREEDY = {"temperature": 0, "num_predict": 40}


@pytest.fixture
def busy_daemon(tmp_path: Path, smollm2_path: Path, gemma3_path: Path) -> Daemon:
    daemon = Daemon(tmp_path, LOCALLLM_KEEP_ALIVE="10m").start()
    try:
        daemon.create("smol", f"FROM {smollm2_path}\n{STOPS}")
        daemon.create("gem", f"FROM {gemma3_path}")
        yield daemon
    finally:
        daemon.stop()


async def _generate(client: httpx.AsyncClient, model: str, prompt: str) -> tuple[str, list[int]]:
    body = {"model": model, "prompt": prompt, "stream": False, "options": GREEDY}
    response = await client.post("/api/generate", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    return answer["response"], answer["context"]


async def _alone(url: str, model: str, prompts: list[str]) -> list[tuple[str, list[int]]]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        return [await _generate(client, model, prompt) for prompt in prompts]


def test_polling_api_ps_a_thousand_times_a_second_changes_no_answer(busy_daemon: Daemon) -> None:
    """Six answers at once while a client asks /api/ps every millisecond (and /metrics now and then),
    on a runner whose token texts are all still to be rendered: the same text and ids as alone."""

    async def polled() -> tuple[list[tuple[str, list[int]]], list[int]]:
        statuses: list[int] = []
        done = asyncio.Event()

        async def poll(client: httpx.AsyncClient) -> None:
            while not done.is_set():
                statuses.append((await client.get("/api/ps")).status_code)
                if len(statuses) % 50 == 0:
                    statuses.append((await client.get("/metrics")).status_code)
                await asyncio.sleep(0.001)

        async with httpx.AsyncClient(base_url=busy_daemon.url, timeout=600) as client:
            await _generate(client, "smol", "Hi")  # loaded before the polling starts
            poller = asyncio.create_task(poll(client))
            try:
                answers = await asyncio.gather(*(_generate(client, "smol", q) for q in QUESTIONS))
            finally:
                done.set()
                await poller
        return answers, statuses

    answers, statuses = asyncio.run(polled())
    assert statuses and set(statuses) == {200}
    assert answers == asyncio.run(_alone(busy_daemon.url, "smol", QUESTIONS))


def _runner_of(daemon: Daemon, model_path: Path) -> int:
    """The PID of the runner serving ``model_path`` (the store links the file in place: the same inode)."""
    for pid in daemon.runner_pids():
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        if os.path.samefile(args[args.index("--model") + 1], model_path):
            return pid
    raise AssertionError(f"no runner of {model_path} among {daemon.runner_pids()}")


def test_a_killed_runner_fails_only_its_own_requests(busy_daemon: Daemon, smollm2_path: Path) -> None:
    """SmolLM2's runner is killed while it streams answers beside Gemma's: its requests end with an
    error, Gemma's are what they are alone, and the next SmolLM2 request loads it again."""
    prompts = QUESTIONS[:3]
    expected = asyncio.run(_alone(busy_daemon.url, "gem", prompts))

    async def smol_stream(client: httpx.AsyncClient, started: asyncio.Event) -> list[dict[str, Any]]:
        body = {"model": "smol", "prompt": "Tell me a long story about the sea.",
                "options": {"temperature": 0, "num_predict": 4000}}
        events = []
        async with client.stream("POST", "/api/generate", json=body) as response:
            if response.status_code != 200:  # killed before its answer began
                return [{"error": (await response.aread()).decode(), "status": response.status_code}]
            async for line in response.aiter_lines():
                if line.strip():
                    events.append(json.loads(line))
                    started.set()
        return events

    async def run() -> tuple[list[list[dict[str, Any]]], list[tuple[str, list[int]]]]:
        async with httpx.AsyncClient(base_url=busy_daemon.url, timeout=600) as client:
            started = asyncio.Event()
            smol = [asyncio.create_task(smol_stream(client, started)) for _ in range(2)]
            gem = [asyncio.create_task(_generate(client, "gem", p)) for p in prompts]
            await started.wait()
            os.kill(_runner_of(busy_daemon, smollm2_path), signal.SIGKILL)
            return await asyncio.gather(*smol), await asyncio.gather(*gem)

    smol_events, gem_answers = asyncio.run(run())
    for events in smol_events:
        assert "error" in events[-1] and not any(e.get("done") for e in events), events[-3:]
    assert gem_answers == expected
    again = asyncio.run(_alone(busy_daemon.url, "smol", ["Hi"]))
    assert again[0][0]
