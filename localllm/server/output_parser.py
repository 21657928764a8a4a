"""Splitting a model's streamed text into answer, thinking and tool calls, as it arrives.

One parser serves every model family; what differs between families is
data: the thinking block's tags (``<think>``/``</think>`` for Qwen3 and
DeepSeek-R1, inferred from the template) and the tool-call syntax of
:mod:`localllm.server.tools` (Hermes ``<tool_call>…</tool_call>``, Mistral
``[TOOL_CALLS][…]``, Llama 3 ``<|python_tag|>{…}`` or a bare JSON answer).

Text is passed on as soon as it cannot be the start of a marker: only a
suffix that some marker begins with is held back until the next piece shows
what it is. So content streams even when tools are offered; only the text of
a call itself waits until the call is complete (a Hermes call as soon as its
closing tag arrives, the other syntaxes at the end of the answer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ..templates.thinking import ThinkingTags
from .conversation import Content, Delta, Thinking, ToolCallDelta
from .tools import CALL_MARKERS, HERMES, LLAMA3, new_call_id, parse_tool_calls

_CONTENT, _THINKING, _CALLS = "content", "thinking", "calls"
_HERMES_CLOSE = "</tool_call>"


@dataclass(frozen=True)
class ParserSetup:
    """What the parser looks for in one answer."""

    thinking_tags: ThinkingTags | None = None  # opening and closing tag of a thinking block
    starts_thinking: bool = False  # the prompt already opened the block (the template wrote the opening tag)
    call_syntax: str | None = None  # tools.HERMES / MISTRAL / LLAMA3 when tools are offered
    tool_names: frozenset[str] = frozenset()


def _held_suffix(text: str, markers: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that one of ``markers`` starts with (and is not all of)."""
    longest = max((len(m) for m in markers), default=0)
    for k in range(min(len(text), longest - 1), 0, -1):
        if any(m.startswith(text[-k:]) for m in markers):
            return k
    return 0


class OutputParser:
    """Feed the answer's text pieces; get back :class:`Content`, :class:`Thinking` and
    :class:`ToolCallDelta` deltas in order."""

    def __init__(self, setup: ParserSetup) -> None:
        self.setup = setup
        self._state = _THINKING if setup.starts_thinking and setup.thinking_tags else _CONTENT
        self._buffer = ""  # text not yet passed on
        self._answered = False  # content (beyond whitespace) was passed on: no thinking block may open now
        self._strip_leading = self._state == _THINKING  # the answer after a thinking block starts past its spaces
        self._calls = 0
        self._call_text = ""  # the text of the calls being gathered (state _CALLS)

    # -- public API --------------------------------------------------------------------

    def feed(self, text: str) -> list[Delta]:
        """Deltas that ``text`` (the next piece of the answer) completes."""
        self._buffer += text
        out: list[Delta] = []
        while self._step(out, final=False):
            pass
        return out

    def finish(self) -> list[Delta]:
        """Deltas for what is left once the answer has ended."""
        out: list[Delta] = []
        while self._step(out, final=True):
            pass
        if self._state == _CALLS:
            out += self._parse_calls(self._call_text + self._buffer)
        elif self._buffer:
            self._emit_text(out, self._buffer)
        self._buffer = self._call_text = ""
        return out

    @property
    def calls_made(self) -> int:
        return self._calls

    # -- states --------------------------------------------------------------------------

    def _step(self, out: list[Delta], final: bool) -> bool:
        """Consume what the buffer decides; True when another step may consume more."""
        if self._state == _THINKING:
            return self._step_thinking(out, final)
        if self._state == _CALLS:
            return self._step_calls(out)
        return self._step_content(out, final)

    def _past_leading_space(self) -> bool:
        """Drop the spaces a block starts with; False while the buffer holds nothing else."""
        if self._strip_leading:
            self._buffer = self._buffer.lstrip()
            if not self._buffer:
                return False
            self._strip_leading = False
        return True

    def _content_markers(self) -> list[str]:
        markers: list[str] = []
        if self.setup.thinking_tags and not self._answered:
            markers.append(self.setup.thinking_tags[0])
        if self.setup.call_syntax:
            markers += CALL_MARKERS[self.setup.call_syntax]
        return markers

    def _step_content(self, out: list[Delta], final: bool) -> bool:
        if not self._past_leading_space():
            return False
        if self._bare_json_call_starts():
            self._state = _CALLS
            return True
        markers = self._content_markers()
        found = [(i, m) for m in markers if (i := self._buffer.find(m)) >= 0]
        opening = self.setup.thinking_tags[0] if self.setup.thinking_tags else None
        # a thinking block opens only before any answer text
        found = [(i, m) for i, m in found if m != opening or not self._buffer[:i].strip()]
        if found:
            index, marker = min(found)
            if marker == opening:
                self._state, self._strip_leading = _THINKING, True
            else:
                self._emit_text(out, self._buffer[:index])
                self._state, self._call_text = _CALLS, marker
            self._buffer = self._buffer[index + len(marker):]
            return True
        keep = 0 if final else _held_suffix(self._buffer, markers)
        if not final and opening in markers and not self._buffer[:len(self._buffer) - keep].strip():
            keep = len(self._buffer)  # leading spaces wait: a thinking block may still open
        ready, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
        self._emit_text(out, ready)
        return False

    def _bare_json_call_starts(self) -> bool:
        """A Llama 3 model calls a tool by answering with bare JSON: such an answer is gathered whole."""
        return (self.setup.call_syntax == LLAMA3 and not self._answered
                and self._buffer.lstrip()[:1] in ("{", "["))

    def _step_thinking(self, out: list[Delta], final: bool) -> bool:
        if not self._past_leading_space():
            return False
        closing = self.setup.thinking_tags[1]
        index = self._buffer.find(closing)
        if index >= 0:
            if index:
                out.append(Thinking(self._buffer[:index].rstrip()))
            self._buffer = self._buffer[index + len(closing):]
            self._state, self._strip_leading = _CONTENT, True
            self._answered = True  # one thinking block an answer
            return True
        keep = 0 if final else _held_suffix(self._buffer, [closing])
        ready, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
        if ready:
            out.append(Thinking(ready))
        return False

    def _step_calls(self, out: list[Delta]) -> bool:
        """Gather call text; a Hermes call is passed on as soon as its closing tag arrives."""
        self._call_text += self._buffer
        self._buffer = ""
        if self.setup.call_syntax != HERMES:
            return False
        index = self._call_text.find(_HERMES_CLOSE)
        if index < 0:
            return False
        end = index + len(_HERMES_CLOSE)
        out += self._parse_calls(self._call_text[:end])
        self._buffer, self._call_text = self._call_text[end:], ""
        self._state, self._strip_leading = _CONTENT, True
        return True

    # -- output --------------------------------------------------------------------------

    def _emit_text(self, out: list[Delta], text: str) -> None:
        if not text:
            return
        if text.strip():
            self._answered = True
        if out and isinstance(out[-1], Content):
            out[-1].text += text
        else:
            out.append(Content(text))

    def _parse_calls(self, text: str) -> list[Delta]:
        """The calls in ``text``; text that holds no valid call is the answer's, never lost."""
        content, calls = parse_tool_calls(text, self.setup.call_syntax, set(self.setup.tool_names))
        out: list[Delta] = []
        if not calls:
            self._emit_text(out, text)
            return out
        if content.strip():
            self._emit_text(out, content)
        for call in calls:
            out.append(ToolCallDelta(dataclasses.replace(call, id=call.id or new_call_id()), self._calls))
            self._calls += 1
        return out
