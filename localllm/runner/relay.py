"""Hand one request's events from the engine thread to its HTTP response, in bursts.

Every wake-up of the event loop for a token is felt three times: the
runner's loop, then the daemon and the client each take a core from
llama.cpp's compute threads, whose barriers then wait for the preempted
thread. On a small model that costs more than the token itself (about 8% of
decode speed on two cores, ``scripts/bench/decode.py``). So content is handed
over at most once per ``interval``: the first piece (time to first token)
and the last event (done or error) go at once, the pieces between in bursts,
each still its own event. ``LOCALLLM_STREAM_INTERVAL=0`` hands over every piece.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

Event = dict[str, Any]


class EventRelay:
    """Events written by the engine thread (``emit``), read in batches on the event loop (``batch``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self._loop = loop
        self._interval = interval
        self._events: collections.deque[Event] = collections.deque()  # append/popleft are thread-safe
        self._ready = asyncio.Event()
        self._last_wake = -float("inf")

    def emit(self, event: Event) -> None:
        """Queue ``event`` (engine thread); wake the reader unless a wake-up is due soon anyway."""
        self._events.append(event)
        now = time.monotonic()
        if "content" in event and now - self._last_wake < self._interval:
            return  # the next piece past the interval, or the final event, carries it
        self._last_wake = now
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the event loop is gone: the runner is exiting
            pass

    async def batch(self) -> list[Event]:
        """The events queued since the last call, waiting for at least one."""
        while not self._events:
            await self._ready.wait()
            self._ready.clear()
        return [self._events.popleft() for _ in range(len(self._events))]
