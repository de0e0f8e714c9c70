"""Image loading: formats, EXIF orientation, grayscale / palette / alpha / 16-bit, errors, and folder walking.

OpenCV's imread is the oracle where it applies (it also drops alpha and keeps the high byte of 16-bit pixels).
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from facerun.errors import ImageError
from facerun.face.images import iter_images, load_image

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def photo(data_dir):
    return data_dir / "faces" / "group" / "fr_two_people.jpg"


@pytest.fixture(scope="module")
def photo_rgb(photo):
    return load_image(photo)


def test_jpeg_matches_opencv_in_rgb_order(photo):
    rgb = load_image(photo)
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3 and rgb.flags.c_contiguous
    bgr = cv2.imread(str(photo), cv2.IMREAD_COLOR)
    assert rgb.shape == bgr.shape
    # both decoders are libjpeg based; a swapped channel order would differ by tens of levels on this photo
    diff = np.abs(rgb.astype(int) - bgr[:, :, ::-1].astype(int))
    assert diff.mean() < 1.0, diff.mean()
    swapped = np.abs(rgb.astype(int) - bgr.astype(int)).mean()
    assert swapped > 5 * max(diff.mean(), 0.1)


@pytest.mark.parametrize("orientation, stored_from_view", [
    (3, Image.Transpose.ROTATE_180),
    (6, Image.Transpose.ROTATE_90),   # stored turned 90 degrees counter-clockwise; the viewer turns it back
    (8, Image.Transpose.ROTATE_270),
    (2, Image.Transpose.FLIP_LEFT_RIGHT),
])
def test_exif_orientation_is_applied(tmp_path, photo_rgb, orientation, stored_from_view):
    stored = Image.fromarray(photo_rgb).transpose(stored_from_view)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / f"rotated{orientation}.png"  # lossless, so the pixels must come back exactly
    stored.save(path, exif=exif.tobytes())
    assert Image.open(path).size == stored.size
    loaded = load_image(path)
    assert loaded.shape == photo_rgb.shape
    assert np.array_equal(loaded, photo_rgb)


def test_grayscale_png(tmp_path, photo_rgb):
    gray = Image.fromarray(photo_rgb).convert("L")
    path = tmp_path / "gray.png"
    gray.save(path)
    loaded = load_image(path)
    assert loaded.shape == photo_rgb.shape
    expected = np.asarray(gray)
    for c in range(3):
        assert np.array_equal(loaded[:, :, c], expected)


def test_rgba_png_drops_alpha_like_opencv(tmp_path, photo_rgb):
    height, width = photo_rgb.shape[:2]
    alpha = np.zeros((height, width), dtype=np.uint8)
    alpha[:, width // 2:] = 255  # half transparent: the colour underneath must survive, not turn black
    path = tmp_path / "rgba.png"
    Image.fromarray(np.dstack([photo_rgb, alpha]), "RGBA").save(path)
    loaded = load_image(path)
    assert np.array_equal(loaded, photo_rgb)
    assert np.array_equal(loaded, cv2.imread(str(path), cv2.IMREAD_COLOR)[:, :, ::-1])


def test_real_rgba_photo(data_dir):
    path = data_dir / "faces" / "lin_manuel_miranda" / "lin-manuel-miranda.png"
    if not path.exists():
        pytest.skip("lin-manuel-miranda.png not in the data set")
    assert Image.open(path).mode == "RGBA"
    loaded = load_image(path)
    assert np.array_equal(loaded, cv2.imread(str(path), cv2.IMREAD_COLOR)[:, :, ::-1])


def test_palette_png(tmp_path, photo_rgb):
    palette = Image.fromarray(photo_rgb).quantize(colors=64)
    path = tmp_path / "palette.png"
    palette.save(path)
    assert Image.open(path).mode == "P"
    assert np.array_equal(load_image(path), np.asarray(palette.convert("RGB")))


def test_16bit_grayscale_keeps_the_high_byte_like_opencv(tmp_path):
    values = (np.arange(64 * 48, dtype=np.uint32) * 21 % 65536).astype(np.uint16).reshape(48, 64)
    path = tmp_path / "deep.png"
    Image.fromarray(values).save(path)
    assert Image.open(path).mode.startswith("I;16")
    loaded = load_image(path)
    assert loaded.shape == (48, 64, 3)
    assert np.array_equal(loaded[:, :, 0], (values >> 8).astype(np.uint8))
    assert np.array_equal(loaded, cv2.imread(str(path), cv2.IMREAD_COLOR)[:, :, ::-1])


@pytest.mark.parametrize("suffix, options", [(".webp", {"lossless": True}), (".bmp", {}), (".png", {})])
def test_other_formats_round_trip(tmp_path, photo_rgb, suffix, options):
    path = tmp_path / f"copy{suffix}"
    Image.fromarray(photo_rgb).save(path, **options)
    assert np.array_equal(load_image(path), photo_rgb)


def _one_line_error(path) -> str:
    with pytest.raises(ImageError) as info:
        load_image(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_errors_are_one_line(tmp_path, photo):
    assert "no such file" in _one_line_error(tmp_path / "missing.jpg")
    assert "directory" in _one_line_error(tmp_path)
    text = tmp_path / "notes.jpg"
    text.write_text("this is not a picture\n")
    assert "not an image" in _one_line_error(text)
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    _one_line_error(empty)
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(photo.read_bytes()[:2000])
    assert "cannot read" in _one_line_error(truncated)


def test_iter_images_walks_folders_and_keeps_named_files(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "deep").mkdir(parents=True)
    for name in ["b/2.PNG", "b/1.jpg", "a/deep/x.webp", "a/z.bmp", "a/readme.txt", "a/y.jpeg"]:
        (tmp_path / name).write_bytes(b"")
    named_text = tmp_path / "a" / "readme.txt"
    missing = tmp_path / "nope.jpg"
    found = iter_images([tmp_path, named_text, missing, tmp_path / "b" / "1.jpg"])
    relative = [p.relative_to(tmp_path).as_posix() if p.is_relative_to(tmp_path) else str(p) for p in found]
    # the folder: images only, recursive, sorted; then the explicitly named text file and the missing path;
    # b/1.jpg was already listed, so it is not repeated
    assert relative == ["a/deep/x.webp", "a/y.jpeg", "a/z.bmp", "b/1.jpg", "b/2.PNG", "a/readme.txt", "nope.jpg"]


def test_every_shared_photo_loads(data_dir):
    paths = iter_images([data_dir / "faces", data_dir / "wider" / "images"])
    assert len(paths) > 150
    for path in paths:
        rgb = load_image(path)
        assert rgb.dtype == np.uint8 and rgb.shape[2] == 3 and min(rgb.shape[:2]) > 16, path


def test_an_rgb_jpeg_loads_as_pillows_own_rgb_conversion(tmp_path, photo_rgb):
    # the loader reads an RGB photo without Pillow's copies (no turning, no conversion): the very same pixels
    path = tmp_path / "photo.jpg"
    Image.fromarray(photo_rgb).save(path, quality=90)
    with Image.open(path) as image:
        want = np.asarray(image.convert("RGB"))
    got = load_image(path)
    assert got.dtype == np.uint8 and got.flags.c_contiguous and np.array_equal(got, want)
