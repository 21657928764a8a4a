"""Pulling a model: plan its blobs and their sources, download each once, verify, then name it.

``Puller.pull`` yields Ollama's pull status objects. A plan is one GGUF file
(catalog, Hugging Face, URL) or a registry manifest's layers and config,
fetched several at once. The download of one blob is a shared job: concurrent
pulls of the same model (or of two names for the same file) follow one
download and all see its progress. When every follower goes away the job stops
at the next chunk and keeps its partial file, so the next pull resumes. A blob
enters the store only after its sha256 and its format (GGUF header, JSON)
check out, and the manifest is written last, only once every blob is in.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
from .events import Emit, Job, merged_events
from ..gguf import InvalidGGUF, read_gguf
from .models import SUMMARY_ARRAY_LIMIT, json_layer, register_model, text_layer
from .names import DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG, MAX_PART_LENGTH, ModelName
from .sources import (
    DirectURL, FetchContext, HuggingFaceFile, PullCancelled, Source, SourceError, choose_hf_file, choose_hf_projector,
    hf_file_digest, hf_model_info, url_host_is_loopback
)
from .remote import RegistryBlob, RegistryError, fetch_manifest, manifest_layers, repository_for
from .remote_names import UnsafeRemoteName
from .store import (
    CONFIG_MEDIA_TYPE, MEDIA_ADAPTER, MEDIA_LICENSE, MEDIA_MESSAGES, MEDIA_MODEL, MEDIA_PARAMS, MEDIA_PROJECTOR,
    MEDIA_SYSTEM, MEDIA_TEMPLATE, DigestMismatch, Store, layer, parse_digest
)

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 0.1  # seconds between progress events of one download
PARALLEL_BLOBS = 4  # blobs of one pull downloaded at once
GGUF_LAYERS = (MEDIA_MODEL, MEDIA_ADAPTER, MEDIA_PROJECTOR)
JSON_LAYERS: dict[str, type] = {MEDIA_PARAMS: dict, MEDIA_MESSAGES: list, CONFIG_MEDIA_TYPE: dict}
MAX_JSON_LAYER_BYTES = 16 << 20


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
class BlobJob:
    """One blob a pull needs and where to get it."""

    key: str  # identifies the download that concurrent pulls share
    digest: str | None
    size: int | None
    sources: tuple[Source, ...]
    label: str  # shown in "pulling <label>" when the digest is not known up front
    media_type: str = MEDIA_MODEL


@dataclass(frozen=True)
class PullPlan:
    name: ModelName
    blobs: tuple[BlobJob, ...]
    manifest: bytes | None = None  # a registry's manifest, written as it came once every blob is in
    template: str | None = None  # extra layers of a single-file model (the catalog's)
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
        """Pull ``name`` (catalog, ``hf.co/...``, ``url``, else its registry), yielding Ollama status objects.

        Raises PullError with a message a person can act on.
        """
        yield {"status": "pulling manifest"}
        plan = await self._plan(name, url, insecure)
        fetched: dict[int, str] = {}
        # held from the start: a concurrent delete of a name sharing these blobs must not collect them
        with contextlib.ExitStack() as holds:
            holds.enter_context(self.store.hold([job.digest for job in plan.blobs if job.digest]))

            def fetch_job(index: int, job: BlobJob) -> Job:
                async def fetch(emit: Emit) -> None:
                    digest = await self._fetch(plan.name, job, emit)
                    holds.enter_context(self.store.hold([digest]))
                    fetched[index] = digest

                return fetch

            jobs = [fetch_job(index, job) for index, job in enumerate(plan.blobs)]
            async for event in merged_events(jobs, PARALLEL_BLOBS):
                yield event
            try:
                layers = await asyncio.to_thread(self._register, plan, [fetched[i] for i in range(len(jobs))])
            except (ValueError, OSError) as exc:  # InvalidGGUF, CorruptManifest, disk errors
                raise PullError(f"could not register '{plan.name.display}': {exc}", 507) from None
            for descriptor in layers:
                digest_of_layer, size_of_layer = descriptor["digest"], descriptor["size"]
                yield _progress_event(digest_of_layer[7:19], digest_of_layer, size_of_layer, size_of_layer)
            yield {"status": "verifying sha256 digest"}
            yield {"status": "writing manifest"}
        yield {"status": "success"}

    async def _fetch(self, name: ModelName, job: BlobJob, emit: Emit) -> str:
        """Have ``job``'s blob in the store (downloading it unless it is there); returns its digest."""
        if job.digest and self.store.has_blob(job.digest):
            size = self.store.blob_path(job.digest).stat().st_size
            emit(_progress_event(job.digest[7:19], job.digest, size, size))
            return job.digest
        download = await self._join(name, job)
        download.followers += 1
        try:
            async for event in download.follow():
                emit(event)
        finally:
            download.followers -= 1
            if download.followers == 0 and not download.finished.is_set():
                download.cancelled.set()
        if download.error is not None:
            raise download.error
        assert download.result is not None
        return download.result[0]

    async def _plan(self, name: ModelName, url: str | None, insecure: bool) -> PullPlan:
        if url is not None:
            return self._plan_url(name, url, insecure)
        entry = catalog.lookup(name)
        if entry is not None:
            return PullPlan(
                name=name,
                blobs=(BlobJob(entry.digest, entry.digest, entry.size, entry.sources, entry.digest[7:19]),),
                template=entry.template,
                system=entry.system,
                parameters=entry.parameters,
                license=entry.license,
            )
        if name.is_huggingface:
            return await self._plan_huggingface(name)
        return await self._plan_registry(name, insecure)

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
        job = BlobJob(digest or f"url:{address}", digest, None, (DirectURL(address),), label)
        return PullPlan(name, (job,))

    @staticmethod
    async def _plan_huggingface(name: ModelName) -> PullPlan:
        repo = f"{name.namespace}/{name.model}"
        quant = None if name.tag == DEFAULT_TAG else name.tag
        try:
            info = await asyncio.to_thread(hf_model_info, repo)
            sibling = choose_hf_file(info, quant)
        except SourceError as exc:
            raise PullError(f"cannot pull '{name.display}': {exc}") from None
        jobs = [_hf_job(repo, info.sha or "main", sibling, MEDIA_MODEL)]
        projector = choose_hf_projector(info)
        if projector is not None:
            jobs.append(_hf_job(repo, info.sha or "main", projector, MEDIA_PROJECTOR))
        return PullPlan(name, tuple(jobs))

    async def _plan_registry(self, name: ModelName, insecure: bool) -> PullPlan:
        """The blobs of ``name``'s manifest on its registry (Ollama's, unless the name has a host)."""
        try:
            repository = repository_for(name, self.settings, insecure)
            manifest = await fetch_manifest(repository)
            descriptors = manifest_layers(manifest, repository)
        except RegistryError as exc:
            if exc.status != 404:
                raise PullError(f"cannot pull '{name.display}': {exc}", exc.status) from None
            hint = ""
            if name.host == DEFAULT_HOST:
                known = ", ".join(catalog.catalog_names())
                hint = f" (built in: {known}; or pull hf.co/<org>/<repo>[:<quant>] or an https:// URL of a .gguf file)"
            raise PullError(f"{exc}{hint}", 404) from None
        blobs = tuple(
            BlobJob(d["digest"], d["digest"], d["size"], (RegistryBlob(repository, d["digest"]),), d["digest"][7:19],
                    d["mediaType"])
            for d in descriptors
        )
        return PullPlan(name, blobs, manifest=manifest)

    async def _join(self, name: ModelName, job: BlobJob) -> _Download:
        while (running := self._downloads.get(job.key)) is not None and running.cancelled.is_set():
            await running.finished.wait()  # a cancelled job still owns the partial file until it stops
        if running is not None:
            return running
        download = _Download()
        self._downloads[job.key] = download
        asyncio.get_running_loop().create_task(self._run(name, job, download))
        return download

    async def _run(self, name: ModelName, job: BlobJob, download: _Download) -> None:
        loop = asyncio.get_running_loop()

        def progress(completed: int, total: int | None) -> None:
            label = job.digest[7:19] if job.digest else job.label
            event = _progress_event(label, job.digest, completed, total)
            loop.call_soon_threadsafe(download.progress, event, total is not None and completed >= total)

        ctx = FetchContext(self.store, progress, download.cancelled, job.digest, job.size)
        errors: list[str] = []
        try:
            for source in job.sources:
                try:
                    path = await source.fetch(ctx)
                    result = await asyncio.to_thread(self._admit, path, job)
                except (SourceError, UnsafeRemoteName, DigestMismatch, InvalidGGUF, OSError) as exc:
                    disk_error = isinstance(exc, OSError) and exc.strerror
                    reason = f"{exc.strerror}: {exc.filename}" if disk_error else str(exc)
                    log.warning("pull %s: source %s failed: %s", name.display, source.describe(), reason)
                    errors.append(f"{source.describe()}: {reason}")
                    continue
                await asyncio.sleep(0)  # let queued progress callbacks run before finishing
                download.finish(result=result)
                return
            download.finish(error=PullError(f"could not pull '{name.display}': " + "; ".join(errors), 502))
        except PullCancelled:
            download.finish(error=PullError(f"pull of '{name.display}' was cancelled"))
        except Exception as exc:  # never leave followers waiting on a job that died
            log.exception("pull %s failed", name.display)
            download.finish(error=PullError(f"could not pull '{name.display}': {type(exc).__name__}: {exc}", 500))
        finally:
            if self._downloads.get(job.key) is download:
                del self._downloads[job.key]

    def _admit(self, path: Path, job: BlobJob) -> tuple[str, int]:
        """Verify a downloaded file and move it into the blobs.

        A file with the wrong digest is deleted (an incomplete or stale download);
        a model, adapter or projector that is not a valid GGUF may be crafted, so
        it goes to quarantine; JSON layers must parse as what they hold.
        """

        def validate(candidate: Path, digest: str) -> None:
            if job.media_type in JSON_LAYERS:
                check_json_layer(candidate, job.media_type)
                return
            try:
                read_gguf(candidate, skip_arrays_over=SUMMARY_ARRAY_LIMIT)
            except InvalidGGUF as exc:
                kept = self.store.quarantine(candidate, digest)
                raise InvalidGGUF(
                    f"the downloaded file is not a valid GGUF model ({exc}); it was quarantined as {kept}"
                ) from None

        needs_check = job.media_type in GGUF_LAYERS or job.media_type in JSON_LAYERS
        try:
            return self.store.add_blob_file(path, job.digest, validate=validate if needs_check else None)
        except DigestMismatch as exc:
            raise DigestMismatch(f"sha256 mismatch: {exc}; the download was discarded") from None

    def _register(self, plan: PullPlan, digests: list[str]) -> list[dict[str, Any]]:
        """Write the manifest (the registry's as it came, or ours with the catalog's extra layers).

        Returns the extra layers written here. Exclusive, so that a concurrent
        delete of a name sharing these small blobs cannot collect one between
        its write and the manifest naming it.
        """
        with self.store.exclusive():
            if plan.manifest is not None:
                self.store.write_manifest_bytes(plan.name, plan.manifest)
                return []
            layers = self._extra_layers(plan)
            layers += [layer(job.media_type, digest, self.store.blob_path(digest).stat().st_size)
                       for job, digest in zip(plan.blobs[1:], digests[1:])]  # a projector pulled with the model
            register_model(self.store, plan.name, digests[0], layers)
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


def _hf_job(repo: str, revision: str, sibling: Any, media_type: str) -> BlobJob:
    """The download of one file of a Hugging Face repository as a layer of ``media_type``."""
    digest = hf_file_digest(sibling)
    return BlobJob(
        key=digest or f"hf:{repo}/{sibling.rfilename}",
        digest=digest,
        size=sibling.size,
        sources=(HuggingFaceFile(repo, sibling.rfilename, revision=revision),),
        label=digest[7:19] if digest else sibling.rfilename,
        media_type=media_type,
    )


def check_json_layer(path: Path, media_type: str) -> None:
    """A params or messages layer, or a config, must be the JSON object or list Ollama writes there."""
    expected = JSON_LAYERS[media_type]
    if path.stat().st_size > MAX_JSON_LAYER_BYTES:
        raise SourceError(f"the {media_type} layer is larger than {MAX_JSON_LAYER_BYTES} bytes")
    try:
        value = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"the {media_type} layer is not JSON ({exc})") from None
    if not isinstance(value, expected):
        raise SourceError(f"the {media_type} layer is not a JSON {'object' if expected is dict else 'list'}")
