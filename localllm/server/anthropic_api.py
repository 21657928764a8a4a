"""Anthropic's Messages endpoints (``/v1/messages``, ``/v1/messages/count_tokens``); the
converters are :mod:`localllm.server.dialects.anthropic`'s."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .dialects.anthropic import CountTokensRequest, MessagesRenderer, MessagesRequest, messages_turn
from .dialects.render import named_sse, rendered, truncation_headers
from .handler import ChatHandler, PreparedTurn
from .state import state_of
from .streaming import streamed

router = APIRouter(prefix="/v1")


async def _respond(handler: ChatHandler, turn: PreparedTurn, model: str, stream: bool):
    renderer = MessagesRenderer(model)
    if not stream:
        answer = await handler.answer(turn)
        return JSONResponse(renderer.whole(answer), headers=truncation_headers(answer.final.truncated))
    deltas = await handler.open(turn)  # a failure before the first event is still an error status
    return streamed(named_sse(rendered(renderer, deltas)), "text/event-stream",
                    truncation_headers(deltas.notes.truncated))


@router.post("/messages")
async def messages(body: MessagesRequest, request: Request):
    state = state_of(request)
    turn = state.chat.prepare(messages_turn(body))
    return await _respond(state.chat, turn, body.model, body.stream)


@router.post("/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, int]:
    state = state_of(request)
    turn = state.chat.prepare(messages_turn(body))
    return {"input_tokens": await state.chat.count_tokens(turn)}
