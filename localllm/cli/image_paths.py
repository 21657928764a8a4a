"""Image and audio files named in a prompt typed at ``localllm run`` (Ollama's way of sending images
from a terminal).

For a model that can see, a path ending in an image extension is taken out
of the prompt and its file sent as an image: ``./photo.jpg``, ``/tmp/a.png``,
``~/Pictures/b.webp``, a quoted path with spaces (``'my photo.jpg'``) or one
with escaped spaces (``my\\ photo.jpg`` after ``./``); for a model that hears,
so is a path ending in ``.wav``, ``.mp3`` or ``.flac`` (sent with the images,
as Ollama's ``images`` carry audio). A file that is missing, unreadable, or
not an image (or audio) is refused with a message naming it, before anything
is sent.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path

from localllm.audio import AudioError, check_audio
from localllm.images import ImageError, decode_image

IMAGE_EXTENSIONS = ("jpeg", "jpg", "png", "webp", "gif")
AUDIO_EXTENSIONS = ("wav", "mp3", "flac")
_START = r"(?:~|\.{1,2}/|/|[A-Za-z]:[\\/])"


def _path_pattern(extensions: tuple[str, ...]) -> re.Pattern[str]:
    ending = rf"\.(?:{'|'.join(extensions)})"
    return re.compile(
        rf"""(?P<q>['"])(?P<quoted>{_START}[^'"]*?{ending})(?P=q)"""  # quoted: spaces as they are
        rf"""|(?<![\w/:])(?P<bare>{_START}(?:\\ |[^\s'"])*?{ending})(?=$|[\s,;:!?)]|\.(?:\s|$))""",
        re.IGNORECASE,
    )


class ImagePathError(ValueError):
    """A file named in the prompt cannot be sent as an image (or audio); the message names it."""


@dataclass(frozen=True)
class PromptImages:
    prompt: str  # with the image paths taken out
    images: list[str]  # base64 images and audio, in the order the paths appear
    paths: list[str]  # as the prompt wrote them


def extract_images(prompt: str, images: bool = True, audio: bool = False) -> PromptImages:
    """The prompt without its image (and, with ``audio``, audio) paths, and the files they name (see the
    module docstring)."""
    extensions = (IMAGE_EXTENSIONS if images else ()) + (AUDIO_EXTENSIONS if audio else ())
    if not extensions:
        return PromptImages(prompt, [], [])
    found: list[str] = []
    paths: list[str] = []
    kept: list[str] = []
    last = 0
    for match in _path_pattern(extensions).finditer(prompt):
        text = match.group("quoted") or match.group("bare").replace("\\ ", " ")
        found.append(_read_file(text))
        paths.append(text)
        kept.append(prompt[last : match.start()])
        last = match.end()
    kept.append(prompt[last:])
    return PromptImages(" ".join(" ".join(kept).split()) if paths else prompt, found, paths)


def is_audio_path(text: str) -> bool:
    return text.lower().endswith(tuple("." + ext for ext in AUDIO_EXTENSIONS))


def _read_file(text: str) -> str:
    kind = "audio" if is_audio_path(text) else "image"
    path = Path(text).expanduser()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ImagePathError(f"no such {kind} file: {text}") from None
    except OSError as exc:
        raise ImagePathError(f"cannot read {kind} file {text}: {exc.strerror or exc}") from None
    try:
        if kind == "audio":
            check_audio(raw, text)
        else:
            decode_image(raw, text)
    except (AudioError, ImageError) as exc:
        raise ImagePathError(str(exc)) from None
    return base64.b64encode(raw).decode()
