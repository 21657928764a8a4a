"""Splitting a model's streamed text into answer, thinking and tool calls, as it arrives.

One parser serves every model family; what differs between families is data
(:mod:`localllm.templates.families`): the thinking block's tags, the markers
between blocks that are no text of the answer (Harmony's ``<|end|>``…), and
the tool-call syntax (where a call starts and ends, and which decoder of
:mod:`localllm.server.tools` reads it).

Text is passed on as soon as it cannot be the start of a marker: only a
suffix that some marker begins with is held back until the next piece shows
what it is. So content streams even when tools are offered; only the text of
a call itself waits until the call is complete (when its closing marker
arrives; for syntaxes without one, at the next call or the end of the answer).

A call that does not decode (arguments that are not JSON, a tool that was not
offered, a call cut off by the token limit) is no call: its text is passed on
as content, unchanged, and the answer's reason stays what the runner said
(``length`` for a cut-off), never ``tool_calls``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..templates.families import FORMATS, ChatFormat
from ..templates.thinking import ThinkingTags
from .conversation import Content, Delta, Thinking, ToolCallDelta
from .tools import decode_calls, new_call_id

log = logging.getLogger(__name__)

_CONTENT, _THINKING, _CALL = "content", "thinking", "call"


@dataclass(frozen=True)
class ParserSetup:
    """What the parser looks for in one answer."""

    format: ChatFormat = FORMATS["hermes"]
    thinking_tags: ThinkingTags | None = None  # opening and closing tag of a thinking block
    starts_thinking: bool = False  # the prompt already opened the block (the template wrote the opening tag)
    continues_header: bool = False  # the prompt ends with the format's ``answer_start``, which the answer goes on
    tools: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # offered tools' schemas: calls are parsed
    client_names: Mapping[str, str] = field(default_factory=dict)  # a tool's prompt name -> the client's (Harmony)


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
        fmt = setup.format
        self._calls_syntax = fmt.calls if setup.tools else None
        self._label = fmt.thinking_label if setup.thinking_tags == fmt.thinking else ""
        self._state = _THINKING if setup.starts_thinking and setup.thinking_tags else _CONTENT
        self._buffer = fmt.answer_start if setup.continues_header else ""  # text not yet passed on
        self._answered = False  # content (beyond whitespace) was passed on: no thinking block may open now
        self._strip_leading = self._state == _THINKING  # a block's text starts past its spaces
        self._at_label = self._state == _THINKING  # the thinking block's label may still come
        self._calls = 0
        self._opening = ""  # the marker that opened the call being gathered

    # -- public API --------------------------------------------------------------------

    def feed(self, text: str) -> list[Delta]:
        """Deltas that ``text`` (the next piece of the answer) completes."""
        self._buffer += text
        out: list[Delta] = []
        while self._step(out, final=False):
            pass
        return out

    def finish(self, cut_off: bool = False) -> list[Delta]:
        """Deltas for what is left once the answer has ended; ``cut_off``: by the token limit, so a
        call still open is cut off, whatever its text would decode to."""
        out: list[Delta] = []
        while self._step(out, final=True):
            pass
        if self._state == _CALL:
            self._end_call(out, self._buffer, "", cut_off)
        elif self._buffer:
            self._emit_text(out, self._buffer)
        self._buffer = ""
        return out

    @property
    def calls_made(self) -> int:
        return self._calls

    # -- states --------------------------------------------------------------------------

    def _step(self, out: list[Delta], final: bool) -> bool:
        """Consume what the buffer decides; True when another step may consume more."""
        if self._state == _THINKING:
            return self._step_thinking(out, final)
        if self._state == _CALL:
            return self._step_call(out)
        return self._step_content(out, final)

    def _past_leading_space(self) -> bool:
        """Drop the spaces a block starts with; False while the buffer holds nothing else."""
        if self._strip_leading:
            self._buffer = self._buffer.lstrip()
            if not self._buffer:
                return False
            self._strip_leading = False
        return True

    def _content_markers(self) -> dict[str, str]:
        """The markers that may come in the answer's text, each with the state it leads to
        (the current one: the marker is dropped)."""
        markers = {m: _CONTENT for m in self.setup.format.dropped}
        if syntax := self._calls_syntax:
            markers.update({m: _CONTENT for m in syntax.wrappers})
            markers.update({m: _CALL for m in syntax.opening})
        if self.setup.thinking_tags and not self._answered:
            markers[self.setup.thinking_tags.opening] = _THINKING
        return markers

    @staticmethod
    def _first_marker(text: str, markers: Sequence[str]) -> tuple[int, str] | None:
        """The earliest marker in ``text`` (the longest of those starting there)."""
        found = [(i, -len(m), m) for m in markers if (i := text.find(m)) >= 0]
        return (min(found)[0], min(found)[2]) if found else None

    def _step_content(self, out: list[Delta], final: bool) -> bool:
        if not self._past_leading_space():
            return False
        if self._bare_json_call_starts():
            self._state, self._opening = _CALL, ""
            return True
        markers = self._content_markers()
        opening = self.setup.thinking_tags.opening if self.setup.thinking_tags else None
        # a thinking block opens only before any answer text
        candidates = [m for m in markers if m != opening or not self._buffer[:self._buffer.find(m)].strip()]
        if first := self._first_marker(self._buffer, candidates):
            index, marker = first
            longer = [m for m in markers if m != marker and m.startswith(self._buffer[index:])]
            if longer and not final:  # the text may yet become a longer marker
                self._emit_text(out, self._buffer[:index])
                self._buffer = self._buffer[index:]
                return False
            if markers[marker] != _THINKING:  # before a thinking block there are only spaces, dropped
                self._emit_text(out, self._buffer[:index])
            self._buffer = self._buffer[index + len(marker):]
            self._enter(markers[marker], marker)
            return True
        keep = 0 if final else _held_suffix(self._buffer, list(markers))
        if not final and opening in markers and not self._buffer[:len(self._buffer) - keep].strip():
            keep = len(self._buffer)  # leading spaces wait: a thinking block may still open
        ready, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
        self._emit_text(out, ready)
        return False

    def _enter(self, state: str, marker: str) -> None:
        if state == _THINKING:
            self._state, self._strip_leading, self._at_label = _THINKING, True, bool(self._label)
        elif state == _CALL:
            self._state, self._opening = _CALL, marker

    def _bare_json_call_starts(self) -> bool:
        """A Llama 3 model calls a tool by answering with bare JSON: such an answer is gathered whole."""
        syntax = self._calls_syntax
        return (syntax is not None and syntax.name == "llama3" and not self._answered
                and self._buffer.lstrip()[:1] in ("{", "["))

    def _past_label(self, final: bool) -> bool:
        """Drop the label a thinking block starts with (Gemma 4's ``thought``); False while it may still come."""
        if self._at_label:
            label = self._label
            if label.startswith(self._buffer) and not final:  # all of it, or the start: what follows decides
                return False
            if self._buffer.startswith(label):
                self._buffer = self._buffer[len(label):]
                self._strip_leading = True
                if not self._past_leading_space():
                    return False
            self._at_label = False
        return True

    def _step_thinking(self, out: list[Delta], final: bool) -> bool:
        if not self._past_leading_space() or not self._past_label(final):
            return False
        closing = self.setup.thinking_tags.closing
        ends = [closing]
        if self._calls_syntax and self.setup.format.calls_end_thinking:
            ends += self._calls_syntax.opening
        if first := self._first_marker(self._buffer, ends):
            index, marker = first
            if index:
                out.append(Thinking(self._buffer[:index].rstrip()))
            self._buffer = self._buffer[index + len(marker):]
            self._state, self._strip_leading = _CONTENT, True
            self._answered = True  # one thinking block an answer
            if marker != closing:
                self._enter(_CALL, marker)
            return True
        # spaces at the end wait: the block's text ends before the spaces in front of its closing tag
        keep = 0
        if not final:
            keep = _held_suffix(self._buffer, ends)
            before = self._buffer[:len(self._buffer) - keep]
            keep += len(before) - len(before.rstrip())
        ready, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
        if ready:
            out.append(Thinking(ready))
        return False

    def _step_call(self, out: list[Delta]) -> bool:
        """A call is passed on once its closing marker (or, without one, the next call's opening) arrives."""
        syntax = self._calls_syntax
        ends = [syntax.closing] if syntax.closing else list(syntax.opening)
        first = self._first_marker(self._buffer, ends)
        if first is None:
            return False
        index, marker = first
        self._end_call(out, self._buffer[:index], marker if syntax.closing else "")
        self._buffer = self._buffer[index + (len(marker) if syntax.closing else 0):]
        return True

    def _end_call(self, out: list[Delta], text: str, closing: str, cut_off: bool = False) -> None:
        """Decode one call's text; text that holds no valid call is the answer's, never lost."""
        calls = None if cut_off else decode_calls(self._calls_syntax, text, self.setup.tools)
        if calls is None:
            log.info("model output is not a valid call to an offered tool; passed on as text: %.200r",
                     self._opening + text + closing)
            self._emit_text(out, self._opening + text + closing)
        else:
            for call in calls:
                out.append(ToolCallDelta(dataclasses.replace(call, id=call.id or new_call_id(),
                                                             name=self.setup.client_names.get(call.name, call.name)),
                                         self._calls))
                self._calls += 1
        self._state, self._opening, self._strip_leading = _CONTENT, "", True

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
