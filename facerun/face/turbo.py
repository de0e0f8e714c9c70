"""JPEGs decoded by libjpeg-turbo's own API (the optional `simplejpeg` package), straight into the four-byte layout
(R, G, B and an unused byte) that images.load_photo gives, with the GIL released for the whole decode.

Pillow decodes JPEGs with the same libjpeg-turbo settings (accurate integer DCT, fancy upsampling, DCT scaling of
1/2, 1/4 or 1/8 for a draft), so the pixels are Pillow's to the byte; tests/test_turbo.py holds them to that on every
orientation, on grey and progressive files, on drafts and on the shared photos. What Pillow adds on top, this does
in fewer steps: no Python loop over the file's blocks, no decode into Pillow's own image and copy out of it.

Anything this path is not sure of gives None and the caller decodes with Pillow as before, which also gives the
error for a broken file: not a JPEG, a header simplejpeg cannot read (CMYK, unusual subsampling), an EXIF block it
cannot parse, or a decode that fails. FACERUN_JPEG=pillow turns it off.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .. import settings
from . import jpeg_header

# the stored colour spaces whose conversion to RGB is libjpeg's own in both: CMYK and YCCK files Pillow turns into RGB
# with its own formula, so they stay Pillow's
DECODED_AS_PILLOW = frozenset({"YCbCr", "Gray", "RGB"})


def available() -> bool:
    """Whether this path is used: simplejpeg importable and FACERUN_JPEG not 'pillow'."""
    return _decoder() is not None


def _decoder():
    if settings.get("FACERUN_JPEG") == "pillow":
        return None
    return _simplejpeg()


@cache  # looked for once: a failed import searches the whole path again each time, on every photo
def _simplejpeg():
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def header(data: bytes) -> tuple[int, int, int] | None:
    """(width, height, EXIF orientation) of a JPEG as stored, or None where this path leaves the file to Pillow."""
    decoder = _decoder()
    if decoder is None or data[:3] != b"\xff\xd8\xff":
        return None
    orientation = jpeg_header.orientation(data)
    if orientation is None:
        return None
    try:
        height, width, colorspace, _ = decoder.decode_jpeg_header(data)
    except ValueError:
        return None
    if colorspace not in DECODED_AS_PILLOW:
        return None
    return int(width), int(height), orientation


def decode(data: bytes, width: int, height: int, scale: int = 1, channels: int = 4) -> np.ndarray | None:
    """The stored pixels as h x w x 4 uint8 (R, G, B, unused; channels=3: R, G, B), scaled by 1/scale (1, 2, 4 or
    8: the sizes Pillow's draft gives, ceil(width / scale) x ceil(height / scale)); None on any failure."""
    decoder = _decoder()
    if decoder is None:
        return None
    want_w, want_h = -(-width // scale), -(-height // scale)
    try:
        # simplejpeg picks the smallest of libjpeg's N/8 scalings that is at least this size: exactly 1/scale
        pixels = decoder.decode_jpeg(data, "RGBX" if channels == 4 else "RGB", min_height=want_h, min_width=want_w,
                                     min_factor=float(scale))
    except (ValueError, MemoryError):
        return None
    if pixels.shape != (want_h, want_w, channels):
        return None
    return pixels


# Pillow's ImageOps.exif_transpose, as array views: 2 mirrored, 3 turned half round, 4 flipped, 5 transposed,
# 6 turned a quarter clockwise, 7 transversed, 8 turned a quarter counter-clockwise
_UPRIGHT = {
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.transpose(1, 0, 2),
    6: lambda a: a.transpose(1, 0, 2)[:, ::-1],
    7: lambda a: a.transpose(1, 0, 2)[::-1, ::-1],
    8: lambda a: a.transpose(1, 0, 2)[::-1],
}


def upright(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """The pixels as a viewer shows them (a contiguous copy where the orientation turns or mirrors them)."""
    turn = _UPRIGHT.get(orientation)
    return pixels if turn is None else np.ascontiguousarray(turn(pixels))


def turned(orientation: int) -> bool:
    """Whether the orientation swaps width and height."""
    return orientation in (5, 6, 7, 8)
