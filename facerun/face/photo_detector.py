"""What a library run needs of a detector (`PhotoDetector`), and the adapter that lets a plain one (only `detect`)
run through it.

The library loop (face/library.py) splits detection into stages so it can overlap them: a decoding thread lays the
photo out as the network's input (`prepare`, after `fit_size` said how far a large photo may be decoded shrunk) and
makes that size's programs (`precompile`), the network thread runs it (`run_network`), a post-processing thread
turns the outputs into faces (`faces_from`). facerun's `Detector` implements this directly; anything else with a
`detect(rgb)` method is wrapped in `PlainDetector`, whose whole detection runs as the network stage.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np


class PhotoDetector(ABC):
    """A detector in the library run's stages. Subclass it to be run in stages; `photo_detector` wraps the rest."""

    device: str | None = None  # where the network runs ("cpu", "gpu"), when the detector knows

    @abstractmethod
    def fit_size(self, width: int, height: int) -> tuple[int, int] | None:
        """The (width, height) a photo of this size is shrunk to before the network, or None: at its own size. The
        library then decodes a large JPEG already shrunk (images.load_photo_shrunk) where it needs no more."""

    @abstractmethod
    def prepare(self, pixels: np.ndarray, shrunk: np.ndarray | None = None,
                photo_size: tuple[int, int] | None = None):
        """The photo laid out as the network's input (CPU work, on a decoding thread). `pixels`: H x W x 3 RGB or
        H x W x 4 (images.load_photo's layout; the fourth byte unused); `shrunk`: the photo already shrunk to
        fit_size; `photo_size`: the photo's own (width, height) when `pixels` is only the shrunk input. The value
        returned is handed to the other stages; its `shape` is the network input's (N, C, H, W), or () if unknown."""

    def precompile(self, prepared) -> None:
        """Make what running this input needs (programs of a new size) ahead of run_network, on the decoding thread.
        Errors are left for run_network. Nothing by default."""
        return None

    @abstractmethod
    def run_network(self, prepared):
        """Run the network on a prepared input (the network thread); returns it, holding the outputs."""

    def batch_key(self, prepared):
        """What photos must share to run in one submission (submit_networks), or None: this one runs alone. None
        by default."""
        return None

    def batch_key_of_size(self, width: int, height: int):
        """The batch_key a photo of this upright size will have, known from its header before it is decoded (a
        library run may then decode photos of one key together), or None: not known. None by default."""
        return None

    def submit_networks(self, prepared: list):
        """run_network on several prepared inputs of one batch_key: a function that waits for them and gives them
        back, outputs set, in order. One after another by default."""
        for p in prepared:
            self.run_network(p)
        return lambda: prepared

    @abstractmethod
    def faces_from(self, prepared) -> list:
        """The faces (facerun.face.faces.Face, best score first) in the photo's own pixels, from run_network's."""


@dataclass
class _Whole:
    """A plain detector's photo between the stages: the RGB it is given, then the faces it found."""

    rgb: np.ndarray | None
    faces: list | None = None
    shape: tuple = ()  # a plain detector's network input is its own business


class PlainDetector(PhotoDetector):
    """Any object with `detect(rgb) -> faces` (rgb an H x W x 3 uint8 array) as a PhotoDetector: photos decode at
    their own size, and detect() runs whole in the network stage (same faces as calling it on each photo)."""

    def __init__(self, detector):
        self.detector = detector

    def fit_size(self, width: int, height: int) -> None:
        return None

    def prepare(self, pixels: np.ndarray, shrunk: np.ndarray | None = None,
                photo_size: tuple[int, int] | None = None) -> _Whole:
        return _Whole(np.ascontiguousarray(pixels[:, :, :3]))  # a plain detect() gets a plain array

    def run_network(self, prepared: _Whole) -> _Whole:
        prepared.faces, prepared.rgb = list(self.detector.detect(prepared.rgb)), None
        return prepared

    def faces_from(self, prepared: _Whole) -> list:
        return prepared.faces


def photo_detector(detector) -> PhotoDetector:
    """`detector` as the library run uses it: itself when it is a PhotoDetector, else wrapped in PlainDetector."""
    return detector if isinstance(detector, PhotoDetector) else PlainDetector(detector)


__all__ = ["PhotoDetector", "PlainDetector", "photo_detector"]
