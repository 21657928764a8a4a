"""Image files for the vision tests, made with Pillow in memory."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image

COLOURS = {"red": (230, 20, 20), "green": (20, 200, 20), "blue": (20, 20, 230), "white": (250, 250, 250),
           "black": (5, 5, 5)}


def picture(colour: str, fmt: str = "PNG", size: tuple[int, int] = (48, 40)) -> bytes:
    """A picture of one colour (COLOURS) in ``fmt`` (PNG, JPEG, WEBP, GIF)."""
    out = io.BytesIO()
    Image.new("RGB", size, COLOURS[colour]).save(out, format=fmt)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{b64(data)}"


def bomb_png(width: int = 20000, height: int = 20000) -> bytes:
    """A real PNG of ``width`` x ``height`` black pixels (1 bit each): a few hundred kilobytes that
    would decode to over a gigabyte of RGB. Written row by row through zlib, never held whole."""
    row = b"\x00" + b"\x00" * ((width + 7) // 8)  # filter byte, then the packed bits
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit greyscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
