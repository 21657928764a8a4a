"""Loopback HTTP servers the registry tests pull from.

- ``PackageIndexServer``: a PEP 691 (JSON) / PEP 503 (HTML) simple index over a
  directory of wheels, plus the files themselves with Range support.
- ``HubServer``: the Hugging Face Hub endpoints huggingface-hub calls for
  ``model_info`` and ``hf_hub_download`` (HEAD/GET ``/{repo}/resolve/{rev}/{file}``).
- ``RegistryServer``: a Docker v2 registry as Ollama's speaks it (manifests,
  blobs with Range, HEAD, uploads, ``{"errors": [...]}`` bodies, optional
  Bearer auth with Docker's token exchange).

All record the requests they get and can cut the next transfer of a file
after N bytes (the connection closes mid-body), to test resumed downloads, or
answer a path with a body of any size (``answer_padded``), as a hostile server.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import re
import secrets
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from localllm.config import load_settings
from localllm.registry.pull import Puller, parse_pull_target
from localllm.registry.store import Store

PEP691_JSON = "application/vnd.pypi.simple.v1+json"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _Handler(BaseHTTPRequestHandler):
    server: _LoopbackServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._dispatch(send_body=True)

    def do_HEAD(self) -> None:
        self._dispatch(send_body=False)

    def do_POST(self) -> None:
        self._dispatch(send_body=True)

    def do_PUT(self) -> None:
        self._dispatch(send_body=True)

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _dispatch(self, send_body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        with self.server.lock:
            self.server.requests.append((self.command, path, self.headers.get("Range")))
        if (padded := self.server.owner.padded.get(path)) is not None:
            if self.command in ("POST", "PUT"):
                self.read_body()
            self.send_padded(*padded)
            return
        self.server.owner.handle(self, path, send_body)

    def send_json(
        self, status: int, body: Any, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        self.send_bytes(status, json.dumps(body).encode(), content_type, headers)

    def send_bytes(
        self, status: int, data: bytes, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_padded(self, status: int, start: bytes, size: int, headers: dict[str, str]) -> None:
        """``start`` then spaces up to ``size`` bytes in all, a megabyte at a time, until the client hangs up."""
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        self.close_connection = True
        if self.command == "HEAD":
            return
        padding = b" " * (1 << 20)
        try:
            self.wfile.write(start)
            for sent in range(len(start), size, len(padding)):
                self.wfile.write(padding[: size - sent])
        except (BrokenPipeError, ConnectionResetError):
            pass

    def send_file(self, path: Path, send_body: bool, extra_headers: dict[str, str], cut: int | None) -> None:
        """Serve a file honouring ``Range: bytes=N-``; stop after ``cut`` body bytes if set."""
        size = path.stat().st_size
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", "") or "")
        if match:
            start = int(match.group(1))
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(size - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        for key, value in extra_headers.items():
            self.send_header(key, value)
        self.end_headers()
        if not send_body:
            return
        remaining = size - start if cut is None else min(cut, size - start)
        with path.open("rb") as f:
            f.seek(start)
            while remaining > 0:
                chunk = f.read(min(1 << 20, remaining))
                if not chunk:
                    break
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    return
                remaining -= len(chunk)
        if cut is not None:
            self.close_connection = True


class _LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: Any):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner = owner
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, str | None]] = []


class _Base:
    def __init__(self) -> None:
        self.httpd = _LoopbackServer(self)
        self._cuts: dict[str, int] = {}
        self.padded: dict[str, tuple[int, bytes, int, dict[str, str]]] = {}
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def requests(self) -> list[tuple[str, str, str | None]]:
        with self.httpd.lock:
            return list(self.httpd.requests)

    def cut_next(self, filename: str, after_bytes: int) -> None:
        """The next GET of ``filename`` stops after ``after_bytes`` bytes of body."""
        with self.httpd.lock:
            self._cuts[filename] = after_bytes

    def answer_padded(self, path: str, status: int, start: bytes, size: int,
                      headers: dict[str, str] | None = None) -> None:
        """Answer every request for ``path`` with ``status`` and ``start`` padded with spaces to ``size`` bytes,
        as a hostile server would."""
        self.padded[path] = (status, start, size, dict(headers or {}))

    def _take_cut(self, filename: str) -> int | None:
        with self.httpd.lock:
            return self._cuts.pop(filename, None)

    def __enter__(self) -> _Base:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)

    def handle(self, handler: _Handler, path: str, send_body: bool) -> None:
        raise NotImplementedError


class PackageIndexServer(_Base):
    """Serves ``<url>/simple/<project>/`` and ``<url>/files/<wheel>`` from a directory of wheels."""

    def __init__(self, wheels_dir: Path, json_api: bool = True, listed_as: dict[str, str] | None = None):
        """``listed_as``: the name the index gives a wheel instead of its own (as a hostile index would)."""
        super().__init__()
        self.wheels_dir = Path(wheels_dir)
        self.json_api = json_api
        self.listed_as = dict(listed_as or {})
        self._hashes: dict[str, str] = {}

    @property
    def index_url(self) -> str:
        return f"{self.url}/simple"

    def _hash(self, path: Path) -> str:
        key = f"{path}:{path.stat().st_mtime_ns}:{path.stat().st_size}"
        if key not in self._hashes:
            self._hashes[key] = sha256_of(path)
        return self._hashes[key]

    def handle(self, handler: _Handler, path: str, send_body: bool) -> None:
        if match := re.fullmatch(r"/simple/([^/]+)/?", path):
            project = match.group(1)
            dist = re.sub(r"[-_.]+", "_", project).lower() + "-"
            wheels = sorted(p for p in self.wheels_dir.glob("*.whl") if p.name.lower().startswith(dist))
            if not wheels:
                handler.send_json(404, {"message": "not found"})
                return
            files = [
                {
                    "filename": self.listed_as.get(w.name, w.name),
                    "url": f"../../files/{w.name}",
                    "hashes": {"sha256": self._hash(w)},
                    "size": w.stat().st_size,
                }
                for w in wheels
            ]
            if self.json_api and PEP691_JSON in (handler.headers.get("Accept") or ""):
                handler.send_json(200, {"meta": {"api-version": "1.1"}, "name": project, "files": files}, PEP691_JSON)
                return
            links = "".join(f'<a href="{f["url"]}#sha256={f["hashes"]["sha256"]}">{html.escape(f["filename"])}</a>\n'
                            for f in files)
            data = f"<html><body>{links}</body></html>".encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "text/html")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        if match := re.fullmatch(r"/files/([^/]+)", path):
            target = self.wheels_dir / match.group(1)
            if target.is_file():
                cut = self._take_cut(target.name) if send_body else None
                handler.send_file(target, send_body, {}, cut)
                return
        handler.send_json(404, {"message": "not found"})


class HubServer(_Base):
    """A minimal Hugging Face Hub: ``repos`` maps ``org/name`` to ``{filename: path}``."""

    COMMIT = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, repos: dict[str, dict[str, Path]], hashes: dict[Path, str] | None = None):
        super().__init__()
        self.repos = repos
        self._hashes = dict(hashes or {})

    def _hash(self, path: Path) -> str:
        if path not in self._hashes:
            self._hashes[path] = sha256_of(path)
        return self._hashes[path]

    def handle(self, handler: _Handler, path: str, send_body: bool) -> None:
        if match := re.fullmatch(r"/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?", path):
            repo = match.group(1)
            if repo not in self.repos:
                handler.send_json(404, {"error": "Repository not found"}, headers={"X-Error-Code": "RepoNotFound"})
                return
            siblings = [
                {
                    "rfilename": filename,
                    "size": file.stat().st_size,
                    "blobId": self._hash(file)[:40],
                    "lfs": {"sha256": self._hash(file), "size": file.stat().st_size, "pointerSize": 135},
                }
                for filename, file in self.repos[repo].items()
            ]
            info = {"id": repo, "modelId": repo, "sha": self.COMMIT, "private": False, "siblings": siblings}
            handler.send_json(200, info)
            return
        if match := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            repo, _revision, filename = match.groups()
            file = self.repos.get(repo, {}).get(filename)
            if file is None:
                handler.send_response(404)
                handler.send_header("X-Error-Code", "EntryNotFound" if repo in self.repos else "RepoNotFound")
                handler.send_header("Content-Length", "0")
                handler.end_headers()
                return
            digest = self._hash(file)
            headers = {
                "X-Repo-Commit": self.COMMIT,
                "ETag": f'"{digest}"',
                "X-Linked-Etag": f'"{digest}"',
                "X-Linked-Size": str(file.stat().st_size),
            }
            cut = self._take_cut(filename) if send_body else None
            handler.send_file(file, send_body, headers, cut)
            return
        handler.send_json(404, {"error": "not found"})


MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_V1 = "application/vnd.docker.container.image.v1+json"


def registry_errors(code: str, message: str) -> dict[str, Any]:
    return {"errors": [{"code": code, "message": message}]}


class RegistryServer(_Base):
    """A Docker v2 registry holding models as Ollama's does, its blobs as files under ``root``.

    ``token``: /v2/ then answers 401 with a ``Bearer realm="<url>/token"`` challenge, and the
    realm hands out a session token to a request bearing ``token`` (Docker's token protocol);
    with ``exchange=False`` the challenge has no realm and ``token`` itself is the credential.
    ``refuse_push`` makes every upload and manifest PUT answer 403 DENIED. ``serve_instead`` serves other bytes
    under a blob's digest; ``gate`` holds a blob's GET until another blob's GET has begun.
    """

    def __init__(self, root: Path, token: str | None = None, exchange: bool = True):
        super().__init__()
        self.blobs_dir = Path(root) / "registry-blobs"
        self.blobs_dir.mkdir(parents=True, exist_ok=True)
        self.manifests: dict[tuple[str, str], bytes] = {}
        self.token = token
        self.exchange = exchange
        self.session = f"session-{secrets.token_hex(8)}"
        self.refuse_push = False
        self.token_requests: list[str | None] = []  # Authorization of each /token request
        self._uploads: dict[str, str] = {}  # upload id -> repository
        self._swapped: dict[str, Path] = {}
        self._started: set[str] = set()  # digests whose GET has begun
        self._gates: dict[str, str] = {}

    @property
    def host(self) -> str:
        """``127.0.0.1:<port>``, the host part of a model name on this registry."""
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    # -- set-up by the tests ---------------------------------------------------------

    def add_blob(self, content: bytes | Path) -> tuple[str, int]:
        if isinstance(content, Path):
            digest = f"sha256:{sha256_of(content)}"
            target = self.blobs_dir / digest.replace(":", "-")
            if not target.exists():
                shutil.copyfile(content, target)
            return digest, content.stat().st_size
        digest = f"sha256:{hashlib.sha256(content).hexdigest()}"
        (self.blobs_dir / digest.replace(":", "-")).write_bytes(content)
        return digest, len(content)

    def publish(self, repository: str, tag: str, layers: list[tuple[str, bytes | Path]],
                config: bytes = b'{"model_format":"gguf","rootfs":{"type":"layers","diff_ids":[]}}') -> bytes:
        """Store the blobs and a manifest naming them; returns the manifest bytes."""
        descriptors = []
        for media_type, content in layers:
            digest, size = self.add_blob(content)
            descriptors.append({"mediaType": media_type, "digest": digest, "size": size})
        config_digest, config_size = self.add_blob(config)
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_V2,
                    "config": {"mediaType": CONFIG_V1, "digest": config_digest, "size": config_size},
                    "layers": descriptors}
        data = json.dumps(manifest, indent=2).encode()  # not our compact form: it must be kept byte for byte
        self.manifests[(repository, tag)] = data
        return data

    def serve_instead(self, digest: str, data: bytes) -> None:
        swapped = self.blobs_dir / f"swapped-{digest.replace(':', '-')}"
        swapped.write_bytes(data)
        self._swapped[digest] = swapped

    def gate(self, digest: str, until: str) -> None:
        self._gates[digest] = until

    def has_blob(self, digest: str) -> bool:
        return (self.blobs_dir / digest.replace(":", "-")).is_file()

    # -- the protocol ----------------------------------------------------------------

    def handle(self, handler: _Handler, path: str, send_body: bool) -> None:
        if path == "/token":
            self._issue_token(handler)
            return
        match = re.fullmatch(r"/v2/(.+?)/(manifests/[^/]+|blobs/uploads/[^/]*|blobs/sha256:[0-9a-f]{64})", path)
        if path != "/v2/" and match is None:
            handler.send_json(404, registry_errors("NOT_FOUND", "no such endpoint"))
            return
        repository = match.group(1) if match else ""
        writing = handler.command in ("POST", "PUT")
        if self.token and not self._authorized(handler, repository, writing):
            return
        if match is None:
            handler.send_json(200, {})
            return
        if writing and self.refuse_push:
            handler.read_body()
            handler.send_json(403, registry_errors("DENIED", "requested access to the resource is denied"))
            return
        kind = match.group(2)
        if kind.startswith("manifests/"):
            self._manifest(handler, repository, kind.split("/", 1)[1])
        elif kind.startswith("blobs/uploads/"):
            self._upload(handler, repository, kind.rsplit("/", 1)[1])
        else:
            self._blob(handler, kind.split("/", 1)[1], send_body)

    def _authorized(self, handler: _Handler, repository: str, writing: bool) -> bool:
        expected = self.session if self.exchange else self.token
        if handler.headers.get("Authorization") == f"Bearer {expected}":
            return True
        scope = f"repository:{repository}:{'pull,push' if writing else 'pull'}"
        challenge = (f'Bearer realm="{self.url}/token",service="test-registry",scope="{scope}"' if self.exchange
                     else 'Bearer error="invalid_token"')
        if handler.command in ("POST", "PUT"):
            handler.read_body()
        handler.send_json(401, registry_errors("UNAUTHORIZED", "authentication required"),
                          headers={"WWW-Authenticate": challenge})
        return False

    def _issue_token(self, handler: _Handler) -> None:
        sent = handler.headers.get("Authorization")
        with self.httpd.lock:
            self.token_requests.append(sent)
        if sent != f"Bearer {self.token}":
            handler.send_json(401, registry_errors("UNAUTHORIZED", "bad credentials"))
            return
        handler.send_json(200, {"token": self.session, "expires_in": 300})

    def _manifest(self, handler: _Handler, repository: str, tag: str) -> None:
        if handler.command == "PUT":
            data = handler.read_body()
            try:
                named = [d["digest"] for d in [*json.loads(data)["layers"], json.loads(data)["config"]]]
            except (ValueError, KeyError, TypeError):
                handler.send_json(400, registry_errors("MANIFEST_INVALID", "manifest invalid"))
                return
            if not all(self.has_blob(digest) for digest in named):
                handler.send_json(400, registry_errors("MANIFEST_BLOB_UNKNOWN", "blob unknown to registry"))
                return
            self.manifests[(repository, tag)] = data
            handler.send_bytes(201, b"", headers={"Location": f"/v2/{repository}/manifests/{tag}"})
            return
        if not any(repo == repository for repo, _tag in self.manifests):
            handler.send_json(404, registry_errors("NAME_UNKNOWN", "repository name not known to registry"))
            return
        data = self.manifests.get((repository, tag))
        if data is None:
            handler.send_json(404, registry_errors("MANIFEST_UNKNOWN", "manifest unknown"))
            return
        headers = {"Docker-Content-Digest": f"sha256:{hashlib.sha256(data).hexdigest()}"}
        handler.send_bytes(200, data if handler.command == "GET" else b"", MANIFEST_V2, headers)

    def _blob(self, handler: _Handler, digest: str, send_body: bool) -> None:
        path = self._swapped.get(digest) or self.blobs_dir / digest.replace(":", "-")
        if not path.is_file():
            handler.send_json(404, registry_errors("BLOB_UNKNOWN", "blob unknown to registry"))
            return
        if send_body:
            with self.httpd.lock:
                self._started.add(digest)
            if (other := self._gates.get(digest)) and not self._wait_for(other):
                handler.send_json(500, registry_errors("UNKNOWN", f"{other} was not requested alongside"))
                return
        cut = self._take_cut(digest) if send_body else None
        handler.send_file(path, send_body, {"Docker-Content-Digest": digest}, cut)

    def _wait_for(self, digest: str, timeout: float = 10) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.httpd.lock:
                if digest in self._started:
                    return True
            time.sleep(0.01)
        return False

    def _upload(self, handler: _Handler, repository: str, upload_id: str) -> None:
        if handler.command == "POST" and not upload_id:
            upload_id = secrets.token_hex(8)
            with self.httpd.lock:
                self._uploads[upload_id] = repository
            handler.send_bytes(202, b"", headers={"Location": f"/v2/{repository}/blobs/uploads/{upload_id}",
                                                  "Docker-Upload-UUID": upload_id})
            return
        with self.httpd.lock:
            known = self._uploads.pop(upload_id, None) == repository
        digest = parse_qs(urlsplit(handler.path).query).get("digest", [""])[0]
        data = handler.read_body()
        if handler.command != "PUT" or not known:
            handler.send_json(404, registry_errors("BLOB_UPLOAD_UNKNOWN", "blob upload unknown to registry"))
            return
        if digest != f"sha256:{hashlib.sha256(data).hexdigest()}":
            handler.send_json(400, registry_errors("DIGEST_INVALID", "provided digest did not match uploaded content"))
            return
        self.add_blob(data)
        handler.send_bytes(201, b"", headers={"Location": f"/v2/{repository}/blobs/{digest}"})


async def collect(puller: Puller, target: str, **kwargs: Any) -> list[dict[str, Any]]:
    name, url = parse_pull_target(target)
    return [event async for event in puller.pull(name, url=url, **kwargs)]


def run(puller: Puller, target: str, **kwargs: Any) -> list[dict[str, Any]]:
    return asyncio.run(collect(puller, target, **kwargs))


def new_puller(root: Path) -> Puller:
    return Puller(Store(root), load_settings())
