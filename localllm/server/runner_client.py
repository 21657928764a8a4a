"""Start a runner process for one model and talk to it over its unix socket.

The daemon never loads weights itself: each loaded model is a child process
(``python -m localllm.runner``) so that a crash in native code takes down only
that runner, and unloading is process exit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import httpx

from ..config import CHILD_CWD

log = logging.getLogger("localllm.runner_client")

LOAD_TIMEOUT_S = 120.0
EXIT_GRACE_S = 1.0  # how long a runner whose connection broke may take to exit
STOP_TIMEOUT_S = 30.0  # how long a stopping runner may take: its engine's last step, then at most 10 s writing
# its KV blocks to the disk tier (PERSIST_BUDGET_S)
READY_POLL_S = 0.01  # how often a starting runner is looked at: a restart's first answer waits for that look


class RunnerError(RuntimeError):
    """The runner failed or went away; the message is fit for the API caller."""


class RunnerBadRequest(ValueError):
    """The runner refused a request as invalid (HTTP 400 from the runner)."""


@dataclass(frozen=True)
class RunnerConfig:
    """What a runner process is started with; equal configs can share a runner."""

    model_path: Path
    n_ctx: int
    n_parallel: int
    n_threads: int | None  # None: the runner uses the physical cores
    n_batch: int = 512
    n_gpu_layers: int = 0
    devices: tuple[str, ...] = ()  # offload devices in order (workers' "host:port#i", local names); () llama.cpp's
    tensor_split: tuple[int, ...] = ()  # layers on each of ``devices``
    cpu_expert_layers: tuple[int, ...] = ()  # offloaded layers whose expert tensors stay on the CPU
    no_gpu: bool = False  # llama.cpp may use no GPU at all (num_gpu 0, or none that should take layers)
    embedding: bool = False
    adapters: tuple[Path, ...] = ()
    projector: Path | None = None  # vision projector GGUF: images in
    engine: str = "llama.cpp"
    kv_tokens: int | None = None  # native engine: positions in its KV block pool (None: the runner's default)
    kv_disk: Path | None = None  # native engine: the prefix cache's disk tier (all models' blocks), None: off
    kv_disk_bytes: int = 0  # most bytes the disk tier's files take together
    kv_cache_type: str = "f16"  # LOCALLLM_KV_CACHE_TYPE (the native engine keeps f16 or q8_0)
    flash_attention: bool = False  # llama.cpp engine (LOCALLLM_FLASH_ATTENTION)
    worker_timeout: float = 120.0  # seconds one decode step may wait on workers (LOCALLLM_WORKER_TIMEOUT)
    stream_interval: float = 0.1  # seconds between bursts of streamed pieces (LOCALLLM_STREAM_INTERVAL)

    @property
    def remote_workers(self) -> tuple[str, ...]:
        """The workers (host:port) its ``devices`` name."""
        return tuple(sorted({device.partition("#")[0] for device in self.devices if "#" in device}))


@dataclass(frozen=True)
class Health:
    """A runner's ``/health`` answer: what it loaded and how its KV cache is doing."""

    n_ctx: int = 0
    n_ctx_train: int = 0
    n_parallel: int = 0
    n_vocab: int = 0
    bos: str = ""  # the BOS and EOS tokens' text, for chat templates
    eos: str = ""
    model_size: int = 0
    device_bytes: dict[str, int] = field(default_factory=dict)  # what the load took of each local offload device
    kv_used_cells: int = 0
    cache_tokens: int = 0
    cache_hit_rate: float = 0.0
    cache_mode: str = ""  # "kv prefix", "recurrent state checkpoints", "sliding window checkpoints" (engine.py), "none"
    cache_reused_tokens: int = 0  # prompt tokens served from the cache since the runner started
    cache_ram_bytes: int = 0
    queue_depth: int = 0
    kv_blocks: dict[str, int] = field(default_factory=dict)
    kv_disk: dict[str, Any] = field(default_factory=dict)  # the prefix cache's disk tier (native engine)
    embedding: bool = False

    @classmethod
    def of(cls, answer: dict[str, Any]) -> Health:
        return cls(**{f.name: answer[f.name] for f in fields(cls) if f.name in answer})


@dataclass
class RunnerProcess:
    """A live runner child process and an HTTP client bound to its socket."""

    config: RunnerConfig
    process: asyncio.subprocess.Process
    socket_path: Path
    client: httpx.AsyncClient
    health: Health = field(default_factory=Health)
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=40))
    stderr_pump: asyncio.Task | None = None  # done when the runner's stderr reached its end

    @property
    def alive(self) -> bool:
        """Whether the process runs: a killed child is gone at once, before asyncio reaps it."""
        if self.process.returncode is not None:
            return False
        try:
            with open(f"/proc/{self.process.pid}/stat", "rb") as stat:
                state = stat.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True  # no procfs: asyncio's return code is all there is
        return state not in (b"Z", b"X")

    def exit_description(self) -> str:
        """Why the runner is gone, with its last log lines, for error messages."""
        code = self.process.returncode
        if code is None:
            how = "has exited"
        elif code < 0:
            how = f"was killed by signal {signal.Signals(-code).name}"
        else:
            how = f"exited with status {code}"
        tail = " | ".join(line for line in list(self.stderr_tail)[-3:] if line)
        workers = self.config.remote_workers
        lost = (f" (its layers were on workers {', '.join(workers)}: one that stops answering ends the runner; "
                "the next load plans without it)") if workers else ""
        return f"model runner {how}" + (f": {tail}" if tail else "") + lost

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Terminate the runner and wait for it (it writes its cached KV to the disk tier first); memory really
        comes back."""
        await self.client.aclose()
        if self.alive:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except asyncio.TimeoutError:
                self.process.kill()
                await self.process.wait()
        self.socket_path.unlink(missing_ok=True)

    async def refresh_health(self) -> Health:
        """Re-read ``/health`` (cache size and hit rate change as requests run); the last answer if it fails."""
        try:
            response = await self.client.get("/health", timeout=5)
            if response.status_code == 200:
                self.health = Health.of(response.json())
        except httpx.TransportError:
            pass
        return self.health

    def complete(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """A completion's events (``/completion``): pieces, then one ``done`` or ``error``; closing cancels."""
        return self._stream("/completion", body)

    async def tokenize(self, content: str, prompt: bool = False, add_special: bool = True,
                       parse_special: bool = True, images: Sequence[str] = ()) -> list[int]:
        """``content``'s tokens; ``prompt``: as a completion tokenizes its prompt (BOS where the model wants
        one, specials parsed), else with llama.cpp's ``add_special`` and ``parse_special``. ``images`` (base64)
        stand at the content's image markers, each a run of placeholder tokens (a vision model's runner)."""
        body = {"content": content, "prompt": prompt, "add_special": add_special, "parse_special": parse_special}
        if images:
            body["images"] = list(images)
        return (await self._post_json("/tokenize", body))["tokens"]

    async def detokenize(self, tokens: list[int]) -> str:
        return (await self._post_json("/detokenize", {"tokens": tokens}))["content"]

    async def decode_audio(self, data: bytes) -> bytes:
        """``/audio``: ``data`` (WAV, MP3 or FLAC) as the projector hears it, a mono 16-bit WAV at its rate."""
        try:
            response = await self.client.post("/audio", content=data, timeout=600.0)
        except httpx.TransportError as exc:
            raise RunnerError(await self._gone_message(exc)) from None
        if response.status_code != 200:
            _checked_json(response)
        return response.content

    async def embed(self, texts: list[str], truncate: bool) -> dict[str, Any]:
        """``/embedding`` of ``texts``: ``embeddings`` and ``prompt_eval_count``."""
        return await self._post_json("/embedding", {"content": texts, "truncate": truncate})

    async def rerank(self, query: str, documents: list[str]) -> dict[str, Any]:
        """``/rerank``: per document (in order) its ``score``, ``tokens`` and ``truncated``; ``prompt_eval_count``."""
        return await self._post_json("/rerank", {"query": query, "documents": documents})

    async def _post_json(self, path: str, body: dict[str, Any], timeout: float | None = 600.0) -> dict[str, Any]:
        """POST to the runner and return its JSON answer."""
        try:
            response = await self.client.post(path, json=body, timeout=timeout)
        except httpx.TransportError as exc:
            raise RunnerError(await self._gone_message(exc)) from None
        return _checked_json(response)

    async def _stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """POST to the runner and yield its NDJSON lines; closing the iterator cancels."""
        try:
            async with self.client.stream("POST", path, json=body, timeout=httpx.Timeout(None, connect=10)) as response:
                if response.status_code != 200:
                    await response.aread()
                    _checked_json(response)
                async for line in response.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as exc:
            raise RunnerError(await self._gone_message(exc)) from None

    async def _gone_message(self, exc: Exception) -> str:
        """Why the connection broke: a runner that is exiting gets a moment to finish, so its last words
        (a lost worker, say) reach the message."""
        exited = [self.process.wait()] + ([self.stderr_pump] if self.stderr_pump else [])
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(asyncio.gather(*exited)), EXIT_GRACE_S)
        if not self.alive:
            return self.exit_description()
        return f"lost connection to the model runner: {exc}"


def _checked_json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        data = {"error": response.text.strip() or f"runner answered HTTP {response.status_code}"}
    if response.status_code == 400:
        raise RunnerBadRequest(data.get("error", "bad request"))
    if response.status_code != 200:
        raise RunnerError(data.get("error", f"runner answered HTTP {response.status_code}"))
    return data


async def _pump_stderr(runner: RunnerProcess) -> None:
    assert runner.process.stderr is not None
    while True:
        raw = await runner.process.stderr.readline()
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip()
        runner.stderr_tail.append(line)
        log.info("runner[%d]: %s", runner.process.pid, line)


async def start_runner(config: RunnerConfig, name: str) -> RunnerProcess:
    """Start a runner for ``config`` and wait until it answers ``/health``."""
    socket_dir = Path(tempfile.mkdtemp(prefix="localllm-runner-"))
    socket_path = socket_dir / "runner.sock"
    args = [
        sys.executable, "-m", "localllm.runner",
        "--model", str(config.model_path),
        "--socket", str(socket_path),
        "--ctx", str(config.n_ctx),
        "--parallel", str(config.n_parallel),
        "--batch", str(config.n_batch),
        "--gpu-layers", str(config.n_gpu_layers),
        "--engine", config.engine,
    ]
    if config.kv_tokens:
        args += ["--kv-tokens", str(config.kv_tokens)]
    if config.kv_disk is not None and config.kv_disk_bytes:
        args += ["--kv-disk", str(config.kv_disk), "--kv-disk-bytes", str(config.kv_disk_bytes)]
    for device in config.devices:
        args += ["--device", device]
    if config.tensor_split:
        args += ["--tensor-split", ",".join(map(str, config.tensor_split))]
    if config.cpu_expert_layers:
        args += ["--cpu-experts", ",".join(map(str, config.cpu_expert_layers))]
    if config.no_gpu:
        args.append("--no-gpu")
    if config.remote_workers:
        # No host-RAM prefix tier: copying a sequence's KV off a worker takes a round trip per V row
        # (thousands a prompt), slower over a real network than computing the prefix again.
        args += ["--cache-ram-mb", "0"]
    if config.n_threads:
        args += ["--threads", str(config.n_threads)]
    if config.embedding:
        args.append("--embedding")
    if config.flash_attention:
        args.append("--flash-attention")
    args += ["--kv-cache-type", config.kv_cache_type, "--worker-timeout", str(config.worker_timeout),
             "--stream-interval", str(config.stream_interval)]
    for adapter in config.adapters:
        args += ["--adapter", str(adapter)]
    if config.projector is not None:
        args += ["--projector", str(config.projector)]
    # Every setting of the runner is on its command line: it reads none of the daemon's LOCALLLM_* variables.
    env = {key: value for key, value in os.environ.items() if not key.startswith("LOCALLLM_")}
    if config.remote_workers:  # ggml aborts a runner whose worker goes away: without a debugger's backtrace
        env["GGML_NO_BACKTRACE"] = "1"
    process = await asyncio.create_subprocess_exec(
        *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env=env, cwd=CHILD_CWD,
    )
    client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(socket_path)), base_url="http://runner")
    runner = RunnerProcess(config=config, process=process, socket_path=socket_path, client=client)
    runner.stderr_pump = asyncio.get_running_loop().create_task(_pump_stderr(runner))
    deadline = asyncio.get_running_loop().time() + LOAD_TIMEOUT_S
    while True:
        if not runner.alive:
            await runner.stop()
            raise RunnerError(f"failed to load model {name}: {runner.exit_description()}")
        if socket_path.exists():
            try:
                response = await client.get("/health", timeout=5)
                if response.status_code == 200:
                    runner.health = Health.of(response.json())
                    return runner
            except httpx.TransportError:
                pass
        if asyncio.get_running_loop().time() > deadline:
            await runner.stop()
            raise RunnerError(f"model {name} did not load within {LOAD_TIMEOUT_S:.0f} s")
        await asyncio.sleep(READY_POLL_S)
