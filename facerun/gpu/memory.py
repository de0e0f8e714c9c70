"""Where a program's data lives on the device, and in what layout.

Weights and constants stay on the device per model while they fit its byte budget (default 1536 MiB,
FACERUN_GPU_BUDGET_MB); past it they are `Transient`, uploaded for each run. Activation values get buffer slots by
lifetime (`SlotPlanner`). The packing functions lay weights and per-channel coefficients out the way the kernels read
them. Nothing here decides which kernel runs: that is plan.py's.
"""

from __future__ import annotations

import hashlib
import operator
import threading
from dataclasses import dataclass
from math import prod

import numpy as np

from .. import program as P
from .. import settings
from .plan import ConvShape, PlanError

# 1536 MiB: a model's programs may hold F(2x2) and F(4x4) weights both (see plan.WINOGRAD4_MIN_TILES)
DEFAULT_BUDGET_MB = settings.default("FACERUN_GPU_BUDGET_MB")


def budget_bytes(budget_mb: float | None = None) -> int:
    """The resident-weight budget: the argument, else FACERUN_GPU_BUDGET_MB, else DEFAULT_BUDGET_MB."""
    if budget_mb is None:
        budget_mb = settings.get("FACERUN_GPU_BUDGET_MB")
    return max(0, int(budget_mb * (1 << 20)))


# ---------------------------------------------------------------------------------------------------- weights


def aligned(a: np.ndarray) -> np.ndarray:
    """float32/uint32 (or float16) data padded to a multiple of 16 bytes (vec4 bindings need it) and never empty."""
    a = np.ascontiguousarray(a).reshape(-1)
    per = 16 // a.itemsize
    pad = (-a.size) % per or (per if a.size == 0 else 0)
    if pad:
        a = np.concatenate([a, np.zeros(pad, a.dtype)])
    return a


@dataclass
class Transient:
    """Data uploaded for each run (past the residency budget)."""

    data: np.ndarray


DERIVED_ENTRIES = 8192  # remembered derivations: past this, forgotten at once (the buffers stay, found by content)


class WeightStore:
    """A model's weights and constants on the device, keyed by content, under a byte budget."""

    def __init__(self, budget: int):
        self.budget = budget
        self.resident_bytes = 0
        self._buffers: dict[tuple, object] = {}
        self._derived: dict[tuple, tuple] = {}  # (role, ids of the sources, extra) -> (the sources, buffer)
        self._lock = threading.Lock()

    def get(self, dev, role: str, data: np.ndarray):
        """A device buffer holding `data` (kept while the budget lasts), or a `Transient` to upload per run."""
        import wgpu

        data = aligned(data)
        key = (role, data.dtype.str, data.size, hashlib.blake2b(data.view(np.uint8), digest_size=16).digest())
        with self._lock:
            buf = self._buffers.get(key)
            if buf is not None:
                return buf
            if self.resident_bytes + data.nbytes > self.budget:
                return Transient(data)
            buf = dev.device.create_buffer_with_data(label=role, data=data, usage=wgpu.BufferUsage.STORAGE)
            self._buffers[key] = buf
            self.resident_bytes += data.nbytes
            return buf

    def derived(self, dev, role: str, sources: tuple, extra: tuple, make):
        """get(dev, role, make()), remembered by the identity of `sources` (arrays or activations, kept alive here)
        and by `extra`, so a later program built from the same arrays finds its buffer without making or hashing
        the data again."""
        key = (role, tuple(map(id, sources)), extra)
        hit = self._derived.get(key)  # one dict read is atomic: the lock guards the writes
        if hit is not None and all(map(operator.is_, hit[0], sources)):
            return hit[1]
        buf = self.get(dev, role, make())
        if not isinstance(buf, Transient):
            with self._lock:
                if len(self._derived) >= DERIVED_ENTRIES:
                    self._derived.clear()
                self._derived[key] = (sources, buf)
        return buf

    def consts(self, dev) -> _Consts:
        """The const store lower.py takes: `(role, data) -> buffer`, with `derived`."""
        return _Consts(self, dev)


class _Consts:
    def __init__(self, store: WeightStore, dev):
        self.store, self.dev = store, dev

    def __call__(self, role: str, data: np.ndarray):
        return self.store.get(self.dev, role, data)

    def derived(self, role: str, sources: tuple, extra: tuple, make):
        return self.store.derived(self.dev, role, sources, extra, make)


# ------------------------------------------------------------------------------------------- buffer slots


class SlotPlanner:
    """Assigns activation buffers by lifetime at compile time: a freed slot is reused by a later value (the smallest
    free one that fits; else the largest free one, grown; else a new one)."""

    def __init__(self):
        self.sizes: list[int] = []
        self.free: list[int] = []

    def take(self, nbytes: int) -> int:
        nbytes = max(16, -(-nbytes // 16) * 16)
        fits = [s for s in self.free if self.sizes[s] >= nbytes]
        if fits:
            slot = min(fits, key=lambda s: self.sizes[s])
        elif self.free:
            slot = max(self.free, key=lambda s: self.sizes[s])
            self.sizes[slot] = nbytes
        else:
            self.sizes.append(nbytes)
            return len(self.sizes) - 1
        self.free.remove(slot)
        return slot

    def give(self, slot: int) -> None:
        if slot not in self.free:
            self.free.append(slot)

    @property
    def total(self) -> int:
        return sum(self.sizes)


# ------------------------------------------------------------------------------------------------ packing


def pack_conv_weights(weight: np.ndarray, groups: int, kpad: int, mpad: int) -> np.ndarray:
    """OIHW weights as the tiled kernel reads them: per group, K-major [kpad][mpad], zero padded."""
    cout = weight.shape[0]
    m = cout // groups
    k = weight[0].size
    w = weight.reshape(groups, m, k).transpose(0, 2, 1)  # (g, K, M)
    out = np.zeros((groups, kpad, mpad), np.float32)
    out[:, :k, :m] = w
    return out


def pack_separable(pw_weight: np.ndarray, pw_bias: np.ndarray | None, blocks: int, quads: int) -> np.ndarray:
    """A 1x1 convolution's weights as separable.wgsl reads them: vec4s of four output channels, by channel quad and
    then input channel (zero past the last channel), then its bias by quad when it has one. (rows, 4) float32."""
    cout, cin = pw_weight.shape[:2]
    nq = blocks * quads
    w = np.zeros((nq * 4, cin), np.float32)
    w[:cout] = pw_weight.reshape(cout, cin)
    rows = [w.reshape(nq, 4, cin).transpose(0, 2, 1).reshape(nq * cin, 4)]
    if pw_bias is not None:
        bias = np.zeros(nq * 4, np.float32)
        bias[:cout] = np.asarray(pw_bias, np.float32).reshape(-1)
        rows.append(bias.reshape(nq, 4))
    return np.ascontiguousarray(np.concatenate(rows))


def pack_depthwise_quads(weight: np.ndarray, blocks: int, quads: int) -> np.ndarray:
    """Depthwise 3x3 weights (C x 1 x 3 x 3) as vec4s of four channels, by channel quad and then tap. (rows, 4)."""
    cout = weight.shape[0]
    nq = blocks * quads
    w = np.zeros((nq * 4, 9), np.float32)
    w[:cout] = weight.reshape(cout, 9)
    return np.ascontiguousarray(w.reshape(nq, 4, 9).transpose(0, 2, 1).reshape(nq * 9, 4))


# F(4x4, 3x3)'s weight transform (interpolation points 0, ±1, ±2; winograd4.wgsl has the two others)
_G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)
_G4_KRON = np.kron(_G4, _G4).astype(np.float32)  # (36, 9): filter (i, j) -> (a, b)


def winograd_weights(weight: np.ndarray, m: int = 2) -> np.ndarray:
    """OIHW 3x3 weights as Winograd F(mxm, 3x3)'s products take them: U = G g Gᵀ of every filter, as the weights of
    an (m+2)²-group 1x1 convolution (group e = (m+2)a + b holds U[a, b] of every output channel), in float32."""
    cout, cin = weight.shape[:2]
    if m == 4:  # one float32 GEMM with kron(G, G) over the filters laid out (cin, cout), as the CPU's F(2x2)
        filters = np.ascontiguousarray(weight.transpose(1, 0, 2, 3), dtype=np.float32).reshape(cin * cout, 9)
        u = np.matmul(_G4_KRON, filters.T).reshape(36, cin, cout)
    else:
        from ..cpu.winograd import transformed_weights  # the CPU's transform: one definition of G

        u = transformed_weights(np.asarray(weight, np.float32))  # (16, cin, cout)
    e = u.shape[0]
    return np.ascontiguousarray(u.transpose(0, 2, 1)).reshape(e * cout, cin, 1, 1)


def im2col_taps(s: ConvShape) -> np.ndarray:
    """Per k = (ci, ky, kx) of a group: (ci, ky * dh, kx * dw, 0) as int32, for the tiled kernel's gather (the same
    for every input size, so one table serves every program of a model)."""
    kh, kw = s.kernel
    ci, ky, kx = np.meshgrid(np.arange(s.cg), np.arange(kh), np.arange(kw), indexing="ij")
    t = np.zeros((s.k, 4), np.int32)
    t[:, 0] = ci.reshape(-1)
    t[:, 1] = (ky * s.dilation[0]).reshape(-1)
    t[:, 2] = (kx * s.dilation[1]).reshape(-1)
    return t


def epilogue_data(cout: int, bias: np.ndarray | None, act: P.Activation | None) -> tuple[np.ndarray, int]:
    """The epilogue buffer: bias (zeros when none) then the prelu slopes; and where the slopes start."""
    parts = [np.zeros(cout, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(-1)]
    slope_at = 0
    if act is not None and act.kind == "prelu":
        slope_at = cout
        parts.append(channel_slopes(act, cout))
    return np.concatenate(parts), slope_at


def channel_slopes(act: P.Activation, channels: int) -> np.ndarray:
    """A prelu's slopes, one per channel (a single slope repeated)."""
    s = np.asarray(act.slope, np.float32).reshape(-1)
    if s.size == 1:
        return np.full(channels, s[0], np.float32)
    if s.size != channels:
        raise PlanError(f"a prelu with {s.size} slopes over {channels} channels")
    return s


def channels_of(shape) -> tuple[int, int]:
    """(channels, values per channel) of an NCHW-like shape, for per-channel coefficients."""
    if len(shape) < 2:
        return 1, 1
    return shape[1], prod(shape[2:])
