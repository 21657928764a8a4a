"""Status events of several concurrent jobs (a pull's layers, a push) as one stream.

Each job gets an ``emit`` callback; the stream yields what they emit in the
order it was emitted, so a pull fetching three layers at once interleaves their
progress as Ollama's does. The first job to fail ends the stream with its
error; a consumer that stops listening (a client that went away) cancels them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

Event = dict[str, Any]
Emit = Callable[[Event], None]
Job = Callable[[Emit], Awaitable[None]]


async def merged_events(jobs: Sequence[Job], limit: int) -> AsyncIterator[Event]:
    """Run ``jobs``, at most ``limit`` at a time, yielding their events; raises the first job's failure."""
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    slots = asyncio.Semaphore(limit)

    async def run(job: Job) -> None:
        async with slots:
            await job(queue.put_nowait)

    tasks = [asyncio.ensure_future(run(job)) for job in jobs]
    everything = asyncio.gather(*tasks)
    everything.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (event := await queue.get()) is not None:
            yield event
        everything.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if everything.done() and not everything.cancelled():
            everything.exception()  # retrieved: a failure after the consumer left is not worth a warning
