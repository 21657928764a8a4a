"""Request bodies of Ollama's API (``/api/*``), field names as Ollama's.

Pydantic validates them, so a wrong type is a 400 naming the field, and
FastAPI's OpenAPI schema describes them (the fuzz tests read it).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

KeepAlive = str | float | int | None


class RequestBody(BaseModel):
    """The base of every dialect's request body: unknown fields are ignored, as the vendors' APIs do."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _NamedBody(RequestBody):
    """Ollama accepts the legacy ``name`` wherever it now says ``model``."""

    model: str = ""
    name: str | None = None

    @model_validator(mode="after")
    def _legacy_name(self) -> "_NamedBody":
        if not self.model and self.name:
            self.model = self.name
        return self


class ToolCallFunction(RequestBody):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class ToolCall(RequestBody):
    id: str | None = None
    function: ToolCallFunction


class Message(RequestBody):
    role: str
    content: str | None = ""
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    thinking: str | None = None


class GenerateRequest(_NamedBody):
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    stream: bool = True
    raw: bool = False
    format: str | dict[str, Any] | None = None
    images: list[str] | None = None
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None
    grammar: str | None = None  # extension: GBNF rules, as llama.cpp's server takes them
    logprobs: bool = False
    top_logprobs: int | None = None
    think: bool | str | None = None
    truncate: bool | None = None  # a prompt over the context is cut (the default), or with false a 400
    shift: bool | None = None  # an answer that fills the context slides it (the default), or with false stops


class ChatRequest(_NamedBody):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    format: str | dict[str, Any] | None = None
    grammar: str | None = None  # extension: GBNF rules
    logprobs: bool = False
    top_logprobs: int | None = None
    options: dict[str, Any] | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: bool | str | None = None
    truncate: bool | None = None  # old messages are left out to fit the context (the default), or with false a 400
    shift: bool | None = None  # an answer that fills the context slides it (the default), or with false stops


class ShowRequest(_NamedBody):
    verbose: bool = False


class PullRequest(_NamedBody):
    insecure: bool = False
    stream: bool = True


class PushRequest(PullRequest):
    """``/api/push`` takes what ``/api/pull`` takes: model, insecure, stream."""


class CopyRequest(RequestBody):
    source: str
    destination: str


class DeleteRequest(_NamedBody):
    pass


class CacheClearRequest(_NamedBody):
    """``DELETE /api/cache``: the model whose cached KV goes, or every model's when ``model`` is empty."""


class CreateRequest(_NamedBody):
    """Ollama's structured create, plus ``modelfile``+``path`` for raw Modelfile text."""

    from_: str | None = Field(default=None, alias="from")
    modelfile: str | None = None
    path: str | None = None
    files: dict[str, str] | None = None
    adapters: dict[str, str] | None = None
    template: str | None = None
    system: str | None = None
    parameters: dict[str, Any] | None = None
    messages: list[Message] | None = None
    license: str | list[str] | None = None
    quantize: str | None = None
    requires: str | None = None
    parser: str | None = None  # Ollama's PARSER / RENDERER names
    renderer: str | None = None
    stream: bool = True


class EmbedRequest(_NamedBody):
    input: str | list[str] = ""
    truncate: bool = True
    dimensions: int | None = Field(default=None, ge=1)
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None


class LegacyEmbeddingsRequest(_NamedBody):
    prompt: str = ""
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None
