"""A photo on the device: its bytes uploaded and laid out as the network input (`shaders/image.wgsl`), the bucket
programs it may run in masked to its size (the mask sizes written into the convolutions' parameters; which programs
stay exact so is `masking.py`'s analysis), and the checks that let the GPU do either (`PhotoChecks`).

A detector family gives one `runner.PhotoLayout` (its blob, alignment, crop and bucket); `PhotoInput` is one
compiled program's side of it, `PhotoChecks` one model's (its first photo laid out against the CPU's blob, the
masked run against a smaller photo's own program, both in the model's one agreement check).
"""

from __future__ import annotations

import logging
import struct
import weakref

import numpy as np

from .. import counters, phases
from ..errors import GpuError
from ..runner import Candidates, PhotoLayout, Selected, select_rows
from . import kernels as K
from . import masking
from .arena import GROWTH
from .plan import flat_grid
from .replay import copier, encoder
from .select import selection
from .staging import staged_bytes, write_words

log = logging.getLogger("facerun.gpu")


def _wgpu():
    import wgpu

    return wgpu


class _Buffers:
    """An arena's photo-bytes buffer and the layout kernel's uniform buffer (one photo runs at a time per arena)."""

    def __init__(self):
        self.image = None
        self.params = None
        self.generation = 0  # bumped when the bytes buffer is replaced: bind groups and commands over it are stale


ITEMS = "items"  # GpuProgram.current's photo for a batch whose items are each masked to their own photo size
PARAMS_COPIED = "copied"  # GpuProgram.current's photo for a run that copies its parameters into place itself

_BUFFERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # arena -> _Buffers


def _buffers(arena, nbytes: int) -> _Buffers:
    """The arena's photo buffers, the bytes one at least `nbytes` (call with the arena's lock held)."""
    kept = _BUFFERS.get(arena)
    if kept is None:
        kept = _BUFFERS[arena] = _Buffers()
    wgpu = _wgpu()
    dev = arena.dev.device
    if kept.image is None or kept.image.size < nbytes:
        size = max(nbytes, int(kept.image.size * GROWTH) if kept.image is not None else nbytes, 16)
        size = -(-size // 256) * 256
        most = getattr(getattr(arena.dev, "limits", None), "max_binding", None)
        if most is not None and size > most:  # it is bound whole: the headroom stops at the largest binding
            size = max(nbytes, most - most % 16)
        kept.image = dev.create_buffer(label="facerun photo bytes", size=size,
                                       usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST)
        kept.generation += 1
        arena.drop_groups("image")
    if kept.params is None:
        kept.params = dev.create_buffer(label="facerun photo params", size=256,
                                        usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
    return kept


def _field_offset(kernel: K.Kernel, name: str) -> int:
    """The byte offset of parameter `name` in `kernel`'s uniform struct."""
    return next(f.offset for f in kernel.layout.fields if f.name == name)


class PhotoInput:
    """One compiled program's photo side (`gp`, a runner.GpuProgram): the mask parameters of a smaller photo, and a
    photo laid out on the device as the input."""

    def __init__(self, gp):
        self.gp = gp
        slot = K.UNIFORM_SLOT
        # the convolutions' output writers: where their mask sizes go in the parameters, and what they write
        self._masks = [(i * slot + _field_offset(d.kernel, "vh"), d.mask)
                       for i, d in enumerate(gp.dispatches) if d.mask is not None]
        self._items = [i * slot + _field_offset(d.kernel, "mask_items")
                       for i, d in enumerate(gp.dispatches) if d.mask is not None]
        self._item_params: bytes | None = None
        self._masked_params: dict[tuple[int, int], bytes] = {}
        self._maskable: dict[int, str | None] = {}
        self._ready = None  # (key, command buffer) recorded for the next photo while the GPU ran this one
        self._key = None
        self._batch = None  # batch.PhotoBatch, made at the first batch of photos (batch.batch_of)
        self._items_batch = None  # batch.ItemsBatch of a batch program, made at its first batch (batch.items_of)
        self._selections: dict = {}  # runner.Candidates -> select.Selection, made at its first run

    @property
    def input_hw(self) -> tuple[int, int] | None:
        shape = self.gp.prog.input_shape
        return tuple(shape[2:]) if len(shape) == 4 else None

    def mask_reason(self, align: int) -> str | None:
        """None when the program runs a photo of a multiple of `align` rows and columns up to its input's exactly
        (masking.maskable); else why not."""
        if align not in self._maskable:
            self._maskable[align] = masking.maskable(self.gp.prog, align)
        return self._maskable[align]

    def params(self, photo: tuple[int, int]) -> bytes:
        """The parameters with every convolution output masked to a photo of `photo` (rows, columns)."""
        blob = self._masked_params.get(photo)
        if blob is None:
            buf = bytearray(self.gp.params)
            sizes = masking.mask_sizes([m[:2] for _, m in self._masks], self.input_hw, photo)
            for (at, _), (vh, vw) in zip(self._masks, sizes):
                struct.pack_into("<II", buf, at, max(vh, 1), max(vw, 1))
            blob = self._masked_params[photo] = bytes(buf)
            if len(self._masked_params) > 64:  # a bucket takes few photo sizes; bound it all the same
                self._masked_params.pop(next(iter(self._masked_params)))
        return blob

    def item_params(self) -> bytes:
        """The parameters with every convolution output masked to each batch item's own photo size (the sizes in the
        arena's `photos` buffer): vh, vw hold the output's steps down from the input, mask_items an item's output
        elements (epilogue.wgsl `mask_limits`). The same for every batch: written once."""
        if self._item_params is None:
            buf = bytearray(self.gp.params)
            height, width = self.input_hw
            for (at, (oh, ow, items)), items_at in zip(self._masks, self._items):
                if height % oh or width % ow:  # masking.maskable admits whole steps only
                    raise GpuError(f"an output of {oh}x{ow} is not a whole step down from {height}x{width}")
                struct.pack_into("<II", buf, at, height // oh, width // ow)
                struct.pack_into("<I", buf, items_at, items)
            self._item_params = bytes(buf)
        return self._item_params

    def checked(self, photo, align: int) -> tuple[int, int] | None:
        """A run's photo size, checked: a multiple of `align` within the input, on a program that masks exactly;
        None when the run is not masked (no photo, or the whole input)."""
        if photo is None:
            return None
        photo = (int(photo[0]), int(photo[1]))
        hw = self.input_hw
        if hw is None or not (0 < photo[0] <= hw[0] and 0 < photo[1] <= hw[1]) or photo[0] % align or photo[1] % align:
            raise GpuError(f"a {photo[0]}x{photo[1]} photo does not fit a program of input {hw} in steps of {align}")
        if photo == hw:
            return None
        why = self.mask_reason(align)
        if why is not None:
            raise GpuError(f"this program cannot run a smaller photo exactly: {why}")
        return photo

    def run_image(self, rgb: np.ndarray, bgr: bool = True, photo: tuple[int, int] | None = None,
                  align: int = 32, select: Candidates | None = None, stager=None):
        """The program on one photo: `rgb` (h x w x 3 uint8, at most the input's height and width; or h x w x 4,
        R, G, B and a byte left unread, as images.load_photo gives) goes up as its bytes and is laid out on the
        device as the input, channels first, as floats, reversed to BGR when `bgr`, zero-padded at the bottom and
        right: exactly yunet.make_blob's blob, for a quarter (a third) of the upload and none of the CPU work. For
        programs of one 1 x 3 x H x W input. photo, align: as in GpuProgram.run (the photo's padded size; `rgb`
        within it). select: only these candidate rows of the outputs come back (select.py), as a runner.Selected
        over the photo's size, or None when the photo has more than they hold. stager: the model's
        staging.PhotoStaging: an image it staged is copied from its buffer on the device, not uploaded here."""
        gp = self.gp
        (_, slot, v), = gp.inputs
        if len(v.shape) != 4 or v.shape[:2] != (1, 3):
            raise GpuError(f"run_image takes a program of a 1x3xHxW input, not {list(v.shape)}")
        ph, pw = v.shape[2:]
        if (rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] not in (3, 4) or rgb.shape[0] > ph
                or rgb.shape[1] > pw):
            raise GpuError(f"run_image takes an image of at most {ph}x{pw}x3 (or x4) uint8, not {list(rgb.shape)} "
                           f"{rgb.dtype}")
        h, w, pixel = rgb.shape
        photo = self.checked(photo, align)
        if photo is not None and (h > photo[0] or w > photo[1]):
            raise GpuError(f"a {h}x{w} image is larger than its photo size {photo[0]}x{photo[1]}")
        staged = staged_bytes(rgb, stager)
        data = np.ascontiguousarray(rgb).reshape(-1) if staged is None else None
        gx, gy, row = flat_grid(3 * ph * pw, gp.dev.limits)
        params = K.IMAGE.params().pack(total=3 * ph * pw, row=row, h=h, w=w, ph=ph, pw=pw, bgr=int(bgr), pixel=pixel)
        chosen = selection(gp, select) if select is not None else None
        size = np.array(photo if photo is not None else (ph, pw), np.uint32)

        def prepare():
            gp.current(photo)
            clock = phases.current()
            t = phases.perf_counter_ns() if clock else 0
            ahead = None
            if staged is None:
                bufs = _buffers(gp.arena, -(-data.size // 4) * 4)
                write_words(gp.write, bufs.image, 0, data)
            else:  # copied on the device, by a command buffer submitted with the run's (recorded ahead of it)
                bufs = _buffers(gp.arena, staged.nbytes)
                enc = encoder(gp.native, gp.dev.device, "facerun staged photo")
                copier(gp.native, enc)(staged.hand_over(), 0, bufs.image, 0, staged.nbytes)
                ahead = enc.finish()
            gp.write(bufs.params, 0, params)
            if chosen is not None:
                gp.write(gp.arena.photos, 0, size)
            if clock:
                t = clock.lap(phases.UPLOAD, t)
            commands, self._ready = self._ready, None
            current = (bufs.generation, gp.generation, None if chosen is None else (chosen.spec, chosen.generation()))
            if commands is None or commands[0] != current:
                commands = (current, self._commands(bufs, slot, gx, gy, chosen))
            self._key = commands[0]
            if clock:
                clock.lap(phases.RECORD, t)
            run = commands[1] if ahead is None else [ahead, commands[1]]
            if chosen is not None:
                return run, gp.staging, chosen.read_bytes
            return run, gp.staging

        def record_next():
            if staged is not None:
                staged.release()  # its buffer mapped again once this submission ran
            if gp.raw:
                self._ready = (self._key, self._commands(_buffers(gp.arena, 0), slot, gx, gy, chosen))

        if chosen is None:
            return gp.submit_run(prepare, record_next)
        return gp.submit_run(prepare, record_next, lambda flat: chosen.unpack(flat, 0, tuple(size)))

    def _commands(self, bufs: _Buffers, slot: int, gx: int, gy: int, chosen=None):
        """run_image's command buffer: the photo laid out into the input slot, the pass, the outputs copied (or
        only the candidate rows `chosen`, a select.Selection, chosen and copied)."""
        gp = self.gp
        enc = encoder(gp.native, gp.dev.device, "facerun photo")
        gp.encode_pass(enc, first=(gp.dev.pipeline(K.IMAGE), self.layout_group(bufs, slot), gx, gy))
        if chosen is None:
            gp.copy_outputs(enc, gp.staging, 0)
        else:
            chosen.copy(enc, chosen.record(enc, 1), 0, gp.staging, 0)
        return enc.finish()

    def layout_group(self, bufs: _Buffers, slot: int):
        """The layout dispatch's bind group: the photo's bytes and parameters in, the input slot out."""
        gp = self.gp
        buf = gp.buffers[slot]
        key = ("image", bufs.generation, id(buf))

        def make():
            entries = [{"binding": K.UNIFORM_BINDING,
                        "resource": {"buffer": bufs.params, "offset": 0, "size": bufs.params.size}}]
            for b in K.READ_BINDINGS:
                read = bufs.image if b == K.READ_BINDINGS[0] else gp.dev.dummy
                entries.append({"binding": b, "resource": {"buffer": read, "offset": 0, "size": read.size}})
            entries.append({"binding": K.OUT_BINDING, "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
            dummy = gp.dev.dummy
            entries.append({"binding": K.PHOTOS_BINDING,
                            "resource": {"buffer": dummy, "offset": 0, "size": dummy.size}})
            return gp.dev.device.create_bind_group(layout=gp.dev.layout, entries=entries)

        return gp.arena.bind_group(key, make)


def _same(a, b) -> bool:
    """Two runs' outputs alike bit for bit: both candidate rows (runner.Selected) or both outputs by name."""
    if isinstance(a, Selected) or isinstance(b, Selected):
        return (isinstance(a, Selected) and isinstance(b, Selected)
                and np.array_equal(a.rows.view(np.uint32), b.rows.view(np.uint32)))
    return all(np.array_equal(a[k], b[k]) for k in b)


class PhotoChecks:
    """One model's photo path on the GPU, and what its checks found: `image_layout` (the device's layout of photos
    gave the CPU's blob's outputs; None: not tried yet) and `masks_agree` (a photo masked in a larger program gave
    its own program's outputs in the model's check; None: not asked for)."""

    def __init__(self, model, layout: PhotoLayout | None):
        self.model = model  # the GpuModel
        self.layout = layout  # the workload's, or None: photos come only through run_photo's own layout
        self.image_layout: bool | None = None
        self.masks_agree: bool | None = None
        self.batches_agree: bool | None = None  # the first batch of photos gave each photo's own run's outputs
        # the first batch in a batch program gave each photo's run in its bucket's program (within the tolerance)
        self.items_agree: bool | None = None
        self.select_agree: bool | None = None  # the device's candidate rows were the host's choice (select.py)

    @property
    def masked(self) -> bool:
        return self.layout is not None and self.layout.masked

    def check_masks(self, prog, program_of, cpu_run, disagreement, test_inputs) -> None:
        """Part of the model's check when photos are to run masked in larger programs: `prog` (the checked program)
        run masked to a smaller photo against the CPU on that photo's own program (`program_of(shape)`). Not
        agreeing (or a program that cannot be masked) leaves photos in programs of their own size, with a warning."""
        if not self.masked:
            return
        align, crop = self.layout.align, self.layout.crop
        _, _, h, w = prog.input_shape
        photo = (h - align, w - 2 * align) if w > 2 * align else (h - align, w)
        gp = self.model.compile(prog)
        why = gp.mask_reason(align) if min(photo) > 0 else f"its {h}x{w} input has no smaller photo size"
        if why is None:
            own = program_of((1, 3) + photo)
            inputs = test_inputs(own)
            with counters.timed("gpu_checks_cpu"):
                want = cpu_run(own, inputs)
            (name, x), = inputs.items()
            padded = np.zeros(prog.input_shape, np.float32)
            padded[:, :, : photo[0], : photo[1]] = x
            got = crop(gp.run({name: padded}, photo=photo, align=align), (h, w), photo)
            why = disagreement(want, got)
        if why is not None:
            log.warning("photos run in programs of their own size: masked to a smaller photo, %s", why)
            self.masks_agree = False
        else:
            self.masks_agree = True

    # what the checks below find, by attribute: each None until tried, then whether it held
    FINDINGS = ("image_layout", "masks_agree", "batches_agree", "items_agree", "select_agree")

    def findings(self) -> frozenset[str]:
        """The FINDINGS that held (for verdicts.py to keep)."""
        return frozenset(name for name in self.FINDINGS if getattr(self, name) is True)

    def trust(self, held: frozenset[str]) -> None:
        """Take the FINDINGS in `held` as holding, from an earlier process's checks (verdicts.py), instead of trying
        them on this process's first photos."""
        for name in self.FINDINGS:
            if name in held:
                setattr(self, name, True)

    def takes(self, masked: bool) -> bool:
        """Whether a photo goes on the device now: its layout not found wrong, and a masked one (in a larger
        program) only where masking was asked for and the model's check did not find it wrong."""
        if self.image_layout is False:
            return False
        return not masked or (self.masked and self.masks_agree is not False)

    def run(self, prog, rgb: np.ndarray, layout: PhotoLayout, photo: tuple[int, int] | None):
        """`prog` on a photo laid out on the device (the model's check done), or None: the caller runs it another
        way. The first photo is also run from `layout.blob(rgb)`, the CPU's layout: the two must give the very same
        outputs, or the device's layout of photos is not used again. photo: as in runner.Runner.run_photo."""
        align, crop = (self.layout.align, self.layout.crop) if photo is not None else (32, None)
        clock = phases.current()
        t = phases.perf_counter_ns() if clock else 0
        gp = self.model.compile(prog)  # found: a decoder compiled it ahead (precompile)
        if clock:
            clock.lap(phases.PROGRAM, t)
        if photo is not None and (not self.masks_agree or gp.mask_reason(align) is not None):
            return None
        if self.image_layout is True and self.selects(layout):
            chosen = self._selected(gp, rgb, layout, photo, align)
            if chosen is not None:
                return chosen
        got = gp.run_image(rgb, bgr=layout.bgr, photo=photo, align=align, stager=self.model.staging)
        if self.image_layout is None:
            blob = layout.blob(rgb)
            if photo is not None:
                blob = np.pad(blob, [(0, a - b) for a, b in zip(prog.input_shape, blob.shape)])
            want = gp.run({prog.inputs[0][0]: blob}, photo=photo, align=align)
            same = all(np.array_equal(got[k], want[k]) for k in want)
            self.image_layout = same
            if not same:
                log.warning("the GPU's layout of photos differs from the CPU's; photos go up as blobs")
                got = want
        if photo is None:
            return got
        t = phases.perf_counter_ns() if clock else 0
        got = crop(got, tuple(prog.input_shape[2:]), tuple(photo))
        if clock:
            clock.lap(phases.CUT, t)
        return got

    def selects(self, layout: PhotoLayout) -> bool:
        """Whether runs read back only the layout's candidate rows: asked for, and not found wrong."""
        return layout.select is not None and self.select_agree is not False

    def _selected(self, gp, rgb, layout: PhotoLayout, photo, align: int):
        """A photo's candidate rows (runner.Selected) through the compiled `gp`, or None: run it reading its heads
        (more rows than the device holds, or the check found them wrong). The first photo is also run reading its
        heads: the rows the host chooses from those (runner.select_rows) must be the device's, bit for bit, or the
        device does not choose rows again."""
        spec = layout.select
        try:
            selection(gp, spec)  # made once a program; a program whose heads it cannot read: heads whole
        except GpuError as e:
            log.warning("photos read their heads whole: %s", e)
            self.select_agree = False
            return None
        got = gp.run_image(rgb, bgr=layout.bgr, photo=photo, align=align, select=spec, stager=self.model.staging)
        if got is None:
            counters.bump("gpu_select_overflows")
            return None
        if self.select_agree is None:
            hw = tuple(gp.prog.input_shape[2:])
            full = gp.run_image(rgb, bgr=layout.bgr, photo=photo, align=align)
            want = select_rows(full if photo is None else layout.crop(full, hw, tuple(photo)), spec, got.photo_hw)
            same = np.array_equal(want.rows.view(np.uint32), got.rows.view(np.uint32))
            self.select_agree = same
            if not same:
                log.warning("the GPU's candidate rows differ from the host's choice; photos read their heads whole")
                return None
        counters.bump("gpu_select_photos")
        return got

    def submit(self, prog, items: list, layout: PhotoLayout, batch_of):
        """`prog` on photos `items` [(rgb, photo)] in one submission (batch.py), each masked to its `photo` (None:
        the whole input): a function giving each photo's outputs (cut to its photo) in order, or None: run them one
        by one (the first photo's layout check not done yet, or batches found wrong). The first batch is also run
        photo by photo: both must give the very same outputs, or photos are not batched again. batch_of: a
        compiled program -> its batch.PhotoBatch (batch.py builds on this module)."""
        if self.image_layout is not True or self.batches_agree is False:
            return None
        masked = any(photo is not None for _, photo in items)
        align, crop = (self.layout.align, self.layout.crop) if masked else (32, None)
        gp = self.model.compile(prog)
        if masked and (not self.masks_agree or gp.mask_reason(align) is not None):
            return None
        select = layout.select if self.select_agree is True else None  # checked on a photo of its own first
        pending = batch_of(gp).submit(items, layout.bgr, align, select, self.model.staging)
        hw = tuple(prog.input_shape[2:])

        def cut(out, photo):
            return out if photo is None or isinstance(out, Selected) else crop(out, hw, tuple(photo))

        def result() -> list:
            outs = pending.result()
            if select is not None:  # a photo of more rows than the device holds: its heads, from a run of its own
                full = [o is None for o in outs]
                outs = [o if o is not None else gp.run_image(rgb, bgr=layout.bgr, photo=photo, align=align)
                        for o, (rgb, photo) in zip(outs, items)]
                counters.bump("gpu_select_overflows", sum(full))
            if self.batches_agree is None:
                if select is not None:  # each photo's own run choosing its rows
                    singles = [self._selected(gp, rgb, layout, photo, align) for rgb, photo in items]
                    singles = [s if s is not None else o for s, o in zip(singles, outs)]
                else:
                    singles = [gp.run_image(rgb, bgr=layout.bgr, photo=photo, align=align) for rgb, photo in items]
                same = all(_same(a, b) for a, b in zip(outs, singles))
                self.batches_agree = same
                if not same:
                    log.warning("a batch of photos differs from its photos' own runs; photos run one at a time")
                    outs = singles
            return [cut(o, photo) for o, (_, photo) in zip(outs, items)]

        return result

    def submit_items(self, prog, batch_prog, items: list, layout: PhotoLayout, items_of, disagreement):
        """Photos `items` [(rgb, photo)] of the bucket program `prog` through `batch_prog` (its program of N items,
        net.batch_program) in one submission and one pass (batch.ItemsBatch), each item masked to its own photo: a
        function giving each photo's outputs (cut to its photo) in order, or None: run them another way (the first
        photo's layout check not done yet, batch programs found wrong, a program that does not mask). The first
        such batch is also run photo by photo in `prog`: `disagreement(want, got)` (the model's tolerance: the batch
        program's kernels may sum in another order) must find nothing, or batch programs are not used again.
        items_of: a compiled batch program -> its batch.ItemsBatch."""
        if self.image_layout is not True or self.items_agree is False or not self.masked:
            return None
        align, crop = self.layout.align, self.layout.crop
        if self.masks_agree is False:
            return None
        gb = self.model.compile(batch_prog)
        if gb.mask_reason(align) is not None or len(items) > batch_prog.input_shape[0]:
            return None
        batch = items_of(gb)
        if not batch.fits(items):  # the photos' bytes past one binding: once a photo in one submission
            return None
        # rows chosen once the batch programs agreed (their heads may differ from a photo's own by rounding)
        select = layout.select if self.select_agree is True and self.items_agree is True else None
        pending = batch.submit(items, layout.bgr, align, select, self.model.staging)
        hw = tuple(prog.input_shape[2:])

        def cut(outs) -> list:
            return [o if photo is None or isinstance(o, Selected) else crop(o, hw, tuple(photo))
                    for o, (_, photo) in zip(outs, items)]

        def result() -> list:
            outs = pending.result()
            if select is not None:  # a photo of more rows than the device holds: its heads, from a run of its own
                gp = self.model.compile(prog)
                counters.bump("gpu_select_overflows", sum(o is None for o in outs))
                outs = [o if o is not None else gp.run_image(rgb, bgr=layout.bgr, photo=photo, align=align)
                        for o, (rgb, photo) in zip(outs, items)]
            outs = cut(outs)
            if self.items_agree is None:
                gp = self.model.compile(prog)
                singles = cut([gp.run_image(rgb, bgr=layout.bgr, photo=photo, align=align) for rgb, photo in items])
                why = next((w for w in (disagreement(s, o) for s, o in zip(singles, outs)) if w is not None), None)
                self.items_agree = why is None
                if why is not None:
                    log.warning("a batch program's photos differ from their own runs (%s); photos are not run in "
                                "batch programs", why)
                    outs = singles
            return outs

        return result
