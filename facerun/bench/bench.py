"""Benchmarks: how fast each way of running a model is, and whether it still gives the CPU interpreter's answer.

For every model and input size, one row per *path*:

  cpu                the numpy interpreter, batch 1: the reference for both time and parity
  gpu-per-conv       each convolution alone on the GPU, everything else on the CPU (the comparison mode)
  gpu                the whole program on the GPU, batch 1
  gpu-batch          a batch of `batch` items in one submission, timed per face (embedders by default)
  onnxruntime        onnxruntime's CPU provider on the same input: the outside peer (when installed)
  cpu-batch, onnxruntime-batch   the batched run on the CPU paths, for a like-for-like batch comparison
  onnxruntime-webgpu(-batch)     onnxruntime's WebGPU execution provider (the onnxruntime-ep-webgpu plugin), a GPU peer

Each row is timed after warm-up runs, for `repeat` runs or until its time budget is spent (never fewer than three
runs), and judged against the CPU interpreter on the same input: detectors by max abs difference within a tolerance
relative to each output's range, embedders by cosine similarity. A path that cannot run here (no GPU adapter,
onnxruntime missing) gives a row that says why instead of failing the benchmark.

    from facerun.bench import bench
    result = bench.run(bench.discover(["sface-arch-small"]), bench.Settings(repeat=5))
    result.save("run.json"); bench.compare(bench.load_result("a.json"), bench.load_result("b.json"))
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

from .. import agree as parity
from ..errors import FacerunError, InputError

PATHS = ("cpu", "cpu-batch", "gpu-per-conv", "gpu", "gpu-batch", "onnxruntime", "onnxruntime-batch",
         "onnxruntime-webgpu", "onnxruntime-webgpu-batch")
DEFAULT_PATHS = ("cpu", "gpu-per-conv", "gpu", "gpu-batch", "onnxruntime")
GPU_PATHS = frozenset({"gpu-per-conv", "gpu", "gpu-batch"})
BATCH_PATHS = frozenset({"cpu-batch", "gpu-batch", "onnxruntime-batch", "onnxruntime-webgpu-batch"})
# onnxruntime's WebGPU execution provider (the onnxruntime-ep-webgpu plugin): a GPU peer, judged like facerun's GPU
WEBGPU_PATHS = frozenset({"onnxruntime-webgpu", "onnxruntime-webgpu-batch"})
DEFAULT_REPLICAS = ("yunet-arch", "sface-arch", "auraface-arch")
DEFAULT_SIZES = ((640, 640),)  # YuNet's training crop, and the size its published benchmarks use

# Parity: onnxruntime is held to facerun.agree's tolerance (1e-4 of each output's range); the GPU computes in a
# different order (tiled sums, fused epilogues), so its paths get 1e-3. Embeddings are compared by direction.
GPU_TOLERANCE = 1e-3
MIN_COSINE = 0.9999
MIN_RUNS = 3  # a row stops early on its budget only after this many timed runs

FORMAT = "facerun-bench/1"


@dataclass
class Settings:
    sizes: tuple[tuple[int, int], ...] = DEFAULT_SIZES  # (width, height); for detectors
    paths: tuple[str, ...] = DEFAULT_PATHS
    batch: int = 16  # items per batched run
    repeat: int = 10  # timed runs per row (at most)
    warmup: int = 1  # untimed runs first (GPU compilation and its check happen here)
    budget: float = 20.0  # seconds per row, warm-up included; the row stops after MIN_RUNS runs once it is spent
    batch_detectors: bool = False  # run the batch paths for detectors too (the CLI sets it when --paths names them)
    allow_software: bool = False
    seed: int = 0

    def check(self) -> None:
        unknown = [p for p in self.paths if p not in PATHS]
        if unknown:
            raise InputError(f"unknown path {', '.join(unknown)} (paths: {', '.join(PATHS)})")
        if not self.paths:
            raise InputError("no paths to benchmark")
        if self.batch < 1 or self.repeat < 1 or self.warmup < 0 or self.budget < 0:
            raise InputError("batch and repeat must be at least 1, warm-up and budget not negative")
        for w, h in self.sizes:
            if w <= 0 or h <= 0:
                raise InputError(f"sizes must be positive, got {w}x{h}")


@dataclass
class ModelSpec:
    label: str
    source: str  # what facerun.load takes: a file path or a replica name


@dataclass
class Row:
    model: str
    size: str
    path: str
    batch: int
    kind: str
    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    per_face_ms: float | None = None
    speedup_vs_cpu: float | None = None
    max_abs_vs_cpu: float | None = None
    cosine_vs_cpu: float | None = None
    ok: bool | None = None  # parity verdict; None where nothing was compared (skipped rows)
    runs: int = 0
    macs: int | None = None  # multiply-accumulates of one item
    note: str | None = None  # why a row was skipped, or what to know about it

    @property
    def skipped(self) -> bool:
        return self.median_ms is None

    def key(self) -> tuple:
        return (self.model, self.size, self.path, self.batch)


@dataclass
class BenchResult:
    machine: dict
    device: dict
    settings: dict
    rows: list[Row] = field(default_factory=list)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if r.ok is False]

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "created": self.created,
            "machine": self.machine,
            "device": self.device,
            "settings": self.settings,
            "rows": [asdict(r) for r in self.rows],
        }

    def save(self, path) -> None:
        write_json_atomic(Path(path), self.to_json())


# ------------------------------------------------------------------------------------------------- which models


def discover(names=(), models_dir=None) -> list[ModelSpec]:
    """The models to benchmark: every .onnx file in `models_dir`, then each name (a file, a replica name or a known
    model's name, looked up in `models_dir` and facerun's search path); the built-in replicas when both are empty."""
    from ..zoo import replicas as synthetic
    from ..zoo.known import by_sha256, sha256_of

    entries: list[Path | str] = []  # files, and replica names, in the order given
    if models_dir is not None:
        folder = Path(models_dir)
        if not folder.is_dir():
            raise InputError(f"--models {folder}: not a folder")
        found = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".onnx" and p.is_file()
                       and not p.name.startswith("."))
        if not found:
            raise InputError(f"no .onnx files in {folder}")
        entries += found
    for name in map(str, names):
        if synthetic.is_replica(name) and not Path(name).exists():
            entries.append(name)
        elif Path(name).is_file():
            entries.append(Path(name))
        else:
            from ..zoo.find import resolve

            entries.append(resolve(name, models_dir))
    specs: list[ModelSpec] = []
    seen: set = set()
    for entry in entries:
        key = entry.resolve() if isinstance(entry, Path) else entry
        if key in seen:
            continue
        seen.add(key)
        if isinstance(entry, str):
            specs.append(ModelSpec(entry, entry))
            continue
        known = by_sha256(sha256_of(entry))
        specs.append(ModelSpec(known.name if known else entry.stem, str(entry)))
    if not specs:
        specs = [ModelSpec(n, n) for n in DEFAULT_REPLICAS]
    return specs


def classify(net) -> str:
    """"detector", "embedder" or "other": by sha256 for known models, by registry for replicas, else by graph shape
    (a 4-D image input of a small fixed size and one 2-D output is an embedder; anything else is a detector)."""
    from ..zoo import replicas as synthetic
    from ..zoo.known import by_sha256

    known = by_sha256(net.sha256)
    if known is not None:
        return known.kind
    replica = synthetic.REPLICAS.get(net.label)
    if replica is not None:
        return replica.kind if replica.kind in ("detector", "embedder") else "other"
    shape = net.input_shape
    if len(shape) == 4 and all(d is not None and d <= 256 for d in shape[2:]):
        prog = net.program(net.default_shape(1))
        outs = [prog.values[vid].shape for _, vid in prog.outputs]
        if len(outs) == 1 and len(outs[0]) == 2:
            return "embedder"
    return "detector"


def input_range(net) -> tuple[float, float]:
    """Where the model's input values live: 0..255 pixels, or pixels already normalised as (x - mean) / std."""
    from ..zoo import replicas as synthetic
    from ..zoo.known import by_sha256

    known = by_sha256(net.sha256)
    if known is not None:
        means, stds = known.mean, known.std
    else:
        replica = synthetic.REPLICAS.get(net.label)
        pre = getattr(replica, "preprocess", None)
        if pre is None:
            return 0.0, 255.0
        means, stds = [pre.mean] * 3, [pre.std] * 3
    return (min((0.0 - m) / s for m, s in zip(means, stds)), max((255.0 - m) / s for m, s in zip(means, stds)))


# ----------------------------------------------------------------------------------------------------- running


WARMUP_SECONDS = 0.5


def time_runs(fn: Callable[[], object], repeat: int, warmup: int, budget: float, warmup_seconds: float = 0.0):
    """(seconds of each timed run, the last output). Warm-up runs are not timed; once `budget` seconds have passed
    since the start (warm-up included) the row stops, but only after MIN_RUNS timed runs (or `repeat`, if fewer)."""
    start = time.perf_counter()
    out = None
    done = 0
    # warm up for `warmup` runs and at least WARMUP_SECONDS: a GPU left idle during the CPU rows comes back at idle
    # clocks, and one run does not bring them up (YuNet on the H200: 3.3 ms after one warm-up run, 1.3 ms steady)
    while done < warmup or (warmup > 0 and time.perf_counter() - start < warmup_seconds):
        out = fn()
        done += 1
    times: list[float] = []
    least = min(MIN_RUNS, repeat)
    while len(times) < repeat:
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= least and time.perf_counter() - start >= budget:
            break
    return times, out


def _items(outputs: dict, names: list[str], n: int, i: int) -> dict:
    """Item i of a batched result: each output cut into n equal parts along axis 0 (batch-first outputs, and also
    outputs that concatenate per-item rows, such as YuNet 2022mar's priors)."""
    res = {}
    for name in names:
        a = np.asarray(outputs[name])
        step = a.shape[0] // n if a.ndim and a.shape[0] % n == 0 else None
        res[name] = a[i * step:(i + 1) * step] if step else a
    return res


def judge(kind: str, pairs: list[tuple[dict, dict]], names: list[str], tolerance: float):
    """(max abs, min cosine, ok) over (got, want) output dicts. Embedders pass on cosine, others on max abs."""
    diffs = [parity.compare(name, got[name], want[name]) for got, want in pairs for name in names]
    max_abs = max((d.max_abs for d in diffs), default=0.0)
    cosine = min((d.cosine for d in diffs), default=1.0)
    if kind == "embedder":
        ok = all(d.cosine >= MIN_COSINE for d in diffs)
    else:
        ok = all(d.max_abs <= parity.tolerance_for(d.range, tolerance) for d in diffs)
    return float(max_abs), float(cosine), bool(ok)


def _fmt_size(shape: tuple) -> str:
    if len(shape) == 4:
        return f"{shape[3]}x{shape[2]}"
    return "x".join(str(d) for d in shape[1:])


class _Case:
    """One model at one input size: its inputs, its CPU references (computed on demand) and its runners."""

    def __init__(self, net, kind: str, shape: tuple, settings: Settings, sessions: dict):
        self.net, self.kind, self.shape, self.settings = net, kind, shape, settings
        self.names = net.output_names
        self.sessions = sessions
        self._range = input_range(net)
        self._rng = np.random.default_rng(settings.seed)
        self.x = self._rng.uniform(*self._range, size=shape).astype(np.float32)
        self._xb = None
        self._refs: dict[int, dict] = {}

    @property
    def xb(self) -> np.ndarray:
        """The batch input, made on first use (16 detector inputs at 640x640 are 79 MB)."""
        if self._xb is None:
            n = self.settings.batch
            self._xb = self._rng.uniform(*self._range, size=(n,) + tuple(self.shape[1:])).astype(np.float32)
            self._xb[0] = self.x[0]  # item 0 of the batch is the batch-1 input, so one reference serves both
        return self._xb

    def reference(self, item: int) -> dict:
        """The CPU interpreter's output for batch item `item` (0 is also the batch-1 input)."""
        if item not in self._refs:
            x = self.x if item == 0 else self.xb[item:item + 1]
            self._refs[item] = dict(self.net.run_cpu(x))
        return self._refs[item]

    def pairs(self, out: dict, batch: int) -> list[tuple[dict, dict]]:
        if batch == 1:
            return [(out, self.reference(0))]
        return [(_items(out, self.names, batch, i), self.reference(i)) for i in (0, batch - 1)]

    # -- runners: each returns (fn, program run) or raises _Skip --------------------------------------------------

    def runner(self, path: str):
        net, x = self.net, self.x
        if path in GPU_PATHS and net.gpu is None:
            raise _Skip(f"no GPU: {net.gpu_reason or 'not attached'}")
        xb = self.xb if path in BATCH_PATHS else None
        if path == "cpu":
            return lambda: net.run_cpu(x), None
        if path == "cpu-batch":
            return lambda: net.run_batch(xb, device="cpu"), None
        if path == "gpu":
            return lambda: net.run(x), net.program(x.shape)
        if path == "gpu-per-conv":
            return lambda: net.run_per_conv(x), None
        if path == "gpu-batch":
            prog = net.program(xb.shape if net.batch_free else x.shape)
            return lambda: net.run_batch(xb), prog
        if path in ("onnxruntime", "onnxruntime-batch") or path in WEBGPU_PATHS:
            sess = self._session("webgpu" if path in WEBGPU_PATHS else "cpu")
            feed = net.input_name
            if path in ("onnxruntime", "onnxruntime-webgpu"):
                return lambda: _ort(sess, {feed: x}), None
            if net.batch_free:
                return lambda: _ort(sess, {feed: xb}), None
            # a file fixed at batch 1 runs item by item, as facerun's run_batch does
            return lambda: _ort_items(sess, feed, xb, self.names), None
        raise _Skip(f"unknown path {path}")

    def _session(self, provider: str = "cpu"):
        from . import oracle

        key = f"session-{provider}"
        if key not in self.sessions:
            if not oracle.available():
                self.sessions[key] = _Skip("onnxruntime is not installed (pip install 'facerun[oracles]')")
            elif provider == "webgpu" and oracle.webgpu_available():
                self.sessions[key] = _Skip(oracle.webgpu_available())
            else:
                try:
                    self.sessions[key] = oracle.session(self.net.path, provider=provider)
                except Exception as e:  # onnxruntime rejects some files facerun runs
                    self.sessions[key] = _Skip(f"onnxruntime cannot load it: {str(e).strip().splitlines()[-1][:200]}")
        s = self.sessions[key]
        if isinstance(s, _Skip):
            raise s
        return s


class _Skip(Exception):
    """A path that cannot run here; the message goes into the row's note."""


def _ort(sess, feeds):
    from . import oracle

    return oracle.run(sess, feeds)


def _ort_items(sess, feed, xb, names):
    outs = [_ort(sess, {feed: xb[i:i + 1]}) for i in range(xb.shape[0])]
    return {n: np.concatenate([o[n] for o in outs]) for n in names}


def _gpu_fallback(net, prog) -> tuple[str, bool] | None:
    """Why a GPU path's runs went to the CPU after all, and whether that is a failure of the path (the GPU dropped:
    a device error, or disagreeing with the CPU on its check) rather than a limit (this program too big for it)."""
    if net.gpu is None:
        return f"the GPU was dropped, runs went to the CPU: {net.gpu_reason}", True
    reasons = getattr(net.gpu, "program_reasons", None) or {}
    if prog is not None and id(prog) in reasons:
        return f"runs on the CPU: {reasons[id(prog)]}", False
    return None


def bench_row(case: _Case, path: str, settings: Settings, size: str, label: str) -> Row:
    batch = settings.batch if path in BATCH_PATHS else 1
    row = Row(label, size, path, batch, case.kind)
    try:
        row.macs = int(case.net.program(case.shape).macs)
    except Exception:  # an odd step without a cost model must not cost the row
        row.macs = None
    try:
        fn, prog = case.runner(path)
        gc.collect()
        times, out = time_runs(fn, settings.repeat, settings.warmup, settings.budget, WARMUP_SECONDS)
    except _Skip as e:
        row.note = str(e)
        return row
    except FacerunError as e:
        row.note = f"failed: {e}"
        row.ok = False
        return row
    if path in GPU_PATHS:
        fallback = _gpu_fallback(case.net, prog)
        if fallback is not None:
            row.note, failed = fallback
            row.ok = False if failed else None
            return row
    ms = np.asarray(times) * 1e3
    row.runs = len(times)
    row.median_ms = float(np.median(ms))
    row.p10_ms = float(np.percentile(ms, 10))
    row.p90_ms = float(np.percentile(ms, 90))
    row.per_face_ms = row.median_ms / batch
    if path == "cpu":
        row.ok = True  # the reference itself
        row.note = "reference"
        case._refs.setdefault(0, dict(out))
        return row
    tolerance = GPU_TOLERANCE if path in GPU_PATHS or path in WEBGPU_PATHS else parity.TOLERANCE
    try:
        row.max_abs_vs_cpu, row.cosine_vs_cpu, row.ok = judge(case.kind, case.pairs(out, batch), case.names, tolerance)
    except FacerunError as e:
        row.note = f"no parity: {e}"
    return row


def plan_paths(kind: str, settings: Settings) -> list[str]:
    """The paths that make sense for a model of this kind (batch paths: embedders, or detectors when asked)."""
    out = []
    for p in settings.paths:
        if p in BATCH_PATHS and (settings.batch <= 1 or (kind != "embedder" and not settings.batch_detectors)):
            continue
        out.append(p)
    return out


@dataclass
class Loaded:
    spec: ModelSpec
    net: object | None
    kind: str
    error: str | None = None


def load_models(specs: list[ModelSpec], settings: Settings, on_load: Callable[[str], None] | None = None) -> list[Loaded]:
    from ..net import load

    if settings.allow_software:
        _allow_software()
    want_gpu = any(p in GPU_PATHS for p in settings.paths)
    loaded = []
    for spec in specs:
        if on_load:
            on_load(spec.label)
        try:
            net = load(spec.source, device="auto" if want_gpu else "cpu")
            net.label = spec.label
            loaded.append(Loaded(spec, net, classify(net)))
        except FacerunError as e:
            loaded.append(Loaded(spec, None, "other", str(e)))
    return loaded


def _allow_software() -> None:
    from ..gpu import allow_software

    allow_software(True)


def shapes_for(net, kind: str, settings: Settings) -> list[tuple]:
    if kind == "detector" and len(net.input_shape) == 4:
        return [(1, net.input_shape[1] or 3, h, w) for w, h in settings.sizes]
    return [tuple(net.default_shape(1))]


def run(specs: list[ModelSpec], settings: Settings | None = None,
        on_row: Callable[[str, int, int], None] | None = None,
        on_load: Callable[[str], None] | None = None) -> BenchResult:
    """Benchmark `specs` (from `discover`). `on_load(label)` before each model loads; `on_row(description, done,
    total)` before each row runs, for a progress bar."""
    from .machine import device_info, machine_info

    settings = settings or Settings()
    settings.check()
    loaded = load_models(specs, settings, on_load)
    plan = []
    for m in loaded:
        if m.net is None:
            plan.append((m, None, None))
            continue
        for shape in shapes_for(m.net, m.kind, settings):
            # GPU paths are timed first: right after the CPU rows, lingering CPU-side work (BLAS threads spinning down)
            # made the same GPU run 2.5 times slower on the H200 (1.33 vs 3.27 ms). The table keeps the asked order.
            paths = plan_paths(m.kind, settings)
            for path in sorted(paths, key=lambda p: (p not in GPU_PATHS and p not in WEBGPU_PATHS, paths.index(p))):
                plan.append((m, shape, path))
    result = BenchResult(machine_info(), device_info(True if settings.allow_software else None),
                         _settings_json(settings))
    _note_gpu_use(result.device, loaded, settings)
    cases: dict[tuple, _Case | str] = {}
    sessions: dict[int, dict] = {}
    for done, (m, shape, path) in enumerate(plan):
        if m.net is None:
            result.rows.append(Row(m.spec.label, "-", "-", 1, m.kind, note=f"cannot load: {m.error}"))
            continue
        size = _fmt_size(shape)
        if on_row:
            on_row(f"{m.spec.label} {size} {path}", done, len(plan))
        key = (id(m), shape)
        if key not in cases:
            try:
                m.net.program(shape)
                cases[key] = _Case(m.net, m.kind, shape, settings, sessions.setdefault(id(m), {}))
            except FacerunError as e:
                cases[key] = f"cannot run at {size}: {e}"
        case = cases[key]
        if isinstance(case, str):
            result.rows.append(Row(m.spec.label, size, path, 1, m.kind, note=case))
            continue
        result.rows.append(bench_row(case, path, settings, size, m.spec.label))
    if on_row:
        on_row("done", len(plan), len(plan))
    order = {p: i for i, p in enumerate(settings.paths)}
    cases_seen: dict[tuple, int] = {}
    for r in result.rows:
        cases_seen.setdefault((r.model, r.size), len(cases_seen))
    result.rows.sort(key=lambda r: (cases_seen[(r.model, r.size)], order.get(r.path, -1)))
    _speedups(result.rows)
    return result


def _speedups(rows: list[Row]) -> None:
    cpu = {(r.model, r.size): r.median_ms for r in rows if r.path == "cpu" and r.median_ms}
    for r in rows:
        base = cpu.get((r.model, r.size))
        if base and r.per_face_ms:
            r.speedup_vs_cpu = 1.0 if r.path == "cpu" else base / r.per_face_ms


def _note_gpu_use(device: dict, loaded: list[Loaded], settings: Settings) -> None:
    """Say when the adapter exists but the models did not get it (the header must match the GPU rows)."""
    nets = [m.net for m in loaded if m.net is not None]
    device["used"] = any(n.gpu is not None for n in nets)
    if not device["used"] and any(p in GPU_PATHS for p in settings.paths) and nets:
        reasons = sorted({str(n.gpu_reason) for n in nets})
        device["not_used_because"] = "; ".join(reasons)


def _settings_json(s: Settings) -> dict:
    return {"sizes": [f"{w}x{h}" for w, h in s.sizes], "paths": list(s.paths), "batch": s.batch, "repeat": s.repeat,
            "warmup": s.warmup, "budget_s": s.budget, "seed": s.seed, "allow_software": s.allow_software}


# ---------------------------------------------------------------------------------------------- saved results


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON to a temporary file beside `path`, then rename: a reader never sees half a file."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot save to {path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"cannot save to {path}: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_result(path) -> dict:
    """A saved benchmark (`--save`), checked to be one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or "machine" not in data:
        raise InputError(f"{path}: not a facerun bench result (no machine and rows; save one with --save)")
    for r in data["rows"]:
        if not isinstance(r, dict) or not {"model", "size", "path", "batch"} <= set(r):
            raise InputError(f"{path}: a row lacks model/size/path/batch: {str(r)[:80]}")
    return data


@dataclass
class RatioRow:
    model: str
    size: str
    path: str
    batch: int
    a_ms: float | None  # per face
    b_ms: float | None
    speedup: float | None  # a_ms / b_ms: above 1, B is faster
    a_ok: bool | None
    b_ok: bool | None
    found_in: str = "both"  # "both", "A" or "B"


def compare(a: dict, b: dict) -> list[RatioRow]:
    """Rows of two saved runs matched by model, size, path and batch (in A's order, then B's extra rows)."""

    def key(r):
        return (r["model"], r["size"], r["path"], int(r["batch"]))

    b_rows = {key(r): r for r in b["rows"]}
    out = []
    for r in a["rows"]:
        other = b_rows.pop(key(r), None)
        am = r.get("per_face_ms")
        bm = other.get("per_face_ms") if other else None
        out.append(RatioRow(*key(r), am, bm, am / bm if am and bm else None, r.get("ok"),
                            other.get("ok") if other else None, "both" if other else "A"))
    for k, r in b_rows.items():
        out.append(RatioRow(*k, None, r.get("per_face_ms"), None, None, r.get("ok"), "B"))
    return out
