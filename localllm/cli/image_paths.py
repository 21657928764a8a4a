"""Image files named in a prompt typed at ``localllm run`` (Ollama's way of sending images from a terminal).

For a model that can see, a path ending in an image extension is taken out
of the prompt and its file sent as an image: ``./photo.jpg``, ``/tmp/a.png``,
``~/Pictures/b.webp``, a quoted path with spaces (``'my photo.jpg'``) or one
with escaped spaces (``my\\ photo.jpg`` after ``./``). A file that is missing,
unreadable or not an image is refused with a message naming it, before
anything is sent.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path

from localllm.images import ImageError, decode_image

_EXTENSIONS = r"\.(?:jpe?g|png|webp|gif)"
_START = r"(?:~|\.{1,2}/|/|[A-Za-z]:[\\/])"
_PATH = re.compile(
    rf"""(?P<q>['"])(?P<quoted>{_START}[^'"]*?{_EXTENSIONS})(?P=q)"""  # quoted: spaces as they are
    rf"""|(?<![\w/:])(?P<bare>{_START}(?:\\ |[^\s'"])*?{_EXTENSIONS})(?=$|[\s,;:!?)]|\.(?:\s|$))""",
    re.IGNORECASE,
)


class ImagePathError(ValueError):
    """A file named in the prompt cannot be sent as an image; the message names it."""


@dataclass(frozen=True)
class PromptImages:
    prompt: str  # with the image paths taken out
    images: list[str]  # base64, in the order the paths appear
    paths: list[str]  # as the prompt wrote them


def extract_images(prompt: str) -> PromptImages:
    """The prompt without its image paths, and the images they name (see the module docstring)."""
    images: list[str] = []
    paths: list[str] = []
    kept: list[str] = []
    last = 0
    for match in _PATH.finditer(prompt):
        text = match.group("quoted") or match.group("bare").replace("\\ ", " ")
        images.append(_read_image(text))
        paths.append(text)
        kept.append(prompt[last : match.start()])
        last = match.end()
    kept.append(prompt[last:])
    return PromptImages(" ".join(" ".join(kept).split()) if paths else prompt, images, paths)


def _read_image(text: str) -> str:
    path = Path(text).expanduser()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ImagePathError(f"no such image file: {text}") from None
    except OSError as exc:
        raise ImagePathError(f"cannot read image file {text}: {exc.strerror or exc}") from None
    try:
        decode_image(raw, text)
    except ImageError as exc:
        raise ImagePathError(str(exc)) from None
    return base64.b64encode(raw).decode()
