"""Every FACERUN_* environment variable in one table, and the one place facerun reads them.

Each `Setting` knows its name, its type (as docs/environment.md shows it), its default and a line of help; `get(name)`
reads the variable when asked (tests and the CLI change them while a process runs, so nothing is cached here) and
parses it as facerun always has, with the same one-line error for a bad value. Modules take their defaults from this
table too (`default(name)`), so the table in docs/environment.md, generated from it (`python -m facerun.settings
--markdown docs/environment.md`), cannot drift from the code. The process and Ray launchers still write variables
for their children: that is passing them on, not reading them.

Only `errors` is imported: every layer may read its settings from here.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import FacerunError, GpuError, InputError

ON_WORDS = ("1", "true", "yes", "on")
OFF_WORDS = ("0", "off", "no", "false", "cpu")
PHOTO_BUCKET_MULTIPLE = 32  # face/yunet.PAD_DIVISOR: a bucket is a whole number of padded steps


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # the table's "type" column
    default: object  # what `get` returns when the variable is unset or empty
    help: str
    parse: Callable[[str, str], object]  # (name, the variable's unstripped text) -> value, None: the default
    shown_default: str | None = None  # the table's default column, where `default` alone says too little
    raw: bool = False  # any non-empty text counts as set, spaces too (as these two were always read)


# ------------------------------------------------------------------------------------------------ parsers


def positive_number(text: str, what: str) -> float:
    """A finite number > 0 from a flag or variable; anything else (nan, inf, -1, words) an InputError."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(f"{what}={text} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what}={text}: a finite number above 0 is needed")
    return value


def _text(name: str, text: str) -> str:
    return text.strip()


def _word(name: str, text: str) -> str:
    return text.strip().lower()


def _on(name: str, text: str) -> bool:
    return text.strip().lower() in ON_WORDS


def _not_zero(name: str, text: str) -> bool:
    return text.strip() not in ("", "0")


def _any(name: str, text: str) -> bool:
    return True


def _gpu_on(name: str, text: str) -> bool:
    return text.strip().lower() not in OFF_WORDS


def _folders(name: str, text: str) -> list[Path]:
    return [Path(entry.strip()).expanduser() for entry in text.split(os.pathsep) if entry.strip()]


def _path(name: str, text: str) -> Path:
    return Path(text).expanduser()


def _count(name: str, text: str) -> int | None:
    """A whole number above 0; anything else is ignored (None: the default)."""
    text = text.strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _whole(name: str, text: str) -> int:
    text = text.strip()
    if not text.isdigit():
        raise InputError(f"{name} must be a whole number (0 or more), not '{text}'")
    return int(text)


def _whole_mb(name: str, text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def _mib(name: str, text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{name}={text} is not a number of MiB") from None


def _gpu_mib(name: str, text: str) -> float:
    text = text.strip()
    try:
        mb = float(text)
    except ValueError:
        raise GpuError(f"{name}={text} is not a number") from None
    if not math.isfinite(mb) or mb < 0:
        raise GpuError(f"{name}={text}: a finite number of MiB, 0 or more, is needed")
    return mb


def _positive(name: str, text: str) -> float:
    return positive_number(text.strip(), name)


def _photo_batch(name: str, text: str) -> int:
    text = text.strip()
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise InputError(f"{name} must be a whole number from 1 to 64, not '{text}'")
    return int(text)


def _parts(name: str, text: str) -> int:
    text = text.strip()
    if not text.isdigit() or not 1 <= int(text) <= 8:
        raise InputError(f"{name} must be a whole number from 1 to 8, not '{text}'")
    return int(text)


def _bucket(name: str, text: str) -> int:
    text = text.strip()
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0 or value % PHOTO_BUCKET_MULTIPLE:
        raise InputError(f"{name} must be a positive multiple of {PHOTO_BUCKET_MULTIPLE}, not '{text}'")
    return value


def _one_of(words: tuple[str, ...]) -> Callable[[str, str], str]:
    """A parser taking one of `words` (any case)."""

    def parse(name: str, text: str) -> str:
        word = text.strip().lower()
        if word not in words:
            raise InputError(f"{name} must be one of {', '.join(words)}, not '{text.strip()}'")
        return word

    return parse


REPLAY_MODES = ("auto", "held", "native", "api")  # gpu/replay.py: how a run's commands are recorded
PARENT_RUNS = ("until-ready", "always", "off")  # face/processes.py: when the launching process runs photos too
PROCESS_STARTS = ("forkserver", "spawn")  # face/processes.py: how the processes start on the GPU
DECODER_PRIORITIES = ("nice", "idle", "same")  # face/decoders.py: the decoding threads of a library run on the CPU
DECODER_KINDS = ("threads", "processes", "auto")  # face/decoders.py: where a library run decodes its photos


# ------------------------------------------------------------------------------------------------ the table

SETTINGS: tuple[Setting, ...] = (
    Setting("FACERUN_MODELS", "folders", (), "folders searched for model files (`:`-separated; `;` on Windows), "
            "after `--models`", _folders, "none"),
    Setting("FACERUN_CACHE", "path", None, "facerun's cache folder (models, replicas)", _path,
            "`~/.cache/facerun` (the platform's)", raw=True),
    Setting("FACERUN_GPU", "`off`", True, "`off` (or `0`, `no`, `false`, `cpu`): never use the GPU", _gpu_on, "on"),
    Setting("FACERUN_GPU_BACKEND", "`vulkan` `metal` `dx12` `gl` `off`", "",
            "the wgpu backend to enumerate; `off`: never use the GPU", _word, "the platform's"),
    Setting("FACERUN_GPU_ADAPTER", "text, `#N`", "", "use the adapter whose name contains this text; `#N`: the "
            "N-th hardware adapter (from 0), as a Ray actor given GPU N sets it", _text, "the best adapter"),
    Setting("FACERUN_ALLOW_SOFTWARE", "flag", False,
            "accept software adapters (llvmpipe/lavapipe, WARP, SwiftShader); `--allow-software` does the same", _on),
    Setting("FACERUN_GPU_CHECKED", "flag", False,
            "compile every GPU kernel with the shader compiler's bounds checks (the tests' build)", _on),
    Setting("FACERUN_GPU_BUDGET_MB", "MiB", 1536.0, "weights one model keeps resident on the device", _gpu_mib),
    Setting("FACERUN_PROGRAM_BUDGET_MB", "MiB", 512.0,
            "host memory for one model's compiled programs, least recently used dropped", _mib),
    Setting("FACERUN_GPU_PROGRAM_BUDGET_MB", "MiB", 1024.0,
            "device memory for one model's compiled programs, least recently used dropped", _mib),
    Setting("FACERUN_CPU_THREADS", "count", None, "threads of the CPU interpreter, shared between its lanes and "
            "OpenBLAS; library processes get the cores shared out", _count,
            "the cores (one while the machine is busy)"),
    Setting("FACERUN_CPU_REFERENCE", "flag (any value but `0`)", False,
            "run the plain NCHW reference interpreter instead of the fast channels-last one", _not_zero),
    Setting("FACERUN_CPU_ARENA_MB", "whole MiB", 1024,
            "memory the fast CPU interpreter keeps for programs' arenas, least recently used dropped", _whole_mb),
    Setting("FACERUN_MAX_TENSOR_MB", "MiB", 4096.0,
            "the largest tensor a model may compile to (`--max-tensor-mb` wins)", _positive),
    Setting("FACERUN_MAX_PIXELS", "pixels", 100_000_000.0,
            "the largest image facerun decodes, checked from its header (`--max-pixels` wins)", _positive,
            "100000000"),
    Setting("FACERUN_DECODER_PRIORITY", "`nice`, `idle` or `same`", "nice", "the decoding threads of a library "
            "run on the CPU: `nice` (10 nicer than the network), `idle` (Linux's SCHED_IDLE: they run only on a core "
            "nothing else wants) or `same` (the network's priority)", _one_of(DECODER_PRIORITIES), "nice"),
    Setting("FACERUN_DECODERS", "`threads` `processes` `auto`", "threads", "where a library run that needs its "
            "photos only as the detector's input (`detect` without `--draw`) decodes them: on threads of its own "
            "process, in decoder processes writing into shared memory, or `auto`: processes for a run on the GPU "
            "on a machine of at least 8 cores, else threads", _one_of(DECODER_KINDS), "threads"),
    Setting("FACERUN_JPEG", "`pillow`", "", "`pillow`: decode JPEGs with Pillow even where simplejpeg (the `jpeg` "
            "extra) is installed", _word, "simplejpeg when installed"),
    Setting("FACERUN_PHOTO_BUCKET", "multiple of 32", 128, "on the GPU, photos run masked in the program of their "
            "padded size rounded up to this (32: a program per size)", _bucket),
    Setting("FACERUN_GPU_ALIGN", "`off`", True, "`off`: a library run on the GPU aligns the faces it embeds on the "
            "host and uploads the embedder's input, instead of uploading each face's part of its photo and "
            "aligning it on the device", _gpu_on, "on"),
    Setting("FACERUN_EMBED_THREAD", "`on`", False, "`on`: a library run embeds the faces on a thread of its own "
            "beside the detector (where the embedder runs on the GPU), instead of on the thread feeding the GPU",
            _on, "off"),
    Setting("FACERUN_PARENT_RUNS", "`until-ready` `always` `off`", "until-ready", "with `--processes`, whether the "
            "process that starts them runs photos too (detecting, and embedding with a facerun embedder): until "
            "every process is ready, so their start-up is not lost; throughout; or never", _one_of(PARENT_RUNS)),
    Setting("FACERUN_PROCESSES_FROM", "count", 2000, "`--processes auto` (the default): the fewest photos a run "
            "shares out over processes (on a GPU, with 12 cores or more); fewer run in this process alone", _count),
    Setting("FACERUN_PROCESS_START", "`forkserver` `spawn`", "forkserver", "how `--processes` starts its "
            "processes on the GPU: forked from a server that imported facerun and wgpu once, ahead (where the "
            "platform has one), or each a new interpreter importing them itself (as on the CPU, always)",
            _one_of(PROCESS_STARTS)),
    Setting("FACERUN_POST_THREADS", "count", None, "threads of a library run that post-process the detector's "
            "outputs (NMS) and align the faces to embed", _count, "one per two decoding threads, 1 to 4"),
    Setting("FACERUN_PHOTO_BATCH", "whole number 1-64", 8, "on the GPU, photos of one bucket run up to this many "
            "to a submission in a library run (1: each photo on its own)", _photo_batch),
    Setting("FACERUN_PHOTO_HELD", "count", None, "on the GPU, photos a library run holds while their buckets' "
            "batches fill, at most (then the fullest batch runs)", _count, "twice FACERUN_PHOTO_BATCH"),
    Setting("FACERUN_PHOTO_HURRY", "whole number", 2, "on the GPU, a photo the library run must hand on next that "
            "still waits on the device has its batch submitted at once and read back when later batches go in, until "
            "this many batches' worth of photos wait behind it (0: it is run and read back at once, the device idle "
            "meanwhile)", _whole, "2"),
    Setting("FACERUN_PHOTO_LOOKAHEAD", "count", None, "on the GPU, a library run reads this many photos' headers "
            "ahead and decodes them grouped by bucket, so batches of one bucket fill (off unless set)", _count, "off"),
    Setting("FACERUN_PHOTO_ITEMS", "`on`", False, "`on`: a batch of photos (FACERUN_PHOTO_BATCH) runs once in its "
            "bucket's program of that many items, each masked to its own size (one pass), instead of the bucket's "
            "program once a photo in one submission", _on, "off"),
    Setting("FACERUN_PHOTO_SPLIT", "whole number", 4, "on the GPU, a batch of photos of at least this many, submitted "
            "while no other batch is in flight, goes as two submissions, so the device runs the first half while "
            "the second is written (0: never split)", _whole, "4"),
    Setting("FACERUN_PHOTO_PARTS", "whole number 1-8", 2, "on the GPU, how many submissions a batch split by "
            "FACERUN_PHOTO_SPLIT goes in (as even as can be; 1: never split), so the device starts on the first part "
            "sooner",
            _parts),
    Setting("FACERUN_UPLOAD_THREADS", "whole number", 0, "on the GPU, a batch of photos not yet in the device's "
            "upload memory is copied there by this many threads side by side before it is recorded, instead of "
            "written photo after photo by the thread feeding the device (0)", _whole, "0"),
    Setting("FACERUN_UPLOAD_PIECE_MB", "MiB", 0.0, "on the GPU, a program's input larger than this goes up in "
            "queue writes of this size, instead of one write however large (0)", _mib),
    Setting("FACERUN_PHOTO_PADDING", "`run`", "", "`run`: a batch program (FACERUN_PHOTO_ITEMS) runs every item, "
            "its padding past the batch's photos too, instead of only the workgroups of the photos there", _word,
            "skipped"),
    Setting("FACERUN_PHOTO_STAGING_MB", "MiB", 256.0, "on the GPU, device memory for photos a library run's decoding "
            "threads upload ahead of their batch (0: the thread feeding the GPU uploads each photo)", _mib),
    Setting("FACERUN_PHOTO_SELECT", "`off`", True, "`off`: a photo's detector heads come back from the GPU whole "
            "(about 1 MB for a 1024x768 photo) instead of only the rows whose scores pass the threshold (YuNet "
            "2023mar at a score threshold of 0.5 or more)", _gpu_on, "on"),
    Setting("FACERUN_DEBUG", "flag (any value)", False, "show the traceback of an internal error", _any,
            raw=True),
    Setting("FACERUN_GPU_REPLAY", "`auto` `held` `native` `api`", "auto", "how GPU runs are recorded: `held` calls "
            "wgpu-native directly through ctypes, holding the interpreter lock; `native` through wgpu-py's cffi, "
            "letting go of the lock at every call; `api` goes through wgpu-py's API (the same commands); `auto`: "
            "held where this wgpu-py's C signatures are the expected ones", _one_of(REPLAY_MODES)),
    Setting("FACERUN_GPU_CHECK_CACHE", "`off`", True, "`off`: every process checks each model on the GPU against "
            "the CPU anew, instead of trusting a check an earlier process passed on the same adapter, driver, facerun "
            "code, settings and model file (kept in the cache folder's `gpu-checks/`)", _gpu_on, "on"),
    Setting("FACERUN_GPU_SEPARABLE", "`off`", True, "`off`: run a 1x1 convolution and the depthwise 3x3 reading "
            "it as two GPU dispatches instead of one (for A/B timings)", _gpu_on, "on"),
    Setting("FACERUN_GPU_INJECT_FAILURE", "`submit` `readback`", "",
            "tests: make the first GPU submission (or read-back) fail, once", _word, "none"),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"no setting named {name}") from None


def default(name: str):
    """The table's default of `name` (modules take their constants from here)."""
    return setting(name).default


def get(name: str, environ: Mapping[str, str] | None = None):
    """The value of `name` now: parsed from the environment when set and not empty, else the default."""
    entry = setting(name)
    text = (os.environ if environ is None else environ).get(name, "")
    if not (text if entry.raw else text.strip()):
        return entry.default
    value = entry.parse(name, text)
    return entry.default if value is None else value


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every setting the environment sets, parsed once: an InputError naming the first value its setting refuses
    (at a command's start, rather than deep in a run, where a GPU setting's error would drop the GPU)."""
    for entry in SETTINGS:
        try:
            get(entry.name, environ)
        except FacerunError as e:
            raise InputError(str(e)) from None


def is_set(name: str) -> bool:
    """Whether `name` is in the environment with a value (the cache folder says where it came from)."""
    setting(name)
    return bool(os.environ.get(name))


def text(name: str) -> str:
    """The variable's text, stripped ('' when unset): for a launcher passing it on to its children unparsed."""
    setting(name)
    return os.environ.get(name, "").strip()


def pass_on(values: Mapping[str, str]) -> None:
    """Set these variables in this process, for what it loads next and the processes it starts: a library worker
    taking its parent's settings, a Ray actor numbering the GPU it was given. Only this table's names."""
    for name in values:
        setting(name)
    os.environ.update({name: str(value) for name, value in values.items()})


def environment() -> dict[str, str]:
    """This table's variables set in this process now (a process forked from a server started earlier inherits the
    environment of back then: the processes engine hands it these to adopt)."""
    return {name: os.environ[name] for name in _BY_NAME if name in os.environ}


def adopt(values: Mapping[str, str]) -> None:
    """Make this process's settings exactly `values`: those set, the table's others unset (see environment)."""
    for name in _BY_NAME:
        if name not in values:
            os.environ.pop(name, None)
    pass_on(values)


def outside(names) -> dict[str, str]:
    """Other programs' variables that are set, among `names` (a benchmark records what changes its speed)."""
    return {k: os.environ[k] for k in names if k in os.environ}


def facerun_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every FACERUN_* variable set and not empty, by name (what a kept GPU check is filed under: gpu/verdicts.py)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith("FACERUN_") and v}


def cache_root(platform: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """facerun's per-user cache folder: $FACERUN_CACHE, else the platform's convention."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if env.get("FACERUN_CACHE"):
        return get("FACERUN_CACHE", env)  # a raw setting: set exactly when this holds
    home = Path(env.get("HOME") or Path.home())
    if platform == "darwin":
        return home / "Library" / "Caches" / "facerun"
    if platform.startswith("win"):
        local = env.get("LOCALAPPDATA") or str(home / "AppData" / "Local")
        return Path(local) / "facerun" / "Cache"
    xdg = env.get("XDG_CACHE_HOME", "")
    # the XDG spec says a relative value is invalid and must be ignored
    base = Path(xdg) if xdg and os.path.isabs(xdg) else home / ".cache"
    return base / "facerun"


# ------------------------------------------------------------------------------------ docs/environment.md's table

BEGIN = ("<!-- environment table: generated by `python -m facerun.settings --markdown docs/environment.md`; "
         "edit settings.py -->")
END = "<!-- end of environment table -->"


def _shown(entry: Setting) -> str:
    if entry.shown_default is not None:
        return entry.shown_default
    value = entry.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value in (None, "") else str(value)


def markdown() -> str:
    """The environment table as Markdown, one row per setting."""
    rows = ["| variable | type | default | effect |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.kind} | {_shown(s)} | {s.help} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


def with_table(document: str, source: str = "docs/environment.md") -> str:
    """`document` with the text between the table's markers replaced by `markdown()`."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise FacerunError(f"{source}: no environment table markers ({BEGIN} ... {END})")
    return document[: start + len(BEGIN)] + "\n" + markdown() + document[end:]


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--markdown":
        print("usage: python -m facerun.settings --markdown [FILE ...]  (print the table, or rewrite it in each FILE)",
              file=sys.stderr)
        return 2
    if len(argv) == 1:
        sys.stdout.write(markdown())
        return 0
    from .io import write_text  # io is of this layer; only the command writes files

    for name in argv[1:]:
        path = Path(name)
        try:
            old = path.read_text(encoding="utf-8")
            new = with_table(old, name)
        except (OSError, FacerunError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        if new != old:
            write_text(path, new)
            print(f"{name}: environment table rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
