"""Which faces are good enough to put a name on: a minimum box side and detector score.

Faces below the gate are kept in the database (unless `index --skip-small`) but go to the "unsorted" group
(faces.cluster = UNSORTED) instead of into a person, and `identify` calls them unknown without matching them.

Defaults measured on the shared photos (benchmarks/face_size.py: the identity photos shrunk until their largest
face is S px on its shorter box side, detected and embedded again, matched against everyone's full-size photos at
MobileFaceNet's threshold): named right 0.036 at 12 px, 0.321 at 16, 0.738 at 20 (2.4% named wrongly), 0.976 at
24, 0.988 at 32, 1.000 from 40; so 32 px, the smallest side tried with 98% or more named right and none wrongly.
Of the 1,313 WIDER crowd faces in shared/data, 1,082 are below it (median side 16 px). Score: 0.65, under the
lowest-scoring face of the shared identity photos (0.659), so the gate takes no clear face away.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

MIN_FACE = 32.0  # px, the shorter side of the face's box
MIN_SCORE = 0.65
UNSORTED = -3  # faces.cluster of a face below the gate


@dataclass(frozen=True)
class Gate:
    min_face: float = MIN_FACE
    min_score: float = MIN_SCORE

    def __post_init__(self):
        if self.min_face < 0 or not np.isfinite(self.min_face):
            raise InputError(f"--min-face must be 0 or more pixels, not {self.min_face}")
        if not 0 <= self.min_score <= 1:
            raise InputError(f"--min-score must be from 0 to 1, not {self.min_score}")

    def passes(self, boxes, scores=None) -> np.ndarray:
        """Per face (boxes n x 4: x, y, w, h; scores n), whether it is good enough to name."""
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
        ok = np.minimum(boxes[:, 2], boxes[:, 3]) >= self.min_face
        if scores is not None:
            ok &= np.asarray(scores, np.float64) >= self.min_score
        return ok

    def keeps(self, face) -> bool:
        """For one detected face (facerun.face.faces.Face)."""
        return bool(self.passes([face.box], [face.score])[0])

    def describe(self) -> str:
        return f"faces under {self.min_face:g} px or scoring under {self.min_score:g}"


DEFAULT_GATE = Gate()

__all__ = ["DEFAULT_GATE", "MIN_FACE", "MIN_SCORE", "UNSORTED", "Gate"]
