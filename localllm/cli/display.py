"""Terminal output of streamed answers: word wrapping, the model's thinking, and the waiting spinner."""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

from rich.cells import cell_len
from rich.console import Console
from rich.status import Status


class StreamPrinter:
    """Prints text as it streams in, wrapping at word boundaries.

    Tokens arrive in pieces, so a word may already be half printed when it
    turns out not to fit; like Ollama we then move the cursor back over it,
    clear to the end of the line and print it again on the next line. With
    ``wrap`` off (or when ``out`` is not a terminal) text passes through
    unchanged, so piped output is exactly the model's answer.
    """

    def __init__(self, out: TextIO | None = None, wrap: bool = True) -> None:
        self.out = out or sys.stdout
        self.wrap = wrap and self.out.isatty()
        self.width = shutil.get_terminal_size((80, 24)).columns
        self.line_length = 0
        self.word = ""
        self.text: list[str] = []

    def write(self, text: str) -> None:
        if not text:
            return
        self.text.append(text)
        if not self.wrap or self.width < 10:
            self.out.write(text)
        else:
            for ch in text:
                self._write_char(ch)
        self.out.flush()

    def _write_char(self, ch: str) -> None:
        width = cell_len(ch)
        if self.line_length + 1 > self.width - 5 and ch not in "\n\r":
            if ch in " \t":  # the word fits: the line break replaces the space
                self.out.write("\n")
                self.line_length, self.word = 0, ""
                return
            if cell_len(self.word) > self.width - 10:  # a "word" longer than a line: break it here
                self.out.write("\n" + ch)
                self.word, self.line_length = ch, width
                return
            if self.word:
                self.out.write(f"\x1b[{cell_len(self.word)}D")
            self.out.write("\x1b[K\n")
            self.out.write(self.word + ch)
            self.word += ch
            self.line_length = cell_len(self.word)
            return
        self.out.write(ch)
        self.line_length += width
        if ch in "\n\r":
            self.line_length, self.word = 0, ""
        elif ch in " \t" or width >= 2:
            self.word = ""
        else:
            self.word += ch

    @property
    def content(self) -> str:
        """Everything written so far."""
        return "".join(self.text)

    def at_line_start(self) -> None:
        """Someone else wrote a line break: wrapping starts counting again."""
        self.line_length, self.word = 0, ""


# Ollama's CLI colours (its readline package): thinking is grey, its frame bold grey.
GREY, BOLD, RESET = "\x1b[38;5;245m", "\x1b[1m", "\x1b[0m"


class AnswerPrinter:
    """One streamed answer on the terminal: the model's thinking, then its answer.

    Thinking is shown as Ollama's CLI shows it: ``Thinking...``, the text dimmed,
    then ``...done thinking.`` once the answer starts (or the stream ends);
    colours only on a terminal. With ``show_thinking`` off it is kept (for the
    chat history) but not printed.
    """

    def __init__(self, out: TextIO | None = None, wrap: bool = True, show_thinking: bool = True) -> None:
        self.out = out or sys.stdout
        self.wrap = wrap
        self.show_thinking = show_thinking
        self.styled = self.out.isatty()
        self.answer = StreamPrinter(self.out, wrap)
        self._thinking: StreamPrinter | None = None  # the open thinking block, if any
        self._thoughts: list[str] = []

    def think(self, text: str) -> None:
        """A piece of thinking."""
        if not text:
            return
        self._thoughts.append(text)
        if not self.show_thinking:
            return
        if self._thinking is None:
            self._frame("Thinking...\n", then=GREY)
            self._thinking = StreamPrinter(self.out, self.wrap)
        self._thinking.write(text)

    def write(self, text: str) -> None:
        """A piece of the answer; it closes an open thinking block first."""
        if text:
            self.end_thinking()
            self.answer.write(text)

    def end_thinking(self) -> None:
        """Close the open thinking block, if any (``...done thinking.``)."""
        if self._thinking is None:
            return
        if not self._thinking.content.endswith("\n"):
            self.out.write("\n")
        self._frame("...done thinking.\n\n")
        self._thinking = None
        self.answer.at_line_start()

    def stop(self) -> None:
        """Stop where the answer is (cut short, or failed): an open thinking block
        stays unclosed, but the terminal's colours are reset."""
        if self._thinking is not None and self.styled:
            self.out.write(RESET)
            self.out.flush()
        self._thinking = None

    def _frame(self, text: str, then: str = "") -> None:
        self.out.write(f"{GREY}{BOLD}{text}{RESET}{then}" if self.styled else text)
        self.out.flush()

    @property
    def content(self) -> str:
        """The answer written so far, without thinking."""
        return self.answer.content

    @property
    def thinking(self) -> str:
        """All thinking received so far, shown or not."""
        return "".join(self._thoughts)


class Spinner:
    """A spinner on stderr while waiting for the first token; silent when stderr is not a terminal, or
    ``message`` is None (something else is drawn there)."""

    def __init__(self, message: str | None = "") -> None:
        console = Console(stderr=True)
        self._status: Status | None = None
        if console.is_terminal and message is not None:
            self._status = Status(message, console=console, spinner="dots")
            self._status.start()

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
