"""What every detector family shares: the graph description it is recognised by, the base class, placing a photo in
the network's input (and back), and greedy NMS.

A family turns an RGB photo into the network's input (`prepare`, which also returns the `Frame` saying where the
photo went) and the network's outputs back into `Face`s in the photo's pixels (`decode`). Decoding takes the outputs
as a dict by name, so it works on outputs from facerun's interpreter, its GPU path or onnxruntime alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from ..errors import InputError, ModelError
from .faces import FIVE_POINTS, NO_POINTS, Face, no_five_points_reason


@dataclass(frozen=True)
class Graph:
    """What a detector file declares: its image input and its outputs, shapes with None for symbolic sizes."""

    path: Path
    input_name: str
    input_shape: tuple
    outputs: tuple[tuple[str, tuple], ...]

    @property
    def output_names(self) -> list[str]:
        return [name for name, _ in self.outputs]

    @property
    def output_shapes(self) -> list[tuple]:
        return [shape for _, shape in self.outputs]

    @property
    def input_size(self) -> tuple[int, int] | None:
        """(w, h) when the file fixes it, else None."""
        shape = self.input_shape
        if len(shape) == 4 and shape[2] is not None and shape[3] is not None:
            return int(shape[3]), int(shape[2])
        return None

    def describe(self) -> str:
        def fmt(shape):
            return "x".join("?" if d is None else str(d) for d in shape)

        return ", ".join(f"{name} [{fmt(shape)}]" for name, shape in self.outputs)


@dataclass(frozen=True)
class Frame:
    """Where the photo went in the network input: input = photo * scale + offset, per axis."""

    scale_x: float
    scale_y: float
    offset_x: float
    offset_y: float
    width: int  # of the photo
    height: int
    input_width: int  # of the network input
    input_height: int

    def to_photo(self, points: np.ndarray) -> np.ndarray:
        """Input-pixel points (..., 2) -> photo pixels."""
        p = np.asarray(points, dtype=np.float64)
        return (p - [self.offset_x, self.offset_y]) / [self.scale_x, self.scale_y]


class Family:
    """A detector family. Subclasses set the class attributes and implement `matches`, `prepare` and `decode`."""

    name = ""  # short name: "scrfd"
    title = ""  # as people write it: "SCRFD"
    score = 0.5  # the family's own default thresholds (from its reference inference code)
    nms = 0.4
    landmark_names: tuple[str, ...] = NO_POINTS
    follows_image = False  # True: the network runs on the photo at its own size (YuNet); else a fixed input size
    default_input_size = (640, 640)  # (w, h) for a file that leaves its input size free
    size_multiple = 32  # a free input size must be a multiple of the coarsest stride

    def __init__(self, graph: Graph):
        self.graph = graph
        self.chosen_size: tuple[int, int] | None = None

    @classmethod
    def matches(cls, graph: Graph) -> bool:
        raise NotImplementedError

    def prepare(self, rgb: np.ndarray) -> tuple[np.ndarray, Frame]:
        """HxWx3 uint8 RGB -> (1x3xhxw float32 network input, Frame)."""
        raise NotImplementedError

    def decode(self, outputs: dict, frame: Frame, score: float, nms: float, top_k: int) -> list[Face]:
        """Network outputs (by name) -> faces in photo pixels, best score first."""
        raise NotImplementedError

    def photo_layout(self, bucket: int, score: float | None = None):
        """How a runner may lay a raw photo out as this network's input (runner.PhotoLayout, photos in programs of
        their padded size rounded up to `bucket`; `score` the threshold faces are kept at, for the rows a device may
        choose), or None: the family makes the blob on the CPU (it resizes)."""
        return None

    @property
    def five_points(self) -> bool:
        return self.landmark_names == FIVE_POINTS

    def no_five_points_reason(self) -> str:
        return no_five_points_reason(self.title, self.landmark_names)

    def input_size(self) -> tuple[int, int]:
        """(w, h) of the network input: the file's own, else the one chosen, else the family's default."""
        return self.graph.input_size or self.chosen_size or self.default_input_size

    def choose_input_size(self, size: tuple[int, int]) -> None:
        """Run a file whose input size is free at `size` (w, h); InputError where the file fixes it."""
        w, h = (int(v) for v in size)
        if self.follows_image:
            raise InputError(f"{self.title} runs on the photo at its own size; shrink big photos with --max-side")
        fixed = self.graph.input_size
        if fixed is not None and fixed != (w, h):
            raise InputError(f"{self.graph.path.name} ({self.title}) takes {fixed[0]}x{fixed[1]} only, not {w}x{h}")
        if w <= 0 or h <= 0 or w % self.size_multiple or h % self.size_multiple:
            raise InputError(f"{self.title} input size {w}x{h}: width and height must be positive multiples of "
                             f"{self.size_multiple}")
        from ..limits import check_tensor

        check_tensor((1, 3, h, w), f"{self.title} input size {w}x{h}")  # before a canvas that size is made
        self.chosen_size = (w, h)


# ------------------------------------------------------------------------------------------------ placing


def letterbox(rgb: np.ndarray, size: tuple[int, int], fill, centre: bool) -> tuple[np.ndarray, Frame]:
    """The photo resized to fit `size` (w, h) with its aspect kept, on a canvas of `fill`; centred or top-left."""
    height, width = rgb.shape[:2]
    in_w, in_h = size
    factor = min(in_w / width, in_h / height)
    new_w, new_h = max(1, min(in_w, round(width * factor))), max(1, min(in_h, round(height * factor)))
    canvas = np.empty((in_h, in_w, 3), dtype=np.uint8)
    canvas[:] = np.asarray(fill, dtype=np.uint8)
    left, top = ((in_w - new_w) // 2, (in_h - new_h) // 2) if centre else (0, 0)
    canvas[top : top + new_h, left : left + new_w] = _resize(rgb, new_w, new_h)
    return canvas, Frame(new_w / width, new_h / height, left, top, width, height, in_w, in_h)


def stretch(rgb: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, Frame]:
    """The photo resized to exactly `size` (w, h), aspect not kept."""
    height, width = rgb.shape[:2]
    in_w, in_h = size
    return _resize(rgb, in_w, in_h), Frame(in_w / width, in_h / height, 0, 0, width, height, in_w, in_h)


def _resize(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    if rgb.shape[1] == width and rgb.shape[0] == height:
        return rgb
    # Pillow's bilinear filter widens its support when shrinking, so it averages like an area filter (no aliasing)
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.Resampling.BILINEAR))


def to_blob(canvas: np.ndarray, mean, std, bgr: bool) -> np.ndarray:
    """HxWx3 uint8 RGB -> 1x3xHxW float32 (x - mean) / std, channels in the network's order (mean/std in that order)."""
    x = canvas[:, :, ::-1] if bgr else canvas
    x = (x.astype(np.float32) - np.float32(mean)) / np.float32(std)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


# ----------------------------------------------------------------------------------------------- decoding


def output(outputs: dict, name: str, width: int, family: str) -> np.ndarray:
    """An output as rows of `width` values (the batch of one folded away)."""
    array = np.asarray(outputs[name], dtype=np.float32)
    if array.size % width:
        raise ModelError(f"{family} output '{name}' has shape {list(array.shape)}; expected rows of {width} values")
    return array.reshape(-1, width)


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float, top_k: int = 0) -> np.ndarray:
    """Greedy NMS on x1, y1, x2, y2 boxes: indices kept, best score first. Candidates are cut to `top_k` (> 0) before
    suppression; a box is dropped when its IoU (continuous coordinates) with a kept one is above `threshold`."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    if top_k > 0:
        order = order[:top_k]
    b = np.asarray(boxes, dtype=np.float64)[order]
    area = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)

    def too_close(i: int, rest: slice) -> np.ndarray:
        iw = np.clip(np.minimum(b[i, 2], b[rest, 2]) - np.maximum(b[i, 0], b[rest, 0]), 0, None)
        ih = np.clip(np.minimum(b[i, 3], b[rest, 3]) - np.maximum(b[i, 1], b[rest, 1]), 0, None)
        inter = iw * ih
        union = area[i] + area[rest] - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(union > 0, inter / union, 0.0) > threshold

    return order[greedy_keep(order.size, too_close)]


def greedy_keep(count: int, too_close) -> np.ndarray:
    """Greedy suppression over candidates already sorted best first: keep each candidate no kept one suppressed;
    `too_close(i, rest)` says which of the candidates in `rest` (a slice after i) kept candidate i suppresses.
    Returns the kept positions."""
    suppressed = np.zeros(count, dtype=bool)
    kept = []
    for i in range(count):
        if suppressed[i]:
            continue
        kept.append(i)
        rest = slice(i + 1, None)
        suppressed[rest] |= too_close(i, rest)
    return np.asarray(kept, dtype=np.intp)


def box_iou_one(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one x1, y1, x2, y2 box with each of `boxes`."""
    iw = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = iw * ih
    union = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def faces_in_photo(boxes: np.ndarray, scores: np.ndarray, marks: np.ndarray | None, frame: Frame,
                   names: tuple[str, ...]) -> list[Face]:
    """Kept detections (input-pixel x1, y1, x2, y2 boxes, scores, N x K x 2 landmarks or None) -> Faces in photo
    pixels. Boxes are clipped to the photo (they may reach into the letterbox padding); landmarks are not."""
    corners = frame.to_photo(np.asarray(boxes, dtype=np.float64).reshape(-1, 2, 2))
    corners[..., 0] = np.clip(corners[..., 0], 0, frame.width)
    corners[..., 1] = np.clip(corners[..., 1], 0, frame.height)
    photo_marks = None if marks is None else frame.to_photo(marks).astype(np.float32)
    faces = []
    for i in range(corners.shape[0]):
        (x1, y1), (x2, y2) = corners[i]
        faces.append(Face(score=float(scores[i]), box=(float(x1), float(y1), float(x2 - x1), float(y2 - y1)),
                          landmarks=None if photo_marks is None else photo_marks[i], landmark_names=names))
    return faces


def select(boxes, scores, marks, keep):
    """The rows `keep` of boxes, scores and landmarks (None stays None)."""
    return boxes[keep], scores[keep], (None if marks is None else marks[keep])


def sigmoid(x: np.ndarray) -> np.ndarray:
    # clipped so exp cannot overflow; beyond +-100 the sigmoid is 0 or 1 in float32 anyway
    z = np.clip(np.asarray(x, dtype=np.float64), -100.0, 100.0)
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def last_dim(shape: tuple) -> int | None:
    return shape[-1] if shape else None


__all__ = [
    "Family",
    "Frame",
    "Graph",
    "box_iou_one",
    "faces_in_photo",
    "letterbox",
    "nms",
    "output",
    "select",
    "sigmoid",
    "stretch",
    "to_blob",
]
