"""Embedding vectors as the APIs return them: shortened to ``dimensions``, encoded."""

from __future__ import annotations

import base64
import math
import struct

from .errors import bad_request


def shorten(vector: list[float], dimensions: int | None) -> list[float]:
    """Keep the first ``dimensions`` values and L2-normalise again (Matryoshka-style)."""
    if dimensions is None or dimensions >= len(vector):
        if dimensions is not None and dimensions > len(vector):
            raise bad_request(f"dimensions {dimensions} is larger than the model's {len(vector)}")
        return vector
    head = vector[:dimensions]
    norm = math.sqrt(sum(v * v for v in head)) or 1.0
    return [v / norm for v in head]


def encode_base64(vector: list[float]) -> str:
    """OpenAI's ``encoding_format: base64``: little-endian float32 bytes."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
