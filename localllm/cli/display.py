"""Terminal output of streamed answers: word wrapping and the waiting spinner."""

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


class Spinner:
    """A spinner on stderr while waiting for the first token; silent when stderr is not a terminal."""

    def __init__(self, message: str = "") -> None:
        console = Console(stderr=True)
        self._status: Status | None = None
        if console.is_terminal:
            self._status = Status(message, console=console, spinner="dots")
            self._status.start()

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
