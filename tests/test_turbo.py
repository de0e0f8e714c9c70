"""JPEGs decoded by libjpeg-turbo's own API (facerun/face/turbo.py, through simplejpeg): Pillow's pixels to the byte
on every EXIF orientation, subsampling, grey and progressive file, every draft scale; the files it is unsure of left
to Pillow, with Pillow's answer or error. The shared photos are held to the same in tests/test_load_photo.py."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from PIL import Image

from facerun.errors import ImageError
from facerun.face import images, jpeg_header, turbo
from facerun.face.yunet import shrunk_size

pytest.importorskip("simplejpeg", reason="simplejpeg is not installed (pip install 'facerun[jpeg]')")


def _fit(side):
    return lambda width, height: shrunk_size(width, height, side)


def _photo(width=900, height=600, seed=0) -> np.ndarray:
    """Smooth shapes with edges and noise: enough detail for the DCT's rounding and the upsampling to show."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 255 // width), (y * 255 // height), ((x // 37 + y // 23) % 2) * 200], axis=2)
    rgb = rgb + rng.integers(-20, 21, rgb.shape)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def _save(path, rgb, orientation=None, **options):
    kwargs = {"quality": 90, **options}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    Image.fromarray(rgb).save(path, "JPEG", **kwargs)
    return path


def _both(monkeypatch, load, must_take: bool = True):
    """load() with Pillow decoding, then with turbo: (Pillow's result, turbo's, the scales turbo.decode ran at),
    which must not be empty where must_take."""
    calls = []
    real = getattr(turbo.decode, "real", turbo.decode)  # the spy of an earlier call is replaced, not wrapped

    def counted(*args, **kwargs):
        calls.append(args[3] if len(args) > 3 else kwargs.get("scale", 1))
        return real(*args, **kwargs)

    counted.real = real
    monkeypatch.setattr(turbo, "decode", counted)
    monkeypatch.setenv("FACERUN_JPEG", "pillow")
    want = load()
    assert calls == []
    monkeypatch.setenv("FACERUN_JPEG", "")
    got = load()
    assert calls or not must_take, "the turbo path was not taken"
    return want, got, calls


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape and b.flags.c_contiguous
        assert np.array_equal(a[..., :3], b[..., :3])
    else:
        assert a == b


@pytest.mark.parametrize("orientation", [None, 1, 2, 3, 4, 5, 6, 7, 8])
def test_every_orientation_gives_pillows_pixels(tmp_path, monkeypatch, orientation):
    path = _save(tmp_path / "photo.jpg", _photo(), orientation)
    for load in (lambda: images.load_image(path), lambda: images.load_photo(path, _fit(400)),
                 lambda: images.load_photo_shrunk(path, _fit(400)), lambda: images.load_photo_shrunk(path, _fit(200))):
        want, got, _ = _both(monkeypatch, load)
        _same(want, got)
    if orientation in (5, 6, 7, 8):
        assert images.load_image(path).shape[:2] == (900, 600)


@pytest.mark.parametrize("options", [{"subsampling": 0}, {"subsampling": 1}, {"subsampling": 2},
                                     {"progressive": True}, {"quality": 40, "optimize": True}])
def test_every_subsampling_and_progressive_files_give_pillows_pixels(tmp_path, monkeypatch, options):
    path = _save(tmp_path / "photo.jpg", _photo(1001, 667, seed=1), **options)  # odd sizes: partial blocks
    want, got, _ = _both(monkeypatch, lambda: images.load_photo(path, _fit(500)))
    _same(want, got)


def test_grey_jpegs_give_pillows_pixels(tmp_path, monkeypatch):
    path = tmp_path / "grey.jpg"
    Image.fromarray(_photo()[:, :, 0]).save(path, quality=90)
    want, got, _ = _both(monkeypatch, lambda: images.load_photo(path, _fit(500)))
    _same(want, got)
    assert np.array_equal(got[0][:, :, 0], got[0][:, :, 2])


@pytest.mark.parametrize("side,scale", [(1600, 1), (1280, 2), (1000, 2), (700, 4), (300, 8), (100, 8)])
def test_drafts_take_pillows_scale_and_pixels(tmp_path, monkeypatch, side, scale):
    """A 3001x2401 photo fitted to each side: the same DCT scaling as Pillow's draft (1/2 only where the photo is
    at least twice the fitted size), the same pixels after the shrink; turned photos too."""
    rgb = _photo(3001, 2401, seed=2)
    for orientation in (1, 6):
        path = _save(tmp_path / f"big{orientation}.jpg", rgb, orientation)
        want, got, calls = _both(monkeypatch, lambda p=path: images.load_photo_shrunk(p, _fit(side)))
        _same(want, got)
        assert calls == [scale]


def test_every_shared_photo_gives_pillows_pixels(monkeypatch):
    """The 206 shared photos, as a detect-only library run decodes them (fitted to 1280, large ones drafted) and as
    one that aligns (full size, and shrunk to 640): the same bytes from either decoder, and turbo's path taken for
    every JPEG it can read (all but one, whose subsampling simplejpeg's header reader refuses)."""
    from people_fixtures import DATA, FACES, need_real_data

    need_real_data()
    paths = images.iter_images([FACES, DATA / "wider" / "images"])
    assert len(paths) > 150
    taken = 0
    for path in paths:
        want, got, calls = _both(monkeypatch, lambda p=path: (images.load_photo_shrunk(p, _fit(1280)),
                                                             images.load_photo(p, _fit(640))), must_take=False)
        _same(want, got)
        taken += bool(calls)
    jpegs = sum(p.suffix.lower() in (".jpg", ".jpeg") for p in paths)
    assert taken >= jpegs - 2


def test_files_it_is_unsure_of_are_left_to_pillow(tmp_path, monkeypatch):
    """CMYK, a PNG, an EXIF block it cannot parse: Pillow decodes them (turbo.decode never runs or gives None),
    and the pixels are Pillow's."""
    cmyk = tmp_path / "cmyk.jpg"
    Image.fromarray(_photo()).convert("CMYK").save(cmyk, quality=90)
    png = tmp_path / "photo.jpg"  # a PNG named .jpg
    Image.fromarray(_photo()).save(png, "PNG")
    broken = tmp_path / "broken-exif.jpg"
    data = bytearray(_save(tmp_path / "tmp.jpg", _photo(), 6).read_bytes())
    at = data.index(b"Exif\x00\x00") + 6
    data[at:at + 2] = b"XX"  # no byte order
    broken.write_bytes(bytes(data))
    assert jpeg_header.orientation(bytes(data)) is None
    for path in (cmyk, png, broken):
        assert images._turbo(path) is None
        monkeypatch.setenv("FACERUN_JPEG", "pillow")
        want = images.load_photo(path, _fit(300))
        monkeypatch.setenv("FACERUN_JPEG", "")
        _same(want, images.load_photo(path, _fit(300)))


def test_broken_and_oversized_jpegs_give_pillows_errors(tmp_path, monkeypatch):
    whole = _save(tmp_path / "whole.jpg", _photo()).read_bytes()
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(whole[:3000])
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"\xff\xd8\xff" + b"\x00" * 500)
    big = _save(tmp_path / "big.jpg", _photo(1200, 1000))
    for path, env in ((truncated, {}), (junk, {}), (big, {"FACERUN_MAX_PIXELS": "1000000"})):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        messages = []
        for decoder in ("pillow", ""):
            monkeypatch.setenv("FACERUN_JPEG", decoder)
            for load in (images.load_image, lambda p: images.load_photo(p, _fit(640)),
                         lambda p: images.load_photo_shrunk(p, _fit(640))):
                with pytest.raises(ImageError) as error:
                    load(path)
                messages.append(str(error.value))
        assert len(set(messages)) == 1 and "\n" not in messages[0], messages
        for name in env:
            monkeypatch.delenv(name)


def test_the_exif_reader_finds_the_orientation_in_either_byte_order(tmp_path):
    """Hand-made EXIF blocks, little- and big-endian, the orientation after another tag: the reader finds what
    Pillow finds, and the photo decodes upright either way."""
    for order, mark in (("<", b"II"), (">", b"MM")):
        ifd = struct.pack(order + "H", 2) + struct.pack(order + "HHI", 0x010F, 2, 4) + b"Cam\x00"
        ifd += struct.pack(order + "HHIH", 0x0112, 3, 1, 8) + b"\x00\x00" + b"\x00" * 4  # no next IFD
        tiff = mark + struct.pack(order + "HI", 42, 8) + ifd
        path = tmp_path / f"turned-{mark.decode()}.jpg"
        Image.fromarray(_photo(300, 200)).save(path, quality=90, exif=b"Exif\x00\x00" + tiff)
        assert jpeg_header.orientation(path.read_bytes()) == 8
        with Image.open(path) as image:
            assert image.getexif().get(0x0112) == 8
        pixels, size = images._turbo(path)
        assert size == (200, 300) and pixels.shape == (300, 200, 4)
    assert jpeg_header.orientation(b"\xff\xd8\xff\xda\x00\x02") == 1  # no EXIF at all
    assert jpeg_header.orientation(b"\xff\xd8\xff\xe1\x00\x40Exif") is None  # a block longer than the file


def test_pillow_only_when_asked(tmp_path, monkeypatch):
    path = _save(tmp_path / "photo.jpg", _photo())
    monkeypatch.setenv("FACERUN_JPEG", "pillow")
    assert not turbo.available() and images._turbo(path) is None
    monkeypatch.setenv("FACERUN_JPEG", "")
    assert turbo.available() and images._turbo(path) is not None


def test_without_simplejpeg_pillow_decodes(tmp_path, monkeypatch):
    path = _save(tmp_path / "photo.jpg", _photo())
    want = images.load_photo(path, _fit(400))
    monkeypatch.setattr(turbo, "_simplejpeg", lambda: None)  # as where the jpeg extra is not installed
    assert not turbo.available() and images._turbo(path) is None
    _same(want, images.load_photo(path, _fit(400)))


def test_an_xmp_orientation_turns_the_photo_as_pillow_does(tmp_path, monkeypatch):
    """No EXIF block, tiff:Orientation 6 in the XMP packet: Pillow's exif_transpose turns the photo, so must this."""
    xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
           b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="6"/></rdf:RDF></x:xmpmeta>')
    path = _save(tmp_path / "xmp.jpg", _photo(300, 200), xmp=xmp)
    assert jpeg_header.orientation(path.read_bytes()) == 6
    want, got, _ = _both(monkeypatch, lambda: images.load_photo(path, _fit(400)))
    _same(want, got)
    assert got[0].shape[:2] == (300, 200)
