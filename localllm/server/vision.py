"""Images in a request, checked before a model loads: a model without a projector refuses them, and
each image must decode (Pillow, with the pixel limit of :mod:`localllm.images`).

The runner decodes the same bytes again for libmtmd; checking here names the
request's own field in the 400 and spares a model load for a request that
cannot run.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..images import ImageError, decode_base64_image
from ..registry.models import LocalModel
from .errors import bad_request


def check_images(model: LocalModel, images: Iterable[tuple[str, str]]) -> None:
    """``images``: (field, base64 data) pairs. A 400 when the model cannot see or an image is unusable."""
    images = list(images)
    if not images:
        return
    if not model.vision:
        raise bad_request(f"{model.name.display!r} does not support images")
    for field, data in images:
        try:
            decode_base64_image(data, field)
        except ImageError as exc:
            raise bad_request(str(exc)) from None
