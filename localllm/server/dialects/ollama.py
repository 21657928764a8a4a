"""Ollama's generation endpoints (``/api/chat``, ``/api/generate``): request translator
and stream renderer over the conversation core (the routes are in ``server/ollama_api.py``)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..api_types import ChatRequest
from ..conversation import (
    Answer, ChatTurn, Content, Delta, Failure, Final, Message, Thinking, ToolCallDelta, check_think, shaped_logprobs
)
from ..errors import bad_request
from ..formats import format_constraint
from ..tools import ToolCall, call_arguments


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
                    keep_alive=body.keep_alive, shift=body.shift is not False, truncate=body.truncate is not False)


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
        if final.truncated:
            body["truncated"] = True
        for key in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
                    "eval_count", "eval_duration"):
            body[key] = final.metrics.get(key, 0)
        for key in ("draft_count", "draft_accepted_count"):  # localllm: speculative decoding's drafts
            if key in final.metrics:
                body[key] = final.metrics[key]
        return body
