"""Face embeddings: detect, align to the ArcFace template, run an embedder, L2-normalise; cosine matching.

An embedder is only useful with the pre-processing it was trained with (channel order, input size, mean and std),
and an ONNX file does not say what that is. So facerun takes it from what it knows: a known model (by the file's
sha256, from facerun/known.py), a built-in replica (from its registry), a JSON sidecar next to the file, or values
the caller gives. A file with none of these is refused rather than run with a guess, since a wrong guess gives
plausible-looking but meaningless vectors.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from . import align
from ..errors import FacerunError, ImageError, InputError, ModelError

log = logging.getLogger("facerun")

# The embedders `facerun embed` looks for when no model is named, best first.
DEFAULT_EMBEDDERS = ("sface-2021dec", "auraface-v1", "mobilefacenet")
DEFAULT_BATCH = 16

DESCRIBE_HINT = "--input-size 112x112 --mean 127.5 --std 127.5 [--bgr]"


# ------------------------------------------------------------------------------------------- pre-processing


@dataclass(frozen=True)
class Preprocessing:
    """How aligned RGB uint8 crops become the model's input: (x - mean) / std per channel, in `bgr` order if set."""

    input_size: tuple[int, int]  # (w, h)
    mean: tuple[float, float, float]  # in the model's channel order, on the 0..255 scale
    std: tuple[float, float, float]
    bgr: bool = False
    source: str = "known"  # known | replica | sidecar | given
    threshold: float | None = None  # cosine match threshold, when the source gives one

    def describe(self) -> str:
        def triple(v):
            return f"{v[0]:g}" if len(set(v)) == 1 else "(" + ",".join(f"{x:g}" for x in v) + ")"

        w, h = self.input_size
        return f"{w}x{h} {'BGR' if self.bgr else 'RGB'} (x-{triple(self.mean)})/{triple(self.std)}"

    def apply(self, faces: np.ndarray) -> np.ndarray:
        """N x h x w x 3 uint8 RGB -> N x 3 x h x w float32 model input."""
        x = faces[..., ::-1] if self.bgr else faces
        x = (x.astype(np.float32) - np.float32(self.mean)) / np.float32(self.std)
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _triple(value, what: str) -> tuple[float, float, float]:
    if isinstance(value, str):
        parts = [p for p in value.replace(",", " ").split() if p]
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise InputError(f"{what} must be a number or three numbers (r,g,b), got '{value}'") from None
    elif isinstance(value, (int, float, np.floating, np.integer)):
        values = [float(value)]
    else:
        try:
            values = [float(v) for v in value]
        except (TypeError, ValueError):
            raise InputError(f"{what} must be a number or three numbers, got {value!r}") from None
    if len(values) == 1:
        values *= 3
    if len(values) != 3 or not all(np.isfinite(values)):
        raise InputError(f"{what} must be a number or three numbers (one per channel), got {value!r}")
    return tuple(values)  # type: ignore[return-value]


def parse_input_size(value) -> tuple[int, int]:
    """'112x112', 112 or (w, h) -> (w, h)."""
    try:
        if isinstance(value, str):
            parts = value.lower().replace("*", "x").split("x")
            w, h = (int(p) for p in parts) if len(parts) == 2 else (int(parts[0]),) * 2
        elif isinstance(value, (int, np.integer)):
            w = h = int(value)
        else:
            w, h = (int(v) for v in value)
    except (TypeError, ValueError):
        raise InputError(f"input size must look like 112x112 (width x height), got {value!r}") from None
    if w <= 0 or h <= 0:
        raise InputError(f"input size must be positive, got {value!r}")
    return w, h


def sidecar_paths(model_path: Path) -> list[Path]:
    """Where a description of an unknown model may sit: model.json, then model.onnx.json."""
    return [model_path.with_suffix(".json"), model_path.with_name(model_path.name + ".json")]


def _read_sidecar(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise ModelError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a JSON object with input_size, mean, std and bgr")
    unknown = set(data) - {"input_size", "mean", "std", "bgr", "rgb", "threshold", "name", "notes"}
    if unknown:
        raise ModelError(f"{path}: unknown keys {', '.join(sorted(unknown))} (use input_size, mean, std, bgr, "
                         "threshold)")
    return data


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
    """

    def __init__(self, model=None, device: str = "auto", input_size=None, mean=None, std=None, bgr=None,
                 threshold: float | None = None, models_dir=None):
        path, label, replica = _resolve(model, models_dir)
        self.path = path
        self.net = _load_net(path, device)
        self.requested_device = device
        self.known = None
        if replica is None:
            from ..zoo.known import by_sha256

            self.known = by_sha256(self.net.sha256)
        self.name = self.known.name if self.known is not None else label
        self._check_is_embedder(replica)
        given = {k: v for k, v in (("input_size", input_size), ("mean", mean), ("std", std), ("bgr", bgr))
                 if v is not None}
        self.preprocessing = self._preprocessing(replica, given)
        self.note: str | None = None
        if self.preprocessing.source in ("given", "sidecar"):
            origin = "as given" if self.preprocessing.source == "given" else f"from {self._sidecar}"
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

    def _check_is_embedder(self, replica) -> None:
        kind = replica.kind if replica is not None else (self.known.kind if self.known is not None else None)
        if kind is not None and kind != "embedder":
            raise ModelError(f"{self.name} is a face {kind}, not an embedder; pass an embedder with --model "
                             f"({', '.join(DEFAULT_EMBEDDERS)})")
        shape = self.net.input_shape
        if len(shape) != 4 or shape[1] not in (None, 3):
            raise ModelError(f"{self.name} takes input {list(shape)}; an embedder takes N x 3 x H x W images")

    def _preprocessing(self, replica, given: dict) -> Preprocessing:
        self._sidecar: Path | None = None
        base: dict | None = None
        if self.known is not None:
            k = self.known
            base = dict(input_size=k.input_size, mean=k.mean, std=k.std, bgr=not k.rgb, source="known",
                        threshold=k.threshold)
        elif replica is not None and replica.preprocess is not None:
            p = replica.preprocess
            w, h = replica.input_shape[3], replica.input_shape[2]
            base = dict(input_size=(w, h), mean=p.mean, std=p.std, bgr=p.color.upper() == "BGR", source="replica",
                        threshold=None)  # random weights: no threshold means anything
        else:
            for candidate in sidecar_paths(self.path):
                if candidate.is_file():
                    self._sidecar = candidate
                    data = _read_sidecar(candidate)
                    base = self._from_description(data, what=str(candidate))
                    base["source"] = "sidecar"
                    break
        if base is None:
            # unknown file, no sidecar: only an explicit description will do
            missing = [k for k in ("mean", "std") if k not in given]
            if "input_size" not in given and self._declared_size() is None:
                missing.insert(0, "input_size")
            if missing:
                raise ModelError(self._describe_hint(missing if given else None))
            base = dict(input_size=given.get("input_size") or self._declared_size(), mean=0.0, std=1.0,
                        bgr=False, source="given", threshold=None)
        merged = {**base, **given}
        return Preprocessing(
            input_size=parse_input_size(merged["input_size"]) if merged["input_size"] is not None
            else self._need_size(),
            mean=_triple(merged["mean"], "mean"),
            std=_checked_std(_triple(merged["std"], "std")),
            bgr=bool(merged["bgr"]),
            source=merged["source"],
            threshold=merged.get("threshold"),
        )

    def _from_description(self, data: dict, what: str) -> dict:
        if "mean" not in data or "std" not in data:
            raise ModelError(f"{what}: needs at least mean and std (and input_size unless the model fixes it)")
        bgr = data.get("bgr")
        if bgr is None and "rgb" in data:
            bgr = not data["rgb"]
        threshold = data.get("threshold")
        if threshold is not None and not isinstance(threshold, (int, float)):
            raise ModelError(f"{what}: threshold must be a number")
        return dict(input_size=data.get("input_size") or self._declared_size(), mean=data["mean"], std=data["std"],
                    bgr=bool(bgr), threshold=threshold)

    def _declared_size(self) -> tuple[int, int] | None:
        shape = self.net.input_shape
        if len(shape) == 4 and shape[2] is not None and shape[3] is not None:
            return int(shape[3]), int(shape[2])
        return None

    def _need_size(self):
        raise ModelError(f"{self.path.name} has no fixed input size; pass it with --input-size WxH")

    def _describe_hint(self, missing: list[str] | None) -> str:
        sidecar = sidecar_paths(self.path)[0]
        lead = (f"{self.path.name} is not an embedder facerun knows (sha256 {self.net.sha256[:12]}…), so its "
                "pre-processing is unknown")
        if missing:
            options = ", ".join("--" + m.replace("_", "-") for m in missing)
            lead += f" and {options} {'is' if len(missing) == 1 else 'are'} missing"
        return (f"{lead}; describe it with {DESCRIBE_HINT}, or in a JSON file {sidecar} such as "
                '{"input_size": [112, 112], "mean": 127.5, "std": 127.5, "bgr": false}')

    def _check_input_shape(self) -> None:
        declared = self._declared_size()
        if declared is not None and declared != self.input_size:
            raise ModelError(f"{self.name} takes {declared[0]}x{declared[1]} faces, but the pre-processing says "
                             f"{self.input_size[0]}x{self.input_size[1]}")

    # --------------------------------------------------------------------------------------------- embedding
    def align(self, image, landmarks) -> np.ndarray:
        """The aligned crop (at the model's input size) of one face of an RGB image."""
        return align.align_face(image, landmarks, self.input_size)

    def embed(self, faces, batch: int = DEFAULT_BATCH) -> np.ndarray:
        """Embeddings (N x dim, float32, unit length) of aligned RGB uint8 crops: an N x h x w x 3 array, a list of
        h x w x 3 arrays, or one h x w x 3 crop. Runs `batch` faces per call of the network (one GPU submission)."""
        crops = self._as_batch(faces)
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
    ) -> list[FaceEmbedding]:
        """Detect, align and embed the largest face (or every face) of each image (paths or RGB uint8 arrays).

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
    from ..zoo import find as models

    for name in DEFAULT_EMBEDDERS:
        try:
            return models.resolve(name, models_dir)
        except ModelError:
            continue
    where = ", ".join(str(d) for d in models.search_dirs(models_dir))
    raise ModelError(f"no face embedder found (looked for {', '.join(DEFAULT_EMBEDDERS)} in {where}); "
                     f"pass --model PATH|NAME, or get one with `facerun models fetch sface-2021dec`")


def _checked_std(std: tuple[float, float, float]) -> tuple[float, float, float]:
    if any(s == 0 for s in std):
        raise InputError("std must not be zero")
    return std


def _resolve(model, models_dir):
    """model argument -> (file, label, replica entry or None)."""
    from ..zoo import replicas as synthetic

    if model is None:
        path = default_embedder(models_dir)
        return path, path.name, None
    text = str(model)
    if not Path(text).exists() and synthetic.is_replica(text):
        return synthetic.replica_path(text), text, synthetic.get_replica(text)
    from ..zoo import find as models

    path = models.resolve(text, models_dir)
    return path, path.name, None


def _load_net(path: Path, device: str):
    import facerun

    try:
        return facerun.load(str(path), device=device)
    except ModuleNotFoundError as e:
        # the GPU path is optional; where its modules are absent, "auto" means the CPU
        if device == "auto" and (e.name or "").startswith("facerun."):
            return facerun.load(str(path), device="cpu")
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
