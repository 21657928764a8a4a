"""Attachments as clients send them: base64 that holds an image or audio (Ollama's ``images`` field carries both,
and so do our requests to the runner), told apart by their first bytes as libmtmd tells them apart."""

from __future__ import annotations

from .audio import FORMATS, AudioClip, AudioError, check_audio, container_of, is_audio
from .images import DecodedImage, ImageError, decode_image, image_bytes


def decode_base64_media(data: str, what: str = "image") -> DecodedImage | AudioClip:
    """A base64 attachment (Ollama's ``images`` carry audio too) as checked audio or decoded image pixels."""
    raw = image_bytes(data, what)
    return check_audio(raw, what) if is_audio(raw) else decode_image(raw, what)


def input_audio_data(part: object, what: str = "input_audio") -> str:
    """The base64 data of OpenAI's ``input_audio`` object (``{"data": base64, "format": "wav"|"mp3"}``, FLAC
    too), checked to be the container its ``format`` names: a "wav" that is not WAV is refused here."""
    if not isinstance(part, dict):
        raise AudioError(f"{what} must be an object with 'data' (base64) and 'format' (wav, mp3 or flac)")
    data, fmt = part.get("data"), part.get("format")
    if fmt not in FORMATS:
        raise AudioError(f"{what}.format {fmt!r} is not supported: use wav, mp3 or flac")
    if not isinstance(data, str) or not data:
        raise AudioError(f"{what}.data is empty; send the audio file's bytes as base64")
    try:
        raw = image_bytes(data, f"{what}.data")
    except ImageError as exc:  # not base64: the same words as for an image
        raise AudioError(str(exc)) from None
    if container_of(raw) != fmt:
        found = container_of(raw)
        raise AudioError(f"{what}.data is not {FORMATS[fmt]} audio as its format says"
                         + (f" (it is {FORMATS[found]})" if found else ""))
    return data


MediaError = (AudioError, ImageError)  # what decode_base64_media raises for a bad attachment
