"""`Face`, the one result type of every detector family, and the landmark sets the families give.

Landmarks are named from the subject's view ("eye R" is the subject's right eye, on the left of an unmirrored photo),
which is the order YuNet, SCRFD, RetinaFace and YOLOv5-face all use, and the order of the ArcFace alignment template.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ModelError

FIVE_POINTS = ("eye R", "eye L", "nose", "mouth R", "mouth L")
# MediaPipe's BlazeFace: eyes, nose tip, mouth centre, ear tragions (no mouth corners)
BLAZEFACE_POINTS = ("eye R", "eye L", "nose", "mouth", "ear R", "ear L")
NO_POINTS: tuple[str, ...] = ()


@dataclass
class Face:
    """One detected face, in the pixel coordinates of the image given to `detect`."""

    score: float
    box: tuple[float, float, float, float]  # x, y (top-left), width, height
    landmarks: np.ndarray | None  # K x 2 in `landmark_names`' order; None when the family gives none
    landmark_names: tuple[str, ...] = FIVE_POINTS

    def to_dict(self, digits: int = 2) -> dict:
        marks = None if self.landmarks is None else [
            [round(float(x), digits), round(float(y), digits)] for x, y in self.landmarks
        ]
        return {"score": round(float(self.score), 4), "box": [round(float(v), digits) for v in self.box],
                "landmarks": marks}

    @property
    def has_five_points(self) -> bool:
        return self.landmarks is not None and self.landmark_names == FIVE_POINTS


def five_points(face: Face, family_title: str = "this detector") -> np.ndarray:
    """The 5 x 2 landmarks the ArcFace alignment needs; ModelError (one line) when the face has none."""
    if not face.has_five_points:
        raise ModelError(no_five_points_reason(family_title, face.landmark_names if face.landmarks is not None
                                               else NO_POINTS))
    return np.asarray(face.landmarks, dtype=np.float32)


def no_five_points_reason(family_title: str, names: tuple[str, ...]) -> str:
    """Why faces of a family cannot be aligned to the five-point ArcFace template, in one line."""
    if not names:
        what = f"{family_title} gives boxes only, no landmarks"
    elif names == BLAZEFACE_POINTS:
        # the template needs both mouth corners; a mouth centre cannot place them without guessing the mouth width
        what = (f"{family_title} gives 6 keypoints (eyes, nose tip, mouth centre, ears) but no mouth corners")
    else:
        what = f"{family_title} gives {len(names)} landmarks ({', '.join(names)}), not the five the template uses"
    return (f"{what}, so its faces cannot be aligned to the five-point ArcFace template; use a detector with five "
            "landmarks (yunet-2023mar, scrfd-500m, retinaface-mnet025, yolov5n-0.5-face)")


def rescaled(face: Face, scale_x: float, scale_y: float) -> Face:
    """The face in the coordinates of an image `1 / scale` times the size of the one it was found in."""
    x, y, w, h = (float(v) for v in face.box)
    marks = face.landmarks
    if marks is not None:
        marks = (np.asarray(marks, dtype=np.float64) / [scale_x, scale_y]).astype(np.float32)
    return Face(score=face.score, box=(x / scale_x, y / scale_y, w / scale_x, h / scale_y), landmarks=marks,
                landmark_names=face.landmark_names)


__all__ = [
    "BLAZEFACE_POINTS",
    "FIVE_POINTS",
    "NO_POINTS",
    "Face",
    "five_points",
    "no_five_points_reason",
    "rescaled",
]
