"""Helpers for the CLI tests: an isolated environment, the real CLI as a
subprocess, a real daemon, a store written in Ollama's format, and a
pseudo-terminal to drive the chat REPL.

Nothing here stands in for localllm: the tests run ``python -m localllm``
against a daemon started the way users start it. Every daemon (and runner)
started for an environment carries that environment's unique state directory
in its environment, which is how :meth:`CliEnv.kill_daemons` finds exactly
those processes and no others.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import pty
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# What readline's select() on the terminal shows in /proc/PID/syscall: select and pselect6 by architecture.
SELECT_SYSCALLS = {"x86_64": {"23", "270"}, "aarch64": {"72"}}.get(platform.machine(), set())
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]|\r")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_ollama_model(models_dir: Path, gguf: Path, name: str = "smollm2", tag: str = "135m",
                       gguf_sha256: str = SMOLLM2_SHA256) -> str:
    """Write a model into ``models_dir`` exactly as Ollama lays it out; returns the manifest digest.

    Test set-up, not a mock: the daemon must read a store that Ollama wrote.
    """
    blobs = models_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    model_blob = blobs / f"sha256-{gguf_sha256}"
    if not model_blob.exists():
        shutil.copyfile(gguf, model_blob)
    model_layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{gguf_sha256}",
                   "size": gguf.stat().st_size}
    config = json.dumps({
        "model_format": "gguf", "model_family": "llama", "model_families": ["llama"], "model_type": "135M",
        "file_type": "Q4_1", "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{gguf_sha256}"]},
    }).encode()
    (blobs / f"sha256-{_sha256(config)}").write_bytes(config)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": f"sha256:{_sha256(config)}", "size": len(config)},
        "layers": [model_layer],
    }).encode()
    path = models_dir / "manifests" / "registry.ollama.ai" / "library" / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(manifest)
    return _sha256(manifest)


class CliEnv:
    """An isolated localllm environment: its own port, store and state directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.models_dir = root / "models"
        self.state_dir = root / "state"
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "LOCALLLM_HOST": f"127.0.0.1:{self.port}",
            "LOCALLLM_MODELS": str(self.models_dir),
            "LOCALLLM_STATE_DIR": str(self.state_dir),
            "LOCALLLM_NUM_THREADS": "1",
            "COLUMNS": "200",
            "LOCALLLM_REGISTRY": f"https://127.0.0.1:{free_port()}",  # names not built in never reach the internet
        }
        self.env.pop("LOCALLLM_API_KEY", None)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.manifest_digest = ""  # set by a test that writes a model into the store

    def run(self, *args: str, input: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """``python -m localllm ARGS`` with this environment; stdin is a pipe (empty unless ``input``)."""
        return subprocess.run(
            [sys.executable, "-m", "localllm", *args], env=self.env, cwd=self.root, input=input or "",
            capture_output=True, text=True, timeout=timeout,
        )

    def start_daemon(self, timeout: float = 30) -> subprocess.Popen[bytes]:
        """``localllm serve`` in the foreground of a child process, once it answers."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = (self.state_dir / "serve-test.log").open("ab")
        process = subprocess.Popen([sys.executable, "-m", "localllm", "serve"], env=self.env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"daemon exited: {(self.state_dir / 'serve-test.log').read_text()[-2000:]}")
            try:
                if httpx.get(self.base_url + "/", timeout=2).text.strip() == "localllm is running":
                    return process
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        process.kill()
        raise RuntimeError("daemon did not answer in time")

    def daemon_pids(self, daemons_only: bool = False) -> list[int]:
        """Processes whose environment names this state directory: daemons, their runners and render workers
        (``daemons_only``: the ``localllm serve`` processes alone)."""
        marker = f"LOCALLLM_STATE_DIR={self.state_dir}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0") and (
                        not daemons_only or b"serve" in (entry / "cmdline").read_bytes().split(b"\0")):
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    def kill_daemons(self) -> None:
        """Terminate every process started for this environment; SIGKILL what lingers."""
        pids = self.daemon_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.daemon_pids():
            for pid in pids:
                try:
                    os.waitpid(pid, os.WNOHANG)  # reap our own children
                except ChildProcessError:
                    pass
            time.sleep(0.1)
        for pid in self.daemon_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@contextlib.contextmanager
def cli_with_models(root: Path, **modelfiles: str) -> Iterator[CliEnv]:
    """A :class:`CliEnv` with its daemon running and each model created from its Modelfile text (the
    keyword is the model's name); the daemon and what it started end with the block."""
    cli = CliEnv(root)
    process = cli.start_daemon()
    try:
        for name, modelfile in modelfiles.items():
            (cli.root / f"{name}.Modelfile").write_text(modelfile)
            created = cli.run("create", name, "-f", f"{name}.Modelfile")
            assert created.returncode == 0, created.stderr
        yield cli
    finally:
        process.terminate()
        cli.kill_daemons()


class PtySession:
    """The CLI on a pseudo-terminal, driven like a person at a keyboard."""

    def __init__(self, env: CliEnv, *args: str, columns: int = 200) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child: becomes the CLI, the pty is its controlling terminal
            os.chdir(env.root)
            env_vars = {**env.env, "TERM": "xterm"}
            os.execve(sys.executable, [sys.executable, "-m", "localllm", *args], env_vars)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        self.buffer = ""
        self.seen = ""
        self.exit_status: int | None = None

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        text = ANSI.sub("", data.decode("utf-8", "replace"))
        self.buffer += text
        self.seen += text
        return True

    def expect(self, pattern: str, timeout: float = 60) -> str:
        """Wait for ``pattern`` (a regex); returns the output before it and consumes through it."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.buffer)
            if match:
                before = self.buffer[:match.start()]
                self.buffer = self.buffer[match.end():]
                return before
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(min(remaining, 0.5)):
                if not regex.search(self.buffer):
                    raise AssertionError(f"timed out waiting for {pattern!r}; output so far:\n{self.seen[-3000:]}")

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait_reading_keys(self, timeout: float = 60) -> None:
        """Wait until the CLI sleeps in readline's ``select()`` on the terminal.

        The prompt is written before readline enters ``select()``; a Ctrl+C that lands in between
        only sets Python's signal flag and is acted on after the next key (CPython's readline
        checks signals when ``select()`` fails with EINTR), so a test that sends one the moment
        the prompt shows waits for this first.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.pid}/syscall") as f:
                    syscall = f.read().split()[0]
            except (OSError, IndexError):
                return  # no procfs: nothing better than the prompt itself
            if not SELECT_SYSCALLS:
                return
            if syscall in SELECT_SYSCALLS:
                return
            time.sleep(0.05)
        raise AssertionError(f"the CLI never waited for keys; output:\n{self.seen[-3000:]}")

    def sendline(self, line: str) -> None:
        self.send(line + "\r")

    def wait(self, timeout: float = 30) -> int:
        """The CLI's exit code, draining its output meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.exit_status = os.waitstatus_to_exitcode(status)
                return self.exit_status
            self._read(0.2)
        raise AssertionError(f"CLI did not exit; output:\n{self.seen[-3000:]}")

    def close(self) -> None:
        if self.exit_status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


def assert_clean_error(result, *needles: str) -> None:
    """Failed with exit code 1 and one line a person can act on, no traceback."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
