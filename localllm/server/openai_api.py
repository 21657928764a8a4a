"""OpenAI's endpoints: models, embeddings, chat and text completions, Responses; the chat and
Responses converters are :mod:`localllm.server.dialects.openai_chat`'s and ``dialects.responses``'."""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from .api_types import RequestBody
from .conversation import Delta, Final
from .dialects.openai_chat import (
    ChatCompletionRequest, Completion, CompletionRequest, chat_turn, completion_options,
)
from .dialects.render import named_sse, rendered, truncation_headers
from .dialects.responses import (
    REASONING_INCLUDE, ResponseRenderer, ResponsesRequest, new_id, response_object, responses_turn,
)
from .embeddings import encode_base64, shorten
from .errors import bad_request
from .formats import NO_CONSTRAINT
from .handler import PreparedTurn
from .inference import CompletionJob, parse_name
from .limits import check_request
from .state import state_of
from .streaming import streamed

router = APIRouter(prefix="/v1")


class EmbeddingRequest(RequestBody):
    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None



def _model_object(name: str, modified: float) -> dict[str, Any]:
    owner = name.split("/")[0] if "/" in name else "library"
    return {"id": name, "object": "model", "created": int(modified), "owned_by": owner}


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    entries = state_of(request).store.list_models()
    return {"object": "list", "data": [_model_object(e.name.display, e.modified_at.timestamp()) for e in entries]}


@router.get("/models/{model:path}")
async def get_model(model: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    local = state.inference.resolve(model)
    return _model_object(local.name.display, local.model_path.stat().st_mtime)


@router.post("/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request) -> dict[str, Any]:
    raw = body.input
    if isinstance(raw, str):
        inputs: list[str | list[int]] = [raw]
    elif raw and all(isinstance(item, int) for item in raw):
        inputs = [raw]  # one token array
    else:
        inputs = list(raw)
    if not inputs or any(len(item) == 0 for item in inputs):
        raise bad_request("input must not be empty")
    state = state_of(request)
    parse_name(body.model)
    check_request(state.settings.limits, texts=[item for item in inputs if isinstance(item, str)],
                  messages=len(inputs))
    job = state.inference.job(body.model, {}, None)
    answer = await state.inference.embed(job, inputs, True)
    data = []
    for index, vector in enumerate(answer["embeddings"]):
        vector = shorten(vector, body.dimensions)
        encoded = encode_base64(vector) if body.encoding_format == "base64" else vector
        data.append({"object": "embedding", "embedding": encoded, "index": index})
    tokens = answer["prompt_eval_count"]
    return {"object": "list", "data": data, "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


# --- chat and text completions (converted by dialects.openai_chat) ------------------


def completion_job(request: Request, body: CompletionRequest) -> CompletionJob:
    state = state_of(request)
    parse_name(body.model)
    options = completion_options(body, body.max_tokens if body.max_tokens is not None else 16)
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    check_request(state.settings.limits, texts=prompts, constraint=body.grammar)
    return state.inference.job(body.model, options, None, NO_CONSTRAINT, body.grammar)


@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    state = state_of(request)
    turn = state.chat.prepare(chat_turn(body))
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return await Completion(state.chat, turn, body.model, "chat", n=body.n,
                            include_usage=include_usage).respond(body.stream)


@router.post("/completions")
async def completions(body: CompletionRequest, request: Request):
    if isinstance(body.prompt, list) and len(body.prompt) != 1:
        raise bad_request("prompt: send one prompt string per request")
    prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
    if body.suffix:
        raise bad_request("suffix is not supported by /v1/completions; use /api/generate with suffix")
    state = state_of(request)
    job = completion_job(request, body)
    state.inference.want_logprobs(job, body.logprobs is not None, body.logprobs)
    turn = PreparedTurn(job, lambda health: prompt)  # the prompt as it is: no template, no parsing
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return await Completion(state.chat, turn, body.model, "text", n=body.n, include_usage=include_usage,
                            echo=prompt if body.echo else "").respond(body.stream)


# --- Responses (converted by dialects.responses) -----------------------------------


async def _then_at_final(deltas: AsyncIterable[Delta], at_final: Callable[[], None]) -> AsyncIterator[Delta]:
    """``deltas``; ``at_final`` runs once the final delta's events have been sent."""
    async for delta in deltas:
        yield delta
        if isinstance(delta, Final):
            at_final()


@router.post("/responses")
async def create_response(body: ResponsesRequest, request: Request):
    state = state_of(request)
    history = (state.responses.get(body.previous_response_id, "previous_response_id").conversation
               if body.previous_response_id else [])
    turn = responses_turn(body, history)
    prepared = state.chat.prepare(turn)
    renderer = ResponseRenderer(response_object(body, new_id("resp"), int(time.time())),
                                reasoning_handed_back=REASONING_INCLUDE in (body.include or []))

    def keep() -> None:
        if body.store:
            conversation = turn.messages[1:] if body.instructions else turn.messages
            state.responses.save(renderer.response["id"], [*conversation, renderer.output_message()],
                                 renderer.response)

    if not body.stream:
        answer = await state.chat.answer(prepared)
        response = renderer.whole(answer)
        keep()
        return JSONResponse(response, headers=truncation_headers(answer.final.truncated))
    deltas = await state.chat.open(prepared)  # a failure before the first event is still a plain error status
    return streamed(named_sse(rendered(renderer, _then_at_final(deltas, keep))), "text/event-stream",
                    truncation_headers(deltas.notes.truncated))


@router.get("/responses/{response_id}")
async def retrieve_response(response_id: str, request: Request) -> dict[str, Any]:
    return state_of(request).responses.get(response_id).response


@router.delete("/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    state_of(request).responses.delete(response_id)
    return {"id": response_id, "object": "response", "deleted": True}
