"""Images and audio in a request, checked before a model loads: a model without a projector that sees
(or hears) refuses them, and each image must decode (Pillow, with the pixel limit of
:mod:`localllm.images`) and each audio clip's header must hold (:mod:`localllm.audio`).

Audio travels in the same lists as images (Ollama's ``images`` field carries both; the dialects put
OpenAI's ``input_audio`` parts there too) and is told apart by its first bytes, as libmtmd does.
The runner decodes the same bytes again for libmtmd; checking here names the request's own field in
the 400 and spares a model load for a request that cannot run.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..audio import AudioClip
from ..media import MediaError, decode_base64_media
from ..registry.models import LocalModel
from .errors import bad_request


def check_images(model: LocalModel, images: Iterable[tuple[str, str]]) -> None:
    """``images``: (field, base64 data) pairs, images or audio. A 400 when the model cannot see (or hear)
    what it is sent, or an image or clip is unusable."""
    for field, data in images:
        try:
            medium = decode_base64_media(data, field)
        except MediaError as exc:
            raise bad_request(str(exc)) from None
        if isinstance(medium, AudioClip) and not model.audio:
            raise bad_request(f"{model.name.display!r} does not support audio ({field} is {medium.container.upper()} "
                              "audio); use a model whose projector hears (capability 'audio' in /api/show)")
        if not isinstance(medium, AudioClip) and not model.vision:
            raise bad_request(f"{model.name.display!r} does not support images")
