"""UltraFace (Linzaer's Ultra-Light-Fast-Generic-Face-Detector-1MB, RFB and slim): boxes decoded inside the graph,
no landmarks.

Pre- and post-processing as the project's `detect_imgs_onnx.py` does them:
- RGB, resized to the input size (320x240 for the -320 files) without keeping the aspect, (x - 127) / 128;
- outputs scores [1, P, 2] (softmax applied, column 1 = face) and boxes [1, P, 4], corner form as fractions of the
  input (the priors and the variance decoding are part of the graph);
- score > 0.7, hard NMS at IoU 0.3.
"""

from __future__ import annotations

import numpy as np

from .faces import NO_POINTS
from .family import (
    Family,
    Graph,
    faces_in_photo,
    last_dim,
    nms,
    output,
    select,
    stretch,
    to_blob,
)

MEAN, STD = 127.0, 128.0


class UltraFace(Family):
    name = "ultraface"
    title = "UltraFace"
    score = 0.7
    nms = 0.3
    landmark_names = NO_POINTS
    default_input_size = (320, 240)

    def __init__(self, graph: Graph):
        super().__init__(graph)
        by_width = {last_dim(shape): name for name, shape in graph.outputs}
        self.scores, self.boxes = by_width[2], by_width[4]

    @classmethod
    def matches(cls, graph: Graph) -> bool:
        shapes = graph.output_shapes
        if len(shapes) != 2 or len(graph.input_shape) != 4 or not all(len(s) == 3 for s in shapes):
            return False
        return sorted(last_dim(s) for s in shapes) == [2, 4] and shapes[0][1] == shapes[1][1]

    def prepare(self, rgb):
        canvas, frame = stretch(rgb, self.input_size())
        return to_blob(canvas, MEAN, STD, bgr=False), frame

    def decode(self, outputs, frame, score, nms_threshold, top_k):
        scores = output(outputs, self.scores, 2, self.title)[:, 1]
        keep = np.flatnonzero(scores > np.float32(score))
        if keep.size == 0:
            return []
        boxes = output(outputs, self.boxes, 4, self.title)[keep] * np.float32(
            [frame.input_width, frame.input_height, frame.input_width, frame.input_height])
        scores = scores[keep]
        kept = nms(boxes, scores, nms_threshold, top_k)
        return faces_in_photo(*select(boxes, scores, None, kept), frame, self.landmark_names)
