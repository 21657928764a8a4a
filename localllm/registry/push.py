"""Pushing a model to a Docker v2 registry, as ``ollama push`` does.

Blobs first, in manifest order: each is checked with HEAD and skipped when the
registry has it, else uploaded (POST ``/blobs/uploads/``, then PUT to the
returned Location with ``?digest=``); the manifest goes last, byte for byte as
stored, so the registry's digest is the local model ID. A registry that
refuses is a RegistryError naming what it refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx

from ..config import Settings
from .events import Emit, merged_events
from .links import LinkedFileError
from .names import ModelName
from .remote import RegistryError, Repository, repository_for
from .store import (
    CHUNK_SIZE,
    MANIFEST_MEDIA_TYPE,
    CorruptManifest,
    ModelNotFound,
    Store,
    manifest_descriptors,
)

PROGRESS_INTERVAL = 0.1  # seconds between progress events of one upload


class Pusher:
    """Pushes models from a store to registries."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    async def push(self, name: ModelName, *, insecure: bool = False) -> AsyncIterator[dict[str, Any]]:
        """Push ``name`` to its registry, yielding Ollama's push status objects; raises RegistryError."""
        yield {"status": "retrieving manifest"}
        try:
            data = self.store.read_manifest_bytes(name)
            descriptors = manifest_descriptors(self.store.read_manifest(name))
        except ModelNotFound as exc:
            raise RegistryError(str(exc), 404) from None
        except CorruptManifest as exc:
            raise RegistryError(f"cannot push '{name.display}': {exc}", 500) from None
        try:  # a linked file that changed must never go out under the digest it no longer has
            for descriptor in descriptors:
                self.store.check_link(descriptor["digest"])
        except LinkedFileError as exc:
            raise RegistryError(f"cannot push '{name.display}': {exc}", 409) from None
        repository = repository_for(name, self.settings, insecure)

        async def upload_all(emit: Emit) -> None:
            async with repository.client() as client:
                try:
                    for descriptor in descriptors:
                        await self._push_blob(client, repository, descriptor, emit)
                    emit({"status": "pushing manifest"})
                    response = await client.put(
                        repository.manifest_url, content=data, headers={"Content-Type": MANIFEST_MEDIA_TYPE}
                    )
                except httpx.HTTPError as exc:
                    raise repository.unreachable(exc) from None
                if response.status_code not in (200, 201):
                    raise repository.error(response, "accept the manifest")

        with self.store.hold([d["digest"] for d in descriptors]):  # a concurrent delete must not take them
            async for event in merged_events([upload_all], 1):
                yield event
        yield {"status": "success"}

    async def _push_blob(
        self, client: httpx.AsyncClient, repository: Repository, descriptor: dict[str, Any], emit: Emit
    ) -> None:
        digest, size = descriptor["digest"], descriptor["size"]

        def report(completed: int) -> None:
            emit({"status": f"pushing {digest[7:19]}", "digest": digest, "total": size, "completed": completed})

        response = await client.head(repository.blob_url(digest))
        if response.status_code == 200:
            report(size)
            return
        if response.status_code != 404:
            raise repository.error(response, f"check blob {digest[7:19]}")
        response = await client.post(repository.uploads_url)
        location = response.headers.get("location")
        if response.status_code != 202 or not location:
            raise repository.error(response, "start an upload")
        target = httpx.URL(urljoin(repository.uploads_url, location)).copy_merge_params({"digest": digest})
        response = await client.put(
            target,
            content=_read_chunks(self.store.blob_path(digest), report),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )
        if response.status_code != 201:
            raise repository.error(response, f"accept blob {digest[7:19]}")
        report(size)


async def _read_chunks(path: Path, report: Callable[[int], None]) -> AsyncIterator[bytes]:
    """A blob's bytes for an upload body, reporting progress at most every PROGRESS_INTERVAL."""
    sent, last = 0, 0.0
    with open(path, "rb") as f:
        while chunk := await asyncio.to_thread(f.read, CHUNK_SIZE):
            yield chunk
            sent += len(chunk)
            if time.monotonic() - last >= PROGRESS_INTERVAL:
                last = time.monotonic()
                report(sent)
