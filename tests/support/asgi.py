"""The daemon's app called in process through httpx's ASGI transport, from a client address the test picks.

This is how the tests make requests that come from another machine (a
documentation address such as 203.0.113.9) without sending anything over a
network: the app sees that peer address exactly as uvicorn would report it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from localllm.config import Settings
from localllm.server.app import create_app

LOOPBACK = ("127.0.0.1", 40000)
REMOTE = ("203.0.113.9", 40000)  # TEST-NET-3: never routed


@asynccontextmanager
async def in_process(settings: Settings, client: tuple[str, int] = LOOPBACK,
                     headers: dict[str, str] | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of a fresh app for ``settings``, its lifespan (the scheduler) running."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:11434", timeout=120,
                                     headers=headers) as http:
            yield http
