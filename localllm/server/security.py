"""Who may talk to the daemon: Host header, browser Origin, API key, client address, body size.

Every web page the user opens can send requests to ``localhost:11434``. The
Host check stops DNS rebinding (a hostile name resolving to 127.0.0.1), the
Origin check stops other sites' scripts, the optional key stops everything
else. A daemon bound to a network address without a key still answers
model-changing endpoints (pull, push, create, copy, delete, blob upload) only
to clients on this machine, since exposed servers are made to fetch from
hostile registries and to parse hostile files; ``LOCALLLM_ALLOW_REMOTE_CHANGES=1``
opens them deliberately, and even then only trusted clients (loopback, or with
the key) may name files on the server in ``/api/create``. It is plain ASGI
middleware so that it also guards streamed bodies.
"""

from __future__ import annotations

import fnmatch
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..config import Settings, is_loopback_host
from .asgi import HttpMiddleware
from .errors import error_body

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Origins browsers may call from without configuration (as Ollama's defaults).
DEFAULT_ORIGINS = (
    "http://localhost", "https://localhost", "http://localhost:*", "https://localhost:*",
    "http://127.0.0.1", "https://127.0.0.1", "http://127.0.0.1:*", "https://127.0.0.1:*",
    "http://[::1]", "http://[::1]:*", "app://*", "file://*", "tauri://*", "vscode-webview://*",
)
#: Paths whose bodies may be large (model blobs); the body limit does not apply.
UNLIMITED_BODY_PATHS = ("/api/blobs/",)
AUDIO_UPLOAD_PATHS = ("/v1/audio/",)  # recordings: held to LOCALLLM_MAX_AUDIO_BYTES instead
#: Endpoints that change the store or make the daemon fetch or read model files (and ``POST /api/blobs/…``).
MODEL_CHANGING_PATHS = ("/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete", "/api/cache")
#: Where the chat page's files are served (readable without the API key, like ``/``).
PAGE_ASSETS = "/web/"
#: Scope key the guard sets: True for a client on this machine or one that sent the API key.
TRUSTED_CLIENT = "localllm.trusted_client"


def changes_models(method: str, path: str) -> bool:
    """True for the requests that only trusted clients may make unless LOCALLLM_ALLOW_REMOTE_CHANGES is set."""
    path = path.rstrip("/")
    return path in MODEL_CHANGING_PATHS or (path.startswith("/api/blobs/") and method not in ("GET", "HEAD"))


def is_public(method: str, path: str) -> bool:
    """The liveness answer and the chat page's files: no key needed, since the page asks for it."""
    return method in ("GET", "HEAD") and (path == "/" or path.startswith(PAGE_ASSETS))


def is_trusted_client(scope: Scope) -> bool:
    """Whether the guard found the request's client on this machine or holding the API key."""
    return bool(scope.get(TRUSTED_CLIENT))


def _client_is_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    try:
        address = ipaddress.ip_address(client[0])
    except (TypeError, ValueError, IndexError):
        return False  # no peer address (or a name): not known to be this machine
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback


def _split_host(value: str) -> str:
    value = value.strip()
    if value.startswith("["):
        return value[1:].split("]")[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class AccessGuard(HttpMiddleware):
    """ASGI middleware enforcing the access rules before any route runs."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        super().__init__(app)
        self.settings = settings
        self.origins = DEFAULT_ORIGINS + tuple(settings.origins)
        self.loopback_only = is_loopback_host(settings.host)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        host = _split_host(headers.get("host", ""))
        if self.loopback_only and not self._host_allowed(host):
            await _deny(send, path, 403, f"host {host!r} is not allowed; the daemon answers only to localhost names")
            return
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin):
            await _deny(send, path, 403, f"origin {origin!r} is not allowed; add it to LOCALLLM_ORIGINS")
            return
        if scope["method"] == "OPTIONS" and origin is not None:
            await _preflight(send, origin, headers)
            return
        if self.settings.api_key and not is_public(scope["method"], path):
            if not self._key_matches(headers):
                await _deny(send, path, 401, "missing or wrong API key: send 'Authorization: Bearer "
                                             "<LOCALLLM_API_KEY>' or 'x-api-key: <LOCALLLM_API_KEY>'")
                return
        trusted = bool(self.settings.api_key) or _client_is_loopback(scope)
        if not trusted and not self.settings.allow_remote_changes and changes_models(scope["method"], path):
            await _deny(send, path, 403, (
                f"{path} changes models, so it answers only clients on the daemon's own machine; to allow it "
                "from the network set LOCALLLM_API_KEY on the daemon (and send it as a bearer token), or set "
                "LOCALLLM_ALLOW_REMOTE_CHANGES=1 to let anyone who reaches the daemon change models"))
            return
        scope = dict(scope, **{TRUSTED_CLIENT: trusted})
        if not path.startswith(UNLIMITED_BODY_PATHS):
            too_large = self._body_limit(path)
            declared = headers.get("content-length", "")
            if declared.isdigit() and int(declared) > too_large.limit:
                await _deny(send, path, 413, too_large.message)
                return
            receive, send = self._limited(receive, send, path, too_large)
        await self.app(scope, receive, _with_cors(send, origin))

    def _host_allowed(self, host: str) -> bool:
        return is_loopback_host(host) or host == self.settings.host

    def origin_allowed(self, origin: str) -> bool:
        return any(fnmatch.fnmatchcase(origin, pattern) for pattern in self.origins)

    def _key_matches(self, headers: dict[str, str]) -> bool:
        """The key as a bearer token (Ollama's and OpenAI's clients) or in ``x-api-key`` (Anthropic's)."""
        scheme, _, bearer = headers.get("authorization", "").partition(" ")
        offered = [bearer if scheme.lower() == "bearer" else "", headers.get("x-api-key", "")]
        expected = (self.settings.api_key or "").encode()
        return any(key.strip() and hmac.compare_digest(key.strip().encode(), expected) for key in offered)

    def _body_limit(self, path: str) -> "BodyTooLarge":
        """The limit on ``path``'s body: recordings to transcribe may be larger than any other request."""
        if path.startswith(AUDIO_UPLOAD_PATHS):
            return BodyTooLarge(self.settings.max_audio_bytes, "LOCALLLM_MAX_AUDIO_BYTES")
        return BodyTooLarge(self.settings.max_body_bytes, "LOCALLLM_MAX_BODY_BYTES")

    @staticmethod
    def _limited(receive: Receive, send: Send, path: str, too_large: "BodyTooLarge") -> tuple[Receive, Send]:
        """For bodies without a length: once past the limit, the body is cut off and the
        app's answer (an error about the broken body) is replaced by a 413."""
        limit = too_large.limit
        seen = 0
        exceeded = False

        async def limited_receive() -> dict[str, Any]:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    exceeded = True
                    return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            if not exceeded:
                await send(message)
            elif message["type"] == "http.response.start":
                await _deny(send, path, 413, too_large.message)

        return limited_receive, guarded_send


class BodyTooLarge:
    """A body limit and the message for a body over it, naming the setting that raises it."""

    def __init__(self, limit: int, setting: str) -> None:
        self.limit = limit
        self.message = f"request body is larger than the limit of {limit} bytes ({setting})"


async def _deny(send: Send, path: str, status: int, message: str) -> None:
    body = json.dumps(error_body(path, status, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _preflight(send: Send, origin: str, headers: dict[str, str]) -> None:
    allow_headers = headers.get("access-control-request-headers", "Authorization, Content-Type")
    await send({"type": "http.response.start", "status": 204, "headers": [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", b"GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"),
        (b"access-control-allow-headers", allow_headers.encode("latin-1")),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
    ]})
    await send({"type": "http.response.body", "body": b""})


def _with_cors(send: Send, origin: str | None) -> Send:
    if origin is None:
        return send

    async def send_with_cors(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", []), (b"access-control-allow-origin", origin.encode("latin-1")),
                                  (b"vary", b"Origin")]
        await send(message)

    return send_with_cors
