"""The model store: content-addressed blobs and per-name manifests, in Ollama's layout.

::

    <root>/blobs/sha256-<hex>                         immutable content
    <root>/manifests/<host>/<namespace>/<model>/<tag>  Docker v2 manifest (JSON)
    <root>/partial/                                   temp files and resumable downloads
    <root>/quarantine/sha256-<hex>                    downloads rejected as hostile, kept for inspection
    <root>/links/sha256-<hex>                         what a linked file held (see links.py)
    <root>/translated/sha256-<hex>/                   files derived from a blob (ollama_compat.py), removed with it

Every file appears under its final name only complete: data goes to a temp
file in ``partial/`` (same filesystem), is hashed while written, fsynced, then
renamed. A manifest is written only after all the blobs it names exist, so a
crash at any point leaves a store where every manifest's blobs exist and verify.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from .links import LinkedFileError, LinkRecord, read_record, record_bytes
from .names import InvalidName, ModelName

MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
MEDIA_MODEL = "application/vnd.ollama.image.model"
MEDIA_TEMPLATE = "application/vnd.ollama.image.template"
MEDIA_SYSTEM = "application/vnd.ollama.image.system"
MEDIA_PARAMS = "application/vnd.ollama.image.params"
MEDIA_MESSAGES = "application/vnd.ollama.image.messages"
MEDIA_LICENSE = "application/vnd.ollama.image.license"
MEDIA_ADAPTER = "application/vnd.ollama.image.adapter"
MEDIA_PROJECTOR = "application/vnd.ollama.image.projector"

CHUNK_SIZE = 1 << 20
_DIGEST_RE = re.compile(r"sha256:([0-9a-f]{64})")


class InvalidDigest(ValueError):
    """A digest that is not ``sha256:<64 lowercase hex>``."""


class DigestMismatch(ValueError):
    """Content whose sha256 differs from the one it was promised to have."""


class ModelNotFound(LookupError):
    """No manifest for this name."""

    def __init__(self, name: ModelName | str):
        self.name = name
        label = name.display if isinstance(name, ModelName) else name
        super().__init__(f"model '{label}' not found, try pulling it first")


class CorruptManifest(ValueError):
    """A manifest file that is not a readable Docker v2 manifest."""


def parse_digest(digest: str) -> str:
    """Return the hex part of ``sha256:<hex>``, or raise InvalidDigest."""
    match = _DIGEST_RE.fullmatch(digest) if isinstance(digest, str) else None
    if match is None:
        raise InvalidDigest(f"invalid digest {digest!r}: expected 'sha256:' followed by 64 lowercase hex digits")
    return match.group(1)


def layer(media_type: str, digest: str, size: int) -> dict[str, Any]:
    """One manifest layer (or config) descriptor."""
    parse_digest(digest)
    return {"mediaType": media_type, "digest": digest, "size": size}


def build_manifest(config: dict[str, Any], layers: list[dict[str, Any]]) -> dict[str, Any]:
    """A Docker v2 manifest as Ollama writes it."""
    return {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE, "config": config, "layers": layers}


def manifest_descriptors(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The config and every layer of a manifest, validated enough to trust their digests."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("layers"), list):
        raise CorruptManifest("manifest has no 'layers' list")
    descriptors = list(manifest["layers"])
    if manifest.get("config"):
        descriptors.append(manifest["config"])
    for descriptor in descriptors:
        if not isinstance(descriptor, dict) or not isinstance(descriptor.get("size"), int):
            raise CorruptManifest(f"manifest layer {descriptor!r} lacks a digest or size")
        try:
            parse_digest(descriptor.get("digest"))
        except InvalidDigest as exc:
            raise CorruptManifest(str(exc)) from None
    return descriptors


@dataclass(frozen=True)
class ModelEntry:
    """One installed model, as ``/api/tags`` lists it."""

    name: ModelName
    digest: str  # sha256 hex of the manifest bytes (Ollama's model "ID")
    size: int  # sum of the config and layer sizes, and of the files derived from them (translated/)
    modified_at: datetime
    manifest: dict[str, Any]


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _chunks(src: BinaryIO | Iterable[bytes]) -> Iterator[bytes]:
    if hasattr(src, "read"):
        while chunk := src.read(CHUNK_SIZE):  # type: ignore[union-attr]
            yield chunk
    else:
        yield from src  # type: ignore[misc]


def hash_file(path: Path) -> tuple[str, int]:
    """sha256 digest (``sha256:<hex>``) and size of a file."""
    hasher = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for chunk in _chunks(f):
            hasher.update(chunk)
            size += len(chunk)
    return f"sha256:{hasher.hexdigest()}", size


class Store:
    """A model store rooted at ``root``; safe to share between threads of one process."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.blobs_dir = self.root / "blobs"
        self.manifests_dir = self.root / "manifests"
        self.partial_dir = self.root / "partial"
        self.quarantine_dir = self.root / "quarantine"  # made on first use
        self.links_dir = self.root / "links"  # made on first use
        self.translated_root = self.root / "translated"  # made on first use
        for directory in (self.blobs_dir, self.manifests_dir, self.partial_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._held: Counter[str] = Counter()

    # -- blobs ---------------------------------------------------------------

    def blob_path(self, digest: str) -> Path:
        return self.blobs_dir / f"sha256-{parse_digest(digest)}"

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def remove_temporaries(self) -> int:
        """Delete temp files a killed writer left in ``partial/`` (resumable downloads stay), and links
        no manifest names (a create killed between linking its file and writing its manifest).

        Only safe while no other writer runs: the daemon calls it at start.
        """
        removed = 0
        for path in self.partial_dir.glob(".tmp-*"):
            if path.is_dir() and not path.is_symlink():  # a translation that was being written
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
        for directory in self.translated_root.glob("sha256-*") if self.translated_root.is_dir() else ():
            if not (self.blobs_dir / directory.name).exists():  # its blob went while it was being written
                shutil.rmtree(directory, ignore_errors=True)
                removed += 1
        referenced = self.referenced_digests()
        for digest, _record in list(self._link_records()):
            if digest not in referenced:
                if self.blob_path(digest).is_symlink():  # never a blob stored here (an upload awaiting create)
                    self.blob_path(digest).unlink()
                self._link_record_path(digest).unlink(missing_ok=True)
                removed += 1
        return removed

    def temp_path(self, label: str = "blob") -> Path:
        """A fresh path in ``partial/`` for data that is not complete yet."""
        return self.partial_dir / f".tmp-{label}-{secrets.token_hex(8)}"

    def add_blob(self, src: BinaryIO | Iterable[bytes], expected_digest: str | None = None) -> tuple[str, int]:
        """Copy ``src`` into the store while hashing it; returns ``(digest, size)``.

        With ``expected_digest`` the content must hash to it or nothing is
        stored and DigestMismatch is raised.
        """
        if expected_digest is not None:
            parse_digest(expected_digest)
        temp = self.temp_path()
        hasher = hashlib.sha256()
        size = 0
        try:
            with open(temp, "wb") as out:
                for chunk in _chunks(src):
                    hasher.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            digest = f"sha256:{hasher.hexdigest()}"
            if expected_digest is not None and digest != expected_digest:
                raise DigestMismatch(f"content has digest {digest}, expected {expected_digest}")
            self._publish(temp, digest)
        finally:
            temp.unlink(missing_ok=True)
        return digest, size

    def add_blob_bytes(self, data: bytes, expected_digest: str | None = None) -> tuple[str, int]:
        return self.add_blob([data], expected_digest)

    def add_blob_file(
        self, path: Path, expected_digest: str | None = None, validate: Callable[[Path, str], None] | None = None
    ) -> tuple[str, int]:
        """Move a complete file that lives in ``partial/`` into the blobs (no copy).

        The file is hashed, compared with ``expected_digest`` and passed to
        ``validate(path, digest)`` before it gets its final name; if either
        check fails the file is deleted (its bytes are known bad; ``validate``
        may :meth:`quarantine` it first) and the error propagates.
        """
        path = Path(path)
        try:
            digest, size = hash_file(path)
            if expected_digest is not None and digest != expected_digest:
                raise DigestMismatch(f"file has digest {digest}, expected {expected_digest}")
            if validate is not None:
                validate(path, digest)
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
            self._publish(path, digest)
        finally:
            path.unlink(missing_ok=True)
        return digest, size

    def quarantine(self, path: Path, digest: str) -> Path:
        """Move a rejected file out of the way, named by its digest, so it can be inspected but never loaded."""
        self.quarantine_dir.mkdir(exist_ok=True)
        target = self.quarantine_dir / f"sha256-{parse_digest(digest)}"
        os.replace(path, target)
        return target

    def _publish(self, temp: Path, digest: str) -> None:
        final = self.blob_path(digest)
        if not final.is_symlink():
            with contextlib.suppress(FileNotFoundError):  # a concurrent delete may remove it between two checks
                if final.stat().st_size == temp.stat().st_size:
                    return  # identical content already stored
        os.replace(temp, final)  # a copy of a linked file's bytes takes the link's place
        self._link_record_path(digest).unlink(missing_ok=True)
        _fsync_dir(self.blobs_dir)

    # -- linked files (links.py) ----------------------------------------------

    def _link_record_path(self, digest: str) -> Path:
        return self.links_dir / f"sha256-{parse_digest(digest)}"

    def link_file(self, path: Path) -> tuple[str, int]:
        """Make ``path`` a blob without copying it (see links.py); returns ``(digest, size)``.

        A file this store already links with the same size and mtime is not
        hashed again; bytes the store already holds are not linked at all.
        """
        path = Path(os.path.abspath(path))
        stat = path.stat()
        for digest, record in self._link_records():
            if record.path == str(path) and record.matches(stat) and self.linked_file(digest) == path:
                return digest, record.size
        digest, size = hash_file(path)
        if not LinkRecord.of(path, path.stat()).matches(stat) or size != stat.st_size:
            raise LinkedFileError(f"{path} changed while it was being read; try again once it is complete")
        with self._lock:
            blob = self.blob_path(digest)
            if blob.is_file() and self._link_problem(digest) is None:
                return digest, size  # these bytes are stored (or linked) already
            self.links_dir.mkdir(exist_ok=True)
            self._write_file(self._link_record_path(digest), record_bytes(LinkRecord.of(path, stat)))
            temp = self.temp_path("link")
            temp.symlink_to(path)
            os.replace(temp, blob)
            _fsync_dir(self.blobs_dir)
        return digest, size

    def _link_records(self) -> Iterator[tuple[str, LinkRecord]]:
        for record_path in sorted(self.links_dir.glob("sha256-*")) if self.links_dir.is_dir() else ():
            try:
                record = read_record(record_path)
            except ValueError:
                continue
            if record is not None:
                yield "sha256:" + record_path.name.removeprefix("sha256-"), record

    def linked_file(self, digest: str) -> Path | None:
        """The file ``digest``'s blob links to, or None for a blob stored here."""
        try:
            return Path(os.readlink(self.blob_path(digest)))
        except OSError:  # not a symlink, or no blob
            return None

    def check_link(self, digest: str) -> None:
        """Raise LinkedFileError if ``digest``'s blob links a file that vanished or no longer holds it."""
        problem = self._link_problem(digest)
        if problem is not None:
            raise LinkedFileError(problem)

    def _link_problem(self, digest: str) -> str | None:
        blob = self.blob_path(digest)
        if not blob.is_symlink():
            return None
        try:
            record = read_record(self._link_record_path(digest))
        except ValueError:
            record = LinkRecord(str(self.linked_file(digest)), -1, -1)  # unreadable: hash the file again
        if record is None:
            return None  # a symlink someone else made: an ordinary blob to us
        try:
            stat = blob.stat()
        except OSError:
            return f"the linked file {record.path} no longer exists"
        if record.matches(stat):
            return None
        if record.size in (-1, stat.st_size) and hash_file(blob)[0] == digest:
            self._write_file(self._link_record_path(digest), record_bytes(LinkRecord.of(Path(record.path), stat)))
            return None  # touched, same bytes
        return f"the linked file {record.path} changed since it was registered (it no longer holds {digest})"

    def _remove_blob(self, digest: str) -> None:
        """Delete a blob, and the files derived from it; for a linked file only the link goes, never the file."""
        self.blob_path(digest).unlink(missing_ok=True)
        self._link_record_path(digest).unlink(missing_ok=True)
        shutil.rmtree(self.translated_dir(digest), ignore_errors=True)

    # -- files derived from blobs --------------------------------------------

    def translated_dir(self, digest: str) -> Path:
        """Where the files derived from blob ``digest`` are kept (llama.cpp's layout of an Ollama-format file)."""
        return self.translated_root / f"sha256-{parse_digest(digest)}"

    def derived_bytes(self, digests: Iterable[str]) -> int:
        """Disk the files derived from these blobs take (counted in a model's size: they go with it)."""
        total = 0
        for digest in set(digests):
            directory = self.translated_dir(digest)
            for path in directory.rglob("*") if directory.is_dir() else ():
                with contextlib.suppress(OSError):
                    if path.is_file():
                        total += path.stat().st_size
        return total

    def discard_unreferenced(self, digests: Iterable[str]) -> None:
        """Delete those of ``digests`` that no manifest names and nothing holds (a failed create, a
        replaced or deleted manifest's blobs)."""
        with self._lock:
            for digest in set(digests) - self.referenced_digests() - set(self._held):
                self._remove_blob(digest)

    @contextlib.contextmanager
    def hold(self, digests: Iterable[str]) -> Iterator[None]:
        """Keep these blobs from being garbage-collected while a manifest naming them is being built."""
        digests = list(digests)
        with self._lock:
            self._held.update(digests)
        try:
            yield
        finally:
            with self._lock:
                self._held.subtract(digests)
                self._held += Counter()  # drop zero counts

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Keep deletes and copies out while new blobs and the manifest naming them are written together."""
        with self._lock:
            yield

    # -- manifests -----------------------------------------------------------

    def write_manifest(self, name: ModelName, manifest: dict[str, Any]) -> str:
        """Write ``name``'s manifest atomically; returns the manifest's sha256 hex.

        Refuses a manifest naming a blob that is not in the store.
        """
        return self.write_manifest_bytes(name, (json.dumps(manifest, separators=(",", ":")) + "\n").encode())

    def write_manifest_bytes(self, name: ModelName, data: bytes) -> str:
        """Write a manifest's bytes unchanged (a registry's keeps its digest, Ollama's model ID).

        Refuses bytes that are not a manifest, or that name a blob not in the store.
        A manifest it replaces takes along the blobs nothing else names, as a delete would.
        """
        with self._lock:
            for descriptor in manifest_descriptors(self._parse_manifest(name, data)):
                if not self.has_blob(descriptor["digest"]):
                    raise CorruptManifest(f"manifest names blob {descriptor['digest']} which is not in the store")
            replaced = self._named_digests(name)
            manifest_digest = self._write_manifest_bytes(name, data)
            self.discard_unreferenced(replaced)
            return manifest_digest

    def _write_manifest_bytes(self, name: ModelName, data: bytes) -> str:
        path = name.manifest_path(self.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write_file(path, data)
        return hashlib.sha256(data).hexdigest()

    def _write_file(self, path: Path, data: bytes) -> None:
        """Replace ``path`` with ``data`` atomically (temp file, fsync, rename)."""
        temp = self.temp_path(path.name)
        try:
            with open(temp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)
        _fsync_dir(path.parent)

    def read_manifest_bytes(self, name: ModelName) -> bytes:
        try:
            return name.manifest_path(self.root).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ModelNotFound(name) from None

    def read_manifest(self, name: ModelName) -> dict[str, Any]:
        return self._parse_manifest(name, self.read_manifest_bytes(name))

    def manifest_digest(self, name: ModelName) -> str:
        return hashlib.sha256(self.read_manifest_bytes(name)).hexdigest()

    @staticmethod
    def _parse_manifest(name: ModelName, data: bytes) -> dict[str, Any]:
        try:
            manifest = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptManifest(f"manifest of '{name.display}' is not valid JSON: {exc}") from None
        try:
            manifest_descriptors(manifest)
        except CorruptManifest as exc:
            raise CorruptManifest(f"manifest of '{name.display}': {exc}") from None
        return manifest

    def _manifest_files(self) -> Iterator[tuple[ModelName | None, Path]]:
        """Every file four levels under ``manifests/``, with its name if the path is a valid one."""
        for path in sorted(self.manifests_dir.glob("*/*/*/*")):
            if not path.is_file() or path.name.startswith("."):
                continue
            host, namespace, model, tag = path.relative_to(self.manifests_dir).parts
            try:
                yield ModelName(host=host, namespace=namespace, model=model, tag=tag), path
            except InvalidName:
                yield None, path

    def list_models(self) -> list[ModelEntry]:
        """Installed models, newest first; unreadable manifests are skipped (see :meth:`verify`)."""
        entries = []
        for name, path in self._manifest_files():
            if name is None:
                continue
            try:
                data = path.read_bytes()
                manifest = self._parse_manifest(name, data)
                mtime = path.stat().st_mtime
            except (OSError, CorruptManifest):
                continue
            entries.append(
                ModelEntry(
                    name=name,
                    digest=hashlib.sha256(data).hexdigest(),
                    size=sum(d["size"] for d in manifest_descriptors(manifest))
                    + self.derived_bytes(d["digest"] for d in manifest["layers"]),
                    modified_at=datetime.fromtimestamp(mtime, tz=timezone.utc),
                    manifest=manifest,
                )
            )
        entries.sort(key=lambda e: e.modified_at, reverse=True)
        return entries

    def copy(self, src: ModelName, dst: ModelName) -> None:
        """Give ``src``'s model a second name (same manifest bytes, blobs shared)."""
        with self._lock:
            data = self.read_manifest_bytes(src)
            self._parse_manifest(src, data)
            self._write_manifest_bytes(dst, data)

    def delete(self, name: ModelName) -> None:
        """Remove ``name``'s manifest, then the blobs no other manifest references."""
        with self._lock:
            path = name.manifest_path(self.root)
            self.read_manifest_bytes(name)  # ModelNotFound
            digests = self._named_digests(name)
            path.unlink()
            self._remove_empty_parents(path.parent)
            self.discard_unreferenced(digests)

    def _named_digests(self, name: ModelName) -> set[str]:
        """The blobs ``name``'s manifest names; none if it has none or it is corrupt (its blobs stay for verify())."""
        try:
            return {d["digest"] for d in manifest_descriptors(json.loads(self.read_manifest_bytes(name)))}
        except (ModelNotFound, ValueError, CorruptManifest):
            return set()

    def _remove_empty_parents(self, directory: Path) -> None:
        while directory != self.manifests_dir and self.manifests_dir in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def referenced_digests(self) -> set[str]:
        """Digests named by any readable manifest."""
        referenced: set[str] = set()
        for _name, path in self._manifest_files():
            try:
                referenced.update(d["digest"] for d in manifest_descriptors(json.loads(path.read_bytes())))
            except (OSError, ValueError, CorruptManifest):
                continue
        return referenced

    def verify(self) -> list[str]:
        """Check every manifest and the blobs it names; returns problems a person can act on."""
        problems = []
        checked: dict[str, str | None] = {}
        for name, path in self._manifest_files():
            label = str(path.relative_to(self.manifests_dir))
            if name is None:
                problems.append(f"manifest {label}: path is not a valid model name")
                continue
            try:
                descriptors = manifest_descriptors(self._parse_manifest(name, path.read_bytes()))
            except (OSError, CorruptManifest) as exc:
                problems.append(f"manifest {label}: unreadable ({exc})")
                continue
            for descriptor in descriptors:
                digest = descriptor["digest"]
                if digest not in checked:
                    checked[digest] = self._check_blob(digest, descriptor["size"])
                if checked[digest]:
                    problems.append(f"{name.display}: {checked[digest]}")
        return problems

    def _check_blob(self, digest: str, size: int) -> str | None:
        path = self.blob_path(digest)
        if link_problem := self._link_problem(digest):
            return f"blob {digest}: {link_problem}"
        if not path.is_file():
            return f"blob {digest} is missing"
        actual_digest, actual_size = hash_file(path)
        if actual_size != size:
            return f"blob {digest} has {actual_size} bytes, manifest says {size}"
        if actual_digest != digest:
            return f"blob {digest} is corrupt (content hashes to {actual_digest})"
        return None
