"""Contact sheets: one PNG per cluster, its faces as labelled thumbnails in a grid, so a person is seen, not read."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont, ImageOps

from ..errors import FacerunError
from ..io import atomic_write, check_output_folder

THUMB = 112  # pixels, square
COLUMNS = 8
MAX_FACES = 64  # per sheet; the title says how many more there are
MARGIN = 0.25  # of the box size, around each face
LABEL_H = 16
TITLE_H = 28
BACKGROUND = (245, 245, 245)


def face_thumbnail(image: Image.Image, box, size: int = THUMB) -> Image.Image:
    """A square crop around the box (with a margin), scaled to size x size; parts outside the photo are black."""
    x, y, w, h = (float(v) for v in box)
    side = max(w, h) * (1 + 2 * MARGIN)
    cx, cy = x + w / 2, y + h / 2
    left, top = round(cx - side / 2), round(cy - side / 2)
    crop = image.crop((left, top, left + round(side), top + round(side)))  # Pillow pads outside with black
    return crop.resize((size, size), Image.Resampling.BILINEAR)


def write_sheets(clustering, out_dir, noise: bool = True) -> list[Path]:
    """Write cluster-<id>[-<name>].png for every cluster (and noise.png, unsorted.png), replacing the sheets of an
    earlier run in that folder; return the files written."""
    out_dir = check_output_folder(out_dir, "--sheets", error=FacerunError)
    for stale in [*out_dir.glob("cluster-*.png"), out_dir / "noise.png", out_dir / "unsorted.png"]:
        stale.unlink(missing_ok=True)  # sheets of an earlier clustering would mislead
    written = []
    cache: dict[str, Image.Image | None] = {}
    groups = [(c.id, c.name, list(zip(c.images, c.boxes))) for c in clustering.clusters]
    if noise and clustering.noise:
        groups.append((None, None, [(f["image"], f["box"]) for f in clustering.noise]))
    if getattr(clustering, "unsorted", None):  # below the quality gate: too small or unclear to name
        groups.append(("unsorted", None, [(f["image"], f["box"]) for f in clustering.unsorted]))
    for cid, name, faces in groups:
        if cid is None:
            title, filename = f"noise: {len(faces)} faces in no cluster", "noise.png"
        elif cid == "unsorted":
            title, filename = f"unsorted: {len(faces)} faces too small or unclear to name", "unsorted.png"
        else:
            title = f"cluster {cid}" + (f" - {name}" if name else "") + f": {len(faces)} faces"
            filename = f"cluster-{cid:03d}" + (f"-{_slug(name)}" if name else "") + ".png"
        if len(faces) > MAX_FACES:
            title += f" (first {MAX_FACES} shown)"
        sheet = _sheet(title, faces[:MAX_FACES], cache)
        path = out_dir / filename
        written.append(atomic_write(path, lambda handle, sheet=sheet: sheet.save(handle, format="PNG")))
    return written


def _sheet(title: str, faces, cache) -> Image.Image:
    columns = min(COLUMNS, max(1, len(faces)))
    rows = max(1, -(-len(faces) // columns))
    cell_h = THUMB + LABEL_H
    sheet = Image.new("RGB", (max(columns * THUMB, 320), TITLE_H + rows * cell_h), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    draw.text((6, 6), title, fill=(0, 0, 0), font=_font(16))
    small = _font(11)
    for i, (image_path, box) in enumerate(faces):
        x, y = (i % columns) * THUMB, TITLE_H + (i // columns) * cell_h
        photo = _open(image_path, cache)
        if photo is not None:
            sheet.paste(face_thumbnail(photo, box), (x, y))
        label = Path(image_path).name
        if draw.textlength(label, font=small) > THUMB - 4:
            while label and draw.textlength(label + "…", font=small) > THUMB - 4:
                label = label[:-1]
            label += "…"
        draw.text((x + 2, y + THUMB + 1), label, fill=(40, 40, 40), font=small)
    return sheet


def _open(path: str, cache) -> Image.Image | None:
    """The photo upright (EXIF applied, as the boxes are), kept while its faces are drawn; None when unreadable."""
    if path not in cache:
        if len(cache) > 8:
            cache.clear()
        try:
            with Image.open(path) as image:
                cache[path] = ImageOps.exif_transpose(image).convert("RGB")
        except (OSError, ValueError):
            cache[path] = None
    return cache[path]


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow before 10.1 has one bitmap size
        return ImageFont.load_default()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_")[:40] or "named"


__all__ = ["face_thumbnail", "write_sheets"]
