"""`Net`: a loaded model. Compiles a program per input shape (cached), runs it on the CPU interpreter or the GPU."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from . import agree, counters, cpu, phases, settings
from .errors import InputError, ModelError
from .lru import InFlight, LruCache, budget_from_env, program_bytes
from .onnx.compile import compile_model
from .onnx.read import ImportedModel, read_model
from .program import PRECISIONS, ParameterPool, Program
from .runner import NO_WORKLOAD, CpuRunner, PhotoLayout, Runner, Selected, Workload
from .zoo.card import UNKNOWN, ModelCard, identify, identify_file, recognise

GPU_BATCHES = (1, 2, 4, 8, 16)  # batch sizes the GPU runs (a batch is padded up to one), past 16 multiples of 16


def _padded(items: np.ndarray) -> np.ndarray:
    """A batch of items padded with zero items up to gpu_batch(len(items)) (itself where it is one already)."""
    n = items.shape[0]
    if gpu_batch(n) == n:
        return items
    return np.concatenate([items, np.zeros((gpu_batch(n) - n,) + items.shape[1:], items.dtype)])


def gpu_batch(n: int) -> int:
    """The batch size the GPU runs `n` items at: the next of GPU_BATCHES, past them the next multiple of 16."""
    for b in GPU_BATCHES:
        if n <= b:
            return b
    return -(-n // 16) * 16


class Outputs(dict):
    """A model's outputs by name, in the model's order; also addressable by position (`out[0]`)."""

    def __getitem__(self, key):
        if isinstance(key, int):
            return list(self.values())[key]
        return super().__getitem__(key)


class Net:
    """A loaded ONNX model. `run` takes one NCHW array (a batch) or a dict/list of inputs.

    runner: what runs its programs (runner.Runner), or a function making one from this Net (runner.Programs: a
    checking runner asks it for programs of other shapes); None: the CPU. workload: what the model's user knows of
    its use (runner.Workload). Both are fixed at load; a call the runner does not take runs on the CPU."""

    def __init__(self, model: ImportedModel, label: str | None = None, card: ModelCard | None = None,
                 runner=None, workload: Workload = NO_WORKLOAD):
        self.model = model
        self._card = card
        self.label = label or (card.label if card is not None else model.path.name)
        # compiled programs by input shape, least recently used dropped past the budget (a photo library meets
        # thousands of sizes); a dropped program is recompiled when its shape comes back
        self._programs = LruCache(budget_from_env("FACERUN_PROGRAM_BUDGET_MB"), program_bytes,
                                  self._forget)
        self._parameters = ParameterPool()  # one copy of the weights for the programs of every size
        self._compiling = InFlight()  # shapes being compiled, so threads compile different shapes at once
        self._separable: dict[tuple, bool] = {}  # item shape -> whether a batch program keeps items apart
        self._lock = threading.Lock()
        self.workload = workload
        self._cpu = CpuRunner()
        if callable(runner):  # a factory: the runner is made for this net (its programs)
            runner = runner(self)
        self._runner: Runner = runner if runner is not None else self._cpu

    # ------------------------------------------------------------------------------------------------ runner
    @property
    def runner(self) -> Runner:
        return self._runner

    @property
    def gpu(self):
        """The device runner while it is used (a gpu.checked.CheckedGpu), else None."""
        runner = self._runner
        return runner if runner is not self._cpu and runner.device != "cpu" else None

    @property
    def gpu_reason(self) -> str | None:
        """Why no device runs this model (None while one does)."""
        return None if self.gpu is not None else self._runner.reason

    # ------------------------------------------------------------------------------------------ description
    @property
    def card(self) -> ModelCard:
        """What facerun knows about this model: kind, family, pre-processing, threshold, and where that comes from.
        A file known by nothing else is recognised by its graph here, once."""
        card = self._card
        if card is None or card.source == UNKNOWN:
            card = card or identify_file(self.path, self.label, self.sha256)
            card = recognise(card, self.input_shape, lambda: self.program(self.default_shape(1)))
            self._card = card
        return card

    @property
    def path(self) -> Path:
        return self.model.path

    @property
    def sha256(self) -> str:
        return self.model.sha256

    @property
    def input_names(self) -> list[str]:
        return [n for n, _ in self.model.inputs]

    @property
    def input_name(self) -> str:
        return self.model.inputs[0][0]

    @property
    def input_shape(self) -> tuple:
        """The first input's declared shape; None marks a symbolic dimension."""
        return self.model.inputs[0][1]

    @property
    def output_names(self) -> list[str]:
        return list(self.model.outputs)

    @property
    def device(self) -> str:
        return self._runner.device

    def default_shape(self, batch: int = 1) -> tuple[int, ...]:
        """The declared input shape with the batch set and symbolic dims filled (3 channels, 640x640 images)."""
        shape = list(self.input_shape)
        fill = [batch, 3, 640, 640]
        for i, d in enumerate(shape):
            if i == 0:
                shape[0] = batch
            elif d is None:
                shape[i] = fill[i] if i < 4 else 1
        return tuple(shape)

    # ------------------------------------------------------------------------------------------------- compile
    def program(self, shape) -> Program:
        """The program for one input shape (the batch included); compiled once, then cached. Threads may ask at
        once: a shape being compiled is waited for, a cached one or another shape is not held up by it."""
        shape = tuple(int(d) for d in shape)
        while True:
            with self._lock:
                prog = self._programs.get(shape)
            if prog is not None:
                return prog
            busy = self._compiling.claim(shape)
            if busy is None:
                break
            busy.wait()
        try:
            prog = self._compile(shape)
            with self._lock:
                self._parameters.share(prog)
                self._programs.put(shape, prog)
            return prog
        finally:
            self._compiling.done(shape)

    def _compile(self, shape: tuple[int, ...]) -> Program:
        self._check_shape(shape)
        shapes = {self.input_name: shape}
        for name, declared in self.model.inputs[1:]:
            if any(d is None for d in declared):
                raise InputError(f"input '{name}' has a symbolic size: facerun runs models with one input")
            shapes[name] = declared
        try:
            with counters.timed("programs_compiled"):
                prog = compile_model(self.model, shapes)
        except InputError as e:
            raise InputError(f"input {list(shape)} does not fit {self.label}: {e}") from None
        counters.bump("programs_compiled")
        return prog

    def _forget(self, key, prog: Program) -> None:
        """A program left the cache: the GPU side lets go of its compiled form too."""
        counters.bump("programs_evicted")
        self._runner.forget(prog)

    def prog_shapes(self) -> list[tuple]:
        """The input shapes compiled so far (batch programs of fixed-batch files not included)."""
        return [k for k in self._programs if k[0] != "batch"]

    def _check_shape(self, shape):
        declared = self.input_shape
        if len(shape) != len(declared):
            raise InputError(f"{self.label} takes a {len(declared)}-D input {_fmt(declared)}, got {list(shape)}")
        # the channel count is fixed; batch and spatial sizes are bound per call (YuNet runs at any multiple of 32)
        if len(shape) >= 2 and declared[1] is not None and shape[1] != declared[1]:
            raise InputError(f"{self.label} takes {declared[1]} channels {_fmt(declared)}, got {list(shape)}")
        if any(d <= 0 for d in shape):
            raise InputError(f"input shape {list(shape)} has an empty dimension")
        from .limits import check_tensor

        check_tensor(shape, f"{self.label}: input {list(shape)}")  # before anything that size is made

    # ----------------------------------------------------------------------------------------------------- run
    def _inputs(self, x) -> dict[str, np.ndarray]:
        if isinstance(x, dict):
            feeds = {}
            names = self.input_names
            for k, v in x.items():
                name = names[k] if isinstance(k, int) else k
                if name not in names:
                    raise InputError(f"{self.label} has no input '{k}' (inputs: {', '.join(names)})")
                feeds[name] = v
        elif isinstance(x, (list, tuple)) and len(self.input_names) > 1:
            feeds = dict(zip(self.input_names, x))
        elif isinstance(x, (list, tuple)):
            feeds = {self.input_name: np.stack([np.asarray(a) for a in x])}
        else:
            feeds = {self.input_name: x}
        out = {}
        for name, v in feeds.items():
            a = np.asarray(v)
            if a.dtype.kind not in "fiu":
                raise InputError(f"input '{name}' must be numeric, got {a.dtype}")
            if len(self.input_shape) == 4 and a.ndim == 3 and name == self.input_name:
                a = a[None]
            out[name] = np.ascontiguousarray(a, dtype=np.float32)
        if self.input_name not in out:
            raise InputError(f"{self.label}: input '{self.input_name}' is missing")
        return out

    def run(self, x, device: str | None = None) -> Outputs:
        """Run the model. x: an NCHW array (batch first; a CHW array is a batch of one), a list of CHW arrays, or a
        dict by input name/index. Returns the outputs by name (and by index)."""
        feeds = self._inputs(x)
        clock = phases.current()  # the feeding thread's phases (phases.py)
        t = phases.perf_counter_ns() if clock else 0
        prog = self.program(feeds[self.input_name].shape)
        if clock:
            t = clock.lap(phases.PROGRAM, t)
        use_gpu = self.gpu is not None and device != "cpu"
        if use_gpu:
            out = self.gpu.run(prog, feeds)
            if out is not None:
                return self._typed(prog, out)
            t = phases.perf_counter_ns() if clock else 0
        out = cpu.run_program(prog, feeds)
        if clock:
            clock.lap(phases.CPU, t)
        return self._typed(prog, out)

    def run_photo(self, rgb: np.ndarray, shape, blob_of=None, bucket=None) -> Outputs:
        """The model on one photo (h x w x 3 uint8) at input `shape` (1 x 3 x H x W, H and W at least the photo's),
        laid out as the workload's PhotoLayout says (or, without one, by `blob_of`: blob_of(rgb) is the input).
        A runner that lays photos out itself gets the photo (the GPU: its bytes go up, the device makes the blob),
        in a larger bucket's program masked to `shape` when the layout has buckets (the outputs then cut to
        `shape`'s, the very ones of its own program); elsewhere, or when the runner does not take it, the model runs
        on the blob. bucket: the larger input to use, None: the layout's (photo_bucket)."""
        layout = self.workload.photo
        if layout is None or (blob_of is not None and blob_of is not layout.blob):
            layout = PhotoLayout(blob=blob_of)
        gpu = self.gpu
        if gpu is not None:
            clock = phases.current()
            t = phases.perf_counter_ns() if clock else 0
            big = tuple(bucket) if bucket is not None else self.photo_bucket(shape)
            if big is not None and big != tuple(shape):
                prog = self.program(big)
                if clock:
                    clock.lap(phases.PROGRAM, t)
                out = gpu.run_photo(prog, rgb, layout, photo=tuple(shape[2:]))
                if out is not None:
                    return self._typed(prog, out)
                t = phases.perf_counter_ns() if clock else 0
            prog = self.program(shape)
            if clock:
                clock.lap(phases.PROGRAM, t)
            out = gpu.run_photo(prog, rgb, layout)
            if out is not None:
                return self._typed(prog, out)
        return self.run(layout.blob(np.asarray(rgb)))  # a runner.StagedImage as the plain pixels it is

    def submit_photos(self, rgbs: list, shapes: list, bucket, blob_of=None):
        """Photos of one bucket (`bucket`: the input they all run in, each masked to its own `shapes[i]`) through
        the model in one submission where the runner batches photos (the GPU), else one by one: a function giving
        each photo's outputs, in order, the very ones run_photo gives. While the device runs them the caller may
        prepare (and submit) the next batch. blob_of: as in run_photo, for a model loaded without a photo layout
        (its photos then all of the bucket's own size)."""
        submit = getattr(self._runner, "submit_photos", None)
        layout = self.workload.photo
        if layout is None or (blob_of is not None and blob_of is not layout.blob):
            layout = PhotoLayout(blob=blob_of) if blob_of is not None else None
        masked = bucket is not None and any(tuple(s) != tuple(bucket) for s in shapes)
        if (submit is not None and layout is not None and bucket is not None
                and (self._runner.masks_photos() if masked else self._runner.takes_photos())):
            prog = self.program(tuple(bucket))
            items = [(rgb, None if tuple(s) == tuple(bucket) else tuple(s[2:])) for rgb, s in zip(rgbs, shapes)]
            result = submit(prog, items, layout, batch_prog=self.photos_program(bucket, len(items)))
            if result is not None:
                def done() -> list:
                    outs = result()
                    if outs is None:  # the GPU dropped at read-back: the CPU
                        return [self.run_photo(r, s, blob_of, bucket=bucket) for r, s in zip(rgbs, shapes)]
                    return [self._typed(prog, o) for o in outs]

                return done
        outs = [self.run_photo(r, s, blob_of, bucket=bucket) for r, s in zip(rgbs, shapes)]
        return lambda: outs

    def photos_program(self, bucket, count: int) -> Program | None:
        """The program running a batch of `count` photos of `bucket` (1 x 3 x H x W) in one pass, each masked to its
        own size: the bucket's batch program of FACERUN_PHOTO_BATCH items (a shorter batch padded: one program a
        bucket), or None: the photos run once each (FACERUN_PHOTO_ITEMS=off, a batch of one, a graph that mixes
        its items)."""
        items = max(settings.get("FACERUN_PHOTO_BATCH"), count)
        layout = self.workload.photo
        if items < 2 or not settings.get("FACERUN_PHOTO_ITEMS") or layout is None or not layout.masked:
            return None
        try:
            # the graph keeps its items apart at one bucket's size, then at all: a check of two items at the
            # smallest bucket, not three CPU runs at every bucket's size
            bucket = tuple(bucket)
            if self.batch_free:
                return self.program((items, *bucket[1:]))
            return self.batch_program((items, *bucket[1:]), checked_at=(*bucket[:2], layout.bucket, layout.bucket))
        except (InputError, ModelError):
            return None

    def stage_photo(self, rgb: np.ndarray) -> np.ndarray:
        """A photo's bytes put on the device ahead of its run_photo or submit_photos (a library's decoding threads:
        the thread feeding the device then only copies them there); `rgb` itself where the runner does not."""
        return self._runner.stage_photo(rgb)

    @property
    def takes_photos(self) -> bool:
        """Whether run_photo hands photos to a runner that lays them out itself (else it makes the blob first)."""
        return self.workload.photo is not None and self._runner.takes_photos()

    def photo_bucket(self, shape) -> tuple[int, ...] | None:
        """The larger input a photo of input `shape` runs in, masked to it (the layout's bucket, while the runner
        masks photos), or None: its own program."""
        layout = self.workload.photo
        if layout is None or not self._runner.masks_photos():
            return None
        return layout.bucket_shape(tuple(shape))

    def prepare(self, shape, photo: bool = False) -> None:
        """Compile the program of input `shape` (photo=True: the one a photo of that input runs in, run_photo) and
        have the runner make its form of it, ahead of the run: a library's decoding threads do it. Errors are left
        for the run."""
        from .errors import FacerunError

        try:
            bucket = self.photo_bucket(shape) if photo else None
            prog = self.program(bucket or shape)
            self._runner.prepare(prog)
            if bucket is not None:
                batch = self.photos_program(bucket, 1)  # the bucket's batches run in it
                if batch is not None:
                    self._runner.prepare(batch)
        except FacerunError:
            pass

    def _typed(self, prog: Program, out):
        """The outputs in the model's order; an integer constant output (a Shape, say) as the exact integers the
        compiler kept, not the float32 copy the runtimes hold. A photo's candidate rows (runner.Selected, the
        layout's `select`) are given as they are."""
        if isinstance(out, Selected):
            return out
        return Outputs((name, prog.exact_outputs.get(name, out[name])) for name in self.output_names)

    @property
    def batch_free(self) -> bool:
        """Whether the model declares a free batch dimension (so a batch runs as one program)."""
        return self.input_shape[0] is None

    def run_batch(self, x, device: str | None = None) -> Outputs:
        """Run N independent items (an NCHW array or a list of CHW arrays); outputs stacked along axis 0.

        A model with a free batch dimension runs the batch as one program. A file fixed at batch 1 (a constant Reshape
        to [1, -1], say) runs as one batch program too when that program was shown to keep the items apart
        (`batch_program`); otherwise its items run one at a time (on the GPU still in one submission)."""
        feeds = self._inputs(x)
        items = feeds[self.input_name]
        n = items.shape[0]
        if self.gpu is not None and device != "cpu" and gpu_batch(n) != n:
            out = self._run_padded(feeds, n)
            if out is not None:
                return out
        if self.batch_free or n == 1:
            return self.run(feeds, device)
        prog = self.batch_program(items.shape)
        if prog is not None:
            if self.gpu is not None and device != "cpu":
                out = self.gpu.run(prog, feeds)
                if out is not None:
                    return self._typed(prog, out)
            return self._typed(prog, cpu.run_program(prog, feeds))
        single = [{**feeds, self.input_name: items[i : i + 1]} for i in range(n)]
        if self.gpu is not None and device != "cpu":
            outs = self.gpu.run_many(self.program(single[0][self.input_name].shape), single)
            if outs is not None:
                return Outputs((name, np.concatenate([o[name] for o in outs])) for name in self.output_names)
        outs = [self.run(f, device="cpu") for f in single]
        return Outputs((name, np.concatenate([o[name] for o in outs])) for name in self.output_names)

    def submit_batch(self, x):
        """run_batch's outputs, submitted and not waited for where the runner takes it (the GPU: the batch padded as
        run_batch pads it): a function giving them. The caller works on while the device runs the batch; the next
        submission of the same program reads this one back first. Elsewhere the batch runs now."""
        submit = getattr(self._runner, "submit", None)
        if submit is not None and self.gpu is not None:
            feeds = self._inputs(x)
            items = feeds[self.input_name]
            padded = _padded(items)
            prog = self._padded_program(padded.shape)
            result = submit(prog, {**feeds, self.input_name: padded}) if prog is not None else None
            if result is not None:
                def done() -> Outputs:
                    out = self._unpadded(prog, result(), len(items), len(padded))
                    return out if out is not None else self.run_batch(x)

                return done
        out = self.run_batch(x)
        return lambda: out

    def submit_faces(self, cuts: list, layout):
        """An embedder's outputs for faces to align (runner.FaceCut, at most a batch's worth), submitted and not
        waited for as submit_batch's: where the runner aligns them itself (the GPU) only their regions go up, else
        the input is made on the host (`layout.blob`, a runner.FaceLayout). A function giving the outputs."""
        submit = getattr(self._runner, "submit_faces", None)
        n = len(cuts)
        if submit is not None and self.gpu is not None and n:
            w, h = layout.size
            prog = self._padded_program((gpu_batch(n), 3, h, w))
            result = submit(prog, cuts, layout) if prog is not None else None
            if result is not None:
                def done() -> Outputs:
                    out = self._unpadded(prog, result(), n, gpu_batch(n))
                    return out if out is not None else self.run_batch(layout.blob(cuts))

                return done
        return self.submit_batch(layout.blob(cuts))

    def _run_padded(self, feeds: dict, n: int) -> Outputs | None:
        """A batch of `n` items on the GPU padded with zero items up to gpu_batch(n), so a library of photos with any
        number of faces meets five batch programs, not sixteen; None when the batch cannot be padded (a file that
        mixes its items) or the GPU is not used."""
        padded = _padded(feeds[self.input_name])
        prog = self._padded_program(padded.shape)
        if prog is None:
            return None
        return self._unpadded(prog, self.gpu.run(prog, {**feeds, self.input_name: padded}), n, len(padded))

    def _padded_program(self, shape) -> Program | None:
        """The program of a padded batch of `shape`: the shape's own for a free batch (or one item), else the file's
        batch program (None where the graph mixes its items)."""
        return self.program(shape) if self.batch_free or shape[0] == 1 else self.batch_program(shape)

    def _unpadded(self, prog: Program, out, n: int, padded: int) -> Outputs | None:
        """A padded batch's outputs `out` cut to its first `n` items; None when there are none (the GPU dropped) or
        an output is not batch-first (the unpadded run then says what it is)."""
        if out is None:
            return None
        typed = self._typed(prog, out)
        if any(np.ndim(v) == 0 or np.shape(v)[0] != padded for v in typed.values()):
            return None
        return Outputs((name, v[:n]) for name, v in typed.items())

    def batch_program(self, shape, checked_at=None) -> Program | None:
        """For a file fixed at batch 1: one program for `shape[0]` items, or None when the graph mixes its items.

        Compiled with each constant Reshape's leading 1 taken as the batch, then accepted only if, on a seeded input of
        two items, it gives what two single runs give, stacked (checked once per item shape, or once at the item shape
        `checked_at` for all: a photo detector's buckets, whose graph is the same at every size)."""
        shape = tuple(int(d) for d in shape)
        item = tuple(int(d) for d in checked_at) if checked_at is not None else (1,) + shape[1:]
        with self._lock:
            ok = self._separable.get(item)
        if ok is None:
            ok = self._check_separable(item)
            with self._lock:
                self._separable[item] = ok
        if not ok:
            return None
        key = ("batch",) + shape
        with self._lock:
            prog = self._programs.get(key)
        if prog is None:
            with counters.timed("programs_compiled"):
                prog = self._compile_items(shape)
            counters.bump("programs_compiled")
            with self._lock:
                self._parameters.share(prog)
                self._programs.put(key, prog)
        return prog

    def _compile_items(self, shape) -> Program:
        self.program((1,) + tuple(shape[1:]))  # the single shape first: its errors are the clear ones
        return compile_model(self.model, {self.input_name: tuple(shape)}, batch_items=shape[0])

    def _check_separable(self, item) -> bool:
        with counters.timed("separable_checks"):
            return self._separable_on_cpu(item)

    def _separable_on_cpu(self, item) -> bool:
        try:
            prog = self._compile_items((2,) + tuple(item[1:]))
        except (InputError, ModelError):
            return False
        x = agree.seeded_input((2,) + tuple(item[1:]), agree.SEPARABLE_SEED)
        both = cpu.run_program(prog, {self.input_name: x})
        singles = [cpu.run_program(self.program(item), {self.input_name: x[i : i + 1]}) for i in range(2)]
        stacked = {name: np.concatenate([s[name] for s in singles]) for name in self.output_names}
        return agree.disagreement(stacked, both, agree.BATCH_ITEMS) is None

    def run_per_conv(self, x) -> Outputs:
        """The comparison mode: each convolution uploaded, run and read back alone on the GPU, the rest on the CPU."""
        if self.gpu is None:
            from .errors import GpuError

            raise GpuError(f"{self.label} has no GPU path: {self.gpu_reason}")
        feeds = self._inputs(x)
        prog = self.program(feeds[self.input_name].shape)
        return self._typed(prog, cpu.run_program(prog, feeds, conv=self.gpu.conv_hook(prog)))

    def run_cpu(self, x, on_step=None) -> Outputs:
        feeds = self._inputs(x)
        prog = self.program(feeds[self.input_name].shape)
        return self._typed(prog, cpu.run_program(prog, feeds, on_step=on_step))


def _fmt(shape) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def load(model, device: str = "cpu", precision: str = "f32", workload: Workload | None = None,
         label: str | None = None) -> Net:
    """Load a model as a Net: an ONNX file, a known model's or a replica's name, or a ModelCard (facerun.zoo.card).
    device: "cpu", "gpu" (error if unusable) or "auto". precision: "f32", or "f16" on the GPU (Winograd's planes as
    half floats, checked against the CPU at agree.GPU_F16_CHECK); the CPU always runs float32. workload: what the
    caller knows of its use of the model (runner.Workload: the sizes to check and expect, how photos are laid
    out), for the GPU's one agreement check; a face job's Detector and Embedder give theirs. label: how messages
    name the model (default: the card's)."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision '{precision}' ({' or '.join(PRECISIONS)})")
    if precision != "f32" and device == "cpu":
        raise InputError(f"--precision {precision} is for the GPU; the CPU runs f32")
    if device not in RUNNERS:
        raise InputError(f"unknown device '{device}' (cpu, gpu or auto)")
    card = identify(model)
    workload = workload or NO_WORKLOAD
    runner = RUNNERS[device](workload, device == "gpu", precision)
    return Net(read_model(card.path), label=label, card=card, runner=runner, workload=workload)


def _cpu_runner(workload: Workload, required: bool, precision: str):
    return None


def _gpu_runner(workload: Workload, required: bool, precision: str):
    """A factory of the checked GPU runner for a Net; the CPU runner, saying why, when there is no usable GPU
    (GpuError when `required`)."""
    from .errors import GpuError
    from .gpu.checked import gpu_runner

    try:
        return gpu_runner(workload, required=required, precision=precision)
    except GpuError as e:
        if required:
            raise
        return CpuRunner(reason=str(e))


# device name -> a function of (workload, required, precision) giving the Net's runner (or a factory of it; None:
# the CPU). A new backend: its runner module and one line here.
RUNNERS = {"cpu": _cpu_runner, "gpu": _gpu_runner, "auto": _gpu_runner}
