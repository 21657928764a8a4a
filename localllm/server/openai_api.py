"""OpenAI's model and embedding endpoints (``/v1/models``, ``/v1/embeddings``); chat and
text completions are the ``dialects.openai_chat`` module's."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from .embeddings import encode_base64, shorten
from .errors import bad_request
from .inference import parse_name
from .limits import check_request
from .state import state_of

router = APIRouter(prefix="/v1")


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EmbeddingRequest(_Body):
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
