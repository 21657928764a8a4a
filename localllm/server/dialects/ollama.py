"""Ollama's generation endpoints (``/api/chat``, ``/api/generate``): request translator
and stream renderer over the conversation core."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ...templates import prompt as prompts
from ..api_types import ChatRequest, GenerateRequest
from ..conversation import (
    Answer,
    ChatTurn,
    Content,
    Delta,
    Failure,
    Final,
    Message,
    Thinking,
    ToolCallDelta,
    check_think,
    shaped_logprobs,
)
from ..errors import bad_request
from ..formats import format_constraint
from ..handler import ChatHandler, PreparedTurn
from ..inference import CompletionJob, template_errors_as_400
from ..limits import check_request
from ..runner_client import Health
from ..state import DaemonState, state_of
from ..streaming import NDJSON, ndjson, streamed
from ..tools import ToolCall, call_arguments
from .render import rendered

router = APIRouter()

CHAT_ROLES = ("system", "user", "assistant", "tool")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


# --- translator ---------------------------------------------------------------------


def chat_turn(body: ChatRequest) -> ChatTurn:
    """An Ollama chat request as a core turn."""
    messages = []
    for index, m in enumerate(body.messages):
        if m.role not in CHAT_ROLES:
            raise bad_request(f"messages[{index}]: invalid role {m.role!r}; use system, user, assistant or tool")
        calls = [ToolCall(c.function.name, call_arguments(c.function.arguments, f"messages[{index}].tool_calls",
                                                          c.function.name), c.id or "")
                 for c in m.tool_calls or []]
        messages.append(Message(role=m.role, content=m.content or "", images=list(m.images or []),
                                thinking=m.thinking or "", tool_calls=calls, tool_name=m.tool_name or "",
                                tool_call_id=m.tool_call_id or ""))
    return ChatTurn(model=body.model, messages=messages, tools=body.tools, think=check_think(body.think),
                    options=dict(body.options or {}), constraint=format_constraint(body.format),
                    grammar=body.grammar, logprobs=body.logprobs, top_logprobs=body.top_logprobs,
                    keep_alive=body.keep_alive)


# --- renderer -----------------------------------------------------------------------


class OllamaRenderer:
    """Core deltas as Ollama's chat (``message``) or generate (``response``) objects."""

    def __init__(self, model_name: str, kind: str) -> None:
        self.model_name = model_name
        self.kind = kind  # "chat" or "generate"

    def message_object(self, content: str = "", thinking: str = "", calls: list[ToolCall] = (),
                logprobs: list[dict[str, Any]] = ()) -> dict[str, Any]:
        base: dict[str, Any] = {"model": self.model_name, "created_at": now_iso()}
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = [dict(call.ollama(), id=call.id) for call in calls]
            base["message"] = message
        else:
            base["response"] = content
            if thinking:
                base["thinking"] = thinking
        base["done"] = False
        if logprobs:
            base["logprobs"] = shaped_logprobs(logprobs)
        return base

    def opening(self) -> list[dict[str, Any]]:
        """Ollama's streams open with nothing but the answer."""
        return []

    def process(self, delta: Delta) -> list[dict[str, Any]]:
        """The stream objects one delta becomes."""
        if isinstance(delta, Content):
            return [self.message_object(delta.text, logprobs=delta.logprobs)]
        if isinstance(delta, Thinking):
            return [self.message_object(thinking=delta.text)]
        if isinstance(delta, ToolCallDelta):
            return [self.message_object(calls=[delta.call])] if self.kind == "chat" else []
        if isinstance(delta, Final):
            return [self._final(delta, self.message_object())]
        if isinstance(delta, Failure):
            return [{"error": delta.message}]
        return []

    def whole(self, answer: Answer) -> dict[str, Any]:
        """One object holding the whole answer (``stream: false``)."""
        final = answer.final
        body = self.message_object(answer.content, answer.thinking, answer.tool_calls, final.logprobs)
        return self._final(final, body)

    def _final(self, final: Final, body: dict[str, Any]) -> dict[str, Any]:
        body["done"] = True
        body["done_reason"] = "length" if final.reason == "length" else "stop"
        if self.kind == "generate":
            body["context"] = final.context
        for key in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
                    "eval_count", "eval_duration"):
            body[key] = final.metrics.get(key, 0)
        return body


async def _respond(handler: ChatHandler, turn: PreparedTurn, renderer: OllamaRenderer, stream: bool):
    if not stream:
        return JSONResponse(renderer.whole(await handler.answer(turn)))
    deltas = await handler.open(turn)  # a failure before the first event is still a plain error status
    return streamed(ndjson(rendered(renderer, deltas)), NDJSON)


# --- loading without a prompt -------------------------------------------------------


async def _load_only(state: DaemonState, job: CompletionJob, renderer: OllamaRenderer) -> JSONResponse:
    """An empty prompt loads the model (or, with keep_alive 0, unloads it)."""
    if job.keep_alive == 0:
        await state.scheduler.unload(job.model.model_path, tuple(job.model.adapters))
        load_ns = 0
    else:
        _, load_ns = await state.inference.load(job)
    answer = renderer.message_object()
    answer.update(done=True, done_reason="unload" if job.keep_alive == 0 else "load",
                  total_duration=load_ns, load_duration=load_ns)
    return JSONResponse(answer)


# --- routes ---------------------------------------------------------------------------


@router.post("/api/generate")
async def generate(body: GenerateRequest, request: Request):
    state = state_of(request)
    check_request(state.settings.limits, texts=[body.prompt, body.system or "", body.suffix or "",
                                                 body.template or ""],
                  constraint=body.format or body.grammar, options=body.options)
    think = check_think(body.think)
    job = state.inference.job(body.model, body.options, body.keep_alive, format_constraint(body.format),
                              body.grammar)
    state.inference.want_logprobs(job, body.logprobs, body.top_logprobs)
    job.context = body.context
    model = job.model
    renderer = OllamaRenderer(body.model, "generate")
    if body.images:
        raise bad_request(f"{model.name.display!r} does not support images")
    if not body.prompt and not body.suffix and body.context is None:
        return await _load_only(state, job, renderer)

    def render(health: Health) -> str:
        with template_errors_as_400(model):
            return prompts.build_generate_prompt(
                prompt=body.prompt, system=body.system if body.system is not None else model.system,
                suffix=body.suffix, template_override=body.template, model_template=model.template,
                gguf_chat_template=model.chat_template, bos=health.bos, eos=health.eos,
                raw=body.raw, history=model.messages, think=think,
            )

    turn = state.chat.prepare_generate(job, render, None if body.raw else think)
    return await _respond(state.chat, turn, renderer, body.stream)


@router.post("/api/chat")
async def chat(body: ChatRequest, request: Request):
    state = state_of(request)
    turn = chat_turn(body)
    renderer = OllamaRenderer(body.model, "chat")
    if not turn.messages:
        job = state.inference.job(body.model, body.options, body.keep_alive)
        return await _load_only(state, job, renderer)
    return await _respond(state.chat, state.chat.prepare(turn), renderer, body.stream)

