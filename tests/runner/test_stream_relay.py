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

ENDLESS = 'root ::= "la " root'  # an answer that cannot end before its token limit, whatever the model says


def _relay_batches(interval: float, events: list[dict], pause: float, handed: int = 0) -> tuple[list[list[dict]], float]:
    """What a reader on the event loop gets while a thread emits ``events`` ``pause`` seconds apart, and how long
    the emitting took. The first ``handed`` events are emitted one at a time, each only once the reader has
    taken the one before: each must wake the reader by itself, however slowly the machine runs."""
    taken = threading.Event()
    took: list[float] = []

    async def read() -> list[list[dict]]:
        relay = EventRelay(asyncio.get_running_loop(), interval)

        def engine() -> None:
            started = time.monotonic()
            for i, event in enumerate(events):
                taken.clear()
                relay.emit(event)
                if i < handed:
                    taken.wait(30)
                else:
                    time.sleep(pause)
            took.append(time.monotonic() - started)

        thread = threading.Thread(target=engine)
        thread.start()
        batches: list[list[dict]] = []
        while not batches or not any("done" in e or "error" in e for e in batches[-1]):
            batches.append(await relay.batch())
            taken.set()
        await asyncio.to_thread(thread.join)
        return batches

    batches = asyncio.run(read())
    return batches, took[0]


def test_relay_hands_over_the_first_piece_at_once_and_the_rest_in_bursts() -> None:
    events = [{"content": str(i)} for i in range(60)] + [{"done": True}]
    batches, took = _relay_batches(0.1, events, 0.005, handed=1)
    assert [e for b in batches for e in b] == events  # all of them, in order, each its own event
    assert batches[0] == [{"content": "0"}]  # time to first token is not delayed
    assert len(batches) <= took / 0.1 + 3, (len(batches), took)  # a wake-up per 0.1 s, not 61


def test_relay_with_interval_zero_hands_over_every_piece() -> None:
    events = [{"content": str(i)} for i in range(20)] + [{"done": True}]
    batches, _ = _relay_batches(0.0, events, 0.0, handed=len(events))
    assert batches == [[e] for e in events]  # every piece woke the reader by itself


def test_relay_never_holds_back_the_final_event() -> None:
    events = [{"content": "a"}, {"content": "b"}, {"error": "boom"}]
    batches, _ = _relay_batches(60.0, events, 0.0)  # an interval far longer than the test
    assert [e for b in batches for e in b] == events


def _stream_reads(smollm2_path: Path, interval: str) -> tuple[int, int, float]:
    """(pieces, socket reads that carried them, seconds) of a 96-token stream from a real runner."""
    with running_runner(smollm2_path, "--ctx", "512", "--parallel", "1", "--threads", runner_threads(),
                        "--stream-interval", interval) as r:
        body = {"prompt": chat_prompt("Tell me a long story about a fox."), "grammar": ENDLESS,
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
    # bursts two seconds apart: several tokens each even on a machine so busy that a token takes 0.2 s
    pieces, reads, elapsed = _stream_reads(smollm2_path, "2")
    assert pieces >= 60  # still one event per piece
    assert reads <= elapsed / 2 + 3, (reads, elapsed)
    every_piece, every_reads, _ = _stream_reads(smollm2_path, "0")
    assert every_piece == pieces  # same greedy text, same events
    assert every_reads >= 2 * reads, (every_reads, reads)  # without bursts many more writes


@pytest.mark.parametrize("path, body", [
    ("/api/generate", {"prompt": "Tell me a long story about a fox.", "grammar": ENDLESS,
                       "options": {"temperature": 0, "num_predict": 96}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a long story about a fox."}],
                              "grammar": ENDLESS, "temperature": 0, "max_tokens": 96, "stream": True}),
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
