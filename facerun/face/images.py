"""Reading photos into the one layout the detectors use: HxWx3 uint8 RGB, upright.

Pillow does the decoding (JPEG, PNG, WebP, BMP, GIF; AVIF where Pillow was built with it; of an animated GIF or WebP
the first frame; HEIC/HEIF is refused with the reason, Pillow reads none); with the optional simplejpeg installed,
JPEGs are decoded by libjpeg-turbo's own API instead (turbo.py: the same pixels, faster, without the GIL). Camera
photos often store pixels sideways plus an EXIF orientation tag; we apply the tag so boxes refer to the image as a
viewer shows it (OpenCV's imread does the same).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import ImageError, InputError
from . import jpeg_header, turbo

# what a folder walk lists: HEIC/HEIF too, so that a folder of them is reported (not read) rather than passed over
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".avif", ".heic", ".heif"})


def load_image(path: str | Path) -> np.ndarray:
    """Decode `path` into an HxWx3 uint8 RGB array (EXIF orientation applied, alpha dropped, 16-bit scaled to 8)."""
    path = _checked_path(path)
    fast = _turbo(path, channels=3)
    if fast is not None:
        return fast[0]
    return decode_image(path, path)


def decode_image(source, label) -> np.ndarray:
    """`load_image` of a path or an open binary file (bytes read from object storage: `io.BytesIO(data)`);
    `label` names it in the messages."""
    with _opened(source, label) as image:
        return _to_rgb8(image)


def load_photo(path: str | Path, fit: Callable[[int, int], tuple[int, int] | None] | None = None
               ) -> tuple[np.ndarray, np.ndarray | None]:
    """`load_image` for a library run: the photo as an h x w x 4 uint8 array (R, G, B and an unused byte a pixel)
    and, where `fit(width, height)` gives a new (width, height), the photo shrunk to it the way yunet.fit_max_side
    shrinks (Pillow's bilinear), in the same layout; else None. `[:, :, :3]` is exactly `load_image`'s pixels.

    Four bytes a pixel is Pillow's own layout, so the pixels are copied out in C (a few hundredths of a ms per
    megapixel) instead of through numpy's asarray, a Python loop over the bytes that holds the GIL for about 1 ms
    per megapixel: with several photos decoding at once, that loop is what kept the network thread waiting."""
    path = _checked_path(path)
    fast = _turbo(path)
    if fast is not None:
        pixels, (width, height) = fast
        size = fit(width, height) if fit is not None else None
        shrunk = None
        if size is not None and tuple(size) != (width, height):
            shrunk = _resized4(pixels, tuple(size))
        return pixels, shrunk
    with _opened(path, path) as image:
        rgb = _to_rgb_image(image)
        size = fit(*rgb.size) if fit is not None else None
        shrunk = None
        if size is not None and tuple(size) != rgb.size:
            shrunk = _pixels4(rgb.resize(tuple(size), Image.Resampling.BILINEAR))
        return _pixels4(rgb), shrunk


def load_photo_shrunk(path: str | Path, fit: Callable[[int, int], tuple[int, int] | None]
                      ) -> tuple[np.ndarray, tuple[int, int]]:
    """For a run that needs a photo only as the detector's input (no alignment, no drawing): the photo shrunk to
    `fit(width, height)` (or at its own size where that is None) in load_photo's four-byte layout, and the photo's own
    upright (width, height), which its faces are given in.

    A JPEG at least twice the fitted size on both sides is decoded in draft mode: libjpeg scales its DCT by 1/2, 1/4
    or 1/8, never below the fitted size, and Pillow's bilinear shrink does the rest. A 12-megapixel camera photo
    fitted to 1280 pixels decodes at a quarter of its pixels. The pixels are then close to load_photo's shrunk ones
    but not the same bytes (the DCT's scaling filters otherwise); photos under twice the size decode as load_photo
    decodes them."""
    path = _checked_path(path)
    fast = _turbo(path, fit)
    if fast is not None:
        pixels, size = fast
        want = fit(*size)
        if want is not None and tuple(want) != (pixels.shape[1], pixels.shape[0]):
            pixels = _resized4(pixels, tuple(want))
        return pixels, size
    upright: list[tuple[int, int]] = []  # the photo's own size, when the decoded image is smaller
    with _opened(path, path, lambda image: upright.extend(_draft(image, fit))) as image:
        rgb = _to_rgb_image(image)
        size = upright[0] if upright else rgb.size
        want = fit(*size)
        if want is not None and tuple(want) != rgb.size:
            rgb = rgb.resize(tuple(want), Image.Resampling.BILINEAR)
        return _pixels4(rgb), tuple(size)


ORIENTATION = 0x0112  # the EXIF tag; values 5 to 8 store the photo turned by a quarter
HEADER_BYTES = 8192  # a header's first read: most JPEGs' markers before the scan fit
HEADER_MAX_BYTES = 1 << 20  # past this, Pillow reads the header


def _draft(image: Image.Image, fit) -> list[tuple[int, int]]:
    """Before decoding: ask libjpeg for a scaled-down decode of a JPEG much larger than fit() wants; [the photo's own
    upright size] when it did (the decoded image is then smaller), else []."""
    if image.format != "JPEG":
        return []
    width, height = image.size
    turned = image.getexif().get(ORIENTATION, 1) in (5, 6, 7, 8)
    stored = _draft_size(width, height, turned, fit)
    if stored is None:
        return []
    image.draft("RGB", stored)
    return [(height, width) if turned else (width, height)]


def upright_size(path) -> tuple[int, int] | None:
    """A photo's upright (width, height) from its header (EXIF orientation applied), or None where it cannot be read
    (its decode says why). A JPEG's markers are read directly (jpeg_header), any other file or one the reader is
    unsure of by Pillow."""
    head = _jpeg_head(path)
    if head is not None:
        turned = head.orientation in (5, 6, 7, 8)
        return (head.height, head.width) if turned else (head.width, head.height)
    try:
        with Image.open(path) as image:
            width, height = image.size
            turned = image.getexif().get(ORIENTATION, 1) in (5, 6, 7, 8)
    except Exception:  # any unreadable file: the decode reports it
        return None
    return (height, width) if turned else (width, height)


def _jpeg_head(path) -> jpeg_header.Header | None:
    """A JPEG's header from the file's first bytes (more where its markers run longer), None where not read."""
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER_BYTES)
            while True:
                try:
                    return jpeg_header.read(data)
                except jpeg_header.Short:
                    more = f.read(len(data))  # the markers run on (a large ICC profile or EXIF thumbnail)
                    if not more or len(data) >= HEADER_MAX_BYTES:
                        return None
                    data += more
    except OSError:
        return None


def _draft_size(width: int, height: int, turned: bool, fit) -> tuple[int, int] | None:
    """The stored (width, height) a draft is asked for, or None: no draft (fit wants no shrinking, or less than
    half, where libjpeg would decode at full size anyway)."""
    want = fit(*((height, width) if turned else (width, height)))
    if want is None:
        return None
    stored = (want[1], want[0]) if turned else tuple(want)
    if width < 2 * stored[0] or height < 2 * stored[1]:
        return None
    return stored


def _draft_scale(width: int, height: int, stored: tuple[int, int]) -> int:
    """The DCT scaling Pillow's JPEG draft takes for that request: the largest of 8, 4, 2, 1 that still decodes to
    at least the requested size."""
    scale = min(width // stored[0], height // stored[1])
    return next(s for s in (8, 4, 2, 1) if scale >= s)


TURBO_MAX_BYTES = 256 << 20  # a file larger than this is left to Pillow, which reads it piece by piece


def _turbo(path: Path, fit=None, channels: int = 4) -> tuple[np.ndarray, tuple[int, int]] | None:
    """A JPEG decoded by libjpeg-turbo (turbo.py): the upright pixels (h x w x 4 as load_photo gives; x 3 as
    load_image gives with channels=3) and the photo's own upright (width, height); with `fit`, drafted as
    load_photo_shrunk drafts. None where the file goes to Pillow (turbo.py says when)."""
    if not turbo.available():
        return None
    try:
        with open(path, "rb") as f:
            if f.read(3) != b"\xff\xd8\xff" or os.fstat(f.fileno()).st_size > TURBO_MAX_BYTES:
                return None
            f.seek(0)
            data = f.read()
    except OSError:
        return None  # Pillow's open gives the error
    head = turbo.header(data)
    if head is None:
        return None
    width, height, orientation = head
    try:
        from .. import limits

        limits.check_pixels(width, height, what=str(path))
    except InputError as e:
        raise ImageError(str(e)) from None
    turned = turbo.turned(orientation)
    stored = _draft_size(width, height, turned, fit) if fit is not None else None
    scale = _draft_scale(width, height, stored) if stored is not None else 1
    pixels = turbo.decode(data, width, height, scale, channels)
    if pixels is None:
        return None
    return turbo.upright(pixels, orientation), ((height, width) if turned else (width, height))


def _checked_path(path) -> Path:
    path = Path(path)
    try:
        return _checked_kind(path)
    except OSError as e:  # a name too long, a loop of links, a folder on the way not readable
        raise ImageError(f"{path}: cannot read ({e.strerror or e})") from None


def _checked_kind(path: Path) -> Path:
    if not path.exists():
        raise ImageError(f"{path}: no such file")
    if path.is_dir():
        raise ImageError(f"{path}: is a directory, not an image")
    if not path.is_file():  # reading a FIFO would wait for a writer forever, a device may never end
        raise ImageError(f"{path}: not a regular file (a FIFO, a device or a socket), not an image")
    return path


_PILLOW_MAX_PIXELS = Image.MAX_IMAGE_PIXELS  # Pillow's own limit, as it came


@contextmanager
def _opened(source, label, before_load=None) -> Iterator[Image.Image]:
    """The decoded photo (EXIF orientation applied) as a Pillow image, every failure an ImageError naming `label`.
    `before_load(image)` runs between reading the header and decoding (a draft request)."""
    from .. import limits

    limit = limits.max_pixels()
    # Pillow refuses past 2 x MAX_IMAGE_PIXELS on its own (179 megapixels by default, whatever --max-pixels said):
    # it is raised where facerun's limit is higher, which the header check below applies first; never lowered, so
    # a run's smaller --max-pixels leaves no smaller limit behind for the Pillow of the process it ran in
    Image.MAX_IMAGE_PIXELS = max(limit, _PILLOW_MAX_PIXELS)
    try:
        with warnings.catch_warnings():
            # a decompression-bomb *warning* is noise here; the hard limit still raises below
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            # an EXIF block that lies about its own layout: Pillow skips the bad tags and warns on stderr, which
            # would break the one-line output; the photo decodes, upright where the orientation tag survived
            warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
            with Image.open(source) as image:
                _check_size(label, image)  # from the header, before the pixels are decoded
                if before_load is not None:
                    before_load(image)
                image.load()  # decode now, so a truncated file fails here and not later
                ImageOps.exif_transpose(image, in_place=True)  # no copy of a photo that needs no turning
                yield image
    except UnidentifiedImageError:
        raise ImageError(f"{label}: {_unknown_format(source)}") from None
    except Image.DecompressionBombError as e:
        found = re.search(r"\((\d+) pixels\)", str(e))
        size = f"{int(found.group(1)) / 1e6:.0f} megapixels" if found else "too many pixels"
        raise ImageError(f"{label}: {size}, past the limit of {limit / 1e6:g} (--max-pixels or FACERUN_MAX_PIXELS)"
                         ) from None
    except (OSError, SyntaxError, ValueError) as e:
        # truncated data, broken headers, unreadable files (permissions) ...
        raise ImageError(f"{label}: cannot read image ({_one_line(e)})") from None


def _check_size(path, image: Image.Image) -> None:
    from .. import limits

    try:
        limits.check_pixels(*image.size, what=str(path))
    except InputError as e:
        raise ImageError(str(e)) from None


def _to_rgb8(image: Image.Image) -> np.ndarray:
    if _is_wide(image):
        return _wide_to_rgb8(image)
    # convert("RGB") drops alpha (no compositing), expands palettes and grayscale, and converts CMYK/YCbCr; an RGB
    # photo (most JPEGs) is read as it is, without that copy
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8))


def _is_wide(image: Image.Image) -> bool:
    return image.mode.startswith("I;16") or image.mode in ("I", "F")


def _wide_to_rgb8(image: Image.Image) -> np.ndarray:
    # 16-bit (or 32-bit) grayscale: Pillow's convert("RGB") would clip at 255, so keep the high byte, as OpenCV's
    # imread does when it turns 16-bit into 8-bit (Pillow does the same for 16-bit RGB PNGs).
    gray = np.asarray(image)
    if image.mode.startswith("I;16") or gray.max(initial=0) > 255:
        gray = np.clip(gray, 0, 65535).astype(np.uint32) >> 8
    gray = np.clip(gray, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(np.repeat(gray[:, :, None], 3, axis=2))


def _to_rgb_image(image: Image.Image) -> Image.Image:
    """The photo as a Pillow RGB image holding `_to_rgb8`'s very pixels."""
    if _is_wide(image):
        return Image.fromarray(_wide_to_rgb8(image))
    return image if image.mode == "RGB" else image.convert("RGB")


def _pixels4(rgb: Image.Image) -> np.ndarray:
    """An RGB Pillow image's pixels as h x w x 4 uint8: Pillow stores RGB four bytes a pixel, so a paste into an
    RGBX image over a numpy buffer is one copy in C."""
    width, height = rgb.size
    out = np.empty((height, width, 4), np.uint8)
    try:
        target = Image.frombuffer("RGBX", (width, height), out, "raw", "RGBX", 0, 1)
        target.im.paste(rgb.im, (0, 0, width, height))
    except (AttributeError, TypeError, ValueError):  # a Pillow without this core: the same pixels, the slow way
        out[:, :, :3] = np.asarray(rgb)
    return out


def _resized4(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """load_photo's four-byte pixels shrunk to `size` by Pillow's bilinear filter, as load_photo shrinks an RGB
    image: the filter treats each channel alike, so R, G and B come out the very same bytes."""
    height, width = pixels.shape[:2]
    try:
        source = Image.frombuffer("RGBX", (width, height), pixels, "raw", "RGBX", 0, 1)
        resized = source.resize(size, Image.Resampling.BILINEAR)
        out = np.empty((size[1], size[0], 4), np.uint8)
        Image.frombuffer("RGBX", size, out, "raw", "RGBX", 0, 1).im.paste(resized.im, (0, 0, *size))
    except (AttributeError, TypeError, ValueError):  # as in _pixels4: the same pixels, the slow way
        out = np.zeros((size[1], size[0], 4), np.uint8)
        rgb = Image.frombytes("RGB", (width, height), np.ascontiguousarray(pixels[:, :, :3]).tobytes())
        out[:, :, :3] = np.asarray(rgb.resize(size, Image.Resampling.BILINEAR))
    return out


def iter_images(paths) -> list[Path]:
    """Expand files and directories into the list of images to process.

    Files named explicitly are kept whatever their extension (so a bad file is reported, not silently skipped), and
    so are paths that do not exist (the caller reports them when loading). Directories are walked recursively and
    contribute their image files (by extension), sorted. Duplicates are dropped, first occurrence wins.
    """
    found: list[Path] = []
    seen: set[Path] = set()

    def add(p: Path):
        key = p.resolve() if _exists(p) else p
        if key not in seen:
            seen.add(key)
            found.append(p)

    for raw in paths:
        p = Path(raw)
        if _exists(p) and p.is_dir():
            for child in sorted(p.rglob("*")):
                if child.is_file() and child.suffix.lower() in IMAGE_EXTENSIONS:
                    add(child)
        else:
            add(p)
    return found


# ISO base media (ftyp box) brands of HEIF photos, which Pillow does not decode (iPhones save these by default)
_HEIF_BRANDS = {b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs", b"mif1", b"msf1"}


def _unknown_format(source) -> str:
    """Why Pillow could not identify `source`: a HEIC (or, on a Pillow without AVIF, an AVIF) photo is named as such
    with what to do, anything else is not an image."""
    try:
        if hasattr(source, "seek"):
            source.seek(0)
            head = source.read(32)
        else:
            with open(source, "rb") as f:
                head = f.read(32)
    except (OSError, ValueError):
        head = b""
    if head[4:8] == b"ftyp":
        brands = {head[8:12], *(head[i:i + 4] for i in range(16, len(head) - 3, 4))}
        if brands & {b"avif", b"avis"}:
            from PIL import features

            if features.check("avif"):
                return "an AVIF file that Pillow cannot read (damaged, or a kind of AVIF it does not decode)"
            return ("an AVIF photo, which this Pillow cannot decode (Pillow 11.3 or later reads AVIF); convert it to "
                    "JPEG or upgrade Pillow")
        if brands & _HEIF_BRANDS:
            return ("a HEIC/HEIF photo, which facerun does not decode (Pillow reads no HEIF); convert it to JPEG "
                    "first (e.g. heif-convert, or export from the photo app)")
    return "not an image (or not a format Pillow reads)"


def _exists(path: Path) -> bool:
    """Path.exists, False where the name itself is refused (too long, a loop of links): the decode says why."""
    try:
        return path.exists()
    except OSError:
        return False


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__
