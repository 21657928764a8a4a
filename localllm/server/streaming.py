"""Streamed responses whose ready chunks leave in one write.

The runner hands a stream's tokens over in bursts (``runner/relay.py``), and
each token is still its own NDJSON line or SSE event. Written one by one, a
burst of ten tokens costs ten passes through the middleware, ten ``send``
calls and up to ten wake-ups of the client, each taking a core from the
runner's compute threads. Here the body is produced by its own task and
everything it has produced when the socket is next written goes out at once;
a lone chunk (the first token, the final object) still leaves immediately.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

_END = object()
NDJSON = "application/x-ndjson"


async def coalesced(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks``, with those produced while the previous write was under way joined together.

    Closing this iterator (the client went away) cancels the producer, which
    closes ``chunks``: the generation behind it stops.
    """
    ready: asyncio.Queue[bytes | object] = asyncio.Queue()

    async def produce() -> None:
        try:
            async for chunk in chunks:
                ready.put_nowait(chunk)
        finally:
            ready.put_nowait(_END)
            await chunks.aclose()

    producer = asyncio.create_task(produce())
    try:
        while True:
            parts = [await ready.get()]
            while not ready.empty():
                parts.append(ready.get_nowait())
            ended = parts[-1] is _END
            data = b"".join(parts[:-1] if ended else parts)
            if data:
                yield data
            if ended:
                await producer  # raises what the producer raised
                return
    finally:
        producer.cancel()


def streamed(chunks: AsyncIterator[bytes], media_type: str, headers: dict[str, str] | None = None) -> StreamingResponse:
    """A streaming response of ``chunks``, coalesced."""
    return StreamingResponse(coalesced(chunks), media_type=media_type, headers=headers)


def sse(payload: dict[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event: ``data`` only (OpenAI's chat stream), or named by ``event``
    (Responses, Anthropic)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    named = f"event: {event}\n" if event else ""
    return f"{named}data: {data}\n\n".encode()


async def ndjson(objects: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Objects as newline-delimited JSON (Ollama's streams)."""
    async for obj in objects:
        yield (json.dumps(obj, ensure_ascii=False) + "\n").encode()
