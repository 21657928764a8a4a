"""Rendering of the daemon's progress streams (pull, push, create, transcribe) on stderr.

A status without a digest (``pulling manifest``, ``writing manifest``,
``success``) is printed as a line; a status with a digest and a total gets a
progress bar per layer with size, speed and time left, as ``ollama pull``.
A long transcription gets one bar of the recording's seconds (:class:`SecondsBar`).
Bars are drawn only where stderr is a terminal (rich's live display).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


_BAR = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn())
_COLUMNS = (*_BAR, DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
_SECONDS_COLUMNS = (*_BAR, TextColumn("{task.completed:.0f}/{task.total:.0f} s"), TimeRemainingColumn())


def _layer_label(status: str, digest: str) -> str:
    short = digest.removeprefix("sha256:").strip()[:12]
    verb = status.split(" ", 1)[0] if status else "pulling"
    return f"{verb} {short}"


def show_progress(events: Iterable[dict[str, Any]], console: Console | None = None) -> dict[str, Any]:
    """Consume a progress stream, drawing it; returns the last event (``{"status": "success"}``)."""
    console = console or Console(stderr=True, highlight=False)
    last: dict[str, Any] = {}
    last_status = ""
    bars: dict[str, TaskID] = {}
    progress: Progress | None = None  # runs while layers stream, so plain statuses stay plain lines
    try:
        for event in events:
            last = event
            status = str(event.get("status", ""))
            digest = event.get("digest")
            total = event.get("total")
            if digest and total:
                if progress is None:
                    progress = Progress(*_COLUMNS, console=console)
                    progress.start()
                if digest not in bars:
                    bars[digest] = progress.add_task(_layer_label(status, str(digest)), total=int(total))
                progress.update(bars[digest], completed=int(event.get("completed") or 0))
            elif status and status != last_status:
                if progress is not None:  # the layers are done: later statuses go below their bars
                    progress.stop()
                    progress, bars = None, {}
                console.print(status, markup=False, soft_wrap=True)
            last_status = status
    finally:
        if progress is not None:
            progress.stop()
    return last


class SecondsBar:
    """A bar of the seconds of a recording done (``localllm transcribe``), on stderr while it is a terminal;
    :meth:`print` writes a line above it."""

    def __init__(self, label: str, total: float, console: Console | None = None) -> None:
        console = console or Console(stderr=True, highlight=False)
        self._progress: Progress | None = None
        if console.is_terminal:
            self._progress = Progress(*_SECONDS_COLUMNS, console=console, redirect_stdout=False,
                                      redirect_stderr=False)
            self._task = self._progress.add_task(label, total=total)
            self._progress.start()

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def update(self, done: float) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done)

    def print(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
