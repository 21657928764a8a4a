"""The disk tier of the native engine's prefix cache: KV blocks as files that outlive the runner.

A full KV block is a function of the model, the engine, the KV type and
every token from position 0 to its end, so it is named by a *chained token
hash*: ``key(block i) = blake2b(key(block i-1) + tokens of block i)``. The
blocks of one model live in one directory named by the weights' digest
(``<LOCALLLM_KV_DISK_DIR>/<digest>/``), one file per block:

    magic (8 bytes) | header length (u32) | header (JSON) | the block's bytes | crc32 of those bytes (u32)

The header names the model digest, engine, KV type, block size, the block's
layout (layer by layer: which layers a block holds in which head geometry,
and which a state's window holds) and its key; a file is used only when its header is exactly the one
this runner would write, its length exact and its checksum right. Anything
else (truncated, corrupt, another model's or another KV type's) is deleted
and the block computed again. Files are written under a unique temporary
name (``.<key>.<pid>.<random>.tmp``) and renamed whole, so no reader (of this
runner or of another daemon on the same directory) ever opens a half-written
file; a killed runner's temporary files are removed by the next runner.

The directory (all models together) is bounded by ``LOCALLLM_KV_DISK``
bytes: the least recently used files go first (a read refreshes a file's
modification time). A failed write (a full disk, a read-only directory)
stops the tier writing for the rest of the runner's life; requests go on.
Files are mode 0600: KV reveals the prompt.

A model with a recurrent state (Gated DeltaNet layers, or sliding layers
that keep only their window) also keeps state snapshots here, one file per
snapshot named by the key of the block it ends (``<key>.state``): the same
format, checks and budget, with ``"kind": "state"`` and the state's size in
the header.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import logging
import os
import secrets
import shutil
import struct
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("localllm.runner")

MAGIC = b"LLKVBLK1"
SUFFIX = ".kv"
STATE_SUFFIX = ".state"
_U32 = struct.Struct("<I")
ROOT_KEY = b"\0" * 16  # the key "before" the first block
READ_THREADS = 2  # reading and checking a block lets go of the GIL: two read while the engine copies them in
READ_AHEAD = 8  # blocks read ahead of the one being restored


def chain_key(parent: bytes, run: Sequence[int]) -> bytes:
    """The key of a block holding ``run`` after the blocks whose last key is ``parent``."""
    return hashlib.blake2b(parent + struct.pack(f"<{len(run)}i", *run), digest_size=16).digest()


def weights_id(model_path: str | os.PathLike[str]) -> str:
    """The directory name of a model's blocks: its store digest (``sha256-<hex>`` blob names), else a hash of
    the file's identity (a model file outside the store: its path, size and modification time)."""
    path = Path(model_path)
    name = path.name
    if name.startswith("sha256-") and len(name) == 71:
        return name
    st = path.stat()
    return "file-" + hashlib.sha256(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:32]


def clear(root: Path, model_dir: str | None = None) -> int:
    """Delete the blocks of one model (its :func:`weights_id`) or of all; the bytes freed."""
    if model_dir is not None:
        targets = [root / model_dir]
    else:
        targets = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    freed = 0
    for target in targets:
        freed += sum(f.stat().st_size for f in target.rglob("*") if f.is_file()) if target.is_dir() else 0
        shutil.rmtree(target, ignore_errors=True)
    return freed


@dataclass(frozen=True)
class _Kind:
    """One kind of file the tier keeps: KV blocks or recurrent state snapshots."""

    suffix: str
    header: str  # the JSON header without the key
    nbytes: int  # the payload's exact size


class DiskTier:
    """One runner's view of its model's block (and state snapshot) files; see the module docstring."""

    def __init__(self, root: Path, model_dir: str, budget: int, *, engine: str, kv_type: str, block_size: int,
                 layout: str, block_bytes: int, state_bytes: int = 0) -> None:
        self.root = root
        self.dir = root / model_dir / f"{engine}-{kv_type}-{block_size}"
        self.budget = budget
        self.writing = True
        self.reads = 0
        self.writes = 0
        self.dropped = 0  # files found unusable and deleted
        header = {"digest": model_dir, "engine": engine, "kv_type": kv_type, "block_size": block_size,
                  "layout": layout}
        self._kv = _Kind(SUFFIX, json.dumps({**header, "bytes": block_bytes}, sort_keys=True), block_bytes)
        self._state = _Kind(STATE_SUFFIX, json.dumps({**header, "kind": "state", "bytes": state_bytes},
                                                     sort_keys=True), state_bytes)
        try:
            for directory in (root, self.dir.parent, self.dir):
                directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._remove_orphans()
        except OSError as exc:
            self._stop_writing(exc)
        self._used: int | None = None  # bytes of every model's block files; scanned at the first write, not at load

    @staticmethod
    def _prefix(key: bytes, kind: _Kind) -> bytes:
        header = (kind.header[:-1] + f', "key": "{key.hex()}"}}').encode()
        return MAGIC + _U32.pack(len(header)) + header

    def _path(self, key: bytes, kind: _Kind | None = None) -> Path:
        """The file of the block (or of the snapshot: ``kind``) named ``key``."""
        return self.dir / f"{key.hex()}{(kind or self._kv).suffix}"

    # -- reading -------------------------------------------------------------

    def read(self, key: bytes) -> bytes | None:
        """The block named ``key``, checked; None when there is none or it is unusable (then it is deleted)."""
        return self._counted(*self._load(key))

    def read_state(self, key: bytes) -> bytes | None:
        """The state snapshot taken after the block named ``key``, checked as :meth:`read` checks a block."""
        return self._counted(*self._load(key, self._state)) if self._state.nbytes else None

    def read_ahead(self, keys: Sequence[bytes]) -> Iterator[bytes | None]:
        """The blocks named ``keys`` in order, as :meth:`read` gives them, read (and checked) up to READ_AHEAD
        blocks ahead on READ_THREADS threads: a restarted runner's long prompt is hundreds of files. Closing
        it (as a caller does at the first None) stops the reading."""
        queued = iter(keys)
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="kv-disk-read") as pool:
            pending = collections.deque(pool.submit(self._load, key) for key in itertools.islice(queued, READ_AHEAD))
            try:
                while pending:
                    loaded = pending.popleft().result()
                    pending.extend(pool.submit(self._load, key) for key in itertools.islice(queued, 1))
                    yield self._counted(*loaded)
            finally:
                for future in pending:
                    future.cancel()

    def _load(self, key: bytes, kind: _Kind | None = None) -> tuple[bytes | None, bool]:
        """The checked block (or snapshot: ``kind``) named ``key`` (None if absent or unusable) and whether an
        unusable file was deleted; it touches only that file (reading threads call it)."""
        kind = kind or self._kv
        path = self._path(key, kind)
        try:
            with open(path, "rb", buffering=0) as f:
                data = f.read()
        except OSError:
            return None, False
        prefix = self._prefix(key, kind)
        n = len(prefix) + kind.nbytes
        ok = (len(data) == n + _U32.size and data.startswith(prefix)
              and _U32.unpack_from(data, n)[0] == zlib.crc32(memoryview(data)[len(prefix):n]))
        if not ok:
            log.warning("KV disk tier: dropping unusable %s file %s (truncated, corrupt, or another model's "
                        "or KV type's)", "block" if kind is self._kv else "state snapshot", path.name)
            self._unlink(path)
            return None, True
        try:
            os.utime(path)  # recently used: last out
        except OSError:
            pass
        return data[len(prefix):n], False

    def _counted(self, data: bytes | None, dropped: bool) -> bytes | None:
        self.reads += data is not None
        self.dropped += dropped
        return data

    # -- writing -------------------------------------------------------------

    def write(self, key: bytes, data: bytes) -> bool:
        """Store a block (whole, then renamed); False when the tier does not write (off, full, failing)."""
        return self._store(key, data, self._kv)

    def write_state(self, key: bytes, data: bytes) -> bool:
        """Store the state snapshot taken after the block named ``key``, as :meth:`write` stores a block."""
        return self._store(key, data, self._state)

    def _store(self, key: bytes, data: bytes, kind: _Kind) -> bool:
        if not self.writing or not kind.nbytes or len(data) != kind.nbytes:
            return False
        prefix = self._prefix(key, kind)
        size = len(prefix) + len(data) + _U32.size
        if size > self.budget:
            return False
        path = self._path(key, kind)
        if path.exists():
            return True
        if self._used is None:
            self._used = self._scan_usage()
        if self._used + size > self.budget:
            self._make_room(size)
        temp = self.dir / f".{key.hex()}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                with os.fdopen(fd, "wb") as f:  # buffered: a short write is retried, or raises
                    f.write(prefix + data + _U32.pack(zlib.crc32(data)))
            except BaseException:
                self._unlink(temp)
                raise
            os.replace(temp, path)
        except OSError as exc:
            self._stop_writing(exc)
            return False
        self._used += size
        self.writes += 1
        return True

    def _stop_writing(self, exc: OSError) -> None:
        if self.writing:
            log.warning("KV disk tier: cannot write under %s (%s); no more blocks go to disk until the model is "
                        "loaded again", self.dir, exc.strerror or exc)
        self.writing = False

    def _make_room(self, size: int) -> None:
        """Delete the least recently used block files of every model until ``size`` more bytes fit (with a tenth of
        the budget spare, so this scan is rare)."""
        files = sorted(self._block_files())
        used = sum(f[1] for f in files)
        target = max(0, self.budget - self.budget // 10 - size)
        for _, n, path in files:
            if used <= target:
                break
            self._unlink(path)
            used -= n
        self._used = used

    def _scan_usage(self) -> int:
        return sum(size for _, size, _ in self._block_files())

    def _block_files(self) -> list[tuple[int, int, Path]]:
        """(modification time, size, path) of every model's block and snapshot files under the root."""
        files = []
        for path in itertools.chain(self.root.glob(f"*/*/*{SUFFIX}"), self.root.glob(f"*/*/*{STATE_SUFFIX}")):
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((st.st_mtime_ns, st.st_size, path))
        return files

    def _remove_orphans(self) -> None:
        """Temporary files of runners that are gone (killed mid-write); a live runner's are left alone."""
        for temp in self.dir.glob(".*.tmp"):
            parts = temp.name.split(".")
            if len(parts) == 5 and parts[2].isdigit() and not Path(f"/proc/{parts[2]}").exists():
                self._unlink(temp)

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass
