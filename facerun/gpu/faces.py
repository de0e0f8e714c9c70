"""Faces aligned on the device: each face's region of its photo goes up with where its crop's samples fall
(runner.FaceCut), and one kernel (`shaders/faces.wgsl`) samples them into an embedder's input, the warp of
face/align.py and the embedder's pre-processing together, instead of the host aligning every face and uploading
its input as floats.

The device's samples are computed in float32 (the host's in float64), so a crop pixel may land one level away
from the host's where a sample sits on a rounding edge; `disagreement` is the bar the model's check holds the kernel
to on its first batch of faces (checked.CheckedGpu.submit_faces).
"""

from __future__ import annotations

import numpy as np

from ..errors import GpuError
from ..runner import FaceCut, FaceLayout
from . import kernels as K
from . import readback
from .photo import _buffers
from .plan import flat_grid

HEAD = 8  # words a face at the buffer's start: columns, rows, first word of its bytes, unused, a, b, c, d
TAIL = 2  # words a face after every face's head: e, f
# the check: a crop pixel at most this many levels from the host's, and at most this share of them off at all
MOST_LEVELS = 1
MOST_OFF = 0.05


def pack(cuts: list[FaceCut], items: int) -> np.ndarray:
    """The bytes buffer of `cuts` in a batch of `items` faces (the rest zeros), as words."""
    header = (HEAD + TAIL) * items
    at, starts = header, []
    for cut in cuts:
        starts.append(at)
        at += -(-cut.region.nbytes // 4)
    words = np.zeros(at, np.uint32)
    floats = words.view(np.float32)
    raw = words.view(np.uint8)
    for k, (cut, start) in enumerate(zip(cuts, starts)):
        rows, cols = cut.region.shape[:2]
        words[HEAD * k : HEAD * k + 3] = (cols, rows, start)
        a, b, c, d, e, f = cut.inverse
        floats[HEAD * k + 4 : HEAD * k + 8] = (a, b, c, d)
        floats[HEAD * items + TAIL * k : HEAD * items + TAIL * k + 2] = (e, f)
        raw[4 * start : 4 * start + cut.region.nbytes] = cut.region.reshape(-1)
    return words


class FacesInput:
    """One compiled embedder program's side (gp: a runner.GpuProgram of one N x 3 x h x w input): faces laid out
    as its input on the device, then the program, submitted and not waited for."""

    def __init__(self, gp):
        self.gp = gp

    def _plan(self, cuts: list[FaceCut], layout: FaceLayout):
        gp = self.gp
        (_, slot, v), = gp.inputs
        items, channels, h, w = v.shape if len(v.shape) == 4 else (0, 0, 0, 0)
        if channels != 3 or (w, h) != tuple(layout.size) or not 0 < len(cuts) <= items:
            raise GpuError(f"{len(cuts)} faces of {layout.size[0]}x{layout.size[1]} do not fit an input of "
                           f"{list(v.shape)}")
        data = pack(cuts, items)
        gx, gy, row = flat_grid(items * 3 * h * w, gp.dev.limits)
        mean, std = layout.mean, layout.std
        params = K.FACES.params().pack(total=items * 3 * h * w, row=row, h=h, w=w, bgr=int(layout.bgr), faces=items,
                                       mean0=mean[0], mean1=mean[1], mean2=mean[2], std0=std[0], std1=std[1],
                                       std2=std[2])
        held = {}

        def write():  # the program's lock held
            bufs = held["bufs"] = _buffers(gp.arena, data.nbytes)
            gp.write(bufs.image, 0, data)
            gp.write(bufs.params, 0, params)

        def first():
            return gp.dev.pipeline(K.FACES), gp.photo.layout_group(held["bufs"], slot), gx, gy

        return slot, v, write, first

    def fits(self, cuts: list[FaceCut]) -> bool:
        """Whether the faces' bytes fit one binding of the device (else the host aligns them)."""
        (_, _, v), = self.gp.inputs
        items = v.shape[0] if len(v.shape) == 4 else 0
        nbytes = 4 * (HEAD + TAIL) * items + sum(-(-c.region.nbytes // 4) * 4 for c in cuts)
        return nbytes <= self.gp.dev.limits.max_binding

    def start(self, cuts: list[FaceCut], layout: FaceLayout):
        """The program on the faces laid out on the device (runner.Started). GpuError on a device failure."""
        _, _, write, first = self._plan(cuts, layout)
        return self.gp.start(write, first)

    def laid_out(self, cuts: list[FaceCut], layout: FaceLayout) -> np.ndarray:
        """The input the device makes of `cuts` (all its items), read back: what the model's check compares with
        the host's (`layout.blob`)."""
        import wgpu

        gp = self.gp
        slot, v, write, first = self._plan(cuts, layout)
        dev = gp.dev.device
        out = dev.create_buffer(label="facerun faces check", size=-(-v.nbytes // 16) * 16,
                                usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        with gp.lock:
            try:
                write()
                pipe, group, gx, gy = first()
                enc = dev.create_command_encoder(label="facerun faces check")
                cp = enc.begin_compute_pass()
                cp.set_pipeline(pipe)
                cp.set_bind_group(0, group)
                cp.dispatch_workgroups(gx, gy, 1)
                cp.end()
                enc.copy_buffer_to_buffer(gp.buffers[slot], 0, out, 0, v.nbytes)
                gp.dev.queue.submit([enc.finish()])
                flat = readback.read(dev, out, None, v.nbytes)
            except Exception as e:
                raise GpuError(f"laying faces out on the GPU failed: {type(e).__name__}: {e}") from None
        return flat.reshape(v.shape)


def disagreement(want: np.ndarray, got: np.ndarray, layout: FaceLayout) -> str | None:
    """Why the device's input `got` is not the host's `want` for the same faces (N x 3 x h x w), or None: each value
    at most MOST_LEVELS crop levels away, and at most MOST_OFF of them off at all."""
    if got.shape != want.shape:
        return f"the faces' input has shape {list(got.shape)}, not {list(want.shape)}"
    levels = np.abs(got - want) * np.asarray(layout.std, np.float32)[None, :, None, None]
    worst = float(levels.max()) if levels.size else 0.0
    off = float(np.mean(levels > 0.01)) if levels.size else 0.0
    if not worst <= MOST_LEVELS + 0.01 or off > MOST_OFF:
        return (f"faces aligned on the GPU differ from the host's by up to {worst:.2f} levels, {off:.1%} of values "
                f"off (at most {MOST_LEVELS} level, {MOST_OFF:.0%})")
    return None
