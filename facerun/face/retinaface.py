"""RetinaFace (biubug6/Pytorch_Retinaface exports, MobileNet-0.25 or ResNet-50): SSD prior boxes and five landmarks.

Pre- and post-processing as biubug6's `detect.py` and `data/config.py` do them:
- BGR float minus the mean (104, 117, 123), no scaling. The exported files are fixed at one input size (640x640
  here), so the photo is resized into it with its aspect kept, at the top-left; the padding is the mean colour, i.e.
  zero after the mean is taken off;
- priors per level (steps 8, 16, 32; min sizes [16, 32], [64, 128], [256, 512]) on a ceil(H / step) x
  ceil(W / step) grid, centres ((col + 0.5) step, (row + 0.5) step), in (level, row, col, size) order, not clipped;
- outputs loc [P, 4], conf [P, 2] (softmax applied, column 1 = face) and landmarks [P, 10]; with variances 0.1
  and 0.2: centre = prior centre + loc * 0.1 * prior size, size = prior size * exp(loc * 0.2), landmark = prior
  centre + l * 0.1 * prior size;
- score >= 0.6 (biubug6's display threshold), NMS at IoU 0.4.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError
from .faces import FIVE_POINTS
from .family import (
    Family,
    Graph,
    faces_in_photo,
    last_dim,
    letterbox,
    nms,
    output,
    select,
    to_blob,
)

MEAN_BGR = (104.0, 117.0, 123.0)
MIN_SIZES = ((16, 32), (64, 128), (256, 512))
STEPS = (8, 16, 32)
VARIANCE = (0.1, 0.2)


def prior_boxes(width: int, height: int) -> np.ndarray:
    """The priors in input pixels as (cx, cy, size), in the network's output order."""
    levels = []
    for sizes, step in zip(MIN_SIZES, STEPS):
        rows, cols = math.ceil(height / step), math.ceil(width / step)
        r, c, s = np.meshgrid(np.arange(rows), np.arange(cols), np.asarray(sizes), indexing="ij")
        levels.append(np.stack([(c.ravel() + 0.5) * step, (r.ravel() + 0.5) * step, s.ravel()], axis=1))
    return np.concatenate(levels).astype(np.float32)


class RetinaFace(Family):
    name = "retinaface"
    title = "RetinaFace"
    score = 0.6
    nms = 0.4
    landmark_names = FIVE_POINTS
    default_input_size = (640, 640)

    def __init__(self, graph: Graph):
        super().__init__(graph)
        by_width = {last_dim(shape): name for name, shape in graph.outputs}
        self.loc, self.conf, self.landmarks = by_width[4], by_width[2], by_width[10]

    @classmethod
    def matches(cls, graph: Graph) -> bool:
        shapes = graph.output_shapes
        if len(shapes) != 3 or len(graph.input_shape) != 4 or not all(len(s) in (2, 3) for s in shapes):
            return False
        counts = {s[-2] for s in shapes}
        return sorted(last_dim(s) for s in shapes) == [2, 4, 10] and len(counts) == 1

    def prepare(self, rgb):
        mean_rgb = tuple(int(v) for v in MEAN_BGR[::-1])
        canvas, frame = letterbox(rgb, self.input_size(), fill=mean_rgb, centre=False)
        return to_blob(canvas, MEAN_BGR, 1.0, bgr=True), frame

    def decode(self, outputs, frame, score, nms_threshold, top_k):
        priors = prior_boxes(frame.input_width, frame.input_height)
        loc = output(outputs, self.loc, 4, self.title)
        if loc.shape[0] != priors.shape[0]:
            raise ModelError(f"RetinaFace output '{self.loc}' has {loc.shape[0]} rows; the priors of a "
                             f"{frame.input_width}x{frame.input_height} input are {priors.shape[0]}")
        scores = output(outputs, self.conf, 2, self.title)[:, 1]
        keep = np.flatnonzero(scores >= np.float32(score))
        if keep.size == 0:
            return []
        loc, p = loc[keep], priors[keep]
        centre, size = p[:, 0:2], p[:, 2:3]
        v_centre, v_size = np.float32(VARIANCE[0]), np.float32(VARIANCE[1])
        xy = centre + loc[:, 0:2] * v_centre * size
        wh = size * np.exp(loc[:, 2:4] * v_size)
        boxes = np.concatenate([xy - wh / 2, xy + wh / 2], axis=1)
        raw = output(outputs, self.landmarks, 10, self.title)[keep].reshape(-1, 5, 2)
        marks = centre[:, None, :] + raw * v_centre * size[:, None, :]
        scores = scores[keep]
        kept = nms(boxes, scores, nms_threshold, top_k)
        return faces_in_photo(*select(boxes, scores, marks, kept), frame, self.landmark_names)
