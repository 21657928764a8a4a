"""Helpers for the safety and fault tests: streamed API calls, the real CLI, a stalling index.

Everything talks to real processes over loopback; nothing here stands in for localllm.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from support.daemon import Daemon
from support.registry_servers import PackageIndexServer, _Handler

from localllm.registry.store import Store


def stream_events(daemon: Daemon, path: str, body: dict[str, Any], timeout: float = 120) -> list[dict[str, Any]]:
    """POST ``body`` with ``stream: true`` and return every NDJSON event (HTTP errors become one event)."""
    events = []
    with httpx.stream("POST", daemon.url + path, json={**body, "stream": True}, timeout=timeout) as response:
        if response.status_code != 200:
            response.read()
            return [{"error": response.text, "http_status": response.status_code}]
        for line in response.iter_lines():
            if line.strip():
                events.append(json.loads(line))
    return events


def model_names(daemon: Daemon) -> set[str]:
    response = httpx.get(f"{daemon.url}/api/tags", timeout=30)
    response.raise_for_status()
    return {m["name"] for m in response.json()["models"]}


def assert_alive(daemon: Daemon) -> None:
    assert daemon.process is not None and daemon.process.poll() is None, daemon.log()
    assert httpx.get(daemon.url, timeout=10).text == "localllm is running"


def assert_store_consistent(daemon: Daemon) -> Store:
    """Every manifest's blobs exist with the right digest and size."""
    store = Store(daemon.root / "models")
    assert store.verify() == []
    return store


def partial_files(store: Store) -> list[Path]:
    return [p for p in store.partial_dir.rglob("*") if p.is_file()]


def kill_daemon(daemon: Daemon) -> None:
    """SIGKILL the daemon and everything in its session (runners): a power cut, not a shutdown."""
    assert daemon.process is not None
    try:
        os.killpg(daemon.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    daemon.process.wait(10)


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.005) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def run_cli(daemon: Daemon, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m localllm ARGS`` against ``daemon`` (never starts a daemon of its own)."""
    return subprocess.run(
        [sys.executable, "-m", "localllm", *args], env=daemon.env, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=timeout,
    )


class StallingIndex(PackageIndexServer):
    """A package index that can send the first N bytes of a file and then hold the connection open.

    A stalled transfer keeps the daemon mid-download for as long as the test
    needs, so it can be killed at a known point; ``release()`` lets it end.
    """

    def __init__(self, wheels_dir: Path) -> None:
        super().__init__(wheels_dir)
        self._stalls: dict[str, int] = {}
        self._released = threading.Event()

    def stall_next(self, filename: str, after_bytes: int) -> None:
        with self.httpd.lock:
            self._stalls[filename] = after_bytes
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def handle(self, handler: _Handler, path: str, send_body: bool) -> None:
        match = re.fullmatch(r"/files/([^/]+)", path)
        with self.httpd.lock:
            stall = self._stalls.pop(match.group(1), None) if match and send_body else None
        if stall is None:
            super().handle(handler, path, send_body)
            return
        handler.send_file(self.wheels_dir / match.group(1), True, {}, stall)
        handler.wfile.flush()
        self._released.wait(60)  # the body is incomplete: the client waits for bytes that never come

    def __exit__(self, *exc: object) -> None:
        self.release()
        super().__exit__(*exc)
