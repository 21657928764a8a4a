"""HTTP client of the localllm daemon (Ollama's REST API), and its auto-start.

The CLI never touches the store or a model itself: every command goes through
this client. When no daemon answers on ``$LOCALLLM_HOST`` and the host is
local, :func:`connect` starts one in the background (detached, logging to the
state directory) and waits until it answers, so a first-time user never has
to know a daemon exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx

from localllm import __version__
from localllm.config import Settings, load_settings

READY_TEXT = "localllm is running"
START_TIMEOUT = 30.0  # seconds to wait for a freshly started daemon
_PROBE_TIMEOUT = httpx.Timeout(5.0)
# Requests may wait for a model to load or a blob to be hashed; streams wait
# for tokens with no upper bound (Ctrl+C ends them).
_REQUEST_TIMEOUT = httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=5.0)
_STREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=None, write=60.0, pool=5.0)
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""}


class DaemonError(Exception):
    """A failure the user can act on; ``str()`` is one line without a traceback."""


class APIError(DaemonError):
    """The daemon answered with an error (``{"error": ...}``)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


def _probe(base_url: str) -> str | None:
    """What answers ``GET /`` at ``base_url``: its text, or ``None`` if nothing listens."""
    try:
        response = httpx.get(base_url + "/", timeout=_PROBE_TIMEOUT)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return None
    except httpx.HTTPError as exc:  # something accepted the connection but spoke no HTTP we know
        return f"<{type(exc).__name__}>"
    return response.text.strip()


def _start_daemon(settings: Settings) -> subprocess.Popen[bytes]:
    """Start ``python -m localllm serve`` detached, its output appended to the log file."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    with settings.log_file.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "localllm", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=os.environ.copy(),
        )


def _port_taken(settings: Settings) -> DaemonError:
    return DaemonError(
        f"port {settings.port} on {settings.host} is in use by another program; "
        "stop it or set LOCALLLM_HOST to another address"
    )


def _daemon_answers(settings: Settings) -> bool:
    """True when our daemon answers; a :class:`DaemonError` when another program holds the port."""
    answer = _probe(settings.base_url)
    if answer is not None and answer != READY_TEXT:
        raise _port_taken(settings)
    return answer == READY_TEXT


def ensure_daemon(settings: Settings, timeout: float = START_TIMEOUT) -> None:
    """Make sure a localllm daemon answers at ``settings.base_url``, starting one if needed.

    Raises :class:`DaemonError` when the port belongs to another program, the
    host is remote and does not answer, or a started daemon does not come up.
    """
    where = f"{settings.host}:{settings.port}"
    if _daemon_answers(settings):
        return
    if settings.host not in _LOCAL_HOSTS:
        raise DaemonError(f"could not connect to the localllm daemon at {settings.base_url}; is it running?")
    process = _start_daemon(settings)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Exit status first, then the probe: when two commands start daemons at once, the one
        # that loses the port exits, and the probe then finds the winner answering.
        exited = process.poll() is not None
        if _daemon_answers(settings):
            return
        if exited:
            raise DaemonError(
                f"the localllm daemon could not start on {where} (exit code {process.returncode}); "
                f"see {settings.log_file}"
            )
        time.sleep(0.1)
    raise DaemonError(f"the localllm daemon did not answer on {where} within {timeout:.0f} s; see {settings.log_file}")


def _error_message(response: httpx.Response) -> str:
    """The ``error`` field of an error response, or a readable stand-in."""
    try:
        body = json.loads(response.read() or b"null")
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("error"):
        error = body["error"]  # Ollama's string, or OpenAI's {"message": ...}
        return str(error.get("message", error)) if isinstance(error, dict) else str(error)
    text = response.text.strip()
    return text.splitlines()[0] if text else f"the daemon answered {response.status_code} {response.reason_phrase}"


class Client:
    """Typed access to the daemon's ``/api/*`` endpoints.

    Methods return the decoded JSON; streaming endpoints return an iterator of
    the NDJSON objects and raise :class:`APIError` on an in-stream
    ``{"error": ...}`` line. Connection failures become :class:`DaemonError`.
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        headers = {"User-Agent": f"localllm/{__version__}", "Accept": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        self._http = httpx.Client(base_url=self.settings.base_url, headers=headers, timeout=_REQUEST_TIMEOUT)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lost(self, exc: httpx.HTTPError) -> DaemonError:
        return DaemonError(
            f"lost the connection to the localllm daemon at {self.settings.base_url} ({exc.__class__.__name__}); "
            f"see {self.settings.log_file}"
        )

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise self._lost(exc) from None
        if response.status_code >= 400:
            raise APIError(_error_message(response), response.status_code)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text

    def _stream(self, path: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            with self._http.stream("POST", path, json=body, timeout=_STREAM_TIMEOUT) as response:
                if response.status_code >= 400:
                    raise APIError(_error_message(response), response.status_code)
                for line in response.iter_lines():
                    if not line.strip():
                        continue
                    try:
                        item = json.loads(line)
                    except ValueError:
                        raise DaemonError(f"the daemon sent a line that is not JSON: {line[:80]!r}") from None
                    if isinstance(item, dict) and item.get("error"):
                        raise APIError(str(item["error"]))
                    yield item
        except httpx.HTTPError as exc:
            raise self._lost(exc) from None

    # Endpoints, in the order of Ollama's docs/api.md.

    def generate(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Stream ``POST /api/generate``."""
        return self._stream("/api/generate", body)

    def chat(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Stream ``POST /api/chat``."""
        return self._stream("/api/chat", body)

    def transcribe(self, model: str, audio: bytes, filename: str, *, response_format: str = "text",
                   language: str = "", prompt: str = "", translate: bool = False) -> Iterator[dict[str, Any]]:
        """``POST /v1/audio/transcriptions`` (or ``translations``). With response_format text, OpenAI's stream
        events as they come: ``transcript.text.delta`` (``delta``), ``transcript.text.segment`` after each piece
        of the recording (``start``, ``end``, ``text``), ``transcript.text.done``; with json, srt, vtt or
        verbose_json, one ``transcript.text.done`` whose ``text`` is the whole body."""
        fields = {"model": model, "response_format": response_format, "prompt": prompt,
                  **({"language": language} if language and not translate else {})}
        stream = response_format == "text"
        if stream:
            fields["stream"] = "true"
        path = "/v1/audio/translations" if translate else "/v1/audio/transcriptions"
        try:
            with self._http.stream("POST", path, data={k: v for k, v in fields.items() if v},
                                   files={"file": (filename, audio)}, timeout=_STREAM_TIMEOUT) as response:
                if response.status_code >= 400:
                    raise APIError(_error_message(response), response.status_code)
                if not stream:
                    yield {"type": "transcript.text.done", "text": response.read().decode()}
                    return
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        yield json.loads(line[6:])
        except httpx.HTTPError as exc:
            raise self._lost(exc) from None

    def create(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Stream the status objects of ``POST /api/create``."""
        return self._stream("/api/create", body)

    def list(self) -> list[dict[str, Any]]:
        """``GET /api/tags``: the local models."""
        return self._request("GET", "/api/tags").get("models") or []

    def show(self, model: str, *, verbose: bool = False) -> dict[str, Any]:
        """``POST /api/show``: details, parameters, template, model_info, capabilities."""
        return self._request("POST", "/api/show", {"model": model, "verbose": verbose})

    def copy(self, source: str, destination: str) -> None:
        """``POST /api/copy``."""
        self._request("POST", "/api/copy", {"source": source, "destination": destination})

    def delete(self, model: str) -> None:
        """``DELETE /api/delete``."""
        self._request("DELETE", "/api/delete", {"model": model})

    def clear_cache(self, model: str = "") -> int:
        """``DELETE /api/cache``: the prefix cache's blocks on disk, of ``model`` or of every model; bytes freed."""
        return int(self._request("DELETE", "/api/cache", {"model": model})["freed_bytes"])

    def pull(self, model: str, *, insecure: bool = False) -> Iterator[dict[str, Any]]:
        """Stream the progress objects of ``POST /api/pull`` (``insecure``: a registry over plain http)."""
        return self._stream("/api/pull", {"model": model, "insecure": insecure})

    def push(self, model: str, *, insecure: bool = False) -> Iterator[dict[str, Any]]:
        """Stream the progress objects of ``POST /api/push`` (``insecure``: a registry over plain http)."""
        return self._stream("/api/push", {"model": model, "insecure": insecure})

    def ps(self) -> list[dict[str, Any]]:
        """``GET /api/ps``: the loaded models."""
        return self._request("GET", "/api/ps").get("models") or []

    def version(self) -> str:
        """``GET /api/version``."""
        body = self._request("GET", "/api/version")
        if not isinstance(body, dict) or "version" not in body:
            raise DaemonError(f"{self.settings.base_url} did not answer like a localllm daemon")
        return str(body["version"])


def connect(settings: Settings | None = None) -> Client:
    """A client of a running daemon, started in the background when none answers."""
    settings = settings or load_settings()
    ensure_daemon(settings)
    return Client(settings)
