"""Loopback HTTP servers the registry tests pull from.

- ``PackageIndexServer``: a PEP 691 (JSON) / PEP 503 (HTML) simple index over a
  directory of wheels, plus the files themselves with Range support.
- ``HubServer``: the Hugging Face Hub endpoints huggingface-hub calls for
  ``model_info`` and ``hf_hub_download`` (HEAD/GET ``/{repo}/resolve/{rev}/{file}``).

Both record the requests they get and can cut the next transfer of a file
after N bytes (the connection closes mid-body), to test resumed downloads.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

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

    def _dispatch(self, send_body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        with self.server.lock:
            self.server.requests.append((self.command, path, self.headers.get("Range")))
        self.server.owner.handle(self, path, send_body)

    def send_json(
        self, status: int, body: Any, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

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

    def __init__(self, wheels_dir: Path, json_api: bool = True):
        super().__init__()
        self.wheels_dir = Path(wheels_dir)
        self.json_api = json_api
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
                    "filename": w.name,
                    "url": f"../../files/{w.name}",
                    "hashes": {"sha256": self._hash(w)},
                    "size": w.stat().st_size,
                }
                for w in wheels
            ]
            if self.json_api and PEP691_JSON in (handler.headers.get("Accept") or ""):
                handler.send_json(200, {"meta": {"api-version": "1.1"}, "name": project, "files": files}, PEP691_JSON)
                return
            links = "".join(f'<a href="{f["url"]}#sha256={f["hashes"]["sha256"]}">{f["filename"]}</a>\n' for f in files)
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
