"""Benchmarks: how fast each way of running a model is, and whether it still gives the CPU interpreter's answer.

For every model and input size, one row per *path* (each one an entry of facerun.bench.paths.MODEL_PATHS, where a
new path is added):

  cpu                the numpy interpreter, batch 1: the reference for both time and parity
  gpu-per-conv       each convolution alone on the GPU, everything else on the CPU (the comparison mode)
  gpu                the whole program on the GPU, batch 1
  gpu-photo          YuNet: the input as a photo's bytes (uint8, 0-255), laid out on the GPU, the heads' candidate
                     rows read back unless FACERUN_PHOTO_SELECT=off (how `detect` runs it)
  gpu-photo-batch    YuNet: `batch` photos' bytes in one submission, timed per photo (a library run's batches:
                     the heads' candidate rows read back, unless FACERUN_PHOTO_SELECT=off)
  gpu-photo-staged-batch   the same, each photo first copied into the device's upload memory by a thread of 8 (as
                     a library run's decoding threads stage theirs), timed in
  gpu-batch          a batch of `batch` items in one submission, timed per face (embedders by default)
  gpu-f16, gpu-batch-f16   gpu and gpu-batch at --precision f16 (Winograd's planes as half floats, sums in
                     float32): the model loaded again for it, judged against the CPU at agree.GPU_F16_TOLERANCE
                     (embedders by cosine, at least agree.MIN_COSINE_F16)
  onnxruntime        onnxruntime's CPU provider on the same input: the outside peer (when installed)
  cpu-batch, onnxruntime-batch   the batched run on the CPU paths, for a like-for-like batch comparison
  onnxruntime-webgpu(-batch)     onnxruntime's WebGPU execution provider (the onnxruntime-ep-webgpu plugin), a GPU peer
  torch-cuda(-batch), torch-cuda-strict(-batch)   facerun's own program run eagerly by torch on CUDA (cuDNN), with
                     TF32 on (torch's default for convolutions) and in strict fp32: the native GPU peer

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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .. import agree
from ..errors import FacerunError, InputError
from ..io import write_json
from ..zoo.card import ModelCard
from . import roofline
from .paths import MODEL_PATHS, ModelPath, Skip, check_names
from .saved import RatioRow, compare, load_result

# the registry's names, as sets for the callers that ask (the code here asks the registry, so an entry added to it
# at run time is a path like the others)
PATHS = tuple(MODEL_PATHS)
DEFAULT_PATHS = tuple(name for name, p in MODEL_PATHS.items() if p.default)
HALF_PATHS = frozenset(name for name, p in MODEL_PATHS.items() if p.half)  # the model again, its GPU at f16
GPU_PATHS = frozenset(name for name, p in MODEL_PATHS.items() if p.gpu)
BATCH_PATHS = frozenset(name for name, p in MODEL_PATHS.items() if p.batch)
# onnxruntime's WebGPU execution provider (the onnxruntime-ep-webgpu plugin): a GPU peer, judged like facerun's GPU
WEBGPU_PATHS = frozenset(name for name in MODEL_PATHS if name.startswith("onnxruntime-webgpu"))
# torch on CUDA running facerun's program (facerun.bench.torch_peer), judged like facerun's GPU
TORCH_PATHS = frozenset(name for name in MODEL_PATHS if name.startswith("torch-cuda"))
PEER_GPU_PATHS = frozenset(name for name, p in MODEL_PATHS.items() if p.peer_gpu)
REFERENCE = next(name for name, p in MODEL_PATHS.items() if p.reference)  # "cpu": the speed-ups' base
DEFAULT_REPLICAS = ("yunet-arch", "sface-arch", "auraface-arch")
DEFAULT_SIZES = ((640, 640),)  # YuNet's training crop, and the size its published benchmarks use

# Parity: onnxruntime is held to facerun.agree's tolerance (1e-4 of each output's range); the GPU computes in a
# different order (tiled sums, fused epilogues), so its paths get 1e-3. Embeddings are compared by direction.
GPU_TOLERANCE = agree.GPU_TOLERANCE
MIN_COSINE = agree.MIN_COSINE
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
    reprobe: bool = False  # measure the device's peaks again (roofline.py), not the cached ones
    by_kernel: bool = False  # time the GPU rows' programs kernel family by family (roofline.by_kernel)

    def check(self) -> None:
        check_names(self.paths, MODEL_PATHS)
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
    card: ModelCard | None = None  # made by `discover`; None: facerun.load makes it from `source`


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
    # the number parity judged and what it was judged against: detectors (and others) by the max abs difference
    # over the scale the tolerance is relative to (each output's range, at least agree.MIN_RANGE), held to
    # `tolerance`; embedders by cosine, held to at least `min_cosine`
    scaled_diff_vs_cpu: float | None = None
    tolerance: float | None = None
    min_cosine: float | None = None
    ok: bool | None = None  # parity verdict; None where nothing was compared (skipped rows)
    runs: int = 0
    macs: int | None = None  # multiply-accumulates of one item
    # the roofline (roofline.py): bytes one run moves (the whole batch), achieved TFLOP/s (2 x macs x batch over the
    # median) and GB/s, and on GPU rows their fractions of the device's peaks (device["peaks"])
    bytes_per_run: int | None = None
    tflops: float | None = None
    gbps: float | None = None
    of_fma_peak: float | None = None
    of_bandwidth_peak: float | None = None
    # facerun's GPU rows (roofline.device_times): the device's own time for the row's program (its dispatches only,
    # repeated in one submission, the fixed cost of a submission taken out: no upload, no read-back), and the least
    # time the work could take at the device's peaks over it
    device_ms: float | None = None
    device_of_limit: float | None = None
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
    kernels: list[dict] = field(default_factory=list)  # --by-kernel: the GPU rows' kernel families (roofline.py)

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
            **({"kernels": self.kernels} if self.kernels else {}),
        }

    def save(self, path) -> None:
        write_json(Path(path), self.to_json(), error=InputError)


# ------------------------------------------------------------------------------------------------- which models


def discover(names=(), models_dir=None) -> list[ModelSpec]:
    """The models to benchmark: every .onnx file in `models_dir`, then each name (a file, a replica name or a known
    model's name, looked up in `models_dir` and facerun's search path); the built-in replicas when both are empty."""
    from ..zoo.card import identify

    cards = []
    if models_dir is not None:
        folder = Path(models_dir)
        if not folder.is_dir():
            raise InputError(f"--models {folder}: not a folder")
        found = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".onnx" and p.is_file()
                       and not p.name.startswith("."))
        if not found:
            raise InputError(f"no .onnx files in {folder}")
        cards += [identify(p) for p in found]
    cards += [identify(name, models_dir) for name in map(str, names)]
    specs: list[ModelSpec] = []
    seen: set[Path] = set()
    for card in cards:
        key = card.path.resolve()
        if key in seen:
            continue
        seen.add(key)
        source = card.name if card.source == "replica" and card.label == card.name else str(card.path)
        specs.append(ModelSpec(card.name or card.path.stem, source, card))
    if not specs:
        specs = [ModelSpec(n, n) for n in DEFAULT_REPLICAS]
    return specs


def classify(net) -> str:
    """"detector", "embedder" or "other", from the model's card: by sha256 for known models, by registry for
    replicas, else by graph shape (facerun.zoo.card.recognise)."""
    return net.card.kind


# ----------------------------------------------------------------------------------------------------- running


WARMUP_SECONDS = 0.5


def time_runs(fn: Callable[[], object], repeat: int, warmup: int, budget: float, warmup_seconds: float = 0.0):
    """(seconds of each timed run, the last output). Warm-up runs are not timed; once `budget` seconds have passed
    since the start (warm-up included) the row stops, but only after MIN_RUNS timed runs (or `repeat`, if fewer)."""
    start = time.perf_counter()
    out = None
    done = 0
    # warm up for `warmup` runs and at least WARMUP_SECONDS after the first: a GPU left idle during the CPU rows comes
    # back at idle clocks, and one run does not bring them up (YuNet on the H200: 3.3 ms after one warm-up run, 1.3
    # ms steady; the AuraFace replica at batch 1, 11.3 ms for its first 30 runs, then 3.0). The first run compiles
    # and checks a model new to the GPU, which can take the whole half second: so the time counts after it.
    warm = start
    while done < warmup or (warmup > 0 and time.perf_counter() - warm < warmup_seconds):
        out = fn()
        done += 1
        if done == 1:
            warm = time.perf_counter()
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


def judge(kind: str, pairs: list[tuple[dict, dict]], names: list[str], tolerance: float,
          min_cosine: float = agree.MIN_COSINE):
    """(max abs, min cosine, ok, scaled diff) over (got, want) output dicts. Embedders pass on cosine, others on max
    abs; the scaled diff (None for embedders) is the worst output's max abs over its own limit, times `tolerance`:
    the figure that passes exactly when it is at most `tolerance`, in the units the tolerance is given in."""
    rule = agree.Tolerance(None, min_cosine=min_cosine) if kind == "embedder" else agree.Tolerance(tolerance)
    diffs = [agree.compare(name, got[name], want[name], rule) for got, want in pairs for name in names]
    max_abs = max((d.max_abs for d in diffs), default=0.0)
    cosine = min((d.cosine for d in diffs), default=1.0)
    scaled = None
    if rule.rel is not None:
        # the limit is rel x the output's range, or a few float32 steps where that is finer: dividing by the limit
        # itself keeps the figure and the verdict in step on every output
        parts = [d.max_abs / limit if (limit := rule.limit(d)) else (0.0 if d.max_abs == 0 else float("inf"))
                 for d in diffs]
        worst = max(parts, default=0.0) * rule.rel
        scaled = float(worst) if np.isfinite(worst) else None
    return float(max_abs), float(cosine), all(d.ok for d in diffs), scaled


SELECT_BAND = 1e-3  # a score product this close to the floor may fall either side of it on the device


def selected_as_heads(selected, reference: dict, spec) -> dict:
    """`reference` (a photo's heads by name, the CPU's) with the candidate rows a device chose (runner.Selected, by
    the runner.Candidates `spec`) written in at their positions; a position whose scores pass the floor on the CPU
    but that the device left out gets scores of 0 (so the check fails on it), unless its product lies within
    SELECT_BAND of the floor. Judged against `reference`, this covers the rows' values and the choice itself."""
    from ..runner import KEY_SHIFT

    heads = {name: np.array(value, np.float32) for name, value in reference.items()}
    h, w = selected.photo_hw
    floor = np.float32(spec.floor)
    level_of, position = selected.keys >> KEY_SHIFT, selected.keys & np.uint32((1 << KEY_SHIFT) - 1)
    for level, (stride, (a_name, b_name), values) in enumerate(spec.levels):
        count = (h // stride) * (w // stride)
        a, b = heads[a_name].reshape(count), heads[b_name].reshape(count)
        mine = level_of == level
        rows, at = selected.rows[mine], position[mine].astype(np.int64)
        product = np.clip(a, 0, 1) * np.clip(b, 0, 1)
        missed = np.setdiff1d(np.flatnonzero(product >= floor), at)
        missed = missed[product[missed] - floor > SELECT_BAND]
        a[missed] = b[missed] = 0
        a[at], b[at] = rows[:, 1], rows[:, 2]
        column = 3
        for name in values:
            head = heads[name].reshape(count, -1)
            head[at] = rows[:, column : column + head.shape[1]]
            column += head.shape[1]
    return heads


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
        self._range = net.card.input_range
        self.x = agree.seeded_input(shape, settings.seed, self._range)
        self._xb = None
        self._refs: dict = {}  # batch item (or ("photo", item)) -> the CPU's outputs

    @property
    def xb(self) -> np.ndarray:
        """The batch input, made on first use (16 detector inputs at 640x640 are 79 MB)."""
        if self._xb is None:
            shape = (self.settings.batch,) + tuple(self.shape[1:])
            self._xb = agree.seeded_input(shape, self.settings.seed + 1, self._range)
            self._xb[0] = self.x[0]  # item 0 of the batch is the batch-1 input, so one reference serves both
        return self._xb

    def reference(self, item: int) -> dict:
        """The CPU interpreter's output for batch item `item` (0 is also the batch-1 input)."""
        if item not in self._refs:
            x = self.x if item == 0 else self.xb[item:item + 1]
            self._refs[item] = dict(self.net.run_cpu(x))
        return self._refs[item]

    def photo(self) -> np.ndarray:
        """The input as a photo (H x W x 3 uint8 RGB) whose YuNet blob is the input rounded: for gpu-photo."""
        if not hasattr(self, "_photo"):
            self._photo = self._as_photo(self.x[0])
        return self._photo

    def photos(self) -> list[np.ndarray]:
        """The batch input as photos (item 0 the batch-1 input's): for gpu-photo-batch."""
        if not hasattr(self, "_photos"):
            self._photos = [self.photo()] + [self._as_photo(x) for x in self.xb[1:]]
        return self._photos

    def _as_photo(self, x: np.ndarray) -> np.ndarray:
        if not (self.kind == "detector" and (self.net.card.family or "").startswith("yunet")):
            raise Skip("the photo path lays out YuNet's input (the raw BGR photo); this model is fed otherwise")
        bgr = np.clip(np.rint(x), 0, 255).astype(np.uint8).transpose(1, 2, 0)
        return np.ascontiguousarray(bgr[:, :, ::-1])

    def photo_reference(self, item: int = 0) -> dict:
        """The CPU interpreter's output for photo `item`'s blob (the input rounded to whole pixel values)."""
        key = ("photo", item)
        if key not in self._refs:
            from ..face.yunet import make_blob

            photo = self.photos()[item]
            self._refs[key] = dict(self.net.run_cpu(make_blob(photo)))
        return self._refs[key]

    def pairs(self, out, batch: int, path: ModelPath) -> list[tuple[dict, dict]]:
        if path.photo and batch > 1:  # each photo's outputs (a list), the first and the last judged
            return [(self._photo_outputs(out[i], i), self.photo_reference(i)) for i in (0, batch - 1)]
        if path.photo:
            return [(self._photo_outputs(out, 0), self.photo_reference())]
        if batch == 1:
            return [(out, self.reference(0))]
        return [(_items(out, self.names, batch, i), self.reference(i)) for i in (0, batch - 1)]

    def _photo_outputs(self, out, item: int) -> dict:
        """Photo `item`'s outputs by name: the device's candidate rows (runner.Selected) as the CPU's heads with
        those rows written in, so the check judges every row the device chose and every one it left out."""
        from ..runner import Selected

        if not isinstance(out, Selected):
            return dict(out)
        return selected_as_heads(out, self.photo_reference(item), self.photo_net().workload.photo.select)

    def photo_net(self):
        """The model loaded again as a library run loads it (its detector family's photo layout: photos in masked
        bucket programs, in batch programs where FACERUN_PHOTO_ITEMS is on; the heads' candidate rows at the
        family's default threshold read back, unless FACERUN_PHOTO_SELECT is off), once; for gpu-photo-batch."""
        if not hasattr(self, "_photo_net"):
            from .. import settings
            from ..face.detect import photo_bucket
            from ..face.families import family_of
            from ..net import load
            from ..runner import Workload

            try:
                family = family_of(self.net.card.path)
                score = family.score if settings.get("FACERUN_PHOTO_SELECT") else None
                layout = family.photo_layout(photo_bucket(), score)
                self._photo_net = load(self.net.card, device="auto", workload=Workload(photo=layout))
            except FacerunError as e:
                self._photo_net = Skip(f"no photo layout: {e}")
        if isinstance(self._photo_net, Skip):
            raise self._photo_net
        return self._photo_net

    def half_net(self):
        """The model loaded again with its GPU at --precision f16 (for the -f16 paths), once."""
        if not hasattr(self, "_half"):
            from ..net import load

            try:
                self._half = load(self.net.card, device="auto", precision="f16")
            except FacerunError as e:
                self._half = Skip(f"no f16 model: {e}")
        if isinstance(self._half, Skip):
            raise self._half
        return self._half

    def net_for(self, path: ModelPath):
        """The model `path` runs on (the f16 one for the -f16 paths); Skip when it needs a GPU the model lacks."""
        net = self.net
        if path.half:
            if net.gpu is None:
                raise Skip(f"no GPU: {net.gpu_reason or 'not attached'}")
            net = self.half_net()
        if path.gpu and net.gpu is None:
            raise Skip(f"no GPU: {net.gpu_reason or 'not attached'}")
        return net

    def runner(self, path: ModelPath):
        """(the function to time, the GPU program it runs or None) for `path`, or Skip with the reason."""
        return path.make(self, self.net_for(path))

    def session(self, provider: str = "cpu"):
        """onnxruntime's session of the model on `provider` ("cpu" or "webgpu"), made once per model."""
        from . import oracle

        key = f"session-{provider}"
        if key not in self.sessions:
            if not oracle.available():
                self.sessions[key] = Skip("onnxruntime is not installed (pip install 'facerun[oracles]')")
            elif provider == "webgpu" and oracle.webgpu_available():
                self.sessions[key] = Skip(oracle.webgpu_available())
            else:
                try:
                    self.sessions[key] = oracle.session(self.net.path, provider=provider)
                except Exception as e:  # onnxruntime rejects some files facerun runs
                    self.sessions[key] = Skip(f"onnxruntime cannot load it: {str(e).strip().splitlines()[-1][:200]}")
        s = self.sessions[key]
        if isinstance(s, Skip):
            raise s
        return s


def _gpu_fallback(net, prog) -> tuple[str, bool] | None:
    """Why a GPU path's runs went to the CPU after all, and whether that is a failure of the path (the GPU dropped:
    a device error, or disagreeing with the CPU on its check) rather than a limit (this program too big for it)."""
    if net.gpu is None:
        return f"the GPU was dropped, runs went to the CPU: {net.gpu_reason}", True
    reasons = net.gpu.program_reasons  # the checked GPU runner (gpu.checked.CheckedGpu) facerun.load gives
    if prog is not None and id(prog) in reasons:
        return f"runs on the CPU: {reasons[id(prog)]}", False
    return None


def bench_row(case: _Case, name: str, settings: Settings, size: str, label: str) -> Row:
    path = MODEL_PATHS[name]
    batch = settings.batch if path.batch else 1
    row = Row(label, size, name, batch, case.kind)
    try:
        row.macs = int(case.net.program(case.shape).macs)
        row.bytes_per_run = roofline.run_bytes(case.net, case.shape, batch)
    except Exception:  # an odd step without a cost model must not cost the row
        row.macs = row.bytes_per_run = None
    try:
        fn, prog = case.runner(path)
        gc.collect()
        times, out = time_runs(fn, settings.repeat, settings.warmup, settings.budget, WARMUP_SECONDS)
    except Skip as e:
        row.note = str(e)
        return row
    except FacerunError as e:
        row.note = f"failed: {e}"
        row.ok = False
        return row
    if path.gpu:
        fallback = _gpu_fallback(case.half_net() if path.half else case.net, prog)
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
    if path.reference:
        row.ok = True  # the reference itself
        row.note = "reference"
        case._refs.setdefault(0, dict(out))
        return row
    if case.kind == "embedder":
        row.min_cosine = path.min_cosine
    else:
        row.tolerance = path.tolerance
    try:
        row.max_abs_vs_cpu, row.cosine_vs_cpu, row.ok, row.scaled_diff_vs_cpu = judge(
            case.kind, case.pairs(out, batch, path), case.names, path.tolerance, path.min_cosine)
    except FacerunError as e:
        row.note = f"no parity: {e}"
    return row


def plan_paths(kind: str, settings: Settings) -> list[str]:
    """The paths that make sense for a model of this kind (batch paths: embedders, or detectors when asked)."""
    out = []
    for p in settings.paths:
        if MODEL_PATHS[p].batch and (settings.batch <= 1 or (kind != "embedder" and not settings.batch_detectors)):
            continue
        out.append(p)
    return out


@dataclass
class Loaded:
    spec: ModelSpec
    net: object | None
    kind: str
    error: str | None = None


def load_models(specs: list[ModelSpec], settings: Settings,
                on_load: Callable[[str], None] | None = None) -> list[Loaded]:
    from ..net import load

    if settings.allow_software:
        _allow_software()
    want_gpu = any(MODEL_PATHS[p].gpu for p in settings.paths)
    loaded = []
    for spec in specs:
        if on_load:
            on_load(spec.label)
        try:
            net = load(spec.card or spec.source, device="auto" if want_gpu else "cpu", label=spec.label)
            loaded.append(Loaded(spec, net, classify(net)))
        except FacerunError as e:
            loaded.append(Loaded(spec, None, "other", str(e)))
    return loaded


def _allow_software() -> None:
    from ..gpu import allow_software

    allow_software(True)


def shapes_for(net, kind: str, settings: Settings) -> list[tuple]:
    if kind == "detector" and len(net.input_shape) == 4:
        family = getattr(getattr(net, "card", None), "family", None) or ""
        if family.startswith("yunet"):
            from ..face.yunet import padded_size

            # YuNet runs where detect runs it: each side padded up to a multiple of 32 (320x240 -> 320x256)
            return [(1, net.input_shape[1] or 3, *padded_size(h, w)) for w, h in settings.sizes]
        if all(d is not None for d in net.input_shape[2:]):
            # a file fixed at one size (RetinaFace, UltraFace, BlazeFace, YOLOv5-face exports) runs only at that size
            return [tuple(net.default_shape(1))]
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
            for path in sorted(paths, key=lambda p: (not MODEL_PATHS[p].on_device, paths.index(p))):
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
    roofline.finish(result, settings, [(_fmt_size(c.shape), c) for c in cases.values() if not isinstance(c, str)])
    return result


def _speedups(rows: list[Row]) -> None:
    cpu = {(r.model, r.size): r.median_ms for r in rows if r.path == REFERENCE and r.median_ms}
    for r in rows:
        base = cpu.get((r.model, r.size))
        if base and r.per_face_ms:
            r.speedup_vs_cpu = 1.0 if r.path == REFERENCE else base / r.per_face_ms


def _note_gpu_use(device: dict, loaded: list[Loaded], settings: Settings) -> None:
    """Say when the adapter exists but the models did not get it (the header must match the GPU rows)."""
    nets = [m.net for m in loaded if m.net is not None]
    device["used"] = any(n.gpu is not None for n in nets)
    if not device["used"] and any(MODEL_PATHS[p].gpu for p in settings.paths) and nets:
        reasons = sorted({str(n.gpu_reason) for n in nets})
        device["not_used_because"] = "; ".join(reasons)


def _settings_json(s: Settings) -> dict:
    return {"sizes": [f"{w}x{h}" for w, h in s.sizes], "paths": list(s.paths), "batch": s.batch, "repeat": s.repeat,
            "warmup": s.warmup, "budget_s": s.budget, "seed": s.seed, "allow_software": s.allow_software}


__all__ = [
    "BATCH_PATHS", "DEFAULT_PATHS", "GPU_PATHS", "PATHS", "BenchResult", "Loaded", "ModelSpec", "RatioRow", "Row",
    "Settings", "bench_row", "classify", "compare", "discover", "judge", "load_models", "load_result", "plan_paths",
    "run", "shapes_for", "time_runs",
]
