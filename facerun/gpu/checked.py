"""Checked attachment of the GPU to a model: the GPU is used only after it agreed with the CPU interpreter on a
seeded test input (facerun.agree), and it is dropped (with the reason, said once) at the first device error, the
run carrying on on the CPU with the right answer.

What is checked, and when: the first time a model runs on the GPU, the whole network is checked (every output, on
the seeded input) at a small size (or the input size in hand), at batch 1; then the kernel variants the program in
hand uses and the whole run did not, each on its layer alone; and before the model's second run, the variants of the
programs the model expects (a detector's larger sizes, an embedder's batches). That is the model's one agreement
check (`gpu_checks`); the kernel variants it ran are then trusted for the model. A later program (a new input size or
batch) is checked only for kernel variants it needs that were not checked yet, each on its first layer alone, at its
own shape (`gpu_variant_checks`). So a photo library of thousands of sizes pays one check per model and device,
plus a few single-layer checks. Check programs run in buffers of their own, not the model's shared arena. A check
that passed is kept for later processes (verdicts.py: same device, driver, code, settings and model), which trust it
instead of running it (`gpu_checks_kept`) and check only the variants it lacks.

`gpu_runner(programs, workload)` makes the checked runner `facerun.load` hands its Net (a `runner.Runner`): the GPU
runner (`GpuModel`) wrapped in the check, which compares through `agree` and asks the model only for programs of
other shapes (`runner.Programs`); what to check ahead and how photos go up is the load's `runner.Workload`. Each
`run*` returns the outputs or None (meaning: run this on the CPU).
"""

from __future__ import annotations

import contextlib
import logging
import threading

import numpy as np

from .. import agree, counters
from .. import program as P
from ..errors import FacerunError, GpuError, InputError, ModelError
from ..runner import NO_WORKLOAD, FaceLayout, PhotoLayout, Programs, Workload
from .batch import batch_of, items_of
from .faces import disagreement as faces_disagreement
from .model import DoesNotFit, GpuModel, one_conv_program
from .photo import PhotoChecks
from .verdicts import Found, Verdicts

log = logging.getLogger("facerun.gpu")

FACES_LAYOUT = "faces_layout"  # a kept finding: faces laid out on the device agreed with the host's input
FACES_HELD = frozenset({FACES_LAYOUT})


def test_inputs(prog: P.Program, seed: int = agree.TEST_SEED) -> dict[str, np.ndarray]:
    """The seeded check input of a program: values like a normalised image, in [-1, 1]."""
    return agree.seeded_inputs({name: prog.values[vid].shape for name, vid in prog.inputs}, seed)


REFERENCE_MACS = 1e9  # check programs up to this size run on the reference interpreter


def _check_on_cpu(prog: P.Program, feeds) -> dict[str, np.ndarray]:
    """The CPU's answer for a check. A program run once (a small network, a single layer) goes through the reference
    interpreter: the fast one would first build its executable (weights re-laid, an arena), which costs more than
    the run; a large network through the fast one."""
    from .. import cpu

    return cpu.run_program(prog, feeds, reference=prog.macs <= REFERENCE_MACS)


class Disagreement(GpuError):
    """The GPU's outputs differ from the CPU interpreter's on the check input."""


def disagreement(cpu: dict[str, np.ndarray], gpu: dict[str, np.ndarray], tolerance=agree.GPU_CHECK) -> str | None:
    """Why the GPU's outputs do not match the CPU's, or None when they agree within `tolerance`
    (facerun.agree.GPU_CHECK; GPU_F16_CHECK for a model at --precision f16)."""
    return agree.disagreement(cpu, gpu, tolerance)


class CheckedGpu:
    """A model's GPU runner in the check (a runner.Runner): used only for programs it was checked on, dropped on the
    first device error.

    run(prog, feeds) -> outputs, or None when this run belongs on the CPU. `reason` says why the GPU is not used
    (None while it is); `program_reasons` why single programs run on the CPU (too large for the device, say).
    programs: the model's programs of other shapes (runner.Programs), for the whole check at a small size and the
    workload's expected programs; None: every check at the program in hand. workload: runner.Workload.
    """

    def __init__(self, model: GpuModel, cpu_run=None, strict: bool = False, programs: Programs | None = None,
                 workload: Workload = NO_WORKLOAD, verdicts: Verdicts | None = None):

        self.model = model
        # the bar the GPU's outputs must meet against the CPU's: its own for half floats
        self.tolerance = agree.GPU_F16_CHECK if getattr(model, "half", False) else agree.GPU_CHECK
        self.cpu_run = cpu_run or _check_on_cpu
        self.strict = strict
        self.programs = programs
        self.workload = workload
        self.checked_program: P.Program | None = None  # the program the whole check ran (layers are checked on it)
        self.reason: str | None = None
        self.program_reasons: dict[int, str] = {}
        self.whole_checked = False  # the whole network agreed once (on the first program run)
        self.photos = PhotoChecks(model, workload.photo)  # photos laid out on the device, masked in buckets
        self.verified: set[str] = set()  # kernel variants that agreed with the CPU
        self.faces_checked = False  # faces laid out on the device agreed with the host's input (submit_faces)
        self.faces_reason: str | None = None  # why the host lays faces out instead
        self._ahead: list[P.Program] = []  # expected programs whose variants the check left for the second run
        self.verdicts = verdicts or Verdicts(None)  # what an earlier process's check found (verdicts.py)
        self._kept: Found | None = None  # what this process kept last
        self._lock = threading.Lock()
        self._check_lock = threading.Lock()

    @property
    def device_name(self) -> str:
        return self.model.device_name

    @property
    def device(self) -> str:
        """Where runs go now: the GPU's name, "cpu" once dropped."""
        return self.model.device_name if self.reason is None else "cpu"

    @property
    def active(self) -> bool:
        return self.reason is None

    @property
    def image_layout(self) -> bool | None:
        """Whether the device's layout of photos gave the CPU blob's outputs (None: not tried yet)."""
        return self.photos.image_layout

    @property
    def masks_agree(self) -> bool | None:
        """Whether a photo masked in a larger program agreed with its own program in the check (None: not asked)."""
        return self.photos.masks_agree

    # ---- what the model's check runs, from the workload
    def small_program(self, prog: P.Program) -> P.Program | None:
        """The program for the whole-network check of `prog`: its single-item program (the network at batch 1),
        shrunk to the workload's `check_side` when that is set and smaller, or None when `prog` is that already. The
        kernel variants only `prog` needs are then checked layer by layer."""
        shape = tuple(prog.input_shape)
        if self.programs is None or not shape:
            return None
        small = (1,) + shape[1:]
        side = self.workload.check_side
        if side and len(shape) == 4:
            small = (1, shape[1], min(shape[2], side), min(shape[3], side))
        for candidate in (small, (1,) + shape[1:]):  # the shrunk one may not compile: then at the same size
            if candidate == shape:
                return None
            try:
                return self.programs.program(candidate)
            except (InputError, ModelError):
                continue
        return None

    def expected_programs(self, prog: P.Program) -> list[P.Program]:
        """The programs of the workload's expected shapes (those that compile), for the check to plan ahead."""
        progs = []
        if self.programs is None:
            return progs
        for shape in self.workload.expected_for(tuple(prog.input_shape)):
            try:
                batched = shape[0] > 1 and not self.programs.batch_free
                p = self.programs.batch_program(shape) if batched else self.programs.program(shape)
            except (InputError, ModelError):
                continue
            if p is not None:
                progs.append(p)
        return progs

    def drop(self, why: str) -> None:
        """Stop using the GPU for this model, saying why once."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = why
        log.warning("GPU dropped, running on the CPU: %s", why)

    def conv_hook(self, prog: P.Program):
        """The per-convolution mode's hook for cpu.run_program(prog, feeds, conv=...): each convolution on the GPU
        alone. A device error there drops the GPU and the convolution runs on the CPU."""
        on_gpu = self.model.conv_hook(prog)

        def hook(step, args):
            if self.reason is not None:
                return None
            try:
                return on_gpu(step, args)
            except DoesNotFit:
                return None
            except GpuError as e:
                self.drop(str(e))
                return None

        return hook

    def step_outputs(self, prog: P.Program, feeds) -> list[np.ndarray]:
        """Every step's output computed on the GPU in one run (for parity --steps); GpuError on failure."""
        return self.model.step_outputs(prog, feeds)

    def first_check(self, prog: P.Program) -> None:
        """Before the model's first run: trust what an earlier process's check found (verdicts.py), checking only
        what `prog` needs beyond it, or run the model's check; either way what passed is kept for later ones."""
        found = self.verdicts.load()
        if found is None or not self._trust(prog, found):
            self.check(prog)
        self._keep()

    def _trust(self, prog: P.Program, found: Found) -> bool:
        """Take `found` as this process's check (False: it does not cover what this checker must check)."""
        if self.photos.masked and "masks_agree" not in found.held:
            return False
        small = self.small_program(prog)
        counters.bump("gpu_checks_kept")
        self.verified |= found.verified
        self.photos.trust(found.held)
        self.faces_checked = FACES_LAYOUT in found.held
        self.whole_checked = True
        self.checked_program = small if small is not None else prog
        with counters.timed("gpu_checks_layers"):
            self._check_variants_of(prog, [])
        self._ahead = self.expected_programs(prog)
        return True

    def _keep(self) -> None:
        """Keep what this process's checks found (once more of it held than was kept), while they all passed.
        Called after every photo and batch: past the first ones, only the findings are compared (variants are only
        ever added, so their count tells)."""
        if not self.verdicts.kept or self.reason is not None or not self.whole_checked:
            return
        held = self.photos.findings() | (FACES_HELD if self.faces_checked else frozenset())
        kept = self._kept
        if kept is not None and kept.held == held and len(kept.verified) == len(self.verified):
            return
        found = Found(frozenset(self.verified), held)
        with self._lock:
            if found == self._kept:
                return
            self._kept = found
        self.verdicts.keep(found)

    def check(self, prog: P.Program) -> None:
        """The model's agreement check: the whole network on the seeded input at a small size (or at `prog`'s own
        when the model has no smaller one), then each kernel variant that `prog` uses and the whole run did not, on
        its first layer alone; the variants of the programs the model expects (`expected_programs`) are left for
        before the next run (`_check_ahead`). Raises GpuError with the difference (or the device error)."""
        counters.bump("gpu_checks")
        small = self.small_program(prog)
        ahead = self.expected_programs(prog)
        # every pipeline the check and the programs to come need, made on the driver's threads during the CPU run
        making = self._make_pipelines([p for p in (small, prog, *ahead) if p is not None])
        whole, want = prog, None
        if small is not None:
            try:
                with counters.timed("gpu_checks_cpu"):
                    inputs = test_inputs(small)
                    want, whole = self.cpu_run(small, inputs), small
            except FacerunError:  # the model compiles at that size but does not run there: check at its own
                pass
        if want is None:
            inputs = test_inputs(prog)
            with counters.timed("gpu_checks_cpu"):
                want = self.cpu_run(prog, inputs)
        making.join()
        with counters.timed("gpu_checks_gpu"):
            gp = self.model.compile(whole)  # the batch-1 program is the model's own too: cached
            got = gp.run(inputs)
        why = disagreement(want, got, self.tolerance)
        if why is not None:
            raise Disagreement(f"the GPU disagrees with the CPU on the check input: {why}")
        self.verified |= gp.kernel_keys
        if self.programs is not None:
            self.photos.check_masks(whole, self.programs.program, self.cpu_run,
                                    lambda want, got: disagreement(want, got, self.tolerance), test_inputs)
        self.whole_checked = True
        self.checked_program = whole
        with counters.timed("gpu_checks_layers"):
            self._check_variants_of(prog, [])
        # the variants of the programs to come are checked before the next run, not this one: the first photo's
        # answer does not wait for them (its post-processing overlaps them)
        self._ahead = ahead

    def _check_ahead(self) -> None:
        """The part of the model's check left for after its first run: the expected programs' kernel variants."""
        ahead, self._ahead = self._ahead, []
        if ahead:
            with counters.timed("gpu_checks_layers"):
                self._check_variants_of(None, ahead)

    def _make_pipelines(self, progs: list[P.Program]) -> threading.Thread:
        """A thread making the pipelines of every kernel `progs` use (their plans only: nothing else is made).
        A failure there is left for the compile that needs the pipeline to report."""
        kernels = list({d.kernel.key: d.kernel for p in progs for d in self.model.planned(p)}.values())

        def make() -> None:
            with contextlib.suppress(Exception):
                self.model.dev.pipelines(kernels)

        thread = threading.Thread(target=make, name="facerun-pipelines", daemon=True)
        thread.start()
        return thread

    def check_variants(self, prog: P.Program) -> None:
        """Check the kernel variants of `prog` not checked yet, each on the first layer using it, alone."""
        counters.bump("gpu_variant_checks")
        with counters.timed("gpu_variant_checks"):
            self._check_variants_of(prog, [])

    def _check_variants_of(self, prog: P.Program | None, ahead: list[P.Program]) -> None:
        """Check every kernel variant `prog` (the program about to run, or None) and the programs `ahead` use that is
        not verified: on its layer of the checked (small) program, with the plan forced to that variant; failing
        that, `prog`'s variants on their layers at `prog`'s own shapes (or `prog` whole). Variants of programs `ahead`
        that cannot be checked small are left for when such a program runs."""
        pending: dict[str, tuple] = {}  # variant -> (program, first step using it, its plan)
        for p in ([prog] if prog is not None else []) + [a for a in ahead if a is not prog]:
            first_step: dict[str, P.Step] = {}
            for st in p.steps:
                first_step.setdefault(st.node, st)
            dispatches = self.model.compile(p).dispatches if p is prog else self.model.planned(p)
            for d in dispatches:
                if d.kernel.key not in self.verified and d.kernel.key not in pending:
                    pending[d.kernel.key] = (p, first_step.get(d.node), d.plan)
        left = set()
        for key, (p, st, plan) in pending.items():
            if key in self.verified:  # checked on the way, beside another variant (a split's reduce pass)
                continue
            if not self._check_small(st, key, plan) and p is prog:
                left.add(key)
        if left:
            self._check_layers(prog, self._layers_using(prog, left))
            self.verified |= left

    def _check_small(self, st: P.Step | None, key: str, plan) -> bool:
        """Check variant `key` on `st`'s layer of the checked program, its plan forced (tile and split) to `plan`'s;
        False when that layer does not run `key` so (not a tiled convolution, or another shape)."""
        small = self.checked_program
        if small is None or not isinstance(st, P.Conv) or getattr(plan, "tile", None) is None:
            return False
        twin = next((s for s in small.steps if s.node == st.node and isinstance(s, P.Conv)), None)
        if twin is None:
            return False
        one = one_conv_program(small, twin, norm=True)
        force = {"force_tile": plan.tile.name, "force_splits": plan.splits,
                 # Winograd's products are the tiled kernel's: the same form, so its transforms are checked too
                 "force_winograd": plan.m if plan.kernel == "winograd" else False}
        gp = self.model.compile_once(one, force)
        if key not in gp.kernel_keys:
            return False
        inputs = test_inputs(one)
        why = disagreement(self.cpu_run(one, inputs), gp.run(inputs), self.tolerance)
        if why is not None:
            raise Disagreement(f"the GPU disagrees with the CPU on layer {st.node}: {why}")
        counters.bump("gpu_layer_checks")
        self.verified |= gp.kernel_keys
        return True

    def _layers_using(self, prog: P.Program, keys: set[str]) -> list[tuple] | None:
        """The first step using each kernel variant in `keys`, or None when one is outside the convolutions and
        fully connected layers (the other kernels do not depend on shapes) or does another step's work too (a 1x1's
        pass making its depthwise: a program of the layer alone would not run it), so the program is checked
        whole."""
        gp = self.model.compile(prog)
        first_step: dict[str, P.Step] = {}
        for st in prog.steps:
            first_step.setdefault(st.node, st)
        layers: dict[str, P.Step] = {}
        for d in gp.dispatches:
            if d.kernel.key in keys and d.kernel.key not in layers:
                st = first_step.get(d.node)
                if not isinstance(st, (P.Conv, P.Gemm)) or d.also:
                    return None
                layers[d.kernel.key] = st
        return list(layers.values())

    def _check_layers(self, prog: P.Program, layers: list[P.Step] | None) -> None:
        if layers is None:  # a variant outside the convolutions: the whole program, at its own size
            inputs = test_inputs(prog)
            why = disagreement(self.cpu_run(prog, inputs), self.model.run(prog, inputs), self.tolerance)
            if why is not None:
                raise Disagreement(f"the GPU disagrees with the CPU on the check input: {why}")
            return
        for st in layers:
            one = one_conv_program(prog, st, norm=True)
            inputs = test_inputs(one)
            why = disagreement(self.cpu_run(one, inputs), self.model.compile_once(one).run(inputs),
                               self.tolerance)
            if why is not None:
                raise Disagreement(f"the GPU disagrees with the CPU on layer {st.node}: {why}")
            counters.bump("gpu_layer_checks")

    def forget(self, prog: P.Program) -> None:
        """`prog` was dropped by its model: drop its compiled form and what was noted about it."""
        self.program_reasons.pop(id(prog), None)
        self.model.forget(prog)

    def run(self, prog: P.Program, feeds) -> dict[str, np.ndarray] | None:
        if isinstance(feeds, np.ndarray):
            feeds = {prog.inputs[0][0]: feeds}
        return self._guarded(prog, lambda: self.model.run(prog, feeds))

    def submit(self, prog: P.Program, feeds):
        """`prog` on `feeds` submitted, not waited for: a function giving its outputs (None from it: the GPU was
        dropped at read-back), or None now: run it another way."""
        if isinstance(feeds, np.ndarray):
            feeds = {prog.inputs[0][0]: feeds}
        return self._later(self._guarded(prog, lambda: self.model.submit(prog, feeds)))

    def submit_faces(self, prog: P.Program, cuts: list, layout: FaceLayout):
        """`prog` on faces laid out on the device (gpu/faces.py), submitted, not waited for: as `submit`; None now:
        the host makes the input. The layout kernel is checked on the first batch against the host's input for the
        same faces; where it disagrees, the host aligns from then on and the GPU still runs the network."""
        if self.faces_reason is not None:
            return None

        def work():
            gp = self.model.compile(prog)
            if not gp.faces.fits(cuts):
                return None
            if not self.faces_checked:
                why = faces_disagreement(layout.blob(cuts), gp.faces.laid_out(cuts, layout)[: len(cuts)], layout)
                counters.bump("gpu_faces_checks")
                if why is not None:
                    self.faces_reason = why
                    log.warning("faces are aligned on the host: %s", why)
                    return None
                self.faces_checked = True
            return gp.faces.start(cuts, layout)

        started = self._guarded(prog, work)
        self._keep()  # whether the first faces' layout agreed
        return self._later(started)

    def _later(self, started):
        """A function giving a submitted run's outputs (runner.Started), None from it where the GPU failed at
        read-back (then dropped); None for no run."""
        if started is None:
            return None

        def result():
            try:
                return started.result()
            except GpuError as e:
                self.drop(str(e))
                return None

        return result

    def run_photo(self, prog: P.Program, rgb: np.ndarray, layout: PhotoLayout,
                  photo: tuple[int, int] | None = None) -> dict[str, np.ndarray] | None:
        """`prog` on a photo laid out on the device (photo.PhotoChecks.run), or None: run it another way."""
        if not self.photos.takes(photo is not None):
            return None
        got = self._guarded(prog, lambda: self.photos.run(prog, rgb, layout, photo))
        self._keep()  # what the first photo showed (its layout, its candidate rows)
        return got

    def submit_photos(self, prog: P.Program, items: list, layout: PhotoLayout, batch_prog: P.Program | None = None):
        """`prog` (a bucket's program) on photos [(rgb, photo or None)] in one submission: a function giving their
        outputs in order (None from it: the GPU was dropped at read-back), or None now: run them one by one.
        batch_prog: the bucket's program of N items, which runs them in one pass, each masked to its own photo
        (photo.PhotoChecks.submit_items); without it, or where it cannot, `prog` runs once a photo in the one
        submission (photo.PhotoChecks.submit)."""
        if not self.photos.takes(any(photo is not None for _, photo in items)):
            return None
        submitted = None
        if batch_prog is not None and id(batch_prog) not in self.program_reasons:
            same = lambda want, got: disagreement(want, got, self.tolerance)  # noqa: E731
            submitted = self._guarded(batch_prog, lambda: self.photos.submit_items(prog, batch_prog, items, layout,
                                                                                   items_of, same))
            if self.reason is not None:
                return None
        if submitted is None:
            submitted = self._guarded(prog, lambda: self.photos.submit(prog, items, layout, batch_of))
        if submitted is None:
            return None

        def result():
            try:
                got = submitted()
            except GpuError as e:
                self.drop(str(e))
                return None
            self._keep()  # what the first batch showed
            return got

        return result

    def takes_photos(self) -> bool:
        """Whether run_photo lays photos out on the device now."""
        return self.reason is None and self.photos.takes(False)

    def masks_photos(self) -> bool:
        """Whether a photo may run in a larger bucket's program now."""
        return self.reason is None and self.photos.takes(True)

    def prepare(self, prog: P.Program) -> None:
        """The compiled form of `prog` made ahead, once the model's check has passed (a library's decoding threads;
        before the check the first run makes it). Errors are left for the run."""
        if self.reason is None and self.whole_checked:
            with contextlib.suppress(FacerunError):
                self.model.compile(prog)

    def stage_photo(self, rgb: np.ndarray) -> np.ndarray:
        """A photo's bytes on the device ahead of its batch (staging.py), once photos are laid out there (the
        model's first photo checked it); else `rgb` as it is."""
        if self.reason is None and self.photos.image_layout is True:
            return self.model.staging.stage(rgb)
        return rgb

    def run_many(self, prog: P.Program, items: list) -> list[dict[str, np.ndarray]] | None:
        """Several inputs through one program in one submission, or None: run them on the CPU."""
        return self._guarded(prog, lambda: self.model.run_many(prog, items))

    def _guarded(self, prog: P.Program, work):
        if self.reason is not None:
            return None
        key = id(prog)
        if key in self.program_reasons:
            return None
        try:
            with self._check_lock:
                if not self.whole_checked:
                    self.first_check(prog)
                else:
                    if self._ahead:
                        self._check_ahead()
                        self._keep()
                    if self.model.compile(prog).kernel_keys - self.verified:
                        self.check_variants(prog)
                        self._keep()
            return work()
        except DoesNotFit as e:
            # this program alone is beyond the device (a binding, a grid): it runs on the CPU, others stay
            self.program_reasons[key] = str(e)
            log.warning("the program for input %s runs on the CPU: %s", list(prog.input_shape), e)
            return None
        except Disagreement as e:
            if self.strict:
                raise
            self.drop(str(e))
            return None
        except GpuError as e:
            self.drop(str(e))
            return None


def gpu_runner(workload: Workload = NO_WORKLOAD, required: bool = False, budget_mb: float | None = None,
               precision: str = "f32"):
    """A factory of a model's checked GPU runner: programs (runner.Programs, the model's programs of other shapes:
    a Net) -> CheckedGpu. GpuError here when there is no usable GPU. required=True (device="gpu"): a disagreement
    with the CPU raises too, instead of dropping the GPU. precision: "f32", or "f16" (program.PRECISIONS: half-float
    storage, checked at agree.GPU_F16_CHECK)."""
    model = GpuModel(budget_mb=budget_mb, precision=precision)

    def make(programs) -> CheckedGpu:
        photo = workload.photo
        parts = {"precision": precision, "check_side": workload.check_side,
                 "masked": None if photo is None else photo.masked, "align": None if photo is None else photo.align}
        verdicts = Verdicts.for_model(model.dev.identity(), programs.sha256, parts)
        return CheckedGpu(model, strict=required, programs=programs, workload=workload, verdicts=verdicts)

    return make
