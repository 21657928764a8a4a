"""File names a remote chose, made into paths inside the store: the only way one becomes a path.

A package index names its wheels (PEP 691 ``filename``, PEP 503 link text) and
a Hugging Face repository its files (``rfilename``); a hostile or compromised
one can name ``x-1.0-/../../../.bashrc``. :func:`remote_path` accepts a plain
name (for Hugging Face, plain names joined by ``/``) and refuses everything a
filesystem would read as more than that. Digests (``sha256:<hex>``) and model
names have their own checks (``store.parse_digest``, ``names.ModelName``);
everything else the sources write is named by a hash of where it came from.
"""

from __future__ import annotations

import re
from pathlib import Path

MAX_NAME_BYTES = 255  # one path component on Linux, macOS and Windows
MAX_SEGMENTS = 16  # folders deep a Hugging Face file may be
_ODD_CHARACTERS = re.compile(r'[\x00-\x1f\x7f\\:*?"<>|]')  # controls, and what Windows reads as drive or pattern


class UnsafeRemoteName(ValueError):
    """A remote named a file in a way that would not stay a plain name inside the store."""


def _segment_fault(segment: str) -> str | None:
    """Why ``segment`` is not a plain file name, or None when it is one."""
    if not segment:
        return "an empty name or folder"
    if segment in (".", ".."):
        return f"the folder {segment!r}"
    if segment.startswith("."):
        return "a name starting with '.'"
    if "/" in segment:
        return "the character '/'"
    if match := _ODD_CHARACTERS.search(segment):
        return f"the character {match.group()!r}"
    if len(segment.encode("utf-8", errors="surrogatepass")) > MAX_NAME_BYTES:
        return f"a name longer than {MAX_NAME_BYTES} bytes"
    return None


def _segments(name: object, folders: bool) -> tuple[list[str], str | None]:
    """The path components ``name`` stands for, and what is wrong with it (None when nothing is)."""
    if not isinstance(name, str):
        return [], "not a string"
    segments = name.split("/") if folders else [name]
    if len(segments) > MAX_SEGMENTS:
        return segments, f"more than {MAX_SEGMENTS} folders deep"
    return segments, next((fault for fault in map(_segment_fault, segments) if fault), None)


def remote_path(directory: Path, name: str, remote: str, *, folders: bool = False) -> Path:
    """``directory / name`` for a ``name`` that ``remote`` (e.g. ``package index https://…``) chose.

    ``folders``: ``name`` may be plain names joined by ``/`` (a Hugging Face
    repository's file path); else it must be one plain name. Raises
    UnsafeRemoteName naming the remote, the name and what is wrong with it.
    """
    segments, fault = _segments(name, folders)
    if fault:
        raise UnsafeRemoteName(f"{remote} named a file {repr(name)[:200]}, which is not a plain file name "
                               f"({fault}); nothing was written")
    return directory.joinpath(*segments)
