"""One loaded model's GPU side: its weights on the device and its compiled programs (one per input shape).

The first run of a program compiles it (lower.py, then runner.py's device objects); later runs reuse it. Pipelines
are the device's, one per kernel variant (shapes travel in the uniforms), so a new input size costs only planning,
buffers and bind groups. Compiled programs are kept least recently used first under a byte budget of device memory
(FACERUN_GPU_PROGRAM_BUDGET_MB, default 1024), so thousands of sizes keep a flat footprint. A program
beyond the device's limits raises DoesNotFit at compile time, so the caller runs that program on the CPU; any other
device failure is a GpuError. Also the per-convolution mode (each convolution on the GPU alone, the rest on the CPU
interpreter, for comparison) and every step's output from one GPU run (parity --steps).
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from .. import counters, settings
from .. import program as P
from ..errors import GpuError
from ..lru import InFlight, LruCache, budget_from_env
from ..program import PRECISIONS
from . import device as D
from .arena import Arena
from .fusion import pooled_inputs
from .lower import lower, prologues
from .memory import WeightStore, budget_bytes
from .plan import PlanError
from .runner import GpuProgram, short_error
from .staging import PhotoStaging


class DoesNotFit(GpuError):
    """A program beyond this device's limits (a binding, a grid): it runs on the CPU; other programs may not."""


class GpuModel:
    """One loaded model's GPU side.

    run(prog, inputs) -> outputs by name; raises GpuError (the caller then uses the CPU). `conv_hook(prog)` is the
    per-convolution mode's hook for `cpu.run_program(prog, inputs, conv=model.conv_hook(prog))`.
    """

    def __init__(self, budget_mb: float | None = None, dev: D.Device | None = None, precision: str = "f32"):
        self.dev = dev or D.get_device()
        if precision not in PRECISIONS:
            raise GpuError(f"unknown precision '{precision}' ({' or '.join(PRECISIONS)})")
        if precision == "f16" and not self.dev.has_f16:
            raise GpuError(f"{self.dev.label} has no half floats in shaders (the shader-f16 feature)")
        self.precision = precision
        self.half = precision == "f16"  # Winograd's planes and weights stored as f16 (lower.lower's half)
        self.separable = settings.get("FACERUN_GPU_SEPARABLE")  # lower.lower's separable
        self.weights = WeightStore(budget_bytes(budget_mb))
        self.arena = Arena(self.dev)  # the activation buffers and bind groups every program of the model runs in
        self.staging = PhotoStaging(self.dev)  # photos a library's decoding threads put on the device (staging.py)
        self._programs = LruCache(budget_from_env("FACERUN_GPU_PROGRAM_BUDGET_MB"),
                                  lambda hit: hit[1].device_bytes,
                                  lambda key, hit: counters.bump("gpu_programs_evicted"))
        self._compiling = InFlight()  # programs being compiled: another thread wanting one waits, others go on
        self._convs: dict[tuple, tuple[P.Conv, GpuProgram]] = {}
        self._lock = threading.Lock()

    @property
    def device_name(self) -> str:
        return self.dev.label

    @property
    def resident_bytes(self) -> int:
        return self.weights.resident_bytes

    def compile(self, prog: P.Program, force: dict | None = None) -> GpuProgram:
        """The compiled form of `prog` (cached); GpuError when it cannot run on this device. `force` (tests, tuning)
        overrides every convolution's plan (force_splits, force_tile) and bypasses the cache."""
        if force:
            return self._compile(prog, force)
        key = id(prog)
        while True:
            with self._lock:
                hit = self._programs.get(key)
            if hit is not None and hit[0] is prog:
                return hit[1]
            busy = self._compiling.claim(key)
            if busy is None:
                break
            busy.wait()
        try:
            with counters.timed("gpu_programs_compiled"):
                gp = self._compile(prog)
            counters.bump("gpu_programs_compiled")
            with self._lock:
                self._programs.put(key, (prog, gp))
            return gp
        finally:
            self._compiling.done(key)

    def forget(self, prog: P.Program) -> None:
        """Drop the compiled form of `prog` (its owner dropped the program)."""
        with self._lock:
            hit = self._programs.get(id(prog))
            if hit is not None and hit[0] is prog:
                self._programs.pop(id(prog))

    @property
    def compiled_count(self) -> int:
        return len(self._programs)

    def _compile(self, prog: P.Program, force: dict | None = None, shared: bool = True) -> GpuProgram:
        """`prog` for the device, in the model's shared arena (shared=False: buffers of its own, for a program run
        once, so it neither grows the arena nor evicts bind groups)."""
        try:
            return GpuProgram(self.dev, prog, self.weights, force, self.arena if shared else None, self.half,
                              self.separable)
        except PlanError as e:
            raise DoesNotFit(f"this program does not fit the GPU: {e}") from None
        except GpuError:
            raise
        except Exception as e:  # wgpu validation/out-of-memory errors, shader compile errors
            raise GpuError(f"preparing the program for the GPU failed: {short_error(e)}") from None

    def planned(self, prog: P.Program) -> list:
        """`prog`'s dispatches as this device would run them (kernel variants and plans), made without the device:
        for planning checks ahead. PlanError (the program does not fit) gives no dispatches."""
        try:
            return lower(prog, self.dev.limits, _no_consts, half=self.half, separable=self.separable).dispatches
        except PlanError:
            return []

    def run(self, prog: P.Program, inputs) -> dict[str, np.ndarray]:
        if isinstance(inputs, np.ndarray):
            inputs = {prog.inputs[0][0]: inputs}
        return self.compile(prog).run(inputs)

    def submit(self, prog: P.Program, inputs):
        """`prog` on `inputs`, submitted and not waited for (runner.Started: its `result()` gives the outputs)."""
        if isinstance(inputs, np.ndarray):
            inputs = {prog.inputs[0][0]: inputs}
        return self.compile(prog).submit(inputs)

    def compile_once(self, prog: P.Program, force: dict | None = None) -> GpuProgram:
        """The compiled form of `prog`, not cached, in buffers of its own: for programs used a single time (checks).
        `force` as in compile."""
        return self._compile(prog, force, shared=False)

    def run_many(self, prog: P.Program, items: list) -> list[dict[str, np.ndarray]]:
        """Several inputs of the same shape through `prog`, in one submission."""
        return self.compile(prog).run_many(items)

    def step_outputs(self, prog: P.Program, inputs) -> list[np.ndarray]:
        """The output of every step of `prog`, in step order, from one GPU run that keeps them all (parity)."""
        if isinstance(inputs, np.ndarray):
            inputs = {prog.inputs[0][0]: inputs}
        names = [(f"step {i}", st.out) for i, st in enumerate(prog.steps)]
        every = P.Program(prog.values, prog.steps, prog.inputs, names)
        saved = [st.frees for st in prog.steps]  # the steps are shared with `prog`: restore their lifetimes
        try:
            every.assign_lifetimes()
            gp = self._compile(every, shared=False)  # every value kept: far larger than the arena
        finally:
            for st, f in zip(prog.steps, saved):
                st.frees = f
        out = gp.run(inputs)
        return [out[name] for name, _ in names]

    # ---- per-convolution mode
    def conv_hook(self, prog: P.Program):
        """cpu.run_program's `conv` hook for `prog`: each convolution on the GPU (uploaded, run and read back
        alone); other steps get None (the CPU runs them)."""

        def hook(step: P.Step, args: list) -> np.ndarray | None:
            if not isinstance(step, P.Conv):
                return None
            x = np.ascontiguousarray(args[0], np.float32)
            key = (id(step), x.shape)
            with self._lock:
                hit = self._convs.get(key)
                if hit is None or hit[0] is not step:
                    hit = (step, self._compile(one_conv_program(prog, step), shared=False))
                    self._convs[key] = hit
            feeds = {"x": x}
            if len(args) > 1:
                feeds["residual"] = np.ascontiguousarray(args[1], np.float32)
            return hit[1].run(feeds)["y"]

        return hook

    def run_per_conv(self, prog: P.Program, inputs) -> dict[str, np.ndarray]:
        """The program on the CPU interpreter with each convolution on the GPU alone (for comparison)."""
        from .. import cpu

        if isinstance(inputs, np.ndarray):
            inputs = {prog.inputs[0][0]: inputs}
        return cpu.run_program(prog, inputs, conv=self.conv_hook(prog))


class _NoConsts:
    """A const store that makes nothing (planning only)."""

    def __call__(self, role, data):
        return None

    def derived(self, role, sources, extra, make):
        return None


_no_consts = _NoConsts()


def one_conv_program(prog: P.Program, step: P.Conv | P.Gemm, norm: bool = False) -> P.Program:
    """A program of `prog`'s convolution (or fully connected) `step` alone, its shapes taken from `prog` (inputs "x"
    and, with a residual, "residual"; output "y"). norm=True: with the batch norm (lower.prologues) or the 2x2 max
    pool (fusion.pooled_inputs) before it that the lowering may fold into it, "x" then being that step's input, so a
    check runs the kernels the layer runs."""
    xshape, yshape = prog.values[step.x].shape, prog.values[step.out].shape
    conv = norm and isinstance(step, P.Conv)
    before = (prologues(prog).get(id(step)) or pooled_inputs(prog).get(id(step))) if conv else None
    values = [P.Value(0, "x", tuple(prog.values[before.x].shape if before is not None else xshape), "input", 0)]
    inputs = [("x", 0)]
    steps = []
    x = 0
    if before is not None:
        x = len(values)
        values.append(P.Value(x, "before", tuple(xshape), "temp", x))
        steps.append(dataclasses.replace(before, x=0, out=x))
    res = None
    if getattr(step, "residual", None) is not None:
        res = len(values)
        values.append(P.Value(res, "residual", tuple(yshape), "input", res))
        inputs.append(("residual", res))
    out = len(values)
    values.append(P.Value(out, "y", tuple(yshape), "temp", out))
    steps.append(dataclasses.replace(step, out=out, x=x, residual=res) if isinstance(step, P.Conv)
                 else dataclasses.replace(step, out=out, x=x))
    one = P.Program(values, steps, inputs, [("y", out)])
    one.assign_lifetimes()
    return one
