"""Pulling a model: plan its sources, download once, verify, then name it.

``Puller.pull`` yields Ollama's pull status objects. The download of one file
is a shared job: concurrent pulls of the same model (or of two names for the
same pinned file) follow one download and all see its progress. When every
follower goes away the job stops at the next chunk and keeps its partial file,
so the next pull resumes. A blob enters the store only after its sha256 and
GGUF header check out, and the manifest is written last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ..config import Settings
from . import catalog
from .gguf import InvalidGGUF, read_gguf
from .models import SUMMARY_ARRAY_LIMIT, json_layer, register_model, text_layer
from .names import DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG, MAX_PART_LENGTH, ModelName
from .sources import (
    DirectURL,
    FetchContext,
    HuggingFaceFile,
    PullCancelled,
    Source,
    SourceError,
    choose_hf_file,
    hf_file_digest,
    hf_model_info,
    url_host_is_loopback,
)
from .store import MEDIA_LICENSE, MEDIA_PARAMS, MEDIA_SYSTEM, MEDIA_TEMPLATE, DigestMismatch, Store, parse_digest

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 0.1  # seconds between progress events of one download


class PullError(Exception):
    """The pull failed; the message says why and what to try.

    ``status`` is the HTTP status a non-streamed answer carries: 400 for a
    request we cannot serve, 404 for a name nothing provides, 502 when every
    source failed, 507 when the store could not be written.
    """

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def name_for_url(url: str) -> ModelName:
    """The model name a direct ``.gguf`` URL is stored under: its file name, lowercased, tag ``latest``."""
    base = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if not base.lower().endswith(".gguf"):
        raise PullError(f"{url} does not name a .gguf file")
    stem = re.sub(r"[^a-z0-9._-]+", "-", base[: -len(".gguf")].lower())
    stem = re.sub(r"\.{2,}", ".", stem).strip(".-_")[:MAX_PART_LENGTH]
    if not stem:
        raise PullError(f"cannot derive a model name from {url}")
    return ModelName(DEFAULT_HOST, DEFAULT_NAMESPACE, stem, DEFAULT_TAG)


def parse_pull_target(text: str) -> tuple[ModelName, str | None]:
    """Split what a user asked to pull into the name to store and, for URLs, the URL.

    ``"smollm2:135m"`` -> (name, None); ``"https://host/dir/Foo.Q4.gguf"`` ->
    (``foo.q4:latest``, url). Raises InvalidName or PullError.
    """
    text = text.strip()
    if text.lower().startswith(("http://", "https://")):
        return name_for_url(text), text
    return ModelName.parse(text), None


@dataclass(frozen=True)
class PullPlan:
    name: ModelName
    key: str  # identifies the download that concurrent pulls share
    digest: str | None
    size: int | None
    sources: tuple[Source, ...]
    label: str  # shown in "pulling <label>" when the digest is not known up front
    template: str | None = None
    system: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    license: str | None = None


class _Download:
    """One running download and the progress events its followers replay."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.changed = asyncio.Event()
        self.finished = asyncio.Event()
        self.cancelled = threading.Event()
        self.followers = 0
        self.result: tuple[str, int] | None = None
        self.error: PullError | None = None
        self._last_progress = 0.0

    def publish(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.changed.set()
        self.changed = asyncio.Event()

    def progress(self, event: dict[str, Any], final: bool) -> None:
        now = time.monotonic()
        if final or now - self._last_progress >= PROGRESS_INTERVAL:
            self._last_progress = now
            self.publish(event)

    def finish(self, result: tuple[str, int] | None = None, error: PullError | None = None) -> None:
        self.result, self.error = result, error
        self.finished.set()
        self.changed.set()

    async def follow(self) -> AsyncIterator[dict[str, Any]]:
        index = max(len(self.events) - 1, 0)  # a late follower starts from the latest progress
        while True:
            while index < len(self.events):
                yield self.events[index]
                index += 1
            if self.finished.is_set():
                return
            await self.changed.wait()


def _progress_event(label: str, digest: str | None, completed: int, total: int | None) -> dict[str, Any]:
    event: dict[str, Any] = {"status": f"pulling {label}"}
    if digest:
        event["digest"] = digest
    if total is not None:
        event["total"] = total
    event["completed"] = completed
    return event


class Puller:
    """Pulls models into a store; one instance per daemon so downloads can be shared."""

    def __init__(self, store: Store, settings: Settings):
        self.store = store
        self.settings = settings
        self._downloads: dict[str, _Download] = {}

    async def pull(
        self, name: ModelName, *, url: str | None = None, insecure: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        """Pull ``name`` (from the catalog, ``hf.co/...``, or ``url``), yielding Ollama status objects.

        Raises PullError with a message a person can act on.
        """
        yield {"status": "pulling manifest"}
        plan = await self._plan(name, url, insecure)
        with contextlib.ExitStack() as holds:  # a concurrent delete of a name sharing the model must not collect it
            if plan.digest:
                holds.enter_context(self.store.hold([plan.digest]))
            if plan.digest and self.store.has_blob(plan.digest):
                digest = plan.digest
                size = self.store.blob_path(digest).stat().st_size
                yield _progress_event(digest[7:19], digest, size, size)
            else:
                download = await self._join(plan)
                download.followers += 1
                try:
                    async for event in download.follow():
                        yield event
                finally:
                    download.followers -= 1
                    if download.followers == 0 and not download.finished.is_set():
                        download.cancelled.set()
                if download.error is not None:
                    raise download.error
                assert download.result is not None
                digest, size = download.result
                holds.enter_context(self.store.hold([digest]))
            try:
                layers = await asyncio.to_thread(self._register, plan, digest)
            except (ValueError, OSError) as exc:  # InvalidGGUF, CorruptManifest, disk errors
                raise PullError(f"could not register '{plan.name.display}': {exc}", 507) from None
            for descriptor in layers:
                digest_of_layer, size_of_layer = descriptor["digest"], descriptor["size"]
                yield _progress_event(digest_of_layer[7:19], digest_of_layer, size_of_layer, size_of_layer)
            yield {"status": "verifying sha256 digest"}
            yield {"status": "writing manifest"}
        yield {"status": "success"}

    async def _plan(self, name: ModelName, url: str | None, insecure: bool) -> PullPlan:
        if url is not None:
            return self._plan_url(name, url, insecure)
        entry = catalog.lookup(name)
        if entry is not None:
            return PullPlan(
                name=name,
                key=entry.digest,
                digest=entry.digest,
                size=entry.size,
                sources=entry.sources,
                label=entry.digest[7:19],
                template=entry.template,
                system=entry.system,
                parameters=entry.parameters,
                license=entry.license,
            )
        if name.is_huggingface:
            return await self._plan_huggingface(name)
        known = ", ".join(catalog.catalog_names())
        raise PullError(
            f"model '{name.display}' is not in the built-in catalog ({known}); "
            "pull hf.co/<org>/<repo>[:<quant>] or an https:// URL of a .gguf file", 404
        )

    @staticmethod
    def _plan_url(name: ModelName, url: str, insecure: bool) -> PullPlan:
        address, _, fragment = url.partition("#")
        scheme = urlsplit(address).scheme.lower()
        if scheme not in ("http", "https"):
            raise PullError(f"cannot pull {url}: only http(s) URLs are supported")
        if scheme == "http" and not insecure and not url_host_is_loopback(address):
            host = urlsplit(address).hostname
            raise PullError(f"refusing to pull over plain http from {host}; use https or insecure")
        digest = None
        if fragment:
            digest = "sha256:" + fragment.removeprefix("sha256=")
            try:
                parse_digest(digest)
            except ValueError:
                raise PullError(f"{url}: the fragment must be #sha256=<64 hex digits>") from None
        label = unquote(urlsplit(address).path.rsplit("/", 1)[-1])
        return PullPlan(
            name, key=digest or f"url:{address}", digest=digest, size=None, sources=(DirectURL(address),), label=label
        )

    @staticmethod
    async def _plan_huggingface(name: ModelName) -> PullPlan:
        repo = f"{name.namespace}/{name.model}"
        quant = None if name.tag == DEFAULT_TAG else name.tag
        try:
            info = await asyncio.to_thread(hf_model_info, repo)
            sibling = choose_hf_file(info, quant)
        except SourceError as exc:
            raise PullError(f"cannot pull '{name.display}': {exc}") from None
        digest = hf_file_digest(sibling)
        source = HuggingFaceFile(repo, sibling.rfilename, revision=info.sha or "main")
        return PullPlan(
            name,
            key=digest or f"hf:{repo}/{sibling.rfilename}",
            digest=digest,
            size=sibling.size,
            sources=(source,),
            label=digest[7:19] if digest else sibling.rfilename,
        )

    async def _join(self, plan: PullPlan) -> _Download:
        while (running := self._downloads.get(plan.key)) is not None and running.cancelled.is_set():
            await running.finished.wait()  # a cancelled job still owns the partial file until it stops
        if running is not None:
            return running
        download = _Download()
        self._downloads[plan.key] = download
        asyncio.get_running_loop().create_task(self._run(plan, download))
        return download

    async def _run(self, plan: PullPlan, download: _Download) -> None:
        loop = asyncio.get_running_loop()

        def progress(completed: int, total: int | None) -> None:
            label = plan.digest[7:19] if plan.digest else plan.label
            event = _progress_event(label, plan.digest, completed, total)
            loop.call_soon_threadsafe(download.progress, event, total is not None and completed >= total)

        ctx = FetchContext(self.store, progress, download.cancelled, plan.digest, plan.size)
        errors: list[str] = []
        try:
            for source in plan.sources:
                try:
                    path = await source.fetch(ctx)
                    result = await asyncio.to_thread(self._admit, path, plan.digest)
                except (SourceError, DigestMismatch, InvalidGGUF, OSError) as exc:
                    disk_error = isinstance(exc, OSError) and exc.strerror
                    reason = f"{exc.strerror}: {exc.filename}" if disk_error else str(exc)
                    log.warning("pull %s: source %s failed: %s", plan.name.display, source.describe(), reason)
                    errors.append(f"{source.describe()}: {reason}")
                    continue
                await asyncio.sleep(0)  # let queued progress callbacks run before finishing
                download.finish(result=result)
                return
            download.finish(error=PullError(f"could not pull '{plan.name.display}': " + "; ".join(errors), 502))
        except PullCancelled:
            download.finish(error=PullError(f"pull of '{plan.name.display}' was cancelled"))
        except Exception as exc:  # never leave followers waiting on a job that died
            log.exception("pull %s failed", plan.name.display)
            download.finish(error=PullError(f"could not pull '{plan.name.display}': {type(exc).__name__}: {exc}", 500))
        finally:
            if self._downloads.get(plan.key) is download:
                del self._downloads[plan.key]

    def _admit(self, path: Path, expected_digest: str | None) -> tuple[str, int]:
        """Verify a downloaded file and move it into the blobs.

        A file with the wrong digest is deleted (an incomplete or stale download);
        one that is not a valid GGUF may be crafted, so it goes to quarantine.
        """

        def validate(candidate: Path, digest: str) -> None:
            try:
                read_gguf(candidate, skip_arrays_over=SUMMARY_ARRAY_LIMIT)
            except InvalidGGUF as exc:
                kept = self.store.quarantine(candidate, digest)
                raise InvalidGGUF(
                    f"the downloaded file is not a valid GGUF model ({exc}); it was quarantined as {kept}"
                ) from None

        try:
            return self.store.add_blob_file(path, expected_digest, validate=validate)
        except DigestMismatch as exc:
            raise DigestMismatch(f"sha256 mismatch: {exc}; the download was discarded") from None

    def _register(self, plan: PullPlan, model_digest: str) -> list[dict[str, Any]]:
        """Write the catalog's extra layers, the config and the manifest; returns the extra layers.

        Exclusive, so that a concurrent delete of a name sharing these small
        blobs cannot collect one between its write and the manifest naming it.
        """
        with self.store.exclusive():
            layers = self._extra_layers(plan)
            register_model(self.store, plan.name, model_digest, layers)
        return layers

    def _extra_layers(self, plan: PullPlan) -> list[dict[str, Any]]:
        layers = []
        if plan.template:
            layers.append(text_layer(self.store, MEDIA_TEMPLATE, plan.template))
        if plan.system:
            layers.append(text_layer(self.store, MEDIA_SYSTEM, plan.system))
        if plan.license:
            layers.append(text_layer(self.store, MEDIA_LICENSE, plan.license))
        if plan.parameters:
            layers.append(json_layer(self.store, MEDIA_PARAMS, plan.parameters))
        return layers
