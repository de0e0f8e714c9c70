"""Face detection with YuNet on facerun's own runtime, giving the same faces as OpenCV's cv2.FaceDetectorYN."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from . import yunet
from .images import load_image

# YuNet draws boxes as exp(size) * stride around its anchors, and it was trained on 640x640 crops, so a face much
# taller than ~500 px is scored poorly or split in two (a 3061x4600 portrait finds nothing at full size). Shrinking
# the longer side to 1280 brings such faces into range, while 1280x720 frames and WIDER photos (1024 wide) are
# left at full size, where small faces need every pixel.
DEFAULT_MAX_SIDE = 1280


@dataclass
class Face:
    """One detected face, in the pixel coordinates of the image given to `detect`."""

    score: float
    box: tuple[float, float, float, float]  # x, y (top-left), width, height
    landmarks: np.ndarray  # 5x2: right eye, left eye, nose tip, right mouth corner, left mouth corner

    def to_dict(self, digits: int = 2) -> dict:
        return {
            "score": round(float(self.score), 4),
            "box": [round(float(v), digits) for v in self.box],
            "landmarks": [[round(float(x), digits), round(float(y), digits)] for x, y in self.landmarks],
        }


class Detector:
    """YuNet (2023mar by default; 2022mar works too) with OpenCV's pre- and post-processing.

    model: None (YuNet 2023mar, found by `facerun.zoo.find`), a path or a known model name.
    max_side: images whose longer side exceeds it are shrunk first (0 keeps full size); faces come back in the
    original image's coordinates either way.
    """

    def __init__(self, model=None, device: str = "auto", score: float = 0.6, nms: float = 0.3, top_k: int = 5000,
                 max_side: int = DEFAULT_MAX_SIDE):
        if not 0.0 <= score <= 1.0:
            raise InputError(f"score threshold must be between 0 and 1, not {score}")
        if not 0.0 <= nms <= 1.0:
            raise InputError(f"NMS threshold must be between 0 and 1, not {nms}")
        if max_side < 0:
            raise InputError(f"max side must be 0 (full size) or a positive number of pixels, not {max_side}")
        self.score_threshold = float(score)
        self.nms_threshold = float(nms)
        self.top_k = int(top_k)
        self.max_side = int(max_side)
        self.card = _card(model)
        self.model_path = self.card.path
        self.net = _load_net(self.card, device)
        self.generation = yunet.model_generation(self.net.output_names)

    @property
    def device(self) -> str:
        return self.net.device

    def detect(self, image, bgr: bool = False) -> list[Face]:
        """Faces in an RGB uint8 HxWx3 array or an image file, best score first.

        bgr=True: the array is in BGR order (what cv2.imread gives); a file is always read correctly."""
        if isinstance(image, (str, Path)):
            rgb = load_image(image)
        else:
            rgb = _checked_rgb(image)
            if bgr:
                rgb = rgb[:, :, ::-1]
        small, scale_x, scale_y = yunet.fit_max_side(rgb, self.max_side)
        rows = self.detect_rows(small)
        if scale_x != 1.0 or scale_y != 1.0:
            rows = rows.astype(np.float64)
            rows[:, 0:14:2] /= scale_x
            rows[:, 1:14:2] /= scale_y
        return [
            Face(score=float(r[yunet.SCORE_COLUMN]), box=tuple(float(v) for v in r[:4]),
                 landmarks=np.asarray(r[4:14], dtype=np.float32).reshape(5, 2))
            for r in rows
        ]

    def detect_rows(self, rgb: np.ndarray) -> np.ndarray:
        """OpenCV's result layout for an image taken as it is (no resizing): N x 15 float32 rows
        (x, y, w, h, 5 landmarks, score), in cv2.FaceDetectorYN.detect's order."""
        rgb = _checked_rgb(rgb)
        blob = yunet.make_blob(rgb)
        outputs = self.net.run(blob)
        return yunet.decode(self.generation, outputs, blob.shape[2], blob.shape[3], self.score_threshold,
                            self.nms_threshold, self.top_k)


def _checked_rgb(image) -> np.ndarray:
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
        raise InputError(f"expected an HxWx3 uint8 RGB image, got {array.dtype} {list(array.shape)}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise InputError(f"empty image {list(array.shape)}")
    return array


def _card(model):
    from ..zoo.card import identify
    from ..zoo.find import default_detector

    # a path, a built-in replica (yunet-arch) or a known model's name
    return identify(default_detector() if model is None else model)


def _load_net(card, device: str):
    import facerun

    return facerun.load(card, device=device)
