"""A JPEG's size and orientation read from its markers (facerun/face/jpeg_header.py): what Pillow's open and getexif
give, on every orientation, EXIF in either place Pillow looks (the EXIF block, else the XMP packet), markers that run
past the first read, and the shared photos; files it is unsure of go to Pillow."""

from __future__ import annotations

import numpy as np
import pytest
from people_fixtures import DATA, FACES, need_real_data
from PIL import Image

from facerun.face import images, jpeg_header


def _pillows(path):
    """Pillow's answer: the upright (width, height), None where it cannot open the file."""
    try:
        with Image.open(path) as image:
            width, height = image.size
            turned = image.getexif().get(images.ORIENTATION, 1) in (5, 6, 7, 8)
    except Exception:
        return None
    return (height, width) if turned else (width, height)


def _photo(width=90, height=60):
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


def _save(path, orientation=None, **options):
    if orientation is not None:
        exif = Image.Exif()
        exif[images.ORIENTATION] = orientation
        options["exif"] = exif.tobytes()
    Image.fromarray(_photo()).save(path, "JPEG", quality=85, **options)
    return path


def _xmp(orientation):
    return (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
            b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="%d"/></rdf:RDF>'
            b"</x:xmpmeta>" % orientation)


@pytest.mark.parametrize("orientation", [None, 1, 2, 3, 4, 5, 6, 7, 8])
def test_every_orientation_reads_as_pillow_does(tmp_path, orientation):
    path = _save(tmp_path / "photo.jpg", orientation)
    head = jpeg_header.read(path.read_bytes())
    assert head == (90, 60, orientation or 1)
    assert images.upright_size(path) == _pillows(path) == ((60, 90) if orientation in (5, 6, 7, 8) else (90, 60))


def test_an_xmp_orientation_counts_where_the_exif_block_has_none(tmp_path):
    """Pillow's getexif takes tiff:Orientation from the XMP packet when the EXIF block lacks the tag (or there is no
    block); the EXIF tag wins where both are there."""
    xmp_only = _save(tmp_path / "xmp.jpg", xmp=_xmp(6))
    exif_without_tag = tmp_path / "exif-no-tag.jpg"
    exif = Image.Exif()
    exif[0x010F] = "Cam"
    Image.fromarray(_photo()).save(exif_without_tag, "JPEG", exif=exif.tobytes(), xmp=_xmp(8))
    both = _save(tmp_path / "both.jpg", 1, xmp=_xmp(6))
    for path, orientation in ((xmp_only, 6), (exif_without_tag, 8), (both, 1)):
        assert jpeg_header.read(path.read_bytes()).orientation == orientation
        assert images.upright_size(path) == _pillows(path)
    assert images.upright_size(xmp_only) == (60, 90)


def test_markers_past_the_first_read_are_read_on(tmp_path):
    """An ICC profile of 40 kB before the frame: the first bytes end before the scan, the reader reads on."""
    path = _save(tmp_path / "icc.jpg", 6, icc_profile=bytes(range(256)) * 160)
    data = path.read_bytes()
    with pytest.raises(jpeg_header.Short):
        jpeg_header.read(data[:images.HEADER_BYTES])
    assert images._jpeg_head(path) == (90, 60, 6)
    assert images.upright_size(path) == _pillows(path) == (60, 90)


def test_files_it_is_unsure_of_go_to_pillow(tmp_path):
    png = tmp_path / "photo.jpg"  # a PNG named .jpg
    Image.fromarray(_photo()).save(png, "PNG")
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"\xff\xd8\xff" + b"\x00" * 500)
    whole = _save(tmp_path / "whole.jpg", 6).read_bytes()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(whole[:whole.index(b"\xff\xc0")])  # ends before the frame
    for path in (png, junk, cut, tmp_path / "missing.jpg"):
        assert images._jpeg_head(path) is None
        assert images.upright_size(path) == _pillows(path)
    assert images.upright_size(png) == (90, 60)
    assert jpeg_header.read(b"\xff\xd8\xff\xe1\x00\x01") is None  # a length shorter than itself
    assert jpeg_header.orientation(b"\xff\xd8\xff\xe1\x00\x40Exif") is None  # a block longer than the file


def test_the_shared_photos_read_as_pillow_reads_them():
    need_real_data()
    paths = images.iter_images([FACES, DATA / "wider" / "images"])
    jpegs = [p for p in paths if p.suffix.lower() in (".jpg", ".jpeg")]
    assert len(jpegs) > 150
    assert [images.upright_size(p) for p in paths] == [_pillows(p) for p in paths]
    assert sum(images._jpeg_head(p) is not None for p in jpegs) >= len(jpegs) - 2
