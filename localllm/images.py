"""Images as clients send them (base64 PNG, JPEG, WebP or GIF) turned into RGB pixels.

Decoding is Pillow's; this module adds the checks a server needs before it
touches a stranger's file: a size limit on the encoded bytes, a pixel limit
read from the header *before* decoding (a 20,000 x 20,000 PNG is a few
kilobytes that would decode to over a gigabyte), and one error type whose
message names the problem. The daemon decodes once to refuse bad images
before a model loads; the runner decodes the same bytes for libmtmd.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

MARKER = "<__media__>"  # where an image stands in a prompt (libmtmd's default media marker)
MAX_PIXELS = 50_000_000  # a 7000 x 7000 photo passes; a decompression bomb does not
MAX_BYTES = 32 << 20  # of an encoded image
FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
MEDIA_TYPES = {"image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif"}


class ImageError(ValueError):
    """An image that cannot be used; the message names the problem."""


@dataclass(frozen=True)
class DecodedImage:
    """An image's RGB pixels, row by row, and the digest that names its content."""

    width: int
    height: int
    rgb: bytes  # width * height * 3 bytes
    digest: str  # sha256 of the pixels and their shape: equal pictures share KV, different ones never

    @property
    def pixels(self) -> int:
        return self.width * self.height


def image_bytes(data: str, what: str = "image") -> bytes:
    """The bytes of a base64 image (a bare base64 string, as Ollama's ``images`` carries them)."""
    if not isinstance(data, str) or not data:
        raise ImageError(f"{what} is empty")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError(f"{what} is not valid base64") from None
    if not raw:
        raise ImageError(f"{what} is empty (zero bytes)")
    return raw


def decode_image(raw: bytes, what: str = "image") -> DecodedImage:
    """``raw`` (PNG, JPEG, WebP or GIF: its first frame) as RGB pixels, or an :class:`ImageError`."""
    if not raw:
        raise ImageError(f"{what} is empty (zero bytes)")
    if len(raw) > MAX_BYTES:
        raise ImageError(f"{what} is {len(raw)} bytes, more than the limit of {MAX_BYTES}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw), formats=FORMATS) as img:
                width, height = img.size
                if width * height > MAX_PIXELS:
                    raise ImageError(f"{what} is {width}x{height} pixels, more than the limit of {MAX_PIXELS} "
                                     "pixels (a decompression bomb?)")
                img.seek(0)  # a GIF's (or animated WebP's) first frame
                rgb = img.convert("RGB")
                pixels = rgb.tobytes()
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:  # Pillow's own limit, at open
        raise ImageError(f"{what} has more pixels than the limit of {MAX_PIXELS} (a decompression bomb?): "
                         f"{exc}") from None
    except UnidentifiedImageError:
        raise ImageError(f"{what} is not a PNG, JPEG, WebP or GIF image") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:  # truncated or corrupt data
        raise ImageError(f"{what} is corrupt or truncated: {exc}") from None
    digest = hashlib.sha256(f"{width}x{height}:".encode() + pixels).hexdigest()
    return DecodedImage(width, height, pixels, digest)


def decode_base64_image(data: str, what: str = "image") -> DecodedImage:
    """A base64 image's pixels (both steps' checks)."""
    return decode_image(image_bytes(data, what), what)


def data_url_image(url: str, what: str = "image_url") -> str:
    """The base64 data of an image ``data:`` URL, checked for an image media type.

    Remote ``http(s)`` URLs are refused: the daemon fetches nothing from the
    network on a client's behalf (send the image inline as a data URL).
    """
    if not isinstance(url, str) or not url:
        raise ImageError(f"{what} is empty; send the image as a data:image/...;base64 URL")
    if url.startswith(("http://", "https://")):
        raise ImageError(f"{what}: remote image URLs are not fetched; send the image as a data:image/...;base64 URL")
    head, comma, data = url.partition(",")
    if not (head.startswith("data:") and comma):
        raise ImageError(f"{what}: only data:image/...;base64 URLs are supported")
    media_type, _, encoding = head[len("data:"):].partition(";")
    if media_type.lower() not in MEDIA_TYPES:
        raise ImageError(f"{what}: media type {media_type or '(none)'!r} is not an image type this server reads "
                         f"({', '.join(sorted(MEDIA_TYPES))})")
    if encoding != "base64":
        raise ImageError(f"{what}: the data URL must be base64 encoded (data:{media_type};base64,...)")
    return data
