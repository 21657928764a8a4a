"""Stopping the work of a request whose client went away before its answer started.

A streamed answer notices a closed connection by itself (Starlette listens
for it and the generation behind the stream is closed). A whole answer
(``stream: false``) does not: without this, a client that gives up on a long
completion leaves the model generating it to the end, and with
``num_predict`` unlimited and context shifting there is no end. So once a
request's body has been read, and until its response starts, the connection
is watched; a disconnect cancels the handler, which closes the runner stream
and frees the sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from .asgi import HttpMiddleware


class CancelOnDisconnect(HttpMiddleware):
    """ASGI middleware: cancel a handler whose client disconnected while it worked."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        body_read = asyncio.Event()
        gone: list[Message] = []  # the disconnect message, once the watcher has taken it

        async def receive_body() -> Message:
            if gone:
                return gone[0]
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_read.set()
            return message

        async def watch() -> None:
            """Wait until the body is read, then for a disconnect."""
            await body_read.wait()
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.append(message)

        started = asyncio.Event()

        async def send_watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.set()
            await send(message)

        handler = asyncio.create_task(self.app(scope, receive_body, send_watched))
        watcher = asyncio.create_task(watch())
        response_started = asyncio.create_task(started.wait())
        try:
            await asyncio.wait({handler, watcher, response_started}, return_when=asyncio.FIRST_COMPLETED)
            if not handler.done() and gone:  # the client left before any answer: stop the work
                handler.cancel()
            # From the response's start on, the response itself listens for the disconnect.
            await _cancelled(watcher, response_started)
            try:
                await handler
            except asyncio.CancelledError:
                if not (gone and handler.cancelled()):
                    raise  # this request itself is being cancelled (shutdown)
        finally:
            await _cancelled(handler, watcher, response_started)


async def _cancelled(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
