"""Face detection with any detector family on facerun's runtime; YuNet gives the same faces as cv2.FaceDetectorYN."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import settings
from ..errors import InputError, ModelError, UnsupportedOps
from ..runner import Workload
from . import families, yunet
from .faces import Face, rescaled
from .images import load_image
from .photo_detector import PhotoDetector

# YuNet draws boxes as exp(size) * stride around its anchors, and it was trained on 640x640 crops, so a face much
# taller than ~500 px is scored poorly or split in two (a 3061x4600 portrait finds nothing at full size). Shrinking
# the longer side to 1280 brings such faces into range, while 1280x720 frames and WIDER photos (1024 wide) are
# left at full size, where small faces need every pixel.
DEFAULT_MAX_SIDE = 1280
CHECK_SIDE = 128  # the GPU checks YuNet whole at most this size (ms on the CPU), its other variants layer by layer
# On the GPU a photo runs in the program of its padded size rounded up to a multiple of this, masked to its own size
# (exactly its own program's outputs: gpu/masking.py), so a library of many sizes meets few programs. A multiple of
# yunet.PAD_DIVISOR; FACERUN_PHOTO_BUCKET sets it (32: a program per padded size, as before).
PHOTO_BUCKET = settings.default("FACERUN_PHOTO_BUCKET")  # 128


RUNTIMES = ("facerun", "onnxruntime")


@dataclass
class Prepared:
    """One photo on its way through the detector: the network input, the shrink factors, then the raw outputs."""

    blob: np.ndarray | None  # 1 x 3 x h x w; None when the GPU lays out `image` itself
    frame: object  # the family's Frame: how the network input maps onto the photo
    scale_x: float
    scale_y: float
    outputs: dict | None = None
    image: np.ndarray | None = None  # the (shrunk) photo, for the GPU to lay out (YuNet on the GPU)
    shape: tuple = ()  # the network input's shape
    bucket: tuple | None = None  # the larger input the GPU may run it in, masked to `shape` (PHOTO_BUCKET)


class Detector(PhotoDetector):
    """A face detector of any family facerun knows (YuNet, SCRFD, RetinaFace, UltraFace, BlazeFace, YOLOv5-face),
    with that family's own pre-processing and decoding; the family is recognised from the file's graph.

    model: None (YuNet 2023mar, found by `facerun.zoo.find`), a path or a known model name.
    score, nms: thresholds; None takes the family's own defaults (`Detector.family.score`, `.nms`).
    max_side: for YuNet, which runs on the photo at its own size: photos whose longer side exceeds it are shrunk
    first (0 keeps full size). The other families resize every photo into their network's input anyway.
    runtime: "facerun" (its interpreter, or the GPU per `device`) or "onnxruntime" (the reference oracle, for
    comparisons and for models using operators facerun does not run yet).
    for_alignment: refuse, before loading anything, a model whose family gives no five landmarks.
    input_size: (w, h) of the network input for a file that leaves it free (SCRFD; 640x640 by default).
    Faces come back in the original photo's coordinates either way.
    """

    def __init__(self, model=None, device: str = "auto", score: float | None = None, nms: float | None = None,
                 top_k: int = 5000, max_side: int = DEFAULT_MAX_SIDE, runtime: str = "facerun",
                 for_alignment: bool = False, input_size: tuple[int, int] | None = None):
        if score is not None and not 0.0 <= score <= 1.0:
            raise InputError(f"score threshold must be between 0 and 1, not {score}")
        if nms is not None and not 0.0 <= nms <= 1.0:
            raise InputError(f"NMS threshold must be between 0 and 1, not {nms}")
        if max_side < 0:
            raise InputError(f"max side must be 0 (full size) or a positive number of pixels, not {max_side}")
        if runtime not in RUNTIMES:
            raise InputError(f"unknown runtime '{runtime}' ({' or '.join(RUNTIMES)})")
        self.card = _card(model)
        self.model_path = self.card.path
        self.family = families.family_of(self.model_path)
        if for_alignment and not self.family.five_points:
            raise ModelError(self.family.no_five_points_reason())
        if input_size is not None:
            self.family.choose_input_size(input_size)
        self.score_threshold = float(self.family.score if score is None else score)
        self.nms_threshold = float(self.family.nms if nms is None else nms)
        self.top_k = int(top_k)
        self.max_side = int(max_side)
        self.runtime = runtime
        self.net = _load_net(self.card, device, runtime, self.family, self._workload(device, runtime))

    def _workload(self, device: str, runtime: str) -> Workload | None:
        """What the net's runner is told of this detector's use of it (runner.Workload), or None (onnxruntime)."""
        if runtime != "facerun":
            return None
        if not self.family.follows_image:
            return Workload()
        # a photo library meets every size up to max_side: the GPU's one check runs the whole network small and
        # covers the kernel variants of the sizes to come from three programs (what YuNet's layers choose between:
        # with its pools folded into the 1x1s after them, a pooled 1x1 of photos between 640 and 1280 takes a tile
        # neither end does)
        side = -(-(self.max_side or DEFAULT_MAX_SIDE) // 32) * 32
        middle = (min(640, side) + side) // 64 * 32
        expected = tuple((1, 3, s, s) for s in sorted({min(640, side), middle, side}))
        # photos go to the device as their bytes, in buckets of PHOTO_BUCKET (a family whose outputs can be cut)
        # and where the setting lets it, the device chooses the heads' rows worth reading back (gpu/select.py)
        score = self.score_threshold if settings.get("FACERUN_PHOTO_SELECT") else None
        layout = self.family.photo_layout(photo_bucket() if device != "cpu" else 0, score)
        return Workload(check_side=CHECK_SIDE, expected_shapes=expected, photo=layout)

    @property
    def device(self) -> str:
        return self.net.device

    @property
    def generation(self) -> str | None:
        """YuNet's generation (2023mar, 2022mar); None for the other families."""
        return getattr(self.family, "generation", None)

    def detect(self, image, bgr: bool = False) -> list[Face]:
        """Faces in an RGB uint8 HxWx3 array or an image file, best score first.

        bgr=True: the array is in BGR order (what cv2.imread gives); a file is always read correctly."""
        if isinstance(image, (str, Path)):
            rgb = load_image(image)
        else:
            rgb = _checked_rgb(image)
            if bgr:
                rgb = rgb[:, :, ::-1]
        return self.faces_from(self.run_network(self.prepare(rgb)))

    # The stages of `detect` (photo_detector.PhotoDetector), apart so a library run can overlap them (decode and
    # prepare on worker threads, the network on the device, faces_from on another thread) and still give exactly
    # what `detect` gives.
    def prepare(self, rgb: np.ndarray, shrunk: np.ndarray | None = None,
                photo_size: tuple[int, int] | None = None) -> Prepared:
        """Shrink to max_side (YuNet) and lay out the network's input: CPU work, no model.

        rgb may also be h x w x 4 (R, G, B and an unused byte, as images.load_photo gives), and `shrunk` the photo
        already shrunk to `fit_size` (load_photo does it from Pillow's image, without another copy). `photo_size`:
        the photo's own (width, height) when `rgb` is already fitted to it (images.load_photo_shrunk): the faces are
        then given at the photo's size."""
        pixels = _checked_pixels(rgb)
        height, width = pixels.shape[:2]
        scale_x = scale_y = 1.0
        if photo_size is not None and tuple(photo_size) != (width, height):
            if not self.family.follows_image:
                raise InputError(f"{type(self.family).__name__} takes the photo itself, not one fitted to its size")
            shrunk, (width, height) = pixels, tuple(photo_size)
        if self.family.follows_image:
            if shrunk is not None:
                pixels = _checked_pixels(shrunk)
                if self.fit_size(width, height) != (pixels.shape[1], pixels.shape[0]):
                    raise InputError(f"a {width}x{height} photo shrinks to {self.fit_size(width, height)}, "
                                     f"not {pixels.shape[1]}x{pixels.shape[0]}")
                scale_x, scale_y = pixels.shape[1] / width, pixels.shape[0] / height
            else:
                pixels, scale_x, scale_y = yunet.fit_max_side(pixels, self.max_side)
        if self._photos_on_device():  # the photo goes up as its bytes (three or four a pixel); the device lays it out
            shape, frame = self.family.layout(pixels)
            return Prepared(None, frame, scale_x, scale_y, image=pixels, shape=shape,
                            bucket=self.net.photo_bucket(shape))
        rgb = pixels[:, :, :3]  # YuNet's make_blob reads a view; the families that resize want it contiguous
        blob, frame = self.family.prepare(rgb if self.family.follows_image else np.ascontiguousarray(rgb))
        return Prepared(blob, frame, scale_x, scale_y, shape=tuple(blob.shape))

    def fit_size(self, width: int, height: int) -> tuple[int, int] | None:
        """The (width, height) a photo of this size is shrunk to before the network (YuNet past max_side), or
        None: it goes in as it is (other families resize every photo into their fixed input themselves)."""
        if not self.family.follows_image:
            return None
        return yunet.shrunk_size(width, height, self.max_side)

    def _photos_on_device(self) -> bool:
        return self.runtime == "facerun" and self.net.takes_photos

    def precompile(self, prepared: Prepared) -> None:
        """Compile the network's program for this input (and, once the GPU has passed its check, the program's GPU
        form) and put a photo's bytes on the device ahead of run_network: a library's decoding threads do it, so the
        network thread mostly runs. Errors are left for run_network to raise."""
        if self.runtime != "facerun":
            return
        self.net.prepare(prepared.shape, photo=prepared.image is not None)
        if prepared.image is not None:  # its bytes up now, on this thread: not on the one feeding the device
            prepared.image = self.net.stage_photo(prepared.image)

    def run_network(self, prepared: Prepared) -> Prepared:
        if prepared.image is not None:
            prepared.outputs = self.net.run_photo(prepared.image, prepared.shape, bucket=prepared.bucket)
        else:
            prepared.outputs = self.net.run(prepared.blob)
        return prepared

    def batch_key(self, prepared: Prepared):
        """Photos laid out on the device in one GPU bucket run in one submission."""
        return prepared.bucket if prepared.image is not None else None

    def batch_key_of_size(self, width: int, height: int):
        """The GPU bucket a photo of this upright size runs in (prepare's, from its header), or None."""
        if not self.family.follows_image or not self._photos_on_device():
            return None
        fit_w, fit_h = self.fit_size(width, height) or (width, height)
        shape, _ = self.family.layout(np.broadcast_to(np.uint8(0), (fit_h, fit_w, 3)))  # a size, no pixels
        return self.net.photo_bucket(shape)

    def submit_networks(self, prepared: list[Prepared]):
        """run_network on several photos, those of one GPU bucket in one submission (Net.submit_photos): a function
        that waits for them and gives them back, outputs set, in order (the very outputs run_network gives)."""
        bucket = prepared[0].bucket if prepared else None
        if (self.runtime == "facerun" and prepared and bucket is not None
                and all(p.image is not None and p.bucket == bucket for p in prepared)):
            done = self.net.submit_photos([p.image for p in prepared], [p.shape for p in prepared], bucket)

            def finish() -> list[Prepared]:
                for p, out in zip(prepared, done()):
                    p.outputs = out
                return prepared

            return finish
        for p in prepared:
            self.run_network(p)
        return lambda: prepared

    def faces_from(self, prepared: Prepared) -> list[Face]:
        """Decode the outputs (NMS included) into faces in the original photo's pixels."""
        faces = self.family.decode(prepared.outputs, prepared.frame, self.score_threshold, self.nms_threshold,
                                   self.top_k)
        if prepared.scale_x != 1.0 or prepared.scale_y != 1.0:
            faces = [rescaled(face, prepared.scale_x, prepared.scale_y) for face in faces]
        return faces

    def detect_rows(self, rgb: np.ndarray) -> np.ndarray:
        """YuNet only: OpenCV's result layout for an image taken as it is (no resizing): N x 15 float32 rows
        (x, y, w, h, 5 landmarks, score), in cv2.FaceDetectorYN.detect's order."""
        if not isinstance(self.family, yunet.YuNet):
            raise ModelError(f"detect_rows gives OpenCV's YuNet rows; {self.family.title} faces come from detect")
        blob, frame = self.family.prepare(_checked_rgb(rgb))
        return self.family.decode_rows(self.net.run(blob), frame, self.score_threshold, self.nms_threshold,
                                       self.top_k)

    def require_five_points(self) -> None:
        """ModelError (one line) when this detector's faces have no five landmarks to align with."""
        if not self.family.five_points:
            raise ModelError(self.family.no_five_points_reason())


def photo_bucket() -> int:
    """PHOTO_BUCKET, or FACERUN_PHOTO_BUCKET (a positive multiple of 32) when set."""
    return settings.get("FACERUN_PHOTO_BUCKET")


def _checked_rgb(image) -> np.ndarray:
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
        raise InputError(f"expected an HxWx3 uint8 RGB image, got {array.dtype} {list(array.shape)}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise InputError(f"empty image {list(array.shape)}")
    return array


def _checked_pixels(image) -> np.ndarray:
    """An HxWx3 RGB or HxWx4 (RGB and an unused byte) uint8 image."""
    array = np.asarray(image)
    if array.ndim == 3 and array.shape[2] == 4 and array.dtype == np.uint8 and array.shape[0] and array.shape[1]:
        return array
    return _checked_rgb(array)


def _card(model):
    from ..zoo.card import identify
    from ..zoo.find import default_detector

    # a path, a built-in replica (yunet-arch) or a known model's name
    return identify(default_detector() if model is None else model)


def _load_net(card, device: str, runtime: str, family, workload: Workload | None):
    path = card.path
    if runtime == "onnxruntime":
        if device == "gpu":
            raise InputError("--runtime onnxruntime runs on the CPU; use --device cpu or auto")
        from ..ort import OracleNet

        return OracleNet(path)
    import facerun

    try:
        return facerun.load(card, device=device, workload=workload)
    except UnsupportedOps as e:
        # the family's decoder is ready; only the network's operators are missing from facerun's interpreter
        error = UnsupportedOps(e.ops)
        message = (f"{path.name} ({family.title}) uses {e}; `--runtime onnxruntime` runs it with onnxruntime "
                   "until facerun supports them")
        error.args = (message,)
        raise error from None
