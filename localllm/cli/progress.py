"""Rendering of the daemon's progress streams (pull, push, create) on stderr.

A status without a digest (``pulling manifest``, ``writing manifest``,
``success``) is printed as a line; a status with a digest and a total gets a
progress bar per layer with size, speed and time left, as ``ollama pull``.
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


_COLUMNS = (
    TextColumn("{task.description}"),
    BarColumn(),
    TaskProgressColumn(),
    DownloadColumn(),
    TransferSpeedColumn(),
    TimeRemainingColumn(),
)


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
