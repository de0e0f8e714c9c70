"""Face embeddings: detect, align to the ArcFace template, run an embedder, L2-normalise; cosine matching.

An embedder is only useful with the pre-processing it was trained with (channel order, input size, mean and std),
and an ONNX file does not say what that is. So facerun takes it from the model's card (facerun.zoo.card): a known
model (by the file's sha256), a built-in replica, a JSON sidecar next to the file, or values the caller gives. A
file with none of these is refused rather than run with a guess, since a wrong guess gives plausible-looking but
meaningless vectors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import settings
from ..errors import FacerunError, ImageError, InputError, ModelError
from ..runner import FaceCut, FaceLayout, Workload
from ..zoo.card import Preprocess, parse_input_size
from . import align

log = logging.getLogger("facerun")

# The embedders `facerun embed` looks for when no model is named, best first.
DEFAULT_EMBEDDERS = ("sface-2021dec", "auraface-v1", "mobilefacenet")
DEFAULT_BATCH = 16


# ------------------------------------------------------------------------------------------- pre-processing


@dataclass(frozen=True)
class Preprocessing(Preprocess):
    """An embedder's pre-processing (facerun.zoo.card.Preprocess) with where it comes from and its threshold."""

    source: str = "known"  # known | replica | sidecar | given
    threshold: float | None = None  # cosine match threshold, when the source gives one


# -------------------------------------------------------------------------------------------------- records


@dataclass
class FaceEmbedding:
    """One embedded face: where it came from and its unit-length vector."""

    image: str
    box: tuple[float, float, float, float]  # x, y, w, h in the original image
    score: float
    embedding: np.ndarray = field(repr=False)
    landmarks: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self, model: str | None = None, with_embedding: bool = True, digits: int = 6) -> dict:
        d = {"image": self.image, "box": [round(float(v), 2) for v in self.box], "score": round(float(self.score), 4)}
        if model is not None:
            d["model"] = model
        if with_embedding:
            d["embedding"] = [round(float(v), digits) for v in self.embedding]
        return d


@dataclass
class Timing:
    """Seconds spent per stage by `Embedder.embed_images`, and what was counted."""

    images: int = 0
    faces: int = 0
    load_s: float = 0.0
    detect_s: float = 0.0
    align_s: float = 0.0
    embed_s: float = 0.0

    @property
    def ms_per_face(self) -> float | None:
        """Aligning plus embedding, per face (detection is per image, reported apart)."""
        return (self.align_s + self.embed_s) * 1000.0 / self.faces if self.faces else None


# ------------------------------------------------------------------------------------------------- embedder


class Embedder:
    """A face embedder: aligned RGB uint8 crops in, L2-normalised vectors out.

    model: a path, a known model name (sface-2021dec, auraface-v1, mobilefacenet), a replica name
    (sface-arch, auraface-arch, and their -small variants), or None for the first known embedder found.
    input_size / mean / std / bgr: the pre-processing; required (all but input_size, which a file with a fixed input
    shape gives) for a file facerun does not know, else they override the known values.
    precision: "f32", or "f16" on the GPU (facerun.load: Winograd's planes as half floats, checked against the CPU).
    """

    def __init__(self, model=None, device: str = "auto", input_size=None, mean=None, std=None, bgr=None,
                 threshold: float | None = None, models_dir=None, precision: str = "f32"):
        from ..net import GPU_BATCHES
        from ..zoo.card import embedder_card, identify

        # the batches a GPU runs (net.gpu_batch): their kernel variants checked up front, with the first
        self.net = _load_net(identify(model if model is not None else default_embedder(models_dir), models_dir),
                             device, precision, Workload(expected_batches=tuple(b for b in GPU_BATCHES if b > 1)))
        card = self.net.card
        self.path = card.path
        self.requested_device = device
        self.precision = precision
        self.known = card.known
        self.name = card.display_name
        self._check_is_embedder(card)
        given = {k: v for k, v in (("input_size", input_size), ("mean", mean), ("std", std), ("bgr", bgr))
                 if v is not None}
        self._given = given
        self.card = embedder_card(card, given, self._declared_size())
        pre = self.card.preprocess
        self.preprocessing = Preprocessing(pre.input_size, pre.mean, pre.std, pre.bgr, source=self.card.source,
                                           threshold=self.card.threshold)
        self.note: str | None = None
        if self.preprocessing.source in ("given", "sidecar"):
            origin = "as given" if self.preprocessing.source == "given" else f"from {self.card.sidecar}"
            self.note = (f"{self.path.name} is not a model facerun knows; using the pre-processing {origin}: "
                         f"{self.preprocessing.describe()}")
            log.info(self.note)
        elif given:
            self.note = f"{self.name}: pre-processing overridden: {self.preprocessing.describe()}"
            log.info(self.note)
        self.threshold = float(threshold) if threshold is not None else self.preprocessing.threshold
        self._check_input_shape()
        self._dim: int | None = None

    # --------------------------------------------------------------------------------------- description
    def arguments(self) -> dict:
        """The keyword arguments that make this embedder again (another process's: the processes engine), with
        the model by its file, so every process loads the very same one."""
        threshold = None if self.threshold == self.preprocessing.threshold else self.threshold
        return {"model": str(self.path), "device": self.requested_device, **self._given, "threshold": threshold,
                "precision": self.precision}

    @property
    def device(self) -> str:
        return self.net.device

    @property
    def input_size(self) -> tuple[int, int]:
        return self.preprocessing.input_size

    @property
    def dim(self) -> int:
        """The embedding length, read from the compiled program's output shape."""
        if self._dim is None:
            w, h = self.input_size
            prog = self.net.program((1, 3, h, w))
            shape = prog.shape(prog.outputs[0][1])
            self._dim = int(np.prod(shape[1:]))
        return self._dim

    def _check_is_embedder(self, card) -> None:
        if card.source in ("known", "replica") and card.kind != "embedder":
            what = "a face detector" if card.kind == "detector" else "a test graph"
            raise ModelError(f"{self.name} is {what}, not an embedder; pass an embedder with --embedder "
                             f"({', '.join(DEFAULT_EMBEDDERS)})")
        shape = self.net.input_shape
        if len(shape) != 4 or shape[1] not in (None, 3):
            raise ModelError(f"{self.name} takes input {list(shape)}; an embedder takes N x 3 x H x W images")

    def _declared_size(self) -> tuple[int, int] | None:
        shape = self.net.input_shape
        if len(shape) == 4 and shape[2] is not None and shape[3] is not None:
            return int(shape[3]), int(shape[2])
        return None

    def _check_input_shape(self) -> None:
        declared = self._declared_size()
        if declared is not None and declared != self.input_size:
            raise ModelError(f"{self.name} takes {declared[0]}x{declared[1]} faces, but the pre-processing says "
                             f"{self.input_size[0]}x{self.input_size[1]}")

    # --------------------------------------------------------------------------------------------- embedding
    def align(self, image, landmarks, bgr: bool = False) -> np.ndarray:
        """The aligned RGB crop (at the model's input size) of one face of an RGB image (bgr=True: a BGR image,
        as cv2.imread gives; the crop still comes back RGB)."""
        crop = align.align_face(image, landmarks, self.input_size)
        return np.ascontiguousarray(crop[:, :, ::-1]) if bgr else crop

    def embed(self, faces, batch: int = DEFAULT_BATCH, bgr: bool = False) -> np.ndarray:
        """Embeddings (N x dim, float32, unit length) of aligned RGB uint8 crops: an N x h x w x 3 array, a list of
        h x w x 3 arrays, or one h x w x 3 crop (bgr=True: the crops are BGR, e.g. insightface's norm_crop of a
        cv2.imread image). Runs `batch` faces per call of the network (one GPU submission)."""
        crops = self._as_batch(faces)
        if bgr:
            crops = crops[..., ::-1]
        if batch < 1:
            raise InputError(f"batch must be 1 or more, not {batch}")
        if len(crops) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        chunks = []
        for start in range(0, len(crops), batch):
            x = self.preprocessing.apply(crops[start : start + batch])
            out = self.net.run_batch(x)[0]
            chunks.append(np.asarray(out, dtype=np.float32).reshape(len(x), -1))
        vectors = np.concatenate(chunks)
        self._dim = vectors.shape[1]
        return l2_normalize(vectors)

    def submit(self, faces, bgr: bool = False) -> Callable[[], np.ndarray]:
        """`embed` of at most one batch of crops, started on the device and not waited for: a function giving the
        embeddings. The caller aligns the next faces while the device runs these (a library's run); the next
        submission reads this one back first. On the CPU the embeddings are made now."""
        crops = self._as_batch(faces)
        if bgr:
            crops = crops[..., ::-1]
        if len(crops) == 0:
            empty = np.zeros((0, self.dim), dtype=np.float32)
            return lambda: empty
        return self._vectors(self.net.submit_batch(self.preprocessing.apply(crops)), len(crops))

    def cut(self, image, landmarks):
        """What a library run keeps of a face until it is embedded: where the device aligns faces (the GPU, unless
        FACERUN_GPU_ALIGN is off), the part of the photo its crop is sampled from (runner.FaceCut, align.cut_face);
        else its aligned crop (`align`). Either goes to `submit_faces`."""
        if self.net.gpu is not None and settings.get("FACERUN_GPU_ALIGN"):
            rgb = np.asarray(image)
            return align.cut_face(rgb[:, :, :3] if rgb.ndim == 3 and rgb.shape[2] == 4 else rgb, landmarks,
                                  self.input_size)
        return self.align(image, landmarks)

    def submit_faces(self, faces: list) -> Callable[[], np.ndarray]:
        """`submit` of what `cut` gave for at most one batch of faces: the faces aligned where the network runs (the
        regions go up, the device samples them) when all of them are cuts, else aligned here."""
        if not faces:
            return self.submit(np.zeros((0, self.input_size[1], self.input_size[0], 3), np.uint8))
        if not all(isinstance(face, FaceCut) for face in faces):  # the GPU was dropped between cuts: crops here
            crops = [align.warp_cut(f, self.input_size) if isinstance(f, FaceCut) else f for f in faces]
            return self.submit(np.stack(crops))
        return self._vectors(self.net.submit_faces(faces, self.face_layout), len(faces))

    def _vectors(self, result: Callable, count: int) -> Callable[[], np.ndarray]:
        """The unit embeddings of `count` faces from a submitted batch's outputs (`result()`), when asked for."""

        def vectors() -> np.ndarray:
            out = np.asarray(result()[0], dtype=np.float32).reshape(count, -1)
            self._dim = out.shape[1]
            return l2_normalize(out)

        return vectors

    @property
    def face_layout(self) -> FaceLayout:
        """How this embedder takes aligned faces (runner.FaceLayout), for a runner that aligns them itself."""
        pre = self.preprocessing
        size = self.input_size

        def blob(cuts: list) -> np.ndarray:
            return pre.apply(np.stack([align.warp_cut(cut, size) for cut in cuts]))

        return FaceLayout(size, tuple(pre.mean), tuple(pre.std), bool(pre.bgr), blob)

    def _as_batch(self, faces) -> np.ndarray:
        if isinstance(faces, np.ndarray) and faces.ndim == 3:
            faces = faces[None]
        if isinstance(faces, (list, tuple)):
            faces = np.stack([np.asarray(f) for f in faces]) if faces else np.zeros((0, 1, 1, 3), np.uint8)
        crops = np.asarray(faces)
        w, h = self.input_size
        if len(crops) == 0:
            return crops.reshape(0, h, w, 3).astype(np.uint8)
        if crops.ndim != 4 or crops.shape[1:] != (h, w, 3):
            raise InputError(f"{self.name} embeds aligned {w}x{h} RGB crops (N x {h} x {w} x 3), got "
                             f"{list(crops.shape)}; align faces with Embedder.align")
        if crops.dtype != np.uint8:
            raise InputError(f"aligned crops must be uint8 RGB, got {crops.dtype}")
        return crops

    def embed_images(
        self,
        images: Iterable,
        detector=None,
        all_faces: bool = False,
        batch: int = DEFAULT_BATCH,
        on_image: Callable[[str, int, FacerunError | None], None] | None = None,
        skip_unreadable: bool = False,
        timing: Timing | None = None,
        bgr: bool = False,
    ) -> list[FaceEmbedding]:
        """Detect, align and embed the largest face (or every face) of each image (paths or RGB uint8 arrays;
        bgr=True: the arrays are BGR, as cv2.imread gives, while files are read correctly either way).

        Faces are embedded `batch` at a time across images. An image with no face gives no record. An image that
        cannot be read raises ImageError, or with skip_unreadable=True is passed to `on_image` and skipped.
        on_image(label, faces_found, error) is called once per image, after its detection."""
        if batch < 1:
            raise InputError(f"batch must be 1 or more, not {batch}")
        if detector is None:
            from .detect import Detector

            detector = Detector(device=self.requested_device)
        require = getattr(detector, "require_five_points", None)
        if require is not None:
            require()  # before any work: a detector without five landmarks cannot feed the alignment
        timing = timing if timing is not None else Timing()
        records: list[FaceEmbedding] = []
        pending: list[tuple[FaceEmbedding, np.ndarray]] = []

        def flush(count: int):
            # the first `count` pending faces go through the network together
            start = time.perf_counter()
            vectors = self.embed(np.stack([crop for _, crop in pending[:count]]), batch=batch)
            timing.embed_s += time.perf_counter() - start
            for (record, _), vector in zip(pending[:count], vectors):
                record.embedding = vector
            del pending[:count]

        for index, item in enumerate(images):
            label = str(item) if isinstance(item, (str, Path)) else f"array {index}"
            try:
                start = time.perf_counter()
                rgb = _load(item)
                if bgr and not isinstance(item, (str, Path)):
                    rgb = rgb[:, :, ::-1]
                timing.load_s += time.perf_counter() - start
                start = time.perf_counter()
                faces = detector.detect(rgb)
                timing.detect_s += time.perf_counter() - start
            except FacerunError as e:
                if not skip_unreadable or not isinstance(e, (ImageError, InputError)):
                    raise
                if on_image is not None:
                    on_image(label, 0, e)
                continue
            timing.images += 1
            chosen = faces if all_faces else largest(faces)
            start = time.perf_counter()
            for face in chosen:
                record = FaceEmbedding(image=label, box=tuple(float(v) for v in face.box), score=float(face.score),
                                       embedding=np.empty(0, np.float32), landmarks=np.asarray(face.landmarks))
                records.append(record)
                pending.append((record, self.align(rgb, face.landmarks)))
            timing.align_s += time.perf_counter() - start
            timing.faces += len(chosen)
            if on_image is not None:
                on_image(label, len(chosen), None)
            while len(pending) >= batch:
                flush(batch)
        if pending:
            flush(len(pending))
        return records


# -------------------------------------------------------------------------------------------------- helpers


def l2_normalize(vectors: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    return (v / np.maximum(norms, eps)).astype(np.float32)


def cosine(a, b) -> float:
    """Cosine similarity of two vectors (normalised here, so raw outputs work too)."""
    a = l2_normalize(np.asarray(a, dtype=np.float32).reshape(-1))
    b = l2_normalize(np.asarray(b, dtype=np.float32).reshape(-1))
    if a.shape != b.shape:
        raise InputError(f"cannot compare embeddings of length {a.size} and {b.size}")
    return float(np.clip(np.dot(a, b), -1.0, 1.0))


def cosine_matrix(a, b=None) -> np.ndarray:
    """All pairwise cosine similarities between the rows of a and b (or a with itself)."""
    a = l2_normalize(np.atleast_2d(a))
    b = a if b is None else l2_normalize(np.atleast_2d(b))
    return np.clip(a @ b.T, -1.0, 1.0)


def same_person(cos: float, threshold: float) -> bool:
    """The verdict: a cosine at or above the threshold means one person."""
    return bool(cos >= threshold)


def largest(faces: list) -> list:
    """The face with the largest box (as a list of zero or one), the usual choice for a portrait photo."""
    if not faces:
        return []
    return [max(faces, key=lambda f: float(f.box[2]) * float(f.box[3]))]


def default_embedder(models_dir=None) -> Path:
    """The first known embedder found in the model folders (sface-2021dec, auraface-v1, mobilefacenet)."""
    from ..zoo import find

    for name in DEFAULT_EMBEDDERS:
        try:
            return find.resolve(name, models_dir)
        except ModelError:
            continue
    where = ", ".join(str(d) for d in find.search_dirs(models_dir))
    raise ModelError(f"no face embedder found (looked for {', '.join(DEFAULT_EMBEDDERS)} in {where}); "
                     f"pass --embedder NAME|PATH, or get one with `facerun models fetch sface-2021dec`")


def _load_net(card, device: str, precision: str = "f32", workload: Workload | None = None):
    import facerun

    try:
        return facerun.load(card, device=device, precision=precision, workload=workload)
    except ModuleNotFoundError as e:
        # the GPU path is optional; where its modules are absent, "auto" means the CPU
        if device == "auto" and (e.name or "").startswith("facerun."):
            return facerun.load(card, device="cpu", workload=workload)
        raise


def _load(item) -> np.ndarray:
    from .images import load_image

    if isinstance(item, (str, Path)):
        return load_image(item)
    array = np.asarray(item)
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8 or 0 in array.shape:
        raise InputError(f"expected an HxWx3 uint8 RGB image, got {array.dtype} {list(array.shape)}")
    return array


__all__ = [
    "Embedder",
    "FaceEmbedding",
    "Preprocessing",
    "Timing",
    "DEFAULT_EMBEDDERS",
    "cosine",
    "cosine_matrix",
    "same_person",
    "l2_normalize",
    "largest",
    "default_embedder",
    "parse_input_size",
]
