"""Anthropic's Messages API (``/v1/messages``, ``/v1/messages/count_tokens``): request
translator and stream renderer over the conversation core.

Content blocks become core messages: ``tool_use`` blocks an assistant message's
calls, each ``tool_result`` a tool message (before the user's own text, as
Ollama orders them), ``thinking`` blocks the assistant message's thinking.
``redacted_thinking`` is Anthropic's encrypted reasoning, which no local model
can read: it is dropped. Streams are server-sent events named by their type.

Usage follows Anthropic's split: ``input_tokens`` are the prompt tokens computed
for this request, ``cache_read_input_tokens`` those reused from the prefix
cache; together they are what ``count_tokens`` answers. The counts are known
once the answer ends, so a stream's ``message_start`` carries zeros and its
``message_delta`` the real, cumulative counts (the SDKs take them from there).
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..api_types import RequestBody
from ..conversation import (
    Answer, ChatTurn, Content, Delta, Failure, Final, Message, Thinking, ThinkSetting, ToolCallDelta
)
from ..errors import anthropic_error, bad_request
from ..formats import Constraint
from ..inference import parse_name
from ..tools import ToolCall
from .openai_family import response_format_constraint, sampling_options

#: Request fields of Anthropic's that ask for what a local runner cannot do.
REFUSED_FIELDS = {
    "mcp_servers": "MCP servers are not supported; run the tools in your client",
    "container": "code execution containers are not supported",
    "output_format": "this beta field is not supported; use output_config.format",
}
EFFORT_THINK = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


class InputMessage(RequestBody):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class Metadata(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str | None = None  # accepted; nothing is tracked per user


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: dict[str, Any] | None = None


class CountTokensRequest(BaseModel):
    """What decides a prompt: the fields ``count_tokens`` takes."""

    model_config = ConfigDict(extra="allow")  # to refuse REFUSED_FIELDS by name

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: OutputConfig | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    metadata: Metadata | None = None
    stream: bool = False
    grammar: str | None = None  # extension: GBNF rules, as on /api/chat and /v1/chat/completions


# --- translator -----------------------------------------------------------------------


def _text(block: dict[str, Any], key: str, field: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise bad_request(f"{field}.{key} must be a string")
    return value


def _image(block: dict[str, Any], field: str) -> str:
    """The base64 data of an image block (we fetch nothing from the network)."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise bad_request(f"{field}.source must be an object")
    if source.get("type") != "base64":
        raise bad_request(f"{field}.source: image source type {source.get('type')!r} is not supported; "
                          "send the image as base64 (nothing is downloaded)")
    return _text(source, "data", f"{field}.source")


def system_prompt(system: str | list[dict[str, Any]] | None) -> str:
    """The system prompt, a string or a list of text blocks (joined as they are, as Ollama does)."""
    if system is None or isinstance(system, str):
        return system or ""
    texts = []
    for index, block in enumerate(system):
        if block.get("type") != "text":
            raise bad_request(f"system[{index}]: block type {block.get('type')!r} is not supported; use text")
        texts.append(_text(block, "text", f"system[{index}]"))
    return "".join(texts)


def _tool_result(block: dict[str, Any], field: str, calls: dict[str, str]) -> Message:
    """A ``tool_result`` block as a tool message answering an earlier ``tool_use``."""
    call_id = _text(block, "tool_use_id", field)
    if call_id not in calls:
        raise bad_request(f"{field}.tool_use_id: no earlier tool_use block has id {call_id!r}")
    content = block.get("content") or ""
    if not isinstance(content, (str, list)):
        raise bad_request(f"{field}.content must be a string or a list of text blocks")
    texts, images = [], []
    for index, part in enumerate([] if isinstance(content, str) else content):
        part_field = f"{field}.content[{index}]"
        if not isinstance(part, dict) or part.get("type") not in ("text", "image"):
            kind = part.get("type") if isinstance(part, dict) else part
            raise bad_request(f"{part_field}: block type {kind!r} is not supported in a tool_result; use text or image")
        if part["type"] == "text":
            texts.append(_text(part, "text", part_field))
        else:
            images.append(_image(part, part_field))
    text = content if isinstance(content, str) else "".join(texts)
    if block.get("is_error"):
        text = f"Error: {text}"
    return Message(role="tool", content=text, images=images, tool_call_id=call_id, tool_name=calls[call_id])


def _tool_use(block: dict[str, Any], field: str) -> ToolCall:
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise bad_request(f"{field}.input must be an object")
    return ToolCall(_text(block, "name", field), arguments, _text(block, "id", field))


def _message(message: InputMessage, field: str, calls: dict[str, str]) -> list[Message]:
    """One Anthropic message as core messages: its tool results first, then its own."""
    if isinstance(message.content, str):
        return [Message(role=message.role, content=message.content)]
    own = Message(role=message.role)
    texts: list[str] = []
    results: list[Message] = []
    allowed = {"user": ("text", "image", "tool_result"),
               "assistant": ("text", "tool_use", "thinking", "redacted_thinking")}[message.role]
    for index, block in enumerate(message.content):
        block_field = f"{field}.content[{index}]"
        kind = block.get("type")
        if kind not in allowed:
            raise bad_request(f"{block_field}: block type {kind!r} is not supported in a {message.role} message; "
                              f"use {', '.join(allowed)}")
        if kind == "text":
            texts.append(_text(block, "text", block_field))
        elif kind == "image":
            own.images.append(_image(block, block_field))
        elif kind == "tool_result":
            results.append(_tool_result(block, block_field, calls))
        elif kind == "tool_use":
            call = _tool_use(block, block_field)
            calls[call.id] = call.name
            own.tool_calls.append(call)
        elif kind == "thinking":
            own.thinking += _text(block, "thinking", block_field)
    own.content = "".join(texts)
    keep_own = own.content or own.images or own.tool_calls or own.thinking or not results
    return results + ([own] if keep_own else [])


def input_messages(system: str | list[dict[str, Any]] | None, messages: list[InputMessage]) -> list[Message]:
    """The conversation as core messages; a tool result must answer an earlier tool use."""
    converted = []
    if text := system_prompt(system):
        converted.append(Message(role="system", content=text))
    calls: dict[str, str] = {}  # tool_use id -> tool name
    for index, message in enumerate(messages):
        converted += _message(message, f"messages[{index}]", calls)
    return converted


def function_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Custom tools in OpenAI's function shape; Anthropic's server tools cannot run here."""
    if tools is None:
        return None
    functions = []
    for index, tool in enumerate(tools):
        kind = tool.get("type", "custom")
        if kind != "custom":
            raise bad_request(f"tools[{index}]: tool type {kind!r} is not supported; only custom tools "
                              "(name, description, input_schema) run on a local model")
        if not isinstance(tool.get("input_schema"), dict):
            raise bad_request(f"tools[{index}].input_schema is required and must be a JSON schema object")
        functions.append({"type": "function", "function": {
            "name": _text(tool, "name", f"tools[{index}]"), "description": tool.get("description", ""),
            "parameters": tool["input_schema"]}})
    return functions


def tool_choice_of(choice: dict[str, Any] | None, tools: list[dict[str, Any]] | None) -> str:
    """Anthropic's ``tool_choice`` as the core's: auto, none, required or a function name."""
    if choice is None:
        return "auto"
    kind = choice.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        raise bad_request(f"tool_choice.type {kind!r} is not supported; use auto, any, tool or none")
    names = [tool["function"]["name"] for tool in tools or []]
    if kind in ("any", "tool") and not names:
        raise bad_request(f"tool_choice.type {kind!r} needs tools")
    if kind == "tool":
        name = _text(choice, "name", "tool_choice")
        if name not in names:
            raise bad_request(f"tool_choice.name {name!r} is not among the tools ({', '.join(names)})")
        return name
    return {"any": "required"}.get(kind, kind)


def thinking_setting(config: dict[str, Any] | None, effort: str | None) -> ThinkSetting:
    """``thinking`` config as a think setting (``adaptive``: the model's default), else
    ``output_config.effort`` as a think level. The budget is not enforced apart from max_tokens."""
    if config is None:
        return EFFORT_THINK.get(effort)
    kind = config.get("type")
    if config.get("display", "summarized") not in (None, "summarized"):
        raise bad_request(f"thinking.display {config['display']!r} is not supported; thinking is shown")
    if kind == "disabled":
        return False
    if kind == "adaptive":
        return EFFORT_THINK.get(effort)
    if kind == "enabled":
        budget = config.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise bad_request("thinking.budget_tokens must be a positive integer")
        return EFFORT_THINK.get(effort, True)
    raise bad_request(f"thinking.type {kind!r} is not supported; use enabled, adaptive or disabled")


def output_constraint(output_format: dict[str, Any] | None) -> Constraint:
    """``output_config.format`` (structured outputs) as an output constraint."""
    if output_format is not None and output_format.get("type") != "json_schema":
        raise bad_request(f"output_config.format.type {output_format.get('type')!r} is not supported; "
                          "use json_schema")
    return response_format_constraint(output_format, "output_config.format")


def check_fields(body: CountTokensRequest) -> None:
    """Refuse fields asking for what a local runner cannot do, naming them."""
    for name in body.model_extra or {}:
        if name in REFUSED_FIELDS:
            raise bad_request(f"{name}: {REFUSED_FIELDS[name]}")


def messages_turn(body: CountTokensRequest) -> ChatTurn:
    """An Anthropic request as a core turn (sampling and length only when it is a messages request)."""
    check_fields(body)
    parse_name(body.model)
    tools = function_tools(body.tools)
    output = body.output_config or OutputConfig()
    turn = ChatTurn(model=body.model, messages=input_messages(body.system, body.messages), tools=tools,
                    tool_choice=tool_choice_of(body.tool_choice, tools),
                    parallel_tool_calls=not (body.tool_choice or {}).get("disable_parallel_tool_use", False),
                    think=thinking_setting(body.thinking, output.effort),
                    constraint=output_constraint(output.format))
    if isinstance(body, MessagesRequest):
        turn.options = sampling_options(body.temperature, body.top_p, body.max_tokens, body.stop_sequences,
                                        top_k=body.top_k)
        turn.grammar = body.grammar
    return turn


# --- renderer -------------------------------------------------------------------------


def stop_reason(final: Final) -> str:
    if final.reason == "tool_calls":
        return "tool_use"
    if final.reason == "length":
        return "max_tokens"
    return "stop_sequence" if final.stop_sequence else "end_turn"


def usage(final: Final | None) -> dict[str, int]:
    """Anthropic's usage: prompt tokens computed, taken from the cache, and generated."""
    metrics = final.metrics if final else {}
    return {"input_tokens": metrics.get("prompt_eval_count", 0), "output_tokens": metrics.get("eval_count", 0),
            "cache_read_input_tokens": metrics.get("cached_tokens", 0), "cache_creation_input_tokens": 0}


def tool_use_block(call: ToolCall, with_input: bool = True) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments if with_input else {}}


class MessagesRenderer:
    """Core deltas as Anthropic's stream events (``process``), or a whole answer as one message."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = f"msg_{secrets.token_hex(12)}"
        self._index = -1  # of the last block started
        self._open: str | None = None  # type of the block being streamed

    def message(self, content: list[dict[str, Any]], final: Final | None) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop_reason(final) if final else None,
                "stop_sequence": final.stop_sequence if final else None, "usage": usage(final)}

    def whole(self, answer: Answer) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if answer.thinking:
            content.append({"type": "thinking", "thinking": answer.thinking, "signature": ""})
        if answer.content:
            content.append({"type": "text", "text": answer.content})
        content += [tool_use_block(call) for call in answer.tool_calls]
        return self.message(content, answer.final)

    def opening(self) -> list[dict[str, Any]]:
        return [{"type": "message_start", "message": self.message([], None)}, {"type": "ping"}]

    def process(self, delta: Delta) -> list[dict[str, Any]]:
        """The events one delta becomes; blocks open and close as the kind of output changes."""
        if isinstance(delta, Content):
            return self._into("text", {"type": "text_delta", "text": delta.text}) if delta.text else []
        if isinstance(delta, Thinking):
            return self._into("thinking", {"type": "thinking_delta", "thinking": delta.text})
        if isinstance(delta, ToolCallDelta):
            partial = json.dumps(delta.call.arguments, ensure_ascii=False)
            return [*self._close(), self._start(tool_use_block(delta.call, with_input=False)),
                    self._delta({"type": "input_json_delta", "partial_json": partial}), *self._close()]
        if isinstance(delta, Final):
            return [*self._close(),
                    {"type": "message_delta", "delta": {"stop_reason": stop_reason(delta),
                                                        "stop_sequence": delta.stop_sequence},
                     "usage": usage(delta)},
                    {"type": "message_stop"}]
        if isinstance(delta, Failure):
            return [anthropic_error(500, delta.message)]
        return []

    def _into(self, kind: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """A delta for a block of ``kind``, starting one (and closing another) when needed."""
        events = []
        if self._open != kind:
            events += self._close()
            empty = {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": "",
                                                                          "signature": ""}
            events.append(self._start(empty))
        return [*events, self._delta(payload)]

    def _start(self, block: dict[str, Any]) -> dict[str, Any]:
        self._index += 1
        self._open = block["type"]
        return {"type": "content_block_start", "index": self._index, "content_block": block}

    def _delta(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self._index, "delta": payload}

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self._index}]
