"""The chat page: ``GET /`` for browsers, its files under ``/web/``.

``GET /`` stays the liveness answer every client already polls (``localllm is
running``, as Ollama answers "Ollama is running"); only a request that accepts
``text/html`` (a browser navigating there) gets the page instead, and both
answers say ``Vary: Accept``. The files are read once from the package's
``web/`` folder, so the page works offline and nothing outside that folder can
be named. Every file is revalidated by its ETag (``no-cache``), so an upgraded
daemon never serves a stale script, and each carries a strict
Content-Security-Policy: scripts and styles from this origin only, no inline
script, no frames, requests to this origin only.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request, Response

from .errors import not_found
from .security import PAGE_ASSETS

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
READY_TEXT = "localllm is running"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
}
CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self'", "connect-src 'self'",
    "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
    "require-trusted-types-for 'script'", "trusted-types dompurify",
))
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY, "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer", "x-frame-options": "DENY", "cross-origin-opener-policy": "same-origin",
}

router = APIRouter()


class Asset:
    """One file of the page, read once: its bytes, content type and ETag."""

    def __init__(self, path: Path) -> None:
        self.body = path.read_bytes()
        self.content_type = CONTENT_TYPES[path.suffix]
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'

    def response(self, request: Request) -> Response:
        headers = {"etag": self.etag, "cache-control": "no-cache", "vary": "Accept", **SECURITY_HEADERS}
        if self.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        body = b"" if request.method == "HEAD" else self.body
        return Response(body, media_type=self.content_type, headers=headers)


@cache
def assets() -> dict[str, Asset]:
    """The page's files by their path under ``web/`` (only types the page uses)."""
    return {path.relative_to(WEB_DIR).as_posix(): Asset(path)
            for path in sorted(WEB_DIR.rglob("*")) if path.is_file() and path.suffix in CONTENT_TYPES}


def wants_page(request: Request) -> bool:
    """A browser navigating to ``/``, not a client checking that the daemon runs."""
    return "text/html" in request.headers.get("accept", "")


@router.get("/", include_in_schema=False)
@router.head("/", include_in_schema=False)
async def root(request: Request) -> Response:
    if wants_page(request):
        return assets()["index.html"].response(request)
    return Response(READY_TEXT, media_type="text/plain", headers={"vary": "Accept"})


@router.get(PAGE_ASSETS + "{name:path}", include_in_schema=False)
@router.head(PAGE_ASSETS + "{name:path}", include_in_schema=False)
async def asset(name: str, request: Request) -> Response:
    found = assets().get(name)
    if found is None:
        raise not_found(f"{PAGE_ASSETS}{name} is not a file of the chat page")
    return found.response(request)
