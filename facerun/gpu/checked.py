"""Checked attachment of the GPU to a model: the GPU is used only after it agreed with the CPU interpreter on a
seeded test input (facerun.agree), and it is dropped (with the reason, said once) at the first device error, the
run carrying on on the CPU with the right answer.

What is checked, and when: the first program a model runs on the GPU is checked whole (every output, on the seeded
input of that program's shape). Every kernel variant (pipeline) that program uses is then trusted for the model. A
later program (a new input size) is checked again only for kernel variants it needs that were not checked yet, and
on a small case: each such variant's first layer, alone, at its own shape, on GPU and CPU. So a photo library of
thousands of sizes pays one whole check per model and device, plus a few single-layer checks.

`attach(net)` sets `net.gpu` (a CheckedGpu) or `net.gpu_reason`; `Net` then calls `net.gpu.run(prog, feeds)`, which
returns the outputs or None (meaning: run this on the CPU).
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from .. import agree, counters
from .. import program as P
from ..errors import GpuError
from .model import DoesNotFit, GpuModel, one_conv_program

log = logging.getLogger("facerun.gpu")


def test_inputs(prog: P.Program, seed: int = agree.TEST_SEED) -> dict[str, np.ndarray]:
    """The seeded check input of a program: values like a normalised image, in [-1, 1]."""
    return agree.seeded_inputs({name: prog.values[vid].shape for name, vid in prog.inputs}, seed)


class Disagreement(GpuError):
    """The GPU's outputs differ from the CPU interpreter's on the check input."""


def disagreement(cpu: dict[str, np.ndarray], gpu: dict[str, np.ndarray]) -> str | None:
    """Why the GPU's outputs do not match the CPU's, or None when they agree within facerun.agree.GPU_CHECK."""
    return agree.disagreement(cpu, gpu, agree.GPU_CHECK)


class CheckedGpu:
    """A model's GPU, used only for programs it was checked on, dropped on the first device error.

    run(prog, feeds) -> outputs, or None when this run belongs on the CPU. `reason` says why the GPU is not used
    (None while it is); `program_reasons` why single programs run on the CPU (too large for the device, say).
    """

    def __init__(self, model: GpuModel, cpu_run=None, strict: bool = False, on_drop=None):
        from .. import cpu

        self.model = model
        self.cpu_run = cpu_run or cpu.run_program
        self.strict = strict
        self.on_drop = on_drop
        self.reason: str | None = None
        self.program_reasons: dict[int, str] = {}
        self.whole_checked = False  # the whole network agreed once (on the first program run)
        self.verified: set[str] = set()  # kernel variants that agreed with the CPU
        self._lock = threading.Lock()
        self._check_lock = threading.Lock()

    @property
    def device_name(self) -> str:
        return self.model.device_name

    @property
    def active(self) -> bool:
        return self.reason is None

    def drop(self, why: str) -> None:
        """Stop using the GPU for this model, saying why once."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = why
        log.warning("GPU dropped, running on the CPU: %s", why)
        if self.on_drop is not None:
            self.on_drop(why)

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

    def check(self, prog: P.Program) -> None:
        """Compare GPU and CPU on the whole of `prog` with the seeded input; raises GpuError with the difference (or
        the device error). Every kernel variant `prog` uses counts as checked afterwards."""
        counters.bump("gpu_checks")
        inputs = test_inputs(prog)
        want = self.cpu_run(prog, inputs)
        got = self.model.run(prog, inputs)
        why = disagreement(want, got)
        if why is not None:
            raise Disagreement(f"the GPU disagrees with the CPU on the check input: {why}")
        self.verified |= self.model.compile(prog).kernel_keys
        self.whole_checked = True

    def check_variants(self, prog: P.Program, new: set[str]) -> None:
        """Check the kernel variants `new` of `prog` on small cases: the first convolution using each, alone. A
        variant outside the convolutions (none today: their kernels do not depend on shapes) checks `prog` whole."""
        gp = self.model.compile(prog)
        first_step: dict[str, P.Step] = {}
        for st in prog.steps:
            first_step.setdefault(st.node, st)
        layers: dict[int, P.Conv] = {}
        for d in gp.dispatches:
            if d.kernel.key in new:
                st = first_step.get(d.node)
                if not isinstance(st, P.Conv):
                    self.check(prog)
                    return
                layers.setdefault(id(st), st)
        counters.bump("gpu_variant_checks")
        for st in layers.values():
            one = one_conv_program(prog, st)
            inputs = test_inputs(one)
            why = disagreement(self.cpu_run(one, inputs), self.model.run_once(one, inputs))
            if why is not None:
                raise Disagreement(f"the GPU disagrees with the CPU on layer {st.node}: {why}")
        self.verified |= gp.kernel_keys

    def forget(self, prog: P.Program) -> None:
        """`prog` was dropped by its model: drop its compiled form and what was noted about it."""
        self.program_reasons.pop(id(prog), None)
        self.model.forget(prog)

    def run(self, prog: P.Program, feeds) -> dict[str, np.ndarray] | None:
        if isinstance(feeds, np.ndarray):
            feeds = {prog.inputs[0][0]: feeds}
        return self._guarded(prog, lambda: self.model.run(prog, feeds))

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
                    self.check(prog)
                else:
                    new = self.model.compile(prog).kernel_keys - self.verified
                    if new:
                        self.check_variants(prog, new)
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


def attach(net, required: bool = False, budget_mb: float | None = None) -> CheckedGpu | None:
    """Give `net` a checked GPU (`net.gpu`), or say why not (`net.gpu_reason`). required=True (device="gpu") raises
    GpuError when there is no usable GPU, and when the GPU disagrees with the CPU."""
    try:
        model = GpuModel(budget_mb=budget_mb)
    except GpuError as e:
        net.gpu = None
        net.gpu_reason = str(e)
        if required:
            raise
        return None

    def dropped(why: str) -> None:
        net.gpu = None
        net.gpu_reason = why

    gpu = CheckedGpu(model, strict=required, on_drop=dropped)
    net.gpu = gpu
    net.gpu_reason = None
    return gpu
