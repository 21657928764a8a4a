"""Streamed pieces reach the HTTP side in bursts (``LOCALLLM_STREAM_INTERVAL``, the runner's
``--stream-interval``), one event each, none lost."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from localllm.runner.relay import EventRelay

from support.runner import chat_prompt, parse_stream, running_runner, runner_threads


def _relay_batches(interval: float, events: list[dict], pause: float) -> list[list[dict]]:
    """What a reader on the event loop gets while a thread emits ``events`` ``pause`` seconds apart."""

    async def read() -> list[list[dict]]:
        relay = EventRelay(asyncio.get_running_loop(), interval)

        def engine() -> None:
            for event in events:
                relay.emit(event)
                time.sleep(pause)

        threading.Thread(target=engine).start()
        batches: list[list[dict]] = []
        while not batches or not any("done" in e or "error" in e for e in batches[-1]):
            batches.append(await relay.batch())
        return batches

    return asyncio.run(read())


def test_relay_hands_over_the_first_piece_at_once_and_the_rest_in_bursts() -> None:
    events = [{"content": str(i)} for i in range(60)] + [{"done": True}]
    batches = _relay_batches(0.1, events, 0.005)
    assert [e for b in batches for e in b] == events  # all of them, in order, each its own event
    assert batches[0] == [{"content": "0"}]  # time to first token is not delayed
    assert len(batches) <= 8  # ~0.3 s of pieces at 0.1 s, not 61 wake-ups


def test_relay_with_interval_zero_hands_over_every_piece() -> None:
    events = [{"content": str(i)} for i in range(20)] + [{"done": True}]
    batches = _relay_batches(0.0, events, 0.01)
    assert [e for b in batches for e in b] == events
    assert len(batches) >= 15  # a reader that keeps up sees the pieces one by one


def test_relay_never_holds_back_the_final_event() -> None:
    events = [{"content": "a"}, {"content": "b"}, {"error": "boom"}]
    batches = _relay_batches(60.0, events, 0.0)  # an interval far longer than the test
    assert [e for b in batches for e in b] == events


def _stream_reads(smollm2_path: Path, interval: str) -> tuple[int, int, float]:
    """(pieces, socket reads that carried them, seconds) of a 96-token stream from a real runner."""
    with running_runner(smollm2_path, "--ctx", "512", "--parallel", "1", "--threads", runner_threads(),
                        "--stream-interval", interval) as r:
        body = {"prompt": chat_prompt("Tell me a long story about a fox."),
                "options": {"temperature": 0, "num_predict": 96, "stop": []}}
        reads = 0
        with r.client() as client, client.stream("POST", "/completion", json=body) as response:
            start = time.monotonic()
            buffer = b""
            for chunk in response.iter_raw():
                reads += 1
                buffer += chunk
            elapsed = time.monotonic() - start
        pieces, final = parse_stream(buffer.decode().splitlines())
        assert final.get("done"), final
        return len(pieces), reads, elapsed


@pytest.mark.slow
def test_runner_streams_in_bursts_only_when_asked(smollm2_path: Path) -> None:
    pieces, reads, elapsed = _stream_reads(smollm2_path, "0.25")
    assert pieces >= 60  # still one event per piece
    assert reads <= elapsed / 0.25 + 3, (reads, elapsed)
    every_piece, every_reads, _ = _stream_reads(smollm2_path, "0")
    assert every_piece == pieces  # same greedy text, same events
    assert every_reads > every_piece / 2, every_reads  # without bursts nearly every piece is its own write


@pytest.mark.parametrize("path, body", [
    ("/api/generate", {"prompt": "Tell me a long story about a fox.", "options": {"temperature": 0, "num_predict": 96}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a long story about a fox."}],
                              "temperature": 0, "max_tokens": 96, "stream": True}),
])
def test_daemon_writes_each_burst_at_once(daemon, path: str, body: dict) -> None:
    """The daemon passes the runner's bursts on in one write each (default interval 100 ms), a line per token."""
    reads, buffer = 0, b""
    with httpx.stream("POST", f"{daemon.url}{path}", json={"model": "smollm2:135m", **body}, timeout=120) as response:
        start = time.monotonic()
        for chunk in response.iter_raw():
            reads += 1
            buffer += chunk
        elapsed = time.monotonic() - start
    events = [line for line in buffer.decode().splitlines() if line and line != "data: [DONE]"]
    assert len(events) >= 60, events[-1]  # still one object per token
    assert reads <= elapsed / 0.1 + 4, (reads, len(events), elapsed)
