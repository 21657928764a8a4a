"""A model's repository on a Docker v2 registry, as Ollama's pull and push speak to it.

``registry.ollama.ai/library/llama3.2:1b`` lives at
``https://registry.ollama.ai/v2/library/llama3.2/manifests/1b``; its layers at
``.../blobs/sha256:<hex>``. Names without a host go to ``LOCALLLM_REGISTRY``
(Ollama's registry unless set); other hosts are asked over https, or plain http
with ``insecure`` as Ollama's flag does. A registry that answers 401 gets one
answer per request: a token from the realm of its ``WWW-Authenticate: Bearer``
challenge, else its configured token as a Bearer token. A configured token goes
only to the registry it was configured for (``LOCALLLM_REGISTRY_TOKEN``: the
default registry; ``LOCALLLM_REGISTRY_TOKENS``: others by host), never to a host
a pull merely names. Its error bodies
(``{"errors": [{"code": ..., "message": ...}]}``) become sentences a person can
act on. Only a successful GET (a manifest, read up to MAX_MANIFEST_BYTES, or a
blob, up to its size) is read further than MAX_ANSWER_BYTES: error bodies,
challenges, redirects, answers to uploads and the token service's answer are
cut there. Pull (pull.py) and push (push.py) share everything here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from .. import __version__
from ..config import Settings
from .names import DEFAULT_HOST, ModelName
from .sources import HTTP_TIMEOUT, FetchContext, SourceError, download_resumable, read_at_most
from .store import (
    CONFIG_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MEDIA_ADAPTER, MEDIA_LICENSE, MEDIA_MESSAGES, MEDIA_MODEL, MEDIA_PARAMS,
    MEDIA_PROJECTOR, MEDIA_SYSTEM, MEDIA_TEMPLATE, CorruptManifest, manifest_descriptors, parse_digest
)

LAYER_MEDIA_TYPES = (
    MEDIA_MODEL,
    MEDIA_TEMPLATE,
    MEDIA_SYSTEM,
    MEDIA_PARAMS,
    MEDIA_MESSAGES,
    MEDIA_LICENSE,
    MEDIA_PROJECTOR,
    MEDIA_ADAPTER,
)
MAX_MANIFEST_BYTES = 4 << 20  # Ollama's are about 1 KB; anything near this is not a manifest
MAX_ANSWER_BYTES = 64 << 10  # of any answer but a manifest or a blob: errors are ~100 bytes, tokens a few KB
MAX_ERROR_TEXT = 200  # characters of a registry's own message repeated to the user
USER_AGENT = f"localllm/{__version__}"


class RegistryError(SourceError):
    """The registry refused, failed or sent something unusable; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="...",scope="..."`` -> ("bearer", {realm, service, scope})."""
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), {key.lower(): value for key, value in re.findall(r'(\w+)="([^"]*)"', rest)}


class _FirstBytes(httpx.AsyncByteStream):
    """The first ``limit`` bytes of a response body; the rest is never read."""

    def __init__(self, stream: httpx.AsyncByteStream, limit: int) -> None:
        self.stream = stream
        self.limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        left = self.limit
        async for chunk in self.stream:
            yield chunk[:left]
            left -= len(chunk)
            if left <= 0:
                return

    async def aclose(self) -> None:
        await self.stream.aclose()


async def _bound_answer(response: httpx.Response) -> None:
    """Cut every answer but a successful GET's at MAX_ANSWER_BYTES + 1 bytes, as sent (not decompressed: a small
    gzip body can hold gigabytes). httpx itself reads a 401's or a redirect's body whole before going on."""
    if response.request.method == "GET" and response.is_success:
        return  # a manifest or a blob: their readers bound them
    response.headers.pop("content-encoding", None)
    response.stream = _FirstBytes(response.stream, MAX_ANSWER_BYTES + 1)


class RegistryAuth(httpx.Auth):
    """Answers a registry's 401 challenge and keeps the answer for the requests after it."""

    def __init__(self, base_url: str, token: str | None, insecure: bool) -> None:
        self.origin = httpx.URL(base_url)
        self.token = token
        self.insecure = insecure
        self.header: str | None = None  # the Authorization that worked last

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        if (request.url.scheme, request.url.netloc) != (self.origin.scheme, self.origin.netloc):
            yield request  # credentials go to the registry only, not to where it sends uploads or downloads
            return
        if self.header:
            request.headers["Authorization"] = self.header
        response = yield request
        if response.status_code != 401:
            return
        header = await self._answer(response.headers.get("www-authenticate", ""))
        if header is None:
            return  # the 401 stands; the caller reports it
        await response.aread()
        self.header = header
        request.headers["Authorization"] = header
        yield request

    async def _answer(self, challenge: str) -> str | None:
        scheme, params = _challenge(challenge)
        if scheme == "bearer" and params.get("realm"):
            token = await self._exchange(params)
            return f"Bearer {token}" if token else None
        return f"Bearer {self.token}" if self.token else None

    async def _exchange(self, params: dict[str, str]) -> str | None:
        """A token from the challenge's realm (Docker's token protocol), sending the configured token if any."""
        realm = params["realm"]
        scheme = urlsplit(realm).scheme
        if scheme not in ("https", "http"):
            raise RegistryError(f"the registry's token service {realm[:100]!r} is not an http(s) address")
        if scheme == "http" and not self.insecure:
            raise RegistryError(f"the registry's token service {realm} speaks plain http; pass --insecure "
                                "to use it", 400)
        query = {key: params[key] for key in ("service", "scope") if params.get(key)}
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as client, client.stream(
                "GET", realm, params=query, headers=headers
            ) as response:
                answer = await read_at_most(response, MAX_ANSWER_BYTES) if response.status_code == 200 else b""
        except httpx.HTTPError as exc:
            raise RegistryError(f"cannot reach the registry's token service {realm} ({_reason(exc)})") from None
        if response.status_code in (401, 403):
            return None
        if answer is None:
            raise RegistryError(f"the registry's token service {realm} sent an answer larger than "
                                f"{MAX_ANSWER_BYTES} bytes")
        try:
            body = json.loads(answer) if answer else None
        except ValueError:
            body = None
        token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"the registry's token service {realm} answered HTTP {response.status_code} "
                                "without a token")
        return token


def _reason(exc: httpx.HTTPError) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0]


@dataclass(frozen=True)
class Repository:
    """Where one model name lives on a registry, and how to authenticate there."""

    name: ModelName
    base_url: str  # scheme://host[:port]
    auth: RegistryAuth = field(compare=False, repr=False)
    token_setting: str = "LOCALLLM_REGISTRY_TOKEN"  # where this registry's token is configured

    @property
    def path(self) -> str:
        return f"{self.name.namespace}/{self.name.model}"

    @property
    def manifest_url(self) -> str:
        return f"{self.base_url}/v2/{self.path}/manifests/{self.name.tag}"

    @property
    def uploads_url(self) -> str:
        return f"{self.base_url}/v2/{self.path}/blobs/uploads/"

    def blob_url(self, digest: str) -> str:
        return f"{self.base_url}/v2/{self.path}/blobs/{digest}"

    def client(self) -> httpx.AsyncClient:
        """An HTTP client for this registry (redirects followed: Ollama's registry sends blobs from a CDN). It asks
        for answers as they are (``identity``): error bodies are cut before any decompression, so a compressed
        one would lose the registry's message."""
        return httpx.AsyncClient(
            auth=self.auth, follow_redirects=True, timeout=HTTP_TIMEOUT,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
            event_hooks={"response": [_bound_answer]},
        )

    def unreachable(self, exc: httpx.HTTPError) -> RegistryError:
        reason = _reason(exc)
        hint = "; if it serves plain http, pass --insecure" if "SSL" in reason or "TLS" in reason else ""
        return RegistryError(f"cannot reach the registry {self.base_url} ({reason}){hint}")

    def error(self, response: httpx.Response, action: str) -> RegistryError:
        """The registry's error answer as a sentence: unknown model or tag, unauthorized, denied, or what it said."""
        code, message = _error_body(response)
        status = response.status_code
        where = f"{self.base_url} ({self.path})"
        said = f": {message}" if message else ""
        if status == 401 or code == "UNAUTHORIZED":
            hint = (f"the token from {self.token_setting} was not accepted" if self.auth.token
                    else f"set {self.token_setting} to a token it accepts")
            return RegistryError(f"the registry {where} refused to {action}: unauthorized{said}; {hint}", 403)
        if status == 403 or code == "DENIED":
            return RegistryError(f"the registry {where} denied the request to {action}{said}", 403)
        asked_for_manifest = response.request.method == "GET" and str(response.request.url) == self.manifest_url
        if asked_for_manifest and code == "NAME_UNKNOWN":
            return RegistryError(f"model '{self.name.display}' not found: the registry {self.base_url} has no "
                                 f"model {self.path}", 404)
        if asked_for_manifest and (status == 404 or code == "MANIFEST_UNKNOWN"):
            return RegistryError(f"model '{self.name.display}' not found: the registry {self.base_url} has no "
                                 f"{self.path}:{self.name.tag} (check the model's name and tag)", 404)
        label = f" {code}" if code else ""
        return RegistryError(f"the registry {where} could not {action}: HTTP {status}{label}{said}")


def _error_body(response: httpx.Response) -> tuple[str, str]:
    """The first ``errors[]`` entry's code and message (shortened), or empty strings."""
    if len(response.content) > MAX_ANSWER_BYTES:
        return "", f"(an answer larger than {MAX_ANSWER_BYTES} bytes, not read further)"
    try:
        errors = json.loads(response.content or b"null").get("errors")
        first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    except (ValueError, AttributeError):
        first = {}
    code, message = str(first.get("code") or ""), str(first.get("message") or "")
    return code[:40], " ".join(message.split())[:MAX_ERROR_TEXT]


def repository_for(name: ModelName, settings: Settings, insecure: bool) -> Repository:
    """The registry a name lives on: ``LOCALLLM_REGISTRY`` for Ollama's default host, else the name's host."""
    if name.host == DEFAULT_HOST:
        base_url = settings.registry
    else:
        base_url = f"{'http' if insecure else 'https'}://{name.host}"
    if base_url.startswith("http://") and not insecure:
        raise RegistryError(
            f"the registry {base_url} speaks plain http; pass --insecure (API: \"insecure\": true) to use it", 400
        )
    host = httpx.URL(base_url).netloc.decode().lower()
    if host == httpx.URL(settings.registry).netloc.decode().lower():
        token, setting = settings.registry_tokens.get(host, settings.registry_token), "LOCALLLM_REGISTRY_TOKEN"
    else:
        token, setting = settings.registry_tokens.get(host), f"LOCALLLM_REGISTRY_TOKENS ({host}=<token>)"
    return Repository(name, base_url, RegistryAuth(base_url, token, insecure), setting)


async def fetch_manifest(repository: Repository) -> bytes:
    """The manifest's bytes as the registry sent them (checked against its Docker-Content-Digest)."""
    headers = {"Accept": MANIFEST_MEDIA_TYPE}
    try:
        async with repository.client() as client, client.stream(
            "GET", repository.manifest_url, headers=headers
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise repository.error(response, "send the manifest")
            data = await read_at_most(response, MAX_MANIFEST_BYTES)
            if data is None:
                raise RegistryError(f"the registry {repository.base_url} sent a manifest for "
                                    f"'{repository.name.display}' larger than {MAX_MANIFEST_BYTES} bytes")
            promised = response.headers.get("docker-content-digest")
    except httpx.HTTPError as exc:
        raise repository.unreachable(exc) from None
    if promised and promised.startswith("sha256:"):
        actual = f"sha256:{hashlib.sha256(data).hexdigest()}"
        if actual != promised:
            raise RegistryError(f"the manifest of '{repository.name.display}' has digest {actual}, "
                                f"the registry said {promised}")
    return data


def manifest_layers(data: bytes, repository: Repository) -> list[dict[str, Any]]:
    """The layers and then the config of a registry manifest, refused unless localllm can use every one."""
    what = f"the manifest of '{repository.name.display}' from {repository.base_url}"
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RegistryError(f"{what} is not JSON ({exc})") from None
    try:
        descriptors = manifest_descriptors(manifest)
    except CorruptManifest as exc:
        raise RegistryError(f"{what} is not a Docker v2 manifest ({exc})") from None
    if manifest.get("schemaVersion") != 2 or not isinstance(manifest.get("config"), dict):
        raise RegistryError(f"{what} is not a Docker v2 manifest (schemaVersion 2 with a config)")
    for descriptor in manifest["layers"]:
        media_type = descriptor.get("mediaType")
        if media_type not in LAYER_MEDIA_TYPES:
            raise RegistryError(
                f"{what} has a layer of media type {str(media_type)[:100]!r}, which localllm cannot use "
                f"(it knows {', '.join(t.rsplit('.', 1)[-1] for t in LAYER_MEDIA_TYPES)})"
            )
    if manifest["config"].get("mediaType") != CONFIG_MEDIA_TYPE:
        raise RegistryError(f"{what} has a config of media type {str(manifest['config'].get('mediaType'))[:100]!r}, "
                            f"expected {CONFIG_MEDIA_TYPE}")
    if not any(d["mediaType"] == MEDIA_MODEL for d in manifest["layers"]):
        raise RegistryError(f"{what} has no model layer")
    return descriptors


@dataclass(frozen=True)
class RegistryBlob:
    """One blob of a registry repository, as a pull source (resumed with Range from its ``.part`` file)."""

    repository: Repository
    digest: str

    def describe(self) -> str:
        return f"registry {self.repository.base_url}"

    async def fetch(self, ctx: FetchContext) -> Path:
        dest = ctx.store.partial_dir / f"registry-{parse_digest(self.digest)}"
        async with self.repository.client() as client:
            return await download_resumable(
                client, self.repository.blob_url(self.digest), dest, ctx, size=ctx.expected_size
            )
