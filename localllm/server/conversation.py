"""The conversation core: one typed request and one stream of output deltas that
every API dialect translates to and from.

A dialect (``server/dialects/``) turns its wire request into a :class:`ChatTurn`
and renders the :data:`Delta` stream into its own wire events; the handler
(``server/handler.py``) runs a turn on a model. Thinking and tool calls are
split out of the model's text once, by the output parser, before any dialect
sees them, so adding a dialect never touches inference.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Union

from ..images import MARKER
from ..templates.thinking import Think as ThinkSetting
from ..templates.thinking import check_think as templates_check_think
from .errors import bad_request
from .formats import NO_CONSTRAINT, Constraint
from .tools import ToolCall

Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class Message:
    """One message of a conversation, whatever dialect it came in."""

    role: Role
    content: str = ""
    images: list[str] = field(default_factory=list)  # base64 image data
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""  # the call a tool message answers
    tool_name: str = ""  # the function a tool message answers

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates receive it (Ollama's shape, which Jinja templates also read).

        Images stand as markers before the text, as Ollama places them; ``images`` keeps their data
        with the message, so a chat fitted to the context sends the images of the messages it keeps."""
        shaped: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.images:
            shaped["content"] = MARKER * len(self.images) + self.content
            shaped["images"] = self.images
        if self.thinking:
            shaped["thinking"] = self.thinking
        if self.tool_calls:  # Ollama's shape with HF's id and type: arguments stay an object
            shaped["tool_calls"] = [{**call.ollama(), "type": "function", **({"id": call.id} if call.id else {})}
                                    for call in self.tool_calls]
        if self.tool_name:
            shaped["tool_name"] = shaped["name"] = self.tool_name  # Ollama's name for it, and HF's
        if self.tool_call_id:
            shaped["tool_call_id"] = self.tool_call_id
        return shaped


def template_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as templates receive them; a tool result that names only its call's id also
    gets the called function's name, which templates such as gpt-oss's write back."""
    names = {call.id: call.name for m in messages for call in m.tool_calls if call.id}
    shaped = []
    for message in messages:
        if message.role == "tool" and not message.tool_name and message.tool_call_id in names:
            message = replace(message, tool_name=names[message.tool_call_id])
        shaped.append(message.for_template())
    return shaped


ToolChoice = Union[Literal["auto", "none", "required"], str]  # or a function name: call exactly that one


@dataclass
class ChatTurn:
    """What a client asks of a chat model: the conversation so far and how to answer it."""

    model: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None  # OpenAI's function shape: {"type": "function", "function": {...}}
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True  # False: at most one call an answer
    think: ThinkSetting = None
    options: dict[str, Any] = field(default_factory=dict)  # Ollama's option names
    constraint: Constraint = NO_CONSTRAINT
    grammar: str | None = None  # GBNF, llama.cpp's server extension
    logprobs: bool = False
    top_logprobs: int | None = None
    keep_alive: Any = None
    shift: bool = False  # slide the context when the answer fills it (Ollama's default), else end with "length"
    truncate: bool = True  # leave old messages out when the chat does not fit the context, else a 400


def check_think(value: Any) -> ThinkSetting:
    """``value`` as a think setting; a 400 naming the problem for anything else."""
    try:
        return templates_check_think(value)
    except ValueError as exc:
        raise bad_request(str(exc)) from None


def shaped_logprobs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runner's token log-probabilities in the shape Ollama, OpenAI chat and Responses share
    (token, logprob, bytes, top_logprobs; no token ids)."""
    def one(entry: dict[str, Any]) -> dict[str, Any]:
        return {"token": entry["token"], "logprob": entry["logprob"], "bytes": entry["bytes"]}

    return [dict(one(e), top_logprobs=[one(t) for t in e.get("top_logprobs", [])]) for e in entries]


# --- output deltas ---------------------------------------------------------------------


@dataclass
class Content:
    """Answer text, with the log-probabilities of the tokens it completes (runner's entries)."""

    text: str
    logprobs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Thinking:
    """Reasoning text, streamed apart from the answer."""

    text: str


@dataclass
class ToolCallDelta:
    """One whole tool call (the ``index``-th of the answer), emitted once its text is complete."""

    call: ToolCall
    index: int


StopReason = Literal["stop", "length", "tool_calls"]


@dataclass
class Final:
    """The end of an answer: why it stopped and what it cost."""

    reason: StopReason
    stop_sequence: str | None = None  # the stop string that ended it, if one did
    metrics: dict[str, int] = field(default_factory=dict)  # Ollama's counts and durations, cached_tokens
    context: list[int] = field(default_factory=list)  # prompt + answer tokens (/api/generate's context)
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # every token's, for whole answers
    truncated: bool = False  # the prompt was cut inside a message to fit the context

    @property
    def prompt_tokens(self) -> int:
        """Every prompt token, computed or taken from the cache."""
        return self.metrics.get("prompt_eval_count", 0) + self.metrics.get("cached_tokens", 0)

    @property
    def completion_tokens(self) -> int:
        return self.metrics.get("eval_count", 0)

    @property
    def cached_tokens(self) -> int:
        return self.metrics.get("cached_tokens", 0)


@dataclass
class Failure:
    """The answer broke off after it started streaming (the runner died, say)."""

    message: str


Delta = Union[Content, Thinking, ToolCallDelta, Final, Failure]


@dataclass
class Answer:
    """A whole answer, gathered from its deltas (for clients that did not ask to stream)."""

    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    final: Final | None = None
