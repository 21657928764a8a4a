"""Start a real runner process on a unix socket for the tests, and talk to it."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

STARTUP_TIMEOUT = 60.0


class RunnerProcess:
    """A ``python -m localllm.runner`` child with its socket and captured stderr."""

    def __init__(self, model: Path, *args: str, env: dict[str, str] | None = None) -> None:
        # unix socket paths are limited to ~100 bytes: keep the directory short
        self.dir = Path(tempfile.mkdtemp(prefix="llr-", dir="/tmp"))
        self.socket = self.dir / "runner.sock"
        self.log_path = self.dir / "stderr.log"
        self._log = self.log_path.open("wb")
        cmd = [sys.executable, "-m", "localllm.runner", "--model", str(model), "--socket", str(self.socket), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._log, env={**os.environ, **(env or {})})

    @property
    def stderr(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(transport=httpx.HTTPTransport(uds=str(self.socket)), base_url="http://runner", timeout=timeout)

    def async_client(self, timeout: float = 120.0) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(uds=str(self.socket))
        return httpx.AsyncClient(transport=transport, base_url="http://runner", timeout=timeout)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> dict[str, Any]:
        """Poll /health until it answers; fail with the runner's stderr if it exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"runner exited with {self.proc.returncode}:\n{self.stderr}")
            if self.socket.exists():
                try:
                    with self.client(timeout=5) as c:
                        r = c.get("/health")
                    if r.status_code == 200:
                        return r.json()
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        raise TimeoutError(f"runner not ready after {timeout}s:\n{self.stderr}")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def running_runner(model: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[RunnerProcess]:
    """A ready runner for the duration of the block; always stopped afterwards."""
    runner = RunnerProcess(model, *args, env=env)
    try:
        runner.wait_ready()
        yield runner
    finally:
        runner.cleanup()


def runner_threads() -> str:
    return str(min(2, os.cpu_count() or 1))


def parse_stream(lines: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Split NDJSON lines into the content pieces and the final object (done or error)."""
    pieces: list[str] = []
    final: dict[str, Any] = {}
    for line in lines:
        if not line.strip():
            continue
        item = json.loads(line)
        if "content" in item:
            pieces.append(item["content"])
        else:
            final = item
    return pieces, final


def complete(
    client: httpx.Client,
    prompt: str | list[int],
    grammar: str | None = None,
    context: list[int] | None = None,
    grammar_triggers: list[str] | None = None,
    **options: Any,
) -> tuple[list[str], dict[str, Any]]:
    """One streamed /completion: the pieces and the final object."""
    body: dict[str, Any] = {"prompt": prompt, "options": options, "grammar": grammar, "context": context}
    if grammar_triggers:
        body["grammar_triggers"] = grammar_triggers
    with client.stream("POST", "/completion", json=body) as r:
        assert r.status_code == 200, r.read()
        return parse_stream(list(r.iter_lines()))


def chat_prompt(user: str) -> str:
    """SmolLM2's chat format (ChatML) around one user message."""
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def cancellation_storm(runner: RunnerProcess, prompt_of: Callable[[int], str], seed: int, n: int = 100) -> list[Any]:
    """``n`` concurrent greedy streams, many dropped by their client (before any event, or after a few),
    and 15% cancelled while still queued; each outcome: "done", "cancelled", "ended" or the exception."""
    rng = random.Random(seed)

    async def one(ac: httpx.AsyncClient, i: int) -> str:
        body = {"prompt": prompt_of(i), "options": {"temperature": 0, "num_predict": 12}}
        hang_up_after = rng.choice([0, 0, 1, 3, None, None])
        async with ac.stream("POST", "/completion", json=body) as resp:
            seen = 0
            async for line in resp.aiter_lines():
                if hang_up_after is not None and seen >= hang_up_after:
                    return "cancelled"
                seen += 1
                if '"done"' in line:
                    return "done"
        return "ended"

    async def run() -> list[Any]:
        async with runner.async_client(timeout=300) as ac:
            tasks = [asyncio.create_task(one(ac, i)) for i in range(n)]
            await asyncio.sleep(0.5)
            for task in rng.sample(tasks, n * 15 // 100):  # some clients vanish while queued
                task.cancel()
            return await asyncio.gather(*tasks, return_exceptions=True)

    return asyncio.run(run())


SYSTEM = (
    "You are Orbit, the assistant of a small astronomy club. Members ask about telescopes, star charts, "
    "moon phases, planets, meteor showers and how to photograph the night sky. Answer in plain words, "
    "in two or three sentences, and never invent dates of events you do not know. "
)


def chat(user: str, system: str = SYSTEM, history: str = "") -> str:
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n{history}"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def tokens_of(client: httpx.Client, text: str, add_special: bool = True) -> list[int]:
    return client.post("/tokenize", json={"content": text, "add_special": add_special}).json()["tokens"]
