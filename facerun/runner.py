"""The runner contract: what runs a model's programs (`Runner`), and what a face job says about its use of a model
when it loads it (`Workload`, with a `PhotoLayout` for detectors fed raw photos).

A `Net` (net.py) is given its runner and its workload at load time and is not written to afterwards. Every backend
implements `Runner`: `CpuRunner` here (the numpy interpreter, the reference), the checked GPU runner in
`gpu/checked.py` (the device path, used only after it agreed with the CPU). A runner's `run*` returning None means
"not here": the Net then runs that call on the CPU, so a GPU dropped mid-run still gives the right answer.

Low in the layering: imports `program` and `errors` only (cpu/ lazily, inside CpuRunner).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .program import Program

Feeds = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


KEY_SHIFT = 28  # a candidate row's key: its level above this bit, its position below


class StagedImage(np.ndarray):
    """A photo's pixels (usable as the H x W x C uint8 array they are) whose bytes a runner already put on its device
    (`staged`: the runner's own handle, from `stage_photo`), so a run copies them there instead of uploading them on
    the thread that feeds the device. A view or copy of it keeps the type but not the handle (`staged` None), so
    only the staged photo itself runs from the device's copy."""

    staged = None


@dataclass(frozen=True)
class Candidates:
    """The rows of a detector's grid heads worth reading back, chosen on the device: where a network's outputs are
    per-position grids (YuNet 2023mar: a score pair and box and landmark values at every position of three strides),
    most positions score far below the threshold, so the device keeps only the rows whose scores pass `floor` and
    reads back those instead of every head (megabytes a photo).

    levels: (stride, (score a, score b), value heads) per grid level, each head an output of 1 x positions x width
    over the input's grid of that stride. A position is kept where clip(a, 0, 1) * clip(b, 0, 1) >= floor in
    float32 (a floor under the family's threshold squared: a superset of what its decoding keeps). Its row: the
    key (level * 2**KEY_SHIFT + position, so rows sort into the grids' order; as float32's bits), a, b, then each
    value head's values. cap: rows the device holds a photo; a photo with more is run again reading its heads
    whole."""

    levels: tuple[tuple[int, tuple[str, str], tuple[str, ...]], ...]
    floor: float
    cap: int = 1024

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for _, scores, values in self.levels for n in (*scores, *values))


@dataclass(frozen=True)
class Selected:
    """A photo's candidate rows (`Candidates`), in the order of the heads' grids (level, then row-major position):
    m x width float32, column 0 the key's bits (`keys`). photo_hw: the (padded) photo size the grids cover."""

    rows: np.ndarray
    photo_hw: tuple[int, int]

    @property
    def keys(self) -> np.ndarray:
        return self.rows[:, 0].view(np.uint32)


def select_rows(outputs: dict, spec: Candidates, photo_hw: tuple[int, int]) -> Selected:
    """The host's choice of `spec`'s rows from a photo's outputs (cut to `photo_hw`): the reference the device's
    choice must equal, row for row and bit for bit."""
    h, w = photo_hw
    rows = []
    floor = np.float32(spec.floor)
    for level, (stride, (a_name, b_name), values) in enumerate(spec.levels):
        count = (h // stride) * (w // stride)
        a = np.asarray(outputs[a_name], np.float32).reshape(count)
        b = np.asarray(outputs[b_name], np.float32).reshape(count)
        with np.errstate(invalid="ignore"):
            keep = np.flatnonzero(np.clip(a, 0, 1) * np.clip(b, 0, 1) >= floor)
        key = (keep.astype(np.uint32) + np.uint32(level << KEY_SHIFT)).view(np.float32)
        parts = [key[:, None], a[keep, None], b[keep, None]]
        parts += [np.asarray(outputs[v], np.float32).reshape(count, -1)[keep] for v in values]
        rows.append(np.concatenate(parts, axis=1))
    return Selected(np.concatenate(rows).astype(np.float32, copy=False), (int(h), int(w)))


@dataclass(frozen=True)
class PhotoLayout:
    """How a detector family's network takes a raw photo (h x w x 3 or x 4 uint8, RGB), so a runner may lay the photo
    out itself (the GPU: its bytes go up, the device makes the blob) and run it masked in a larger program.

    blob(rgb) -> the network input the CPU would be given (1 x 3 x H x W float32), the reference for a device's
    layout; bgr: the layout reverses the channels (YuNet's blob is BGR, raw 0..255, zero-padded bottom and right).
    align: the input's rows and columns are multiples of it. crop(outputs, input_hw, photo_hw) -> a larger input's
    outputs cut to a photo's (padded) size, as its own program gives them; None: the family's outputs cannot be cut
    (every photo then runs in a program of its own size). bucket: photos share the program of their padded size
    rounded up to a multiple of it, masked to their own size (0: no buckets)."""

    blob: Callable[[np.ndarray], np.ndarray]
    align: int = 32
    bgr: bool = True
    crop: Callable[[dict, tuple[int, int], tuple[int, int]], dict] | None = None
    bucket: int = 0
    select: Candidates | None = None

    @property
    def masked(self) -> bool:
        """Whether photos run in buckets, masked to their size."""
        return self.crop is not None and self.bucket > self.align

    def bucket_shape(self, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        """The larger input a photo of network input `shape` (1 x 3 x H x W) may run in, or None (no buckets)."""
        if not self.masked:
            return None
        step = self.bucket
        return (*shape[:2], -(-shape[2] // step) * step, -(-shape[3] // step) * step)


@dataclass(frozen=True)
class FaceCut:
    """One face to align where the embedder runs: the part of its photo the crop's samples touch, `region` (rows x
    columns x 3 uint8, RGB, a frame of black past the photo's edge), and `inverse`: (a, b, c, d, e, f), the crop
    pixel (x, y) sampled at region point (a x + b y + c, d x + e y + f), bilinearly (face/align.py)."""

    region: np.ndarray
    inverse: tuple[float, float, float, float, float, float]


@dataclass(frozen=True)
class FaceLayout:
    """How an embedder takes aligned faces, so a runner may align them itself (the GPU: the regions go up, the device
    samples them into the network's input). size: the crop's (width, height); mean, std: per input channel, the
    input being (crop - mean) / std, channels first; bgr: the input's channels are B, G, R. blob(cuts) -> the
    network input the host would make from those faces (N x 3 x h x w float32), the reference."""

    size: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    bgr: bool
    blob: Callable[[list], np.ndarray]


@dataclass(frozen=True)
class Workload:
    """What a face job knows, at load time, of how it will use a model: for a runner's agreement check and its
    planning ahead.

    check_side: whole-network checks run at most this many pixels high and wide (a model that runs at any size);
    None: at the size in hand. expected_shapes: input shapes runs will meet (a detector's larger sizes): their kernel
    variants are checked up front. expected_batches: batch sizes of the item shape the model runs at (an embedder's
    GPU batches), checked up front likewise. photo: how raw photos are laid out (detectors fed photos), or None."""

    check_side: int | None = None
    expected_shapes: tuple[tuple[int, ...], ...] = ()
    expected_batches: tuple[int, ...] = ()
    photo: PhotoLayout | None = None

    def expected_for(self, item: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Every input shape expected, given the shape `item` of a run in hand (its batch replaced)."""
        shapes = [tuple(s) for s in self.expected_shapes]
        shapes += [(b, *item[1:]) for b in self.expected_batches if item]
        return shapes


NO_WORKLOAD = Workload()


@runtime_checkable
class Runner(Protocol):
    """Runs a model's programs on one backend. `device`: where runs go now ("cpu" for the CPU, and for a device
    runner that was dropped); `reason`: why not on a device (None while one is used). Each `run*` gives the outputs
    by name, or None: run this call on the CPU (a device runner that was dropped, or that cannot take this one).

    A runner that works beside its caller may also offer (net.Net uses them where present, else runs at once):
    `submit(prog, feeds)` -> a function giving the outputs later (None from it: run on the CPU), or None now;
    `submit_photos(prog, items, layout, batch_prog)`, the same for photos of one bucket; and
    `submit_faces(prog, cuts, layout)`, the same for an embedder's faces it aligns itself (FaceCut, FaceLayout)."""

    @property
    def device(self) -> str: ...

    @property
    def reason(self) -> str | None: ...

    def run(self, prog: Program, feeds: Feeds) -> Outputs | None: ...

    def run_many(self, prog: Program, items: list[Feeds]) -> list[Outputs] | None: ...

    def run_photo(self, prog: Program, rgb: np.ndarray, layout: PhotoLayout,
                  photo: tuple[int, int] | None = None) -> Outputs | None:
        """`prog` on a raw photo laid out by `layout`. photo: the photo's padded (rows, columns) when `prog` is a
        larger bucket's program: the outputs come back cut to that size (`layout.crop`); None, also, when this
        runner does not run photos masked (then run the photo's own program)."""

    def takes_photos(self) -> bool:
        """Whether run_photo lays raw photos out itself now (else the caller makes the blob)."""

    def masks_photos(self) -> bool:
        """Whether a photo may be run in a larger bucket's program now (run_photo with `photo`)."""

    def prepare(self, prog: Program) -> None:
        """Make what running `prog` needs ahead (a library's decoding threads call it); errors are left for run."""

    def stage_photo(self, rgb: np.ndarray) -> np.ndarray:
        """A photo's bytes put on the device ahead of its run (a library's decoding threads call it): a
        StagedImage of `rgb`, or `rgb` itself where this runner does not (or cannot now) stage it."""

    def forget(self, prog: Program) -> None:
        """`prog` was dropped by its model: let go of what was made for it."""


class CpuRunner:
    """The numpy interpreter (cpu/), the reference every other runner is judged by. reason: why no device runner
    is used ("not requested", or the device's error)."""

    device = "cpu"

    def __init__(self, reason: str | None = "not requested"):
        self.reason = reason

    def run(self, prog: Program, feeds: Feeds) -> Outputs:
        from . import cpu

        return cpu.run_program(prog, feeds)

    def run_many(self, prog: Program, items: list[Feeds]) -> list[Outputs]:
        return [self.run(prog, f) for f in items]

    def run_photo(self, prog: Program, rgb: np.ndarray, layout: PhotoLayout,
                  photo: tuple[int, int] | None = None) -> Outputs | None:
        if photo is not None:
            return None  # no buckets on the CPU: a photo's own program is as cheap
        return self.run(prog, {prog.inputs[0][0]: layout.blob(rgb)})

    def takes_photos(self) -> bool:
        return False

    def masks_photos(self) -> bool:
        return False

    def prepare(self, prog: Program) -> None:
        pass

    def stage_photo(self, rgb: np.ndarray) -> np.ndarray:
        return rgb

    def forget(self, prog: Program) -> None:
        pass


class Programs(Protocol):
    """What a checking runner asks of its model: the programs of other input shapes (net.Net implements it)."""

    def program(self, shape) -> Program: ...

    def batch_program(self, shape) -> Program | None: ...

    @property
    def batch_free(self) -> bool: ...

    @property
    def sha256(self) -> str:
        """The model file's sha256 (what the GPU's kept check findings are filed under: gpu/verdicts.py)."""
        ...
