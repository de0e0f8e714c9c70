"""`Net`: a loaded model. Compiles a program per input shape (cached), runs it on the CPU interpreter or the GPU."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from . import agree, counters, cpu
from .errors import InputError, ModelError
from .lru import InFlight, LruCache, budget_from_env, program_bytes
from .onnx.compile import compile_model
from .onnx.read import ImportedModel, read_model
from .program import PRECISIONS, ParameterPool, Program
from .zoo.card import UNKNOWN, ModelCard, identify, identify_file, recognise

GPU_BATCHES = (1, 2, 4, 8, 16)  # batch sizes the GPU runs (a batch is padded up to one), past 16 multiples of 16


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
    """A loaded ONNX model. `run` takes one NCHW array (a batch) or a dict/list of inputs."""

    def __init__(self, model: ImportedModel, label: str | None = None, card: ModelCard | None = None):
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
        self.gpu = None  # a facerun.gpu attachment, when the GPU path is used
        self.gpu_reason: str | None = "not requested"
        # What the user of the net (a detector, an embedder) knows of the shapes to come, for the GPU's one check:
        # `check_side` (whole-network checks at most this many pixels high and wide, when the model runs at any
        # size) and `expected_shapes` (input shapes a run will meet: their kernel variants are checked up front)
        self.check_side: int | None = None
        self.expected_shapes: list[tuple[int, ...]] = []

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
        return self.gpu.device_name if self.gpu is not None else "cpu"

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

    def check_program(self, prog: Program) -> Program | None:
        """The program for the GPU's whole-network check of `prog`: its single-item program (the network at batch 1),
        shrunk to `check_side` pixels when that is set and smaller, or None when `prog` is that already. The kernel
        variants only `prog` needs are then checked layer by layer."""
        shape = tuple(prog.input_shape)
        if not shape:
            return None
        small = (1,) + shape[1:]
        if self.check_side and len(shape) == 4:
            small = (1, shape[1], min(shape[2], self.check_side), min(shape[3], self.check_side))
        for candidate in (small, (1,) + shape[1:]):  # the shrunk one may not compile: then at the same size
            if candidate == shape:
                return None
            try:
                return self.program(candidate)
            except (InputError, ModelError):
                continue
        return None

    def expected_programs(self) -> list[Program]:
        """The programs of `expected_shapes` (those that compile), for the GPU check to plan ahead."""
        progs = []
        for shape in self.expected_shapes:
            try:
                prog = self.batch_program(shape) if shape[0] > 1 and not self.batch_free else self.program(shape)
            except (InputError, ModelError):
                continue
            if prog is not None:
                progs.append(prog)
        return progs

    def _forget(self, key, prog: Program) -> None:
        """A program left the cache: the GPU side lets go of its compiled form too."""
        counters.bump("programs_evicted")
        forget = getattr(self.gpu, "forget", None)
        if forget is not None:
            forget(prog)

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
        prog = self.program(feeds[self.input_name].shape)
        use_gpu = self.gpu is not None and device != "cpu"
        if use_gpu:
            out = self.gpu.run(prog, feeds)
            if out is not None:
                return self._typed(prog, out)
        return self._typed(prog, cpu.run_program(prog, feeds))

    def run_photo(self, rgb: np.ndarray, shape, blob_of, bucket=None) -> Outputs:
        """The model on one photo (h x w x 3 uint8) at input `shape` (1 x 3 x H x W, H and W at least the photo's):
        on the GPU the photo goes up as its bytes and is laid out there (BGR, zero-padded: YuNet's blob);
        elsewhere, or when the GPU does not take it, the model runs on `blob_of(rgb)`. bucket: the shape of a larger
        program the GPU may run the photo in, masked to `shape` (checked.CheckedGpu.photo_masks): the outputs are
        then cut to `shape`'s, the very ones of its own program."""
        run_image = getattr(self.gpu, "run_image", None)
        if bucket is not None and run_image is not None and tuple(bucket) != tuple(shape):
            big = self.program(bucket)
            out = run_image(big, rgb, blob_of, photo=tuple(shape[2:]))
            if out is not None:
                return self._typed(big, out)
        prog = self.program(shape)
        if run_image is not None:
            out = run_image(prog, rgb, blob_of)
            if out is not None:
                return self._typed(prog, out)
        return self.run(blob_of(rgb))

    def _typed(self, prog: Program, out: dict) -> Outputs:
        """The outputs in the model's order; an integer constant output (a Shape, say) as the exact integers the
        compiler kept, not the float32 copy the runtimes hold."""
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

    def _run_padded(self, feeds: dict, n: int) -> Outputs | None:
        """A batch of `n` items on the GPU padded with zero items up to gpu_batch(n), so a library of photos with any
        number of faces meets five batch programs, not sixteen; None when the batch cannot be padded (a file that
        mixes its items) or the GPU is not used."""
        items = feeds[self.input_name]
        padded = np.concatenate([items, np.zeros((gpu_batch(n) - n,) + items.shape[1:], items.dtype)])
        prog = self.program(padded.shape) if self.batch_free else self.batch_program(padded.shape)
        if prog is None:
            return None
        out = self.gpu.run(prog, {**feeds, self.input_name: padded})
        if out is None:
            return None
        typed = self._typed(prog, out)
        if any(np.ndim(v) == 0 or np.shape(v)[0] != len(padded) for v in typed.values()):
            return None  # an output not batch-first: the unpadded run says what it is
        return Outputs((name, v[:n]) for name, v in typed.items())

    def batch_program(self, shape) -> Program | None:
        """For a file fixed at batch 1: one program for `shape[0]` items, or None when the graph mixes its items.

        Compiled with each constant Reshape's leading 1 taken as the batch, then accepted only if, on a seeded input of
        two items, it gives what two single runs give, stacked (checked once per item shape)."""
        shape = tuple(int(d) for d in shape)
        item = (1,) + shape[1:]
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


def load(model, device: str = "cpu", precision: str = "f32") -> Net:
    """Load a model as a Net: an ONNX file, a known model's or a replica's name, or a ModelCard (facerun.zoo.card).
    device: "cpu", "gpu" (error if unusable) or "auto". precision: "f32", or "f16" on the GPU (Winograd's planes as
    half floats, checked against the CPU at agree.GPU_F16_CHECK); the CPU always runs float32."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision '{precision}' ({' or '.join(PRECISIONS)})")
    if precision != "f32" and device == "cpu":
        raise InputError(f"--precision {precision} is for the GPU; the CPU runs f32")
    card = identify(model)
    net = Net(read_model(card.path), card=card)
    if device in ("gpu", "auto"):
        from .gpu.checked import attach

        attach(net, required=(device == "gpu"), precision=precision)
    elif device != "cpu":
        raise InputError(f"unknown device '{device}' (cpu, gpu or auto)")
    return net
