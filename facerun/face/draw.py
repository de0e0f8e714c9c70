"""Annotated copies of photos: face boxes, the landmarks and the score, sized to stay visible on any photo."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

BOX_COLOUR = (0, 255, 0)
# one colour per landmark, in the families' order: right eye, left eye, nose tip, right mouth corner (BlazeFace: mouth
# centre), left mouth corner (BlazeFace: right ear), and BlazeFace's left ear
LANDMARK_COLOURS = ((255, 0, 0), (0, 0, 255), (0, 255, 0), (255, 0, 255), (0, 255, 255), (255, 255, 0))


def draw_faces(rgb: np.ndarray, faces, labels=None) -> Image.Image:
    """A copy of `rgb` (HxWx3 uint8) with every face drawn on it; `faces` are facerun.face.detect.Face objects;
    `labels`, one string a face, replace the scores on the boxes (identify --draw: the names)."""
    image = Image.fromarray(np.asarray(rgb, dtype=np.uint8)).convert("RGB")
    draw = ImageDraw.Draw(image)
    # widths grow with the photo so a box stays visible on a 4000 px photo without swamping a 300 px one
    line = max(1, round(max(image.size) / 500))
    radius = max(2, 2 * line)
    font = _font(max(10, 6 * line + 6))

    # a model's broken output (inf, NaN, or far off the photo) is not drawn; Pillow's integer coordinates overflow
    limit = 4 * max(image.size)
    for i, face in enumerate(faces):
        x, y, w, h = (float(v) for v in face.box)
        if not all(np.isfinite(v) and abs(v) <= limit for v in (x, y, w, h)) or w < 0 or h < 0:
            continue
        draw.rectangle([x, y, x + w, y + h], outline=BOX_COLOUR, width=line)
        marks = () if face.landmarks is None else np.asarray(face.landmarks, dtype=float)
        for (px, py), colour in zip(marks, LANDMARK_COLOURS):
            if np.isfinite(px) and np.isfinite(py) and abs(px) <= limit and abs(py) <= limit:
                draw.ellipse([px - radius, py - radius, px + radius, py + radius], fill=colour)
        label = f"{face.score:.2f}" if labels is None else str(labels[i])
        left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
        text_w, text_h = right - left, bottom - top
        # the label sits on the box's top edge, or just inside it when the box touches the top of the photo
        ty = y - text_h - 2 * line if y - text_h - 2 * line >= 0 else y + line
        draw.rectangle([x, ty, x + text_w + 2 * line, ty + text_h + 2 * line], fill=BOX_COLOUR)
        draw.text((x + line - left, ty + line - top), label, fill=(0, 0, 0), font=font)
    return image


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()
