"""Running a dialect's stream renderer over a turn's deltas."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, Protocol

from ..conversation import Delta
from ..streaming import sse


class StreamRenderer(Protocol):
    """What a dialect's renderer offers: the events a stream opens with, then those of each delta."""

    def opening(self) -> list[dict[str, Any]]: ...

    def process(self, delta: Delta) -> list[dict[str, Any]]: ...


#: Set on OpenAI, Responses and Anthropic answers whose prompt had a message cut inside to fit the
#: context (Ollama's answers say ``"truncated": true`` in their final object instead).
TRUNCATED_HEADER = "X-Localllm-Prompt-Truncated"


def truncation_headers(truncated: bool) -> dict[str, str]:
    """The headers that tell a client its prompt was cut to fit the context."""
    return {TRUNCATED_HEADER: "true"} if truncated else {}


async def rendered(renderer: StreamRenderer, deltas: AsyncIterable[Delta]) -> AsyncIterator[dict[str, Any]]:
    """The wire events of a whole stream, in order."""
    for event in renderer.opening():
        yield event
    async for delta in deltas:
        for event in renderer.process(delta):
            yield event


async def named_sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Events as server-sent events named by their ``type`` (Responses, Anthropic)."""
    async for event in events:
        yield sse(event, event["type"])
