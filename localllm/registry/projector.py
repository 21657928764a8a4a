"""Vision and audio projectors (llama.cpp's ``mmproj`` GGUF files, Ollama's projector layer) as the store sees them.

The header says what a projector is for (``general.architecture`` "clip",
``clip.has_vision_encoder``, ``clip.has_audio_encoder``) and, usually, the width of the embeddings it
writes (``clip.vision.projection_dim``), which must be the language model's
``embedding_length``. ``create`` checks both so that a projector that cannot
work is refused there, naming the file; libmtmd checks the rest at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..gguf import InvalidGGUF, read_gguf

PROJECTOR_ARCHITECTURES = ("clip", "mmproj")


class InvalidProjector(ValueError):
    """A file that cannot serve as a vision or audio projector; the message says why (the caller names the file)."""


@dataclass(frozen=True)
class ProjectorInfo:
    vision: bool
    audio: bool
    projection_dim: int | None  # the embedding width it writes, when the header says


def read_projector(path: Path) -> ProjectorInfo:
    """What the projector at ``path`` takes, from its header; InvalidProjector when it is none."""
    try:
        meta = read_gguf(path, skip_arrays_over=64).metadata
    except InvalidGGUF as exc:
        raise InvalidProjector(f"not a valid GGUF file: {exc}") from None
    arch = meta.get("general.architecture")
    if arch not in PROJECTOR_ARCHITECTURES:
        raise InvalidProjector(f"not a projector: its architecture is {arch!r}, not 'clip' (a language model?)")
    info = ProjectorInfo(vision=bool(meta.get("clip.has_vision_encoder")), audio=bool(meta.get("clip.has_audio_encoder")),
                         projection_dim=meta.get("clip.vision.projection_dim") or meta.get("clip.audio.projection_dim"))
    if not (info.vision or info.audio):
        raise InvalidProjector("the projector has neither a vision nor an audio encoder "
                               "(clip.has_vision_encoder and clip.has_audio_encoder are not set)")
    return info


def check_projector(path: Path, embedding_length: int | None) -> ProjectorInfo:
    """``read_projector``, and its embeddings must be as wide as the language model's."""
    info = read_projector(path)
    if info.projection_dim and embedding_length and info.projection_dim != embedding_length:
        raise InvalidProjector(f"it writes embeddings of {info.projection_dim} values, but the model's are "
                               f"{embedding_length} wide: a projector for another model")
    return info


def is_projector(path: Path) -> bool:
    """Whether ``path`` is a GGUF of a projector architecture (how an uploaded file is told apart)."""
    try:
        return read_gguf(path, skip_arrays_over=64).metadata.get("general.architecture") in PROJECTOR_ARCHITECTURES
    except (InvalidGGUF, OSError):
        return False
