"""A model's card: what facerun knows about one model file, worked out once and carried by its `Net` (`net.card`).

A card says which file it is (path, sha256, a label for messages), what the model is (kind: detector, embedder or
other; family: yunet-2023mar, yunet-2022mar, arcface-style, ...), how to feed it (pre-processing: channel order,
mean and std on the 0..255 scale, input size; hence the range of its input values), an embedder's match threshold,
and where all that comes from (`source`):

    known     the file's sha256 is in facerun.zoo.known
    replica   a built-in replica (by name, or its cached file), facerun.zoo.replicas
    sidecar   a JSON description beside the file (model.json or model.onnx.json)
    given     pre-processing given by the caller (Embedder(mean=..., std=...), --mean/--std)
    graph     none of these: kind and family recognised from the graph's shape, pre-processing unknown

`card_for(name_or_path)` makes one. `facerun.load` makes the card without reading the graph (`identify`), and its
`Net` recognises an unknown file by its graph on first use of `net.card`, keeping the program it compiles for that.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import FacerunError, InputError, ModelError
from ..io import sha256_of
from .known import KnownModel, by_sha256

KINDS = ("detector", "embedder", "other")
SOURCES = ("known", "replica", "sidecar", "given", "graph")
UNKNOWN = "unknown"  # a card not yet recognised by its graph (see Net.card)

# facerun aligns every embedder's faces to the ArcFace five-point template
ARCFACE_STYLE = "arcface-style"

DEFAULT_DETECTOR = "yunet-2023mar"
DESCRIBE_HINT = "--size 112x112 --mean 127.5 --std 127.5 [--bgr]"
SIDECAR_KEYS = {"input_size", "mean", "std", "bgr", "rgb", "threshold", "name", "notes"}
# an image model with a fixed input no larger than this and one 2-D output is taken for an embedder
EMBEDDER_MAX_SIDE = 256


# ------------------------------------------------------------------------------------------- pre-processing


@dataclass(frozen=True)
class Preprocess:
    """How RGB uint8 pixels become the model's input: channels in BGR order if `bgr`, then (x - mean) / std per
    channel (mean and std in the model's channel order, on the 0..255 scale); `input_size` (w, h) when the model
    takes one size only."""

    input_size: tuple[int, int] | None
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    bgr: bool = False

    def input_range(self) -> tuple[float, float]:
        """The smallest and largest input value pixels 0..255 can give."""
        ends = [(p - m) / s for m, s in zip(self.mean, self.std) for p in (0.0, 255.0)]
        return float(min(ends)), float(max(ends))

    def describe(self) -> str:
        def triple(v):
            return f"{v[0]:g}" if len(set(v)) == 1 else "(" + ",".join(f"{x:g}" for x in v) + ")"

        size = f"{self.input_size[0]}x{self.input_size[1]} " if self.input_size else ""
        return f"{size}{'BGR' if self.bgr else 'RGB'} (x-{triple(self.mean)})/{triple(self.std)}"

    def apply(self, faces: np.ndarray) -> np.ndarray:
        """N x h x w x 3 uint8 RGB -> N x 3 x h x w float32 model input."""
        # planes first, then the arithmetic a plane at a time: numpy's broadcasts along a last axis of 3 ran 5x
        # slower (the same values either way)
        order = [2, 1, 0] if self.bgr else [0, 1, 2]
        x = np.empty((faces.shape[0], 3, *faces.shape[1:3]), np.float32)
        x[...] = faces.transpose(0, 3, 1, 2)[:, order]
        x -= np.asarray(self.mean, np.float32)[None, :, None, None]
        x /= np.asarray(self.std, np.float32)[None, :, None, None]
        return x


def triple(value, what: str) -> tuple[float, float, float]:
    """A number, three numbers, or text such as '127.5' or '0.5,0.5,0.5' -> three finite floats."""
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
    if len(values) != 3:
        raise InputError(f"{what} must be a number or three numbers (one per channel), got {value!r}")
    if not all(np.isfinite(values)):
        raise InputError(f"{what} must be finite, got {value!r}")
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


# ---------------------------------------------------------------------------------------------------- card


@dataclass(frozen=True)
class ModelCard:
    path: Path
    label: str  # how messages name the model: the name it was asked for, else the file name
    kind: str  # one of KINDS
    source: str  # one of SOURCES (UNKNOWN until recognised by the graph)
    sha256: str
    family: str | None = None
    preprocess: Preprocess | None = None  # None: unknown (pixels 0..255 are fed as they are)
    threshold: float | None = None  # cosine match threshold (embedders)
    false_match_rate: float | None = None  # impostor pairs at or above the threshold, where it was calibrated
    name: str | None = None  # the known model's or the replica's name
    sidecar: Path | None = None  # the description file, for source "sidecar"
    known: KnownModel | None = field(default=None, repr=False)
    replica: object | None = field(default=None, repr=False)  # the facerun.zoo.replicas.Replica entry

    @property
    def display_name(self) -> str:
        return self.name or self.label

    @property
    def input_range(self) -> tuple[float, float]:
        """Where the model's input values live: its pre-processing applied to pixels 0..255, else 0..255."""
        return self.preprocess.input_range() if self.preprocess is not None else (0.0, 255.0)

    def as_dict(self) -> dict:
        pre = self.preprocess
        return {
            "path": str(self.path), "label": self.label, "name": self.name, "kind": self.kind,
            "family": self.family, "source": self.source, "sha256": self.sha256, "threshold": self.threshold,
            "preprocess": None if pre is None else {"input_size": list(pre.input_size) if pre.input_size else None,
                                                    "mean": list(pre.mean), "std": list(pre.std), "bgr": pre.bgr},
        }


def card_for(name_or_path, models_dir=None) -> ModelCard:
    """The card of a model argument: a path, a known model's name, a built-in replica's name or a file name in the
    search folders (`models_dir` first). An unknown file is read and recognised by its graph's shape."""
    card = identify(name_or_path, models_dir)
    if card.source != UNKNOWN:
        return card
    from ..onnx.compile import compile_model
    from ..onnx.read import read_model

    model = read_model(card.path)
    name, shape = model.inputs[0]

    def compile_one():
        return compile_model(model, {name: (1, shape[1] or 3, *shape[2:])})

    return recognise(card, shape, compile_one)


def identify(name_or_path, models_dir=None) -> ModelCard:
    """`card_for` without reading the graph: an unknown file's card has source UNKNOWN (Net.card completes it)."""
    if isinstance(name_or_path, ModelCard):
        return name_or_path
    from . import replicas

    text = str(name_or_path)
    path = Path(text)
    if path.is_file():
        return identify_file(path, label=path.name)
    if replicas.is_replica(text):
        return _replica_card(replicas.get_replica(text), replicas.replica_path(text), text)
    from .find import resolve

    return identify_file(resolve(text, models_dir), label=text)


def identify_file(path: Path, label: str | None = None, sha256: str | None = None) -> ModelCard:
    """The card of one file, by its content: known, a replica build, described by a sidecar, else UNKNOWN."""
    from . import replicas

    path = Path(path)
    label = label or path.name
    try:
        sha = sha256 or sha256_of(path)
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror or e})") from None
    known = by_sha256(sha)
    if known is not None:
        return _known_card(known, path, label, sha)
    replica = replicas.replica_of_file(path)
    if replica is not None:
        return _replica_card(replica, path, label, sha)
    for candidate in sidecar_paths(path):
        if candidate.is_file():
            return _sidecar_card(path, label, sha, candidate)
    return ModelCard(path, label, "other", UNKNOWN, sha)


def _known_card(known: KnownModel, path: Path, label: str, sha: str) -> ModelCard:
    pre = Preprocess(known.input_size, known.mean, known.std, bgr=not known.rgb)
    return ModelCard(path, label, known.kind, "known", sha, family=known.family, preprocess=pre,
                     threshold=known.threshold, false_match_rate=known.false_match_rate, name=known.name,
                     known=known)


def _replica_card(replica, path: Path, label: str, sha: str | None = None) -> ModelCard:
    from . import replicas

    pre = None
    if replica.preprocess is not None:
        p = replica.preprocess
        size = (replica.input_shape[3], replica.input_shape[2]) if replica.kind == "embedder" else None
        pre = Preprocess(size, (float(p.mean),) * 3, (float(p.std),) * 3, bgr=p.color.upper() == "BGR")
    kind = replica.kind if replica.kind in KINDS else "other"
    replicas.announce(replica)
    # random weights: no match threshold means anything
    return ModelCard(path, label, kind, "replica", sha or sha256_of(path), family=replica.family, preprocess=pre,
                     name=replica.name, replica=replica)


# ------------------------------------------------------------------------------------------------ sidecars


def sidecar_paths(model_path: Path) -> list[Path]:
    """Where a description of an unknown model may sit: model.json, then model.onnx.json."""
    return [model_path.with_suffix(".json"), model_path.with_name(model_path.name + ".json")]


def _sidecar_card(path: Path, label: str, sha: str, sidecar: Path) -> ModelCard:
    data = _read_sidecar(sidecar)
    what = str(sidecar)
    if "mean" not in data or "std" not in data:
        raise ModelError(f"{what}: needs at least mean and std (and input_size unless the model fixes it)")
    bgr = data.get("bgr")
    if bgr is None and "rgb" in data:
        bgr = not data["rgb"]
    threshold = data.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not -1 <= threshold <= 1):  # a cosine; json reads NaN too
        raise ModelError(f"{what}: threshold must be a number from -1 to 1 (a cosine), got {threshold!r}")
    size = parse_input_size(data["input_size"]) if data.get("input_size") else None
    pre = checked_preprocess(Preprocess(size, triple(data["mean"], "mean"), triple(data["std"], "std"), bool(bgr)),
                             what)
    return ModelCard(path, label, "embedder", "sidecar", sha, family=ARCFACE_STYLE, preprocess=pre,
                     threshold=None if threshold is None else float(threshold), sidecar=sidecar)


def _read_sidecar(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise ModelError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a JSON object with input_size, mean, std and bgr")
    unknown = set(data) - SIDECAR_KEYS
    if unknown:
        raise ModelError(f"{path}: unknown keys {', '.join(sorted(unknown))} (use input_size, mean, std, bgr, "
                         "threshold)")
    return data


# (pixel - mean) / std beyond this is no image a network was trained on (std 1e-45 gives 1e47, then inf in float32)
MAX_INPUT_MAGNITUDE = 1e4


def checked_preprocess(pre: Preprocess, where: str = "") -> Preprocess:
    """`pre` when its mean and std make sense for 0..255 pixels, else an InputError in one line: a mean is a pixel
    value (0..255), a std is above 0, and together they keep the model's input within ±MAX_INPUT_MAGNITUDE."""
    lead = f"{where}: " if where else ""

    def fmt(values) -> str:
        return f"{values[0]:g}" if len(set(values)) == 1 else ",".join(f"{v:g}" for v in values)

    if not all(0.0 <= m <= 255.0 for m in pre.mean):
        raise InputError(f"{lead}mean {fmt(pre.mean)} is not a pixel value: the mean is on the 0..255 scale")
    if not all(s > 0 for s in pre.std):
        raise InputError(f"{lead}std {fmt(pre.std)} must be above 0")
    reach = max(abs(v) for v in pre.input_range())
    if not reach <= MAX_INPUT_MAGNITUDE:
        smallest = max(max(m, 255.0 - m) for m in pre.mean) / MAX_INPUT_MAGNITUDE
        scale = 10.0 ** (2 - math.floor(math.log10(smallest)))
        smallest = math.ceil(smallest * scale) / scale  # three digits, rounded up so that the advice holds
        raise InputError(f"{lead}std {fmt(pre.std)} scales pixels to ±{reach:.3g}; a std of at least {smallest:.3g} "
                         f"keeps (pixel - mean) / std within ±{MAX_INPUT_MAGNITUDE:g}")
    return pre


# ---------------------------------------------------------------------------------------- embedder description


def embedder_card(card: ModelCard, given: dict, declared_size: tuple[int, int] | None) -> ModelCard:
    """The card of an embedder with the caller's pre-processing (`given`: input_size, mean, std, bgr) merged in.

    A known model, a replica or a sidecar give every value, which `given` may override; for any other file the
    caller must give mean and std (and input_size unless the graph fixes it), else a ModelError says how."""
    described = card.preprocess is not None and card.source in ("known", "replica", "sidecar")
    if described:
        pre = card.preprocess
        base = dict(input_size=pre.input_size or declared_size, mean=pre.mean, std=pre.std, bgr=pre.bgr)
        source = card.source
    else:
        missing = [k for k in ("mean", "std") if k not in given]
        if "input_size" not in given and declared_size is None:
            missing.insert(0, "input_size")
        if missing:
            raise ModelError(describe_hint(card, missing if given else None))
        base = dict(input_size=declared_size, mean=0.0, std=1.0, bgr=False)
        source = "given"
    merged = {**base, **given}
    if merged["input_size"] is None:
        raise ModelError(f"{card.path.name} has no fixed input size; pass it with --size WxH")
    pre = checked_preprocess(Preprocess(parse_input_size(merged["input_size"]), triple(merged["mean"], "mean"),
                                        triple(merged["std"], "std"), bool(merged["bgr"])))
    return dataclasses.replace(card, kind="embedder", source=source, preprocess=pre,
                               family=card.family or ARCFACE_STYLE)


def describe_hint(card: ModelCard, missing: list[str] | None) -> str:
    """The one-line refusal of an embedder whose pre-processing nothing describes, saying how to describe it."""
    sidecar = sidecar_paths(card.path)[0]
    lead = (f"{card.path.name} is not an embedder facerun knows (sha256 {card.sha256[:12]}…), so its "
            "pre-processing is unknown")
    if missing:
        options = ", ".join("--" + m.replace("_", "-") for m in missing)
        lead += f" and {options} {'is' if len(missing) == 1 else 'are'} missing"
    return (f"{lead}; describe it with {DESCRIBE_HINT}, or in a JSON file {sidecar} such as "
            '{"input_size": [112, 112], "mean": 127.5, "std": 127.5, "bgr": false}')


# ------------------------------------------------------------------------------------------- by graph shape


def recognise(card: ModelCard, input_shape, compile_one) -> ModelCard:
    """An UNKNOWN card completed from its graph: a 4-D image input of a small fixed size with one 2-D output is an
    embedder, any other image model a detector (its family, where one matches, from facerun.face.families), the
    rest "other". The pre-processing stays unknown. `compile_one()` gives the program for one item (only called
    for a fixed input size)."""
    if card.source != UNKNOWN:
        return card
    kind, family = "other", None
    if len(input_shape) == 4:
        fixed_small = all(d is not None and d <= EMBEDDER_MAX_SIDE for d in input_shape[2:])
        if fixed_small and _one_vector_output(compile_one):
            kind, family = "embedder", ARCFACE_STYLE
        else:
            kind, family = "detector", _detector_family(card.path)
    return dataclasses.replace(card, kind=kind, family=family, source="graph")


def _one_vector_output(compile_one) -> bool:
    try:
        prog = compile_one()
    except FacerunError:
        return False
    outs = [prog.values[vid].shape for _, vid in prog.outputs]
    return len(outs) == 1 and len(outs[0]) == 2


def _detector_family(path: Path) -> str | None:
    """The detector family whose graph this is, named as the known table names families (yunet-2023mar, scrfd)."""
    # each family's module owns its graph's signature (facerun.face.families): the one place zoo asks face/, lazily
    from ..face import families

    try:
        family = families.family_of(path)
    except ModelError:
        return None
    generation = getattr(family, "generation", None)
    return f"{family.name}-{generation}" if generation else family.name


__all__ = [
    "ARCFACE_STYLE",
    "DEFAULT_DETECTOR",
    "KINDS",
    "ModelCard",
    "Preprocess",
    "SOURCES",
    "card_for",
    "describe_hint",
    "embedder_card",
    "identify",
    "identify_file",
    "parse_input_size",
    "recognise",
    "sidecar_paths",
    "triple",
]
