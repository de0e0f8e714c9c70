"""Photos of one bucket in one submission, and two submissions in flight.

A batch runs one bucket's program (runner.GpuProgram) over up to N photos in ONE command buffer: for each photo its
bytes and its layout parameters are copied from an upload buffer into the arena's photo buffers, its own masked
parameters (photo.PhotoInput.params: its size in every convolution's mask) are copied from the program's parameter
store into the uniform buffer, then the layout dispatch, the program's pass (its replay list) and the output copies
into the photo's part of a read-back buffer. Every photo runs the very commands and parameters a run of its own
would, in order on the GPU, so its outputs are those of its single run bit for bit. Parameters go to the device once
per (program, photo size), into the store.

Submitting gives a `Pending`; reading it back waits for that submission only (the native submission index), so
while the GPU runs batch k the caller writes batch k+1 and reads batch k-1: each program has two upload buffers and
the model two read-back buffers (`SETS`), used in turn; a buffer still holding an unread batch is read first. A
batch submitted while no other is unread goes as two submissions or more (`split`, FACERUN_PHOTO_SPLIT and
FACERUN_PHOTO_PARTS), so the device starts on the first part while the host writes the next.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .. import counters, phases, settings
from ..errors import GpuError
from . import device as D
from . import kernels as K
from . import pace, readback
from .arena import GROWTH
from .items import groups_for
from .photo import ITEMS, PARAMS_COPIED, _buffers
from .plan import flat_grid
from .replay import copier, encoder, writer
from .select import selection
from .staging import staged_bytes, write_words

SETS = 2  # submissions in flight: the GPU runs one while the host fills the other
ALIGN = 256  # offsets inside the upload and read-back buffers (copies need 4; 256 keeps photos apart)


def _wgpu():
    import wgpu

    return wgpu


def _up(n: int, step: int = ALIGN) -> int:
    return -(-n // step) * step


@dataclass
class _Item:
    """A photo of a batch: its bytes (`data`, or `staged` on the device already: staging.py) and where they and its
    layout parameters go in the upload buffer."""

    nbytes: int
    data: np.ndarray | None
    params: bytes
    photo: tuple | None
    staged: object
    at: int
    params_at: int


class Pending:
    """A submitted batch: `result()` waits for it (it alone) and gives each photo's outputs (uncut), in order."""

    def __init__(self, batch: PhotoBatch, items: int, staging, per_item: int, index: int | None, chosen=None,
                 sizes=None):
        self.batch, self.items, self.staging, self.per_item, self.index = batch, items, staging, per_item, index
        self.chosen, self.sizes = chosen, sizes  # a select.Selection and the photos' sizes: candidate rows read back
        self._outputs: list | None = None
        self._error: GpuError | None = None

    @property
    def done(self) -> bool:
        return self._outputs is not None or self._error is not None

    def result(self) -> list[dict[str, np.ndarray]]:
        if not self.done:
            self.batch._collect(self)
        if self._error is not None:
            raise self._error
        return self._outputs


class Joined:
    """A batch submitted in pieces (`split`): `result()` gives every piece's photos' outputs, in order."""

    def __init__(self, parts: list[Pending]):
        self.parts = parts

    @property
    def done(self) -> bool:
        return all(p.done for p in self.parts)

    def result(self) -> list[dict[str, np.ndarray]]:
        return [out for part in self.parts for out in part.result()]


def split(count: int, idle: bool, least: int, parts: int = 2) -> list[int]:
    """How many photos each submission of a batch of `count` takes: `parts` pieces, as even as can be (the later
    ones a photo more), where nothing else is in flight (`idle`: the device would otherwise wait while the host
    writes every photo before it starts) and the batch has at least `least` photos (0: never); one submission
    otherwise (a batch in flight keeps the device busy, and more passes to record would only cost the thread
    feeding it)."""
    if not idle or least <= 0 or parts < 2 or count < max(least, 2):
        return [count]
    k = min(parts, count)
    small, more = divmod(count, k)
    return [small + (i >= k - more) for i in range(k)]


def submit_split(batch, items: list, bgr: bool, align: int, select=None, stager=None) -> Pending | Joined:
    """`batch.submit_one(items, ...)` (a PhotoBatch or an ItemsBatch), in the parts `split` gives: the device starts
    on the first part while the next is written. With FACERUN_UPLOAD_THREADS, each part's photos are first staged
    (copied into upload memory) by that many threads side by side, not written one after another on this thread."""
    gp = batch.gp
    with gp.lock:
        idle = _ring(gp.arena).idle()
    counts = split(len(items), idle and batch.splits(), settings.get("FACERUN_PHOTO_SPLIT"),
                   settings.get("FACERUN_PHOTO_PARTS"))
    threads = settings.get("FACERUN_UPLOAD_THREADS") if stager is not None else 0
    parts, at = [], 0
    for n in counts:
        part = items[at : at + n]
        if threads:
            part = stager.stage_all(part, threads)
        parts.append(batch.submit_one(part, bgr, align, select, stager))
        at += n
    if len(parts) == 1:
        return parts[0]
    counters.bump("gpu_photo_batches_split")
    return Joined(parts)


class _Ring:
    """A model's read-back buffers for batches of photos: SETS of them, used in turn by every program of the model
    (not two a program: a library meets dozens of buckets, and mapped memory is the host's), each remembering the
    batch still in it, which is read before the buffer takes another."""

    def __init__(self):
        self.turn = 0
        self.buffers: list = [None] * SETS
        self.pending: list = [None] * SETS

    def idle(self) -> bool:
        """Whether no submitted batch is waiting to be read (as far as the host knows, the device has no work)."""
        return all(p is None or p.done for p in self.pending)

    def take(self, dev, nbytes: int) -> tuple[int, object]:
        """The next buffer (its index and the buffer), at least `nbytes`, its last batch read first."""
        k = self.turn
        self.turn = (k + 1) % SETS
        left = self.pending[k]
        if left is not None and not left.done:
            left.batch._collect(left)
        self.pending[k] = None
        buf = self.buffers[k]
        if buf is None or buf.size < nbytes:
            size = max(nbytes, int(buf.size * GROWTH) if buf is not None else nbytes)
            wgpu = _wgpu()
            buf = self.buffers[k] = dev.create_buffer(label="facerun batch read-back", size=_up(size),
                                                      usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        return k, buf


_RINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # arena -> _Ring


def _ring(arena) -> _Ring:
    """The arena's read-back ring (call with the arena's lock held)."""
    ring = _RINGS.get(arena)
    if ring is None:
        ring = _RINGS[arena] = _Ring()
    return ring


class PhotoBatch:
    """One program's batched photo runs (gp: a runner.GpuProgram of one 1 x 3 x H x W input)."""

    def __init__(self, gp):
        self.gp = gp
        self.turn = 0
        self.sets: list[dict] = [{} for _ in range(SETS)]  # upload, staging buffers and the batch still in them
        self.store = None  # the program's parameters per photo size, on the device
        self.store_at: dict = {}  # photo size (None: the whole input) -> offset in the store

    # ---- buffers
    def _param_offset(self, photo) -> int:
        """Where the parameters of `photo` (None: the unmasked program) lie in the store, written there once."""
        gp = self.gp
        at = self.store_at.get(photo)
        if at is not None:
            return at
        size = _up(len(gp.params))
        need = (len(self.store_at) + 1) * size
        blobs = {p: (gp.params if p is None else gp.photo.params(p)) for p in (*self.store_at, photo)}
        if self.store is None or self.store.size < need:
            wgpu = _wgpu()
            self.store = gp.dev.device.create_buffer(label="facerun photo parameters", size=max(need, 4 * size),
                                                     usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
            self.store_at = {}
            for i, p in enumerate(blobs):
                self.store_at[p] = i * size
                gp.write(self.store, i * size, blobs[p])
        else:
            self.store_at[photo] = len(self.store_at) * size
            gp.write(self.store, self.store_at[photo], blobs[photo])
        return self.store_at[photo]

    def _set(self, upload_bytes: int, staging_bytes: int) -> dict:
        """The next set of buffers, its last batch read first, grown to the sizes asked: an upload buffer of this
        program's, and a read-back buffer of the model's ring."""
        s = self.sets[self.turn]
        self.turn = (self.turn + 1) % SETS
        left = s.get("pending")
        if left is not None and not left.done:
            self._collect(left)
        wgpu = _wgpu()
        dev = self.gp.dev.device
        if s.get("upload") is None or s["upload"].size < upload_bytes:
            s["upload"] = dev.create_buffer(label="facerun batch photos", size=_up(upload_bytes),
                                            usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
        s["ring"], s["staging"] = _ring(self.gp.arena).take(dev, staging_bytes)
        return s

    # ---- running
    def splits(self) -> bool:
        """Whether a batch may go in several submissions (`split`): each photo has a pass of its own anyway."""
        return True

    def submit(self, items: list, bgr: bool, align: int, select=None, stager=None) -> Pending | Joined:
        """submit_one, in several submissions where the device is idle (`split`)."""
        return submit_split(self, items, bgr, align, select, stager)

    def submit_one(self, items: list, bgr: bool, align: int, select=None, stager=None) -> Pending:
        """Submit photos `items` [(rgb, photo)]: rgb h x w x 3 (or x 4) uint8 within `photo`, photo the padded
        (rows, columns) it is masked to (None: the whole input). GpuError on a bad item or a device failure.
        select: a runner.Candidates: each photo's candidate rows come back (runner.Selected; None for a photo of
        more rows than the device holds) instead of its outputs. stager: the model's staging.PhotoStaging: an
        image it staged is copied from its buffer on the device, not uploaded here."""
        gp = self.gp
        (_, slot, v), = gp.inputs
        if len(v.shape) != 4 or v.shape[:2] != (1, 3):
            raise GpuError(f"a batch of photos takes a program of a 1x3xHxW input, not {list(v.shape)}")
        ph, pw = v.shape[2:]
        gx, gy, row = flat_grid(3 * ph * pw, gp.dev.limits)
        layout = []
        at = 0  # the upload buffer: each photo's bytes (unless a decoding thread staged them)
        for rgb, photo in items:
            photo = _checked(gp, rgb, photo, ph, pw, align)
            h, w, pixel = rgb.shape
            staged = staged_bytes(rgb, stager)
            data = None if staged is not None else np.ascontiguousarray(rgb).reshape(-1)
            params = K.IMAGE.params().pack(total=3 * ph * pw, row=row, h=h, w=w, ph=ph, pw=pw, bgr=int(bgr),
                                           pixel=pixel)
            nbytes = staged.nbytes if staged is not None else _up(data.size, 4)
            layout.append(_Item(nbytes, data, params, photo, staged, at, 0))
            at += _up(nbytes) if data is not None else 0
        # then every photo's layout parameters and the photos' sizes: one write a batch (a queue write is dear on
        # the feeding thread), copied on the device where each is needed
        small = bytearray(ALIGN * len(layout))
        for k, it in enumerate(layout):
            it.params_at = at + k * ALIGN
            small[k * ALIGN : k * ALIGN + len(it.params)] = it.params
        sizes_at = at + len(small)
        chosen = selection(gp, select) if select is not None else None
        per_item = _up(gp.staging_bytes if chosen is None else chosen.read_bytes)
        if chosen is not None and len(layout) > K.PHOTO_ITEMS:
            raise GpuError(f"a batch of candidate rows takes at most {K.PHOTO_ITEMS} photos, not {len(layout)}")
        sizes = np.array([it.photo if it.photo is not None else (ph, pw) for it in layout], np.uint32)
        small += sizes.tobytes()
        at = sizes_at + _up(sizes.nbytes)
        if D.broken_reason():
            raise GpuError(f"the GPU is not used any more: {D.broken_reason()}")
        with gp.lock, pace.turn():
            try:
                gp.current(PARAMS_COPIED)  # each photo's parameters are copied from the store below
                s = self._set(at, per_item * len(layout))
                upload, staging = s["upload"], s["staging"]
                bufs = _buffers(gp.arena, max(it.nbytes for it in layout))
                group = gp.photo.layout_group(bufs, slot)
                queue = gp.dev.queue
                clock = phases.current()
                t = phases.perf_counter_ns() if clock else 0
                write = writer(gp.native, queue)
                for it in layout:
                    if it.data is not None:
                        write_words(write, upload, it.at, it.data)
                write(upload, layout[0].params_at, small)
                if clock:
                    t = clock.lap(phases.UPLOAD, t)
                enc = encoder(gp.native, gp.dev.device, "facerun photo batch")
                copy = copier(gp.native, enc)
                if chosen is not None:
                    copy(upload, sizes_at, gp.arena.photos, 0, sizes.nbytes)
                first = (gp.dev.pipeline(K.IMAGE), group, gx, gy)
                for i, it in enumerate(layout):
                    if it.staged is not None:
                        copy(it.staged.hand_over(), 0, bufs.image, 0, it.nbytes)
                    else:
                        copy(upload, it.at, bufs.image, 0, it.nbytes)
                    copy(upload, it.params_at, bufs.params, 0, _up(len(it.params), 4))
                    at_params = self._param_offset(it.photo)  # may make the store: before naming it
                    copy(self.store, at_params, gp.arena.uniform, 0, len(gp.params))
                    gp.encode_pass(enc, first=first)
                    if chosen is None:
                        gp.copy_outputs(enc, staging, i * per_item)
                    else:
                        chosen.copy(enc, chosen.record(enc, 1, first=i), i, staging, i * per_item)
                commands = enc.finish()
                if clock:
                    t = clock.lap(phases.RECORD, t)
            except GpuError:
                raise
            except Exception as e:
                raise GpuError(f"recording the GPU work failed: {type(e).__name__}: {e}") from None
            # the uniform buffer now holds the last photo's parameters
            last = layout[-1].photo
            gp.arena.owner = gp if last is None else (gp, last)
            index = _submit(gp, queue, commands)
            for it in layout:  # a staged photo's buffer mapped again once this submission ran
                if it.staged is not None:
                    it.staged.release()
            if clock:
                clock.lap(phases.SUBMIT, t)
        counters.bump("gpu_photo_batches")
        if chosen is not None:
            counters.bump("gpu_select_batches")
        pending = Pending(self, len(layout), staging, per_item, index, chosen, sizes)
        s["pending"] = pending
        _ring(gp.arena).pending[s["ring"]] = pending
        return pending

    def _collect(self, pending: Pending) -> None:
        gp = self.gp
        flat = _read(gp, pending, pending.per_item * pending.items)
        if flat is None:
            return
        if pending.chosen is not None:
            pending._outputs = _rows(pending, flat, pending.per_item)
            return
        pending._outputs = [gp._unpack(flat, i * pending.per_item) for i in range(pending.items)]


def _checked(gp, rgb: np.ndarray, photo, ph: int, pw: int, align: int):
    """A batch item's photo size (None: the whole input), checked with its image against a ph x pw input."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] not in (3, 4) or rgb.shape[0] > ph or rgb.shape[1] > pw:
        raise GpuError(f"a batch takes images of at most {ph}x{pw}x3 (or x4) uint8, not {list(rgb.shape)}")
    photo = gp.photo.checked(photo, align)
    h, w = rgb.shape[:2]
    if photo is not None and (h > photo[0] or w > photo[1]):
        raise GpuError(f"a {h}x{w} image is larger than its photo size {photo[0]}x{photo[1]}")
    return photo


def _submit(gp, queue, commands) -> int | None:
    """Submit a batch's commands (lock held); its submission index. GpuError, the GPU marked broken, on a failure."""
    try:
        return gp.submit_commands(commands, "a batch of photos")
    except GpuError:
        gp.arena.owner = None  # the uniform buffer's parameters are nobody's now
        raise


def _read(gp, pending: Pending, nbytes: int) -> np.ndarray | None:
    """The first `nbytes` of a submitted batch's read-back buffer as floats, or None: the failure is left on
    `pending` (and the GPU marked broken)."""
    seen = D.errors_seen()[0]
    try:
        if D.take_injected("readback"):
            raise RuntimeError("injected failure at read-back (FACERUN_GPU_INJECT_FAILURE)")
        flat = readback.read(gp.dev.device, pending.staging, pending.index, nbytes)
        if D.errors_seen()[0] != seen:
            raise RuntimeError(D.errors_seen()[1])
    except Exception as e:
        why = f"the GPU failed reading a batch of photos back: {type(e).__name__}: {str(e).splitlines()[0]}"
        D.mark_broken(why)
        pending._error = GpuError(why)
        return None
    return flat


def _rows(pending: Pending, flat: np.ndarray, step: int) -> list:
    """A batch's candidate rows read back, item k's from byte k * step (runner.Selected, or None: more than held)."""
    return [pending.chosen.unpack(flat, k * step, tuple(pending.sizes[k])) for k in range(pending.items)]


def batch_of(gp) -> PhotoBatch:
    """The batched photo runs of the compiled program `gp`, made at its first batch."""
    if gp.photo._batch is None:
        gp.photo._batch = PhotoBatch(gp)
    return gp.photo._batch


class ItemsBatch:
    """A batch program's photo runs (gp: a runner.GpuProgram of one N x 3 x H x W input, `net.batch_program`): up to
    N photos of one bucket in one submission, laid out by one dispatch (shaders/images.wgsl) and run by one pass of
    the program, each item masked to its own photo size (the sizes in the arena's `photos` buffer, the parameters
    photo.PhotoInput.item_params). The pass is recorded once a batch, not once a photo, and the photos go up as
    their bytes straight into the layout's buffer (a photo a decoding thread staged is copied there on the device):
    the feeding thread's work a photo is its bytes, or one copy, and its share of one pass. The outputs are each
    item's cut from the batch's (every output is batch first)."""

    def __init__(self, gp):
        self.gp = gp
        (_, self.slot, v), = gp.inputs
        if len(v.shape) != 4 or v.shape[1] != 3 or v.shape[0] > K.PHOTO_ITEMS:
            raise GpuError(f"a batch of photos takes a program of an N x 3 x H x W input, not {list(v.shape)}")
        self.items, _, self.ph, self.pw = v.shape
        for name, vid, *_ in gp.outputs:
            shape = gp.prog.values[vid].shape
            if not shape or shape[0] != self.items:
                raise GpuError(f"output '{name}' of {list(shape)} is not {self.items} items first")
        self._plans: dict[int, tuple[list, int]] = {}  # photos in a batch -> its read-back (_copies)
        self._small = None  # a batch's header, layout parameters and sizes, copied from here into place

    def _small_buffer(self, nbytes: int):
        """The buffer a batch's small writes go to (one is enough: the queue orders a write after the submissions
        made before it, so the batch before has copied out of it)."""
        if self._small is None or self._small.size < nbytes:
            wgpu = _wgpu()
            self._small = self.gp.dev.device.create_buffer(label="facerun batch header", size=_up(nbytes),
                                                           usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
        return self._small

    def fits(self, items: list) -> bool:
        """Whether the photos' bytes (and the header) fit one binding of the layout's buffer."""
        at = _up(16 * self.items) + sum(_up(rgb.nbytes) for rgb, _ in items)
        return at <= self.gp.dev.limits.max_binding

    def splits(self) -> bool:
        """Whether a batch may go in several submissions (`split`): only where a pass runs just its photos' workgroups
        (two passes over the padding would double the device's work)."""
        return bool(self.gp.items) and settings.get("FACERUN_PHOTO_PADDING") != "run"

    def submit(self, items: list, bgr: bool, align: int, select=None, stager=None) -> Pending | Joined:
        """submit_one, in several submissions where the device is idle (`split`)."""
        return submit_split(self, items, bgr, align, select, stager)

    def submit_one(self, items: list, bgr: bool, align: int, select=None, stager=None) -> Pending:
        """Submit photos `items` [(rgb, photo)] (at most the program's N; the rest of the batch is zeros): rgb
        h x w x 3 (or x 4) uint8 within `photo`, photo the padded (rows, columns) it is masked to (None: the whole
        input). GpuError on a bad item or a device failure. select: a runner.Candidates: each photo's candidate
        rows come back (runner.Selected; None for a photo of more rows than the device holds), not its outputs.
        stager: the model's staging.PhotoStaging: an image it staged is copied from its buffer on the device into
        its place in the layout's buffer, not uploaded here."""
        gp, n, ph, pw = self.gp, self.items, self.ph, self.pw
        if not 0 < len(items) <= n:
            raise GpuError(f"a batch program of {n} items takes 1 to {n} photos, not {len(items)}")
        header = np.zeros((n, 4), np.uint32)  # per item: rows, columns, bytes a pixel, first word (images.wgsl)
        sizes = np.empty((n, 2), np.uint32)  # per item: the photo size it is masked to
        sizes[:] = (ph, pw)
        datas, at = [], _up(header.nbytes)
        for k, (rgb, photo) in enumerate(items):
            photo = _checked(gp, rgb, photo, ph, pw, align)
            h, w, pixel = rgb.shape
            if photo is not None:
                sizes[k] = photo
            staged = staged_bytes(rgb, stager)
            data = None if staged is not None else np.ascontiguousarray(rgb).reshape(-1)
            header[k] = (h, w, pixel, at // 4)
            datas.append((at, data, staged))
            at += _up(rgb.nbytes)
        gx, gy, row = flat_grid(n * 3 * ph * pw, gp.dev.limits)
        params = K.IMAGES.params().pack(total=n * 3 * ph * pw, row=row, ph=ph, pw=pw, bgr=int(bgr))
        # the items past the photos are padding: where the program allows, only the photos' workgroups run
        # (items.py; their outputs are never read back)
        count = None if settings.get("FACERUN_PHOTO_PADDING") == "run" or not gp.items else len(items)
        if count is not None:  # the layout's thread i makes input value i: the items in order
            gx, gy = groups_for((gx, gy), (1, gx * gy), n, count)
        params_at = _up(header.nbytes)
        sizes_at = params_at + ALIGN
        small_bytes = bytearray(sizes_at + sizes.nbytes)
        small_bytes[: header.nbytes] = header.tobytes()
        small_bytes[params_at : params_at + len(params)] = params
        small_bytes[sizes_at:] = sizes.tobytes()
        if D.broken_reason():
            raise GpuError(f"the GPU is not used any more: {D.broken_reason()}")
        with gp.lock, pace.turn():
            clock = phases.current()
            try:
                gp.current(ITEMS)
                chosen = selection(gp, select) if select is not None else None
                if chosen is None:
                    copies, nbytes = self._copies(len(items))
                else:
                    copies, nbytes = [], _up(chosen.read_bytes) * len(items)
                # the ring's next buffer: the batch before last read first (its own wait and read-back)
                ring, staging = _ring(gp.arena).take(gp.dev.device, nbytes)
                t = phases.perf_counter_ns() if clock else 0
                bufs = _buffers(gp.arena, at)
                queue = gp.dev.queue
                # straight into the layout's buffer: the queue orders these writes after the batch before's pass
                write = writer(gp.native, queue)
                for offset, data, _ in datas:
                    if data is not None:
                        write_words(write, bufs.image, offset, data)
                # the header, the layout's parameters and the sizes: one write (a queue write is dear on the feeding
                # thread), copied into place on the device
                small = self._small_buffer(len(small_bytes))
                write(small, 0, small_bytes)
                if clock:
                    t = clock.lap(phases.UPLOAD, t)
                enc = encoder(gp.native, gp.dev.device, "facerun photo items")
                copy = copier(gp.native, enc)
                copy(small, 0, bufs.image, 0, header.nbytes)
                copy(small, params_at, bufs.params, 0, _up(len(params), 4))
                copy(small, sizes_at, gp.arena.photos, 0, sizes.nbytes)
                for offset, _, staged in datas:
                    if staged is not None:
                        copy(staged.hand_over(), 0, bufs.image, offset, staged.nbytes)
                gp.encode_pass(enc, first=(gp.dev.pipeline(K.IMAGES), gp.photo.layout_group(bufs, self.slot), gx, gy),
                               count=count)
                for _, slot, offset, size, _, src in copies:
                    if slot is not None:
                        copy(gp.buffers[slot], src, staging, offset, size)
                if chosen is not None:  # the items' regions, one after another as the staging buffer takes them
                    chosen.copy(enc, chosen.record(enc, len(items)), 0, staging, 0, len(items))
                commands = enc.finish()
                if clock:
                    t = clock.lap(phases.RECORD, t)
            except GpuError:
                raise
            except Exception as e:
                raise GpuError(f"recording the GPU work failed: {type(e).__name__}: {e}") from None
            index = _submit(gp, queue, commands)
            for _, _, staged in datas:  # a staged photo's buffer mapped again once this submission ran
                if staged is not None:
                    staged.release()
            if clock:
                clock.lap(phases.SUBMIT, t)
        counters.bump("gpu_photo_item_batches")
        if chosen is not None:
            counters.bump("gpu_select_batches")
        pending = Pending(self, len(items), staging, nbytes, index, chosen, sizes[: len(items)])
        _ring(gp.arena).pending[ring] = pending
        return pending

    def _copies(self, count: int) -> tuple[list, int]:
        """What a batch of `count` photos reads back: the first `count` items of each output (the padding's are
        never copied), packed one after another: [(name, slot, byte offset, bytes, shape, byte offset in the slot)], a
        constant output as (name, None, 0, 0, its first `count` items, 0), and the bytes in all."""
        plan = self._plans.get(count)
        if plan is None:
            gp, copies, at = self.gp, [], 0
            for name, vid, slot, _, src in gp.outputs:
                v = gp.prog.values[vid]
                shape = (count, *v.shape[1:])
                if slot is None:
                    copies.append((name, None, 0, 0, np.array(v.data, np.float32).reshape(v.shape)[:count], 0))
                    continue
                size = v.nbytes // self.items * count
                copies.append((name, slot, at, size, shape, src))
                at += _up(size, 4)
            plan = self._plans[count] = (copies, max(at, 4))
        return plan

    def _collect(self, pending: Pending) -> None:
        flat = _read(self.gp, pending, pending.per_item)
        if flat is None:
            return
        if pending.chosen is not None:
            pending._outputs = _rows(pending, flat, _up(pending.chosen.read_bytes))
            return
        whole = {}
        for name, slot, offset, size, shape, _ in self._copies(pending.items)[0]:
            whole[name] = shape if slot is None else flat[offset // 4 : (offset + size) // 4].reshape(shape)
        pending._outputs = [{name: v[k : k + 1] for name, v in whole.items()} for k in range(pending.items)]


def items_of(gp) -> ItemsBatch:
    """The batched photo runs of the compiled batch program `gp`, made at its first batch."""
    if gp.photo._items_batch is None:
        gp.photo._items_batch = ItemsBatch(gp)
    return gp.photo._items_batch
