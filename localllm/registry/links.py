"""GGUF files used where they are: a blob that is a symlink to the file, and a record of what it held.

``localllm create`` with ``FROM ./model.gguf`` (and ``localllm run ./model.gguf``)
registers the file without copying it::

    <root>/blobs/sha256-<hex>  ->  /home/me/models/model.gguf   (symlink)
    <root>/links/sha256-<hex>      {"path": ..., "size": ..., "mtime_ns": ...}

Why a symlink under the blob's own name rather than a path kept elsewhere: the
manifest stays exactly what Ollama writes (the layer's digest is the file's real
sha256, hashed once at registration), so list, show, cp, push and Ollama itself
reading this store see an ordinary blob; the runner opens ``blobs/sha256-<hex>``
as for any model; and deleting the blob removes the link, never the user's file.

What a symlink cannot say is whether the file still holds those bytes. The
record keeps the size and mtime seen when it was hashed, and the store consults
it whenever a model is resolved: same size and mtime, the file is trusted; same
size but a new mtime, it is hashed again and the record refreshed if the bytes
are the same; otherwise (or if the file is gone) the model is refused with
:class:`LinkedFileError`, never run with other weights. Ollama ignores ``links/``.
A symlink in ``blobs/`` without a record was made by someone else and is taken
as an ordinary blob.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


class LinkedFileError(ValueError):
    """A linked model file that vanished or no longer holds the bytes it was registered with."""


@dataclass(frozen=True)
class LinkRecord:
    """What a linked file looked like when its digest was computed."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path, stat: os.stat_result) -> LinkRecord:
        return cls(str(path), stat.st_size, stat.st_mtime_ns)

    def matches(self, stat: os.stat_result) -> bool:
        return (self.size, self.mtime_ns) == (stat.st_size, stat.st_mtime_ns)


def read_record(path: Path) -> LinkRecord | None:
    """The record at ``path``; None when there is none. An unreadable record raises ValueError."""
    try:
        data = json.loads(path.read_bytes())
        return LinkRecord(path=str(data["path"]), size=int(data["size"]), mtime_ns=int(data["mtime_ns"]))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"link record {path.name} is unreadable: {exc}") from None


def record_bytes(record: LinkRecord) -> bytes:
    return (json.dumps(asdict(record)) + "\n").encode()
