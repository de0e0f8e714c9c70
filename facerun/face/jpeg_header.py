"""A JPEG's stored size and EXIF orientation, read from its markers alone: no decoder, no Pillow image.

A library run reading ahead (FACERUN_PHOTO_LOOKAHEAD) reads every photo's header before its decode, to group photos
of one network size; Pillow's open and EXIF parse cost several times what walking the few markers before the scan
does. The orientation is the one Pillow's `getexif` gives: the first EXIF block's tag, else an XMP packet's
`tiff:Orientation`; where the markers or a block are not what this reader understands, it says so (None) and the
caller asks Pillow.
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

ORIENTATION = 0x0112  # the EXIF tag
EXIF = b"Exif\x00\x00"
XMP = b"http://ns.adobe.com/xap/1.0/\x00"
# start-of-frame markers (baseline, progressive, lossless, arithmetic): not DHT (C4), JPG (C8) or DAC (CC)
FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
NO_TAG = -1  # an EXIF block without the orientation tag
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')


class Header(NamedTuple):
    width: int  # as stored, before the orientation is applied
    height: int
    orientation: int  # 1 to 8; 1 where the file has none


class Short(Exception):
    """The bytes end before the scan: read more of the file."""


def read(data: bytes) -> Header | None:
    """The stored size and orientation of a JPEG starting at `data`, or None where this reader is unsure (the
    caller asks Pillow). Raises Short where `data` ends before the scan starts."""
    found = _walk(data)
    if found is None or found[0] is None:
        return None
    (width, height), orientation = found
    return Header(width, height, orientation)


def orientation(data: bytes) -> int | None:
    """The orientation Pillow reads from a whole JPEG file's markers (1 where none), or None where unsure."""
    try:
        found = _walk(data)
    except Short:
        return None
    return None if found is None else found[1]


def _walk(data: bytes):
    """((width, height) or None, orientation) from the markers before the scan, or None where unsure."""
    if data[:3] != b"\xff\xd8\xff":
        return None
    at, end = 2, len(data)
    size = exif = None
    xmp = b""
    while True:
        if at + 4 > end:
            raise Short
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
            continue
        if marker in (0xDA, 0xD9):  # the scan (or the end): every header marker is behind us
            break
        (length,) = struct.unpack_from(">H", data, at + 2)
        if length < 2:
            return None
        if at + 2 + length > end:
            raise Short
        body = data[at + 4:at + 2 + length]
        if marker == 0xE1 and exif is None and body.startswith(EXIF):  # Pillow reads the first EXIF block
            exif = _tiff_orientation(body[len(EXIF):])
            if exif is None:
                return None
        elif marker == 0xE1 and body.startswith(XMP):  # Pillow keeps the last XMP packet
            xmp = body[len(XMP):]
        elif marker in FRAMES and size is None:
            if len(body) < 5:
                return None
            height, width = struct.unpack_from(">HH", body, 1)
            if not height or not width:  # height given later (DNL): leave it to Pillow
                return None
            size = (width, height)
        at += 2 + length
    if exif is None or exif == NO_TAG:  # no EXIF block, or one without the tag: Pillow looks in the XMP packet
        match = _XMP_ORIENTATION.search(xmp) if xmp else None
        exif = int(match[2]) if match else 1
    return size, exif


def _tiff_orientation(tiff: bytes) -> int | None:
    """The orientation tag of an EXIF block's first directory, NO_TAG where it has none, None where unsure."""
    if len(tiff) < 8:
        return None
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None or struct.unpack_from(order + "H", tiff, 2)[0] != 42:
        return None
    (ifd,) = struct.unpack_from(order + "I", tiff, 4)
    if ifd + 2 > len(tiff):
        return None
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    if ifd + 2 + 12 * count > len(tiff):
        return None
    for i in range(count):
        tag, kind, n = struct.unpack_from(order + "HHI", tiff, ifd + 2 + 12 * i)
        if tag == ORIENTATION:
            if kind != 3 or n != 1:  # not one SHORT: leave its reading to Pillow
                return None
            return struct.unpack_from(order + "H", tiff, ifd + 2 + 12 * i + 8)[0]
    return NO_TAG
