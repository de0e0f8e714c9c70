"""The device's own limits, measured by facerun's probe kernels (shaders/probe.wgsl): memory bandwidth (one large
buffer copied into another: GB/s of bytes read plus bytes written) and arithmetic rate (independent vec4 fma chains
in registers: TFLOP/s, an fma counting 2; in f32, and in f16 where the device grants shader-f16). The benchmark's
roofline (bench/roofline.py) holds each row against them.

Timing: the device is made without the timestamp-query feature (device.py asks for shader-f16 only), so each figure
is wall-clock around a submission and its wait, the submission's fixed cost taken out by the difference between `k`
and `2k` passes in one submission (as tune.gpu_seconds does), the best of BEST_OF tries each. Sizes start small and
grow (x4) while one pass takes under GROW_BELOW_S, then `k` is chosen so a timed submission lasts about TARGET_S: ~10
ms on a big GPU, a few small passes on a software rasteriser.

Results are kept per adapter (name, driver, backend) in one JSON file of facerun's cache (settings.cache_root),
measured again when asked (`peaks(reprobe=True)`, `bench models --reprobe`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .. import counters
from ..errors import FacerunError, GpuError
from ..io import write_json
from ..settings import cache_root
from . import kernels as K
from . import readback

FORMAT = "facerun-probe/1"
CACHE_FILE = "device-peaks.json"
TARGET_S = 0.010  # one timed submission on a fast device
GROW_BELOW_S = 0.002  # a pass shorter than this is made larger (up to the caps below)
BEST_OF = 3
MAX_PASSES = 2000
COPY_START = 4 << 20  # bytes of each buffer in the first copy
COPY_CAP = 256 << 20  # well past any GPU's last-level cache (an H200's L2 is 50 MB)
THREADS = 256  # per workgroup, in both kernels
FMA_START_GROUPS, FMA_MAX_GROUPS = 16, 4096  # 4096 x 256 threads keep every core of a big GPU busy
FMA_START_ITERS, FMA_MAX_ITERS = 16, 1 << 16
CHAINS, UNROLL = 8, 4  # vec4 chains per thread, fma per chain per loop iteration
FMA_PER_ITER = CHAINS * UNROLL * 4  # scalar fma per thread per iteration
SCALE, SHIFT = 0.9990234375, 0.0009765625  # exact in f16: the chains settle at 1


@dataclass
class Peaks:
    """What the probe measured on one adapter."""

    adapter: dict  # name, driver, backend
    fma_tflops: float  # f32
    bandwidth_gbps: float  # bytes read + bytes written by the copy, per second
    f16_tflops: float | None = None  # None: no shader-f16
    measured: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    method: str = "wall clock around submit and wait, fixed cost taken out by k vs 2k passes, best of 3"
    detail: dict = field(default_factory=dict)  # the sizes each figure was measured at

    @property
    def ridge(self) -> float:
        """FLOP per byte where the two limits meet: below it a kernel is bound by memory, above by arithmetic."""
        return self.fma_tflops * 1e12 / (self.bandwidth_gbps * 1e9)

    def to_json(self) -> dict:
        return {**asdict(self), "ridge_flop_per_byte": self.ridge}


def adapter_key(adapter: dict) -> str:
    return " | ".join(str(adapter.get(k) or "") for k in ("name", "driver", "backend"))


def cache_path() -> Path:
    return cache_root() / CACHE_FILE


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("adapters"), dict):
        return {}
    return data["adapters"]


def _from_json(d: dict) -> Peaks | None:
    try:
        p = Peaks(dict(d["adapter"]), float(d["fma_tflops"]), float(d["bandwidth_gbps"]),
                  None if d.get("f16_tflops") is None else float(d["f16_tflops"]), str(d.get("measured", "")),
                  str(d.get("method", "")), dict(d.get("detail") or {}))
    except (KeyError, TypeError, ValueError):
        return None
    good = all(math.isfinite(v) and v > 0 for v in (p.fma_tflops, p.bandwidth_gbps))
    return p if good else None


def peaks(dev=None, adapter: dict | None = None, reprobe: bool = False) -> Peaks:
    """The device's peaks: from the cache when this adapter was probed before (unless `reprobe`), else measured
    now and written there. `dev`: a device.Device (default: facerun's); `adapter`: its name, driver and backend
    (default: read off the adapter facerun uses). GpuError when there is no device or the probe fails on it."""
    from . import device as D

    dev = dev or D.get_device()
    adapter = adapter or _adapter_of(dev)
    key = adapter_key(adapter)
    path = cache_path()
    kept = _read_cache(path)
    if not reprobe and key in kept:
        found = _from_json(kept[key])
        if found is not None:
            return found
    found = measure(dev, adapter)
    kept = _read_cache(path)  # another process may have written meanwhile
    kept[key] = found.to_json()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"format": FORMAT, "adapters": kept})
    except (OSError, FacerunError):  # an unwritable cache costs the next run a probe, not this one its figures
        pass
    return found


def _adapter_of(dev) -> dict:
    from . import device as D

    driver = ""
    try:
        used = [r for r in D.describe_adapters() if r.get("used")]
        driver = used[0].get("driver", "") if used else ""
    except Exception:
        pass
    return {"name": dev.name, "driver": driver, "backend": dev.backend}


# ------------------------------------------------------------------------------------------------- measuring


def _kernel(entry: str, half: bool = False) -> K.Kernel:
    subst = [("T", "f16" if half else "f32"), ("CHAINS", CHAINS), ("UNROLL", UNROLL)]
    if half:
        subst.append(("HALF", True))
    # every index is in range: the copy guards its count, the fma grid is exactly its output's size
    return K.Kernel("probe.wgsl", entry, tuple(subst), trusted=True)


class _Bench:
    """One probe kernel bound to its buffers, timed in submissions of several passes."""

    def __init__(self, dev, kernel: K.Kernel, params: dict, src, out, groups: tuple[int, int]):
        import wgpu

        self.dev, self.out, self.groups = dev, out, groups
        self.pipe = dev.pipeline(kernel)
        data = kernel.layout.pack(**params).ljust(K.UNIFORM_SLOT, b"\0")
        self.uniform = dev.device.create_buffer_with_data(label="facerun probe params", data=data,
                                                          usage=wgpu.BufferUsage.UNIFORM)
        self.staging = dev.device.create_buffer(label="facerun probe read-back", size=16,
                                                usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        entries = [{"binding": K.UNIFORM_BINDING,
                    "resource": {"buffer": self.uniform, "offset": 0, "size": K.UNIFORM_SLOT}}]
        for b in K.READ_BINDINGS:
            buf = src if b == K.READ_BINDINGS[0] else dev.dummy
            entries.append({"binding": b, "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
        entries.append({"binding": K.OUT_BINDING, "resource": {"buffer": out, "offset": 0, "size": out.size}})
        entries.append({"binding": K.PHOTOS_BINDING, "resource": {"buffer": dev.dummy, "offset": 0,
                                                                   "size": dev.dummy.size}})
        self.group = dev.device.create_bind_group(layout=dev.layout, entries=entries)

    def seconds(self, passes: int) -> float:
        """Wall seconds of one submission of `passes` dispatches, until the device is done."""
        enc = self.dev.device.create_command_encoder(label="facerun probe")
        cp = enc.begin_compute_pass(label="facerun probe")
        cp.set_pipeline(self.pipe)
        cp.set_bind_group(0, self.group)
        for _ in range(passes):
            cp.dispatch_workgroups(self.groups[0], self.groups[1], 1)
        cp.end()
        enc.copy_buffer_to_buffer(self.out, 0, self.staging, 0, 16)  # waited on through this read-back
        commands = enc.finish()
        start = time.perf_counter()
        self.dev.queue.submit([commands])
        readback.read(self.dev.device, self.staging)
        counters.bump("device_probe_dispatches", passes)
        return time.perf_counter() - start

    def per_pass(self, first: float) -> tuple[float, int]:
        """(seconds of one pass, passes per timed submission), `first` the wall time of one pass as found."""
        k = max(1, min(MAX_PASSES, round(TARGET_S / max(first, 1e-6))))
        few = min(self.seconds(k) for _ in range(BEST_OF))
        many = min(self.seconds(2 * k) for _ in range(BEST_OF))
        d = (many - few) / k
        return (d if d > 0 else many / (2 * k)), k  # noise past the difference: the plain average, an upper bound


def _grid(workgroups: int, dev) -> tuple[int, int, int]:
    """(x, y, row) of a 2-D grid of at least `workgroups`, rows of `row` workgroups."""
    cap = dev.limits.max_workgroups_per_dim
    gx = min(workgroups, cap)
    gy = -(-workgroups // gx)
    return gx, gy, gx


def _copy_rate(dev) -> tuple[float, dict]:
    import wgpu

    cap = min(COPY_CAP, dev.limits.max_binding // 16 * 16)
    size = min(COPY_START, cap)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
    while True:
        src = dev.device.create_buffer(label="facerun probe source", size=size, usage=usage)
        dst = dev.device.create_buffer(label="facerun probe target", size=size, usage=usage)
        count = size // 16
        gx, gy, row = _grid(-(-count // THREADS), dev)
        b = _Bench(dev, _kernel("copy"), dict(count=count, row=row, scale=0.0, shift=0.0), src, dst, (gx, gy))
        first = min(b.seconds(1) for _ in range(2))
        if first >= GROW_BELOW_S or size * 4 > cap:
            break
        size *= 4
    t, k = b.per_pass(first)
    return 2 * size / t / 1e9, {"buffer_mib": size / (1 << 20), "passes": k, "pass_ms": t * 1e3}


def _fma_rate(dev, half: bool) -> tuple[float, dict]:
    import wgpu

    kernel = _kernel("chains", half)
    groups, iters = FMA_START_GROUPS, FMA_START_ITERS
    while True:
        gx, gy, row = _grid(groups, dev)
        threads = gx * gy * THREADS
        out = dev.device.create_buffer(label="facerun probe sums", size=threads * 16,
                                       usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
        b = _Bench(dev, kernel, dict(count=iters, row=row, scale=SCALE, shift=SHIFT), dev.dummy, out, (gx, gy))
        first = min(b.seconds(1) for _ in range(2))
        if first >= GROW_BELOW_S:
            break
        if groups < FMA_MAX_GROUPS:  # more threads first: a big GPU needs them all busy
            groups *= 4
        elif iters < FMA_MAX_ITERS:
            iters *= 4
        else:
            break
    t, k = b.per_pass(first)
    flop = 2 * FMA_PER_ITER * iters * threads
    return flop / t / 1e12, {"threads": threads, "iterations": iters, "passes": k, "pass_ms": t * 1e3}


def measure(dev, adapter: dict | None = None) -> Peaks:
    """Run the probes on `dev` now (GpuError if the device fails them)."""
    counters.bump("device_probes")
    try:
        gbps, copy_detail = _copy_rate(dev)
        tflops, fma_detail = _fma_rate(dev, False)
        f16 = half_detail = None
        if dev.has_f16:
            f16, half_detail = _fma_rate(dev, True)
    except GpuError:
        raise
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise GpuError(f"the device probe failed: {type(e).__name__}: {first}") from None
    detail = {"copy": copy_detail, "fma_f32": fma_detail}
    if half_detail is not None:
        detail["fma_f16"] = half_detail
    return Peaks(adapter or {"name": dev.name, "driver": "", "backend": dev.backend}, tflops, gbps, f16,
                 detail=detail)
