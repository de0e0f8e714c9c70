"""A photo's candidate rows chosen on the device (runner.Candidates): after the network's pass, one dispatch a grid
level and item (`shaders/select.wgsl`) appends the positions whose scores pass the floor to the item's region of a
buffer of the arena's, and only those regions are read back: tens of KB a photo instead of every head (a 1024x768
photo's YuNet heads are about 1 MB).

`Selection` is one compiled program's side of it: the levels' head buffers, each (item, level)'s parameters and bind
group, made once; `record` adds a batch's dispatches to a command encoder, `copy` an item's region to a read-back
buffer, `unpack` turns that region back into the photo's rows (runner.Selected), or None when the photo had more
rows than the region holds (its heads are then read whole).
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from ..errors import GpuError
from ..runner import KEY_SHIFT, Candidates, Selected
from . import kernels as K
from .plan import flat_grid
from .replay import copier

HEADER = 16  # bytes before an item's rows: the count, then padding
ALIGN = 256  # regions start at storage-offset alignment


def _wgpu():
    import wgpu

    return wgpu


def _up(n: int, step: int = ALIGN) -> int:
    return -(-n // step) * step


class _Out:
    """An arena's candidate regions: one buffer, made for a whole batch of the most items at once (a few MB) so
    that recorded commands never name a buffer since replaced; `generation` counts replacements all the same."""

    def __init__(self):
        self.buffer = None
        self.generation = 0


_OUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # arena -> _Out
_SERIALS = itertools.count()


def _out(arena, region: int) -> _Out:
    """The arena's candidate buffer, K.PHOTO_ITEMS regions of `region` bytes at least (lock held)."""
    kept = _OUTS.get(arena)
    if kept is None:
        kept = _OUTS[arena] = _Out()
    nbytes = K.PHOTO_ITEMS * region
    if kept.buffer is None or kept.buffer.size < nbytes:
        wgpu = _wgpu()
        kept.buffer = arena.dev.device.create_buffer(
            label="facerun candidate rows", size=_up(nbytes),
            usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
        kept.generation += 1
    return kept


class Selection:
    """`spec`'s rows of the compiled program `gp`'s outputs, chosen on the device. The program's outputs are per-item
    grids (items x positions x width, `items` the program's batch); a batch program's item k reads its own part."""

    def __init__(self, gp, spec: Candidates):
        self.gp, self.spec = gp, spec
        self.serial = next(_SERIALS)  # names its bind groups in the arena (an id() may come back for another)
        outputs = {o.name: (o.vid, o.slot, o.at) for o in gp.outputs}
        hw = gp.photo.input_hw
        if hw is None:
            raise GpuError("candidate rows need a program of one N x C x H x W input")
        self.levels = []  # (stride, reads' (slot, byte offset), value widths, positions an item, the grid's columns)
        width = None
        for stride, scores, values in spec.levels:
            slots, widths = [], []
            cols, positions = hw[1] // stride, (hw[0] // stride) * (hw[1] // stride)
            for name in (*scores, *values):
                vid, slot, at = outputs.get(name, (None, None, 0))
                if slot is None:
                    raise GpuError(f"candidate rows need output '{name}' on the device")
                shape = gp.prog.values[vid].shape
                if len(shape) != 3 or shape[1] != positions:
                    raise GpuError(f"output '{name}' of {list(shape)} is not a grid of {positions} positions")
                slots.append((slot, at))
                widths.append(shape[2])
            if widths[0] != 1 or widths[1] != 1 or len(values) > 3:
                raise GpuError("candidate rows take two scores of one value and at most three value heads")
            row = 3 + sum(widths[2:])
            if width not in (None, row):
                raise GpuError("candidate rows of every level must be alike")
            width = row
            self.levels.append((stride, slots, widths[2:], positions, cols))
        self.items = gp.prog.values[outputs[spec.levels[0][1][0]][0]].shape[0]
        self.width = width
        self.read_bytes = HEADER + spec.cap * width * 4  # what an item's read-back holds
        self.region = _up(self.read_bytes)
        self.tags = [level << KEY_SHIFT for level in range(len(self.levels))]
        if len(self.levels) > (1 << (32 - KEY_SHIFT)) or max(p for *_, p, _ in self.levels) >= 1 << KEY_SHIFT:
            raise GpuError("too many grid levels or positions for a candidate row's key")
        with gp.lock:  # the read-back of a single run goes through the arena's staging buffer
            gp.arena.fit(gp.slots.sizes, len(gp.params), self.read_bytes)
        self._params = None  # uniform buffer: a slot a (first item, items, level), written when its group is made
        self._slots: dict[tuple[int, int], int] = {}  # (first item, items) -> its slots' index
        self._grids: dict[tuple[int, int], tuple] = {}  # (items, level) -> flat_grid of its dispatch

    def _grid(self, count: int, level: int) -> tuple:
        key = (count, level)
        if key not in self._grids:
            self._grids[key] = flat_grid(count * self.levels[level][3], self.gp.dev.limits)
        return self._grids[key]

    def _group(self, first: int, count: int, level: int, out):
        """The bind group of items first .. first + count - 1 at a level: their parameters at their slot, the heads,
        the arena's candidate buffer."""
        gp = self.gp
        index = self._slots.setdefault((first, count), len(self._slots))
        if index >= K.PHOTO_ITEMS:
            raise GpuError("too many kinds of candidate-row dispatches for one program")
        slot_at = (index * len(self.levels) + level) * K.UNIFORM_SLOT

        def make():
            wgpu = _wgpu()
            dev = gp.dev.device
            size = K.PHOTO_ITEMS * len(self.levels) * K.UNIFORM_SLOT
            if self._params is None:
                self._params = dev.create_buffer(label="facerun candidate params", size=size,
                                                 usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
            stride, slots, widths, positions, cols = self.levels[level]
            w = (*widths, 0, 0, 0)[:3]
            _, _, row = self._grid(count, level)
            params = K.SELECT.params().pack(
                total=count * positions, row=row, cols=cols, item=first,
                per_item=positions if self.items > 1 else 0, positions=positions, stride=stride,
                tag=self.tags[level], floor=float(self.spec.floor), cap=self.spec.cap, width=self.width,
                step=self.region // 4, w0=w[0], w1=w[1], w2=w[2])
            gp.write(self._params, slot_at, params)
            # a head group's outputs share a slot, each from its own (aligned) byte offset
            buffers = [(gp.buffers[s], at) for s, at in slots]
            buffers += [(gp.dev.dummy, 0)] * (len(K.READ_BINDINGS) - len(slots))
            entries = [{"binding": K.UNIFORM_BINDING,
                        "resource": {"buffer": self._params, "offset": slot_at, "size": K.UNIFORM_SLOT}}]
            entries += [{"binding": b, "resource": {"buffer": buf, "offset": at, "size": buf.size - at}}
                        for b, (buf, at) in zip(K.READ_BINDINGS, buffers)]
            entries.append({"binding": K.OUT_BINDING, "resource": {"buffer": out, "offset": 0, "size": out.size}})
            photos = gp.arena.photos
            entries.append({"binding": K.PHOTOS_BINDING,
                            "resource": {"buffer": photos, "offset": 0, "size": photos.size}})
            return dev.create_bind_group(layout=gp.dev.layout, entries=entries)

        return gp.arena.bind_group(("select", self.serial, first, count, level,
                                    _out(gp.arena, self.region).generation, gp.generation), make)

    def record(self, enc, count: int, first: int = 0):
        """Items first .. first + count - 1's candidate rows, after the pass that made their heads (the arena's
        `photos` holding their photo sizes): their regions cleared, one dispatch a level for all of them. Gives the
        candidate buffer (lock held)."""
        if first + count > K.PHOTO_ITEMS or (self.items > 1 and first + count > self.items):
            raise GpuError(f"candidate rows of items {first}..{first + count - 1}: past the batch")
        gp = self.gp
        out = _out(gp.arena, self.region).buffer
        enc.clear_buffer(out, first * self.region, count * self.region)
        pipeline = gp.dev.pipeline(K.SELECT)
        n = gp.native  # replay.Native: the recording calls made directly (see replay.py), or None: wgpu-py's API
        grids = [self._grid(count, level) for level in range(len(self.levels))]
        if n is not None:
            steps = [(None, n.handle(self._group(first, count, level, out)), gx, gy)
                     for level, (gx, gy, _) in enumerate(grids)]
            steps[0] = (n.handle(pipeline), *steps[0][1:])
            n.compute_pass(enc, steps)
            return out
        cp = enc.begin_compute_pass(label="facerun candidate rows")
        cp.set_pipeline(pipeline)
        for level, (gx, gy, _) in enumerate(grids):
            cp.set_bind_group(0, self._group(first, count, level, out))
            cp.dispatch_workgroups(gx, gy, 1)
        cp.end()
        return out

    def generation(self) -> int:
        """The candidate buffer's generation (lock held): commands recorded in another name a buffer since replaced."""
        return _out(self.gp.arena, self.region).generation

    def copy(self, enc, out, k: int, staging, at: int, count: int = 1) -> None:
        """Item k's region (its count and rows), and the next count - 1 items' after it, into `staging` from byte
        `at`, each item `region` bytes after the last."""
        copier(self.gp.native, enc)(out, k * self.region, staging, at, (count - 1) * self.region + self.read_bytes)

    def unpack(self, flat: np.ndarray, at: int, photo_hw: tuple[int, int]) -> Selected | None:
        """The rows read back from byte `at` of `flat` (float32), in the grids' order; None: more than the region
        holds (read the heads whole)."""
        first = at // 4
        count = int(flat[first : first + 1].view(np.uint32)[0])
        if count > self.spec.cap:
            return None
        rows = flat[first + HEADER // 4 : first + HEADER // 4 + count * self.width].reshape(count, self.width)
        order = np.argsort(rows[:, 0].view(np.uint32), kind="stable")
        return Selected(rows[order], tuple(int(v) for v in photo_hw))


def selection(gp, spec: Candidates) -> Selection:
    """The program's Selection of `spec`, made once."""
    kept = gp.photo._selections.get(spec)
    if kept is None:
        kept = gp.photo._selections[spec] = Selection(gp, spec)
    return kept
