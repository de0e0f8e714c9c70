"""Photos as cameras, phones and old software leave them, made from a shared photo with Pillow: truncated, CMYK,
16-bit, palette with alpha, animated GIF/WebP (the first frame), HEIC (refused with the reason), AVIF, EXIF blocks
that lie, a photo at the pixel limit and one past it. `index` stores what it can read, names the rest in one line
each, and prints nothing else on stderr."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from click.testing import CliRunner
from people_fixtures import FACES, MOBILEFACENET, YUNET, need_real_data
from PIL import Image, features

from facerun.cli import main

SOURCE = "clapton/clapton-2.jpg"  # 400x400, one face


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _exif_that_lies(photo: Image.Image) -> bytes:
    """A JPEG whose EXIF block says its orientation value lies past the end of the block."""
    buf = io.BytesIO()
    photo.save(buf, "JPEG", quality=92)
    data = buf.getvalue()
    tiff = b"MM\x00\x2a\x00\x00\x00\x08" + b"\x00\x05" + b"\x01\x12\x00\x03\xff\xff\xff\xff\x00\x06\x00\x00"
    app1 = b"Exif\x00\x00" + tiff + b"\xde\xad" * 10
    return data[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + data[2:]


@pytest.fixture(scope="module")
def odd_photos(tmp_path_factory):
    need_real_data()
    folder = tmp_path_factory.mktemp("odd-photos")
    src = Image.open(FACES / SOURCE)
    src.load()
    data = (FACES / SOURCE).read_bytes()
    (folder / "truncated.jpg").write_bytes(data[: len(data) // 2])
    src.convert("CMYK").save(folder / "cmyk.jpg", quality=92)
    Image.fromarray(np.asarray(src.convert("L")).astype(np.uint16) * 257).save(folder / "gray16.png")
    src.convert("RGBA").quantize(128).save(folder / "palette-alpha.png", transparency=0)
    mirrored = src.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    src.save(folder / "animated.gif", save_all=True, append_images=[mirrored], duration=100, loop=0)
    src.save(folder / "animated.webp", save_all=True, append_images=[mirrored], duration=100)
    (folder / "lying-exif.jpg").write_bytes(_exif_that_lies(src))
    exif = Image.Exif()
    exif[0x0112] = 9  # no such orientation
    src.save(folder / "orientation-9.jpg", exif=exif.tobytes())
    exif[0x0112] = 6  # stored turned a quarter: upright it is 300 wide, 400 high
    src.crop((0, 0, 400, 300)).save(folder / "turned.jpg", exif=exif.tobytes())
    (folder / "phone.heic").write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(200))
    src.resize((401, 400)).save(folder / "past-the-limit.png")
    if features.check("avif"):
        src.save(folder / "photo.avif")
    return folder


def test_index_stores_the_readable_and_names_the_rest(tmp_path, odd_photos):
    db = tmp_path / "faces.db"
    r = run("--max-pixels", 160000, "index", odd_photos, "--db", db, "--model", MOBILEFACENET, "--detector", YUNET,
            "--device", "cpu", "--json")
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    failed = {item["image"].rsplit("/", 1)[1]: item["error"] for item in report["failed"]}
    assert sorted(failed) == ["past-the-limit.png", "phone.heic", "truncated.jpg"]
    assert "truncated" in failed["truncated.jpg"]
    assert "HEIC/HEIF photo" in failed["phone.heic"] and "convert it to JPEG" in failed["phone.heic"]
    assert "past the limit of 0.16" in failed["past-the-limit.png"]  # 400x400 = the limit itself is read
    # stderr: one line per unreadable photo and nothing else (no Pillow warnings about the lying EXIF)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines), r.stderr
    assert "internal error" not in r.output
    readable = 11 - 3 + (1 if features.check("avif") else 0)
    assert report["added"] == readable and report["faces"] == readable  # one face each


def test_every_odd_photo_gives_the_face_of_the_plain_one(odd_photos):
    """The first frame of an animation (not the mirrored second), the EXIF that lies ignored where it lies and
    applied where it is right. Mirrored, the box would start near x = 66, not 184; grey moves it by 8 at most."""
    plain = run("detect", FACES / SOURCE, "--device", "cpu", "--json")
    assert plain.exit_code == 0, plain.output
    x, y, w, h = json.loads(plain.stdout)[0]["faces"][0]["box"]
    names = ["cmyk.jpg", "gray16.png", "palette-alpha.png", "animated.gif", "animated.webp", "lying-exif.jpg",
             "orientation-9.jpg"]
    r = run("detect", *(odd_photos / n for n in names), "--device", "cpu", "--json")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    for item in json.loads(r.stdout):
        assert (item["width"], item["height"]) == (400, 400) and len(item["faces"]) == 1, item
        bx, by, bw, bh = item["faces"][0]["box"]
        assert abs(bx - x) < 15 and abs(by - y) < 15 and abs(bw - w) < 15, (item["image"], item["faces"][0]["box"])
    turned = run("detect", odd_photos / "turned.jpg", "--device", "cpu", "--json")
    assert turned.exit_code == 0 and (json.loads(turned.stdout)[0]["width"], json.loads(turned.stdout)[0]["height"]
                                      ) == (300, 400)


def test_heic_named_alone_is_refused_with_the_reason(odd_photos):
    for command in ("detect", "embed"):
        r = run(command, odd_photos / "phone.heic", "--device", "cpu")
        assert r.exit_code == 1
        lines = r.stderr.strip().splitlines()
        assert any("a HEIC/HEIF photo, which facerun does not decode" in line for line in lines), r.stderr
        assert "internal error" not in r.output
