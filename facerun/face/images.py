"""Reading photos into the one layout the detectors use: HxWx3 uint8 RGB, upright.

Pillow does the decoding (JPEG, PNG, WebP, BMP). Camera photos often store pixels sideways plus an EXIF orientation
tag; we apply the tag so boxes refer to the image as a viewer shows it (OpenCV's imread does the same).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import ImageError

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})


def load_image(path: str | Path) -> np.ndarray:
    """Decode `path` into an HxWx3 uint8 RGB array (EXIF orientation applied, alpha dropped, 16-bit scaled to 8)."""
    path = Path(path)
    if not path.exists():
        raise ImageError(f"{path}: no such file")
    if path.is_dir():
        raise ImageError(f"{path}: is a directory, not an image")
    if not path.is_file():  # reading a FIFO would wait for a writer forever, a device may never end
        raise ImageError(f"{path}: not a regular file (a FIFO, a device or a socket), not an image")
    return decode_image(path, path)


def decode_image(source, label) -> np.ndarray:
    """`load_image` of a path or an open binary file (bytes read from object storage: `io.BytesIO(data)`);
    `label` names it in the messages."""
    from .. import limits

    limit = limits.max_pixels()
    # Pillow refuses past 2 x MAX_IMAGE_PIXELS on its own (179 megapixels by default, whatever --max-pixels said):
    # its limit follows facerun's, which the header check below applies first (Pillow's only past twice as much)
    Image.MAX_IMAGE_PIXELS = limit
    try:
        with warnings.catch_warnings():
            # a decompression-bomb *warning* is noise here; the hard limit still raises below
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(source) as image:
                _check_size(label, image)  # from the header, before the pixels are decoded
                image.load()  # decode now, so a truncated file fails here and not later
                ImageOps.exif_transpose(image, in_place=True)  # no copy of a photo that needs no turning
                return _to_rgb8(image)
    except UnidentifiedImageError:
        raise ImageError(f"{label}: not an image (or not a format Pillow reads)") from None
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
    from ..errors import InputError

    try:
        limits.check_pixels(*image.size, what=str(path))
    except InputError as e:
        raise ImageError(str(e)) from None


def _to_rgb8(image: Image.Image) -> np.ndarray:
    if image.mode.startswith("I;16") or image.mode in ("I", "F"):
        # 16-bit (or 32-bit) grayscale: Pillow's convert("RGB") would clip at 255, so keep the high byte, as
        # OpenCV's imread does when it turns 16-bit into 8-bit (Pillow does the same for 16-bit RGB PNGs).
        gray = np.asarray(image)
        if image.mode.startswith("I;16") or gray.max(initial=0) > 255:
            gray = np.clip(gray, 0, 65535).astype(np.uint32) >> 8
        gray = np.clip(gray, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(np.repeat(gray[:, :, None], 3, axis=2))
    # convert("RGB") drops alpha (no compositing), expands palettes and grayscale, and converts CMYK/YCbCr; an RGB
    # photo (most JPEGs) is read as it is, without that copy
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8))


def iter_images(paths) -> list[Path]:
    """Expand files and directories into the list of images to process.

    Files named explicitly are kept whatever their extension (so a bad file is reported, not silently skipped), and
    so are paths that do not exist (the caller reports them when loading). Directories are walked recursively and
    contribute their image files (by extension), sorted. Duplicates are dropped, first occurrence wins.
    """
    found: list[Path] = []
    seen: set[Path] = set()

    def add(p: Path):
        key = p.resolve() if p.exists() else p
        if key not in seen:
            seen.add(key)
            found.append(p)

    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for child in sorted(p.rglob("*")):
                if child.is_file() and child.suffix.lower() in IMAGE_EXTENSIONS:
                    add(child)
        else:
            add(p)
    return found


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__
