"""What a model's GPU check found, kept for later processes (FACERUN_GPU_CHECK_CACHE, on by default).

A model's first run on the GPU waits for its check (checked.py): the network on the CPU and on the GPU on a seeded
input, a photo masked in a larger program against its own, the kernel variants its programs use layer by layer. On
the same adapter and driver, running the same facerun code with the same settings on the same model file, a later
process would find the same. So a check that passed is kept in facerun's cache folder (`gpu-checks/`, a small JSON
file a model and device), with what the first photos, batches and faces showed (the device's layout of a photo gave
the CPU's blob, a batch gave its photos' own runs ...), and a later process trusts it: its first photo waits for no
check and runs once. What it needs beyond what was kept (a kernel variant no earlier process ran) is checked as
usual, and added.

The file's name is a hash of everything the findings depend on: the adapter (name, backend, type, vendor, driver),
the device's build of the kernels (bounds-checked or trusted, half floats granted), every .py and .wgsl file of
facerun (any change of code is a new file), the settings in the environment that can change what runs (every
FACERUN_* variable but those that only say where files are or how many threads decode), the model file's sha256 and
the checker's own parts (precision, check size, the photos' layout). Only passing checks are kept: a disagreement is
found again by the next process, which then runs on the CPU as this one did.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .. import counters, settings
from ..errors import FacerunError
from ..io import write_json

FOLDER = "gpu-checks"
FORMAT = 1

# settings that cannot change what the GPU or the CPU computes: where files are, how a run is spread over threads
# and processes, what is printed
NOT_IN_KEY = frozenset({
    "FACERUN_MODELS", "FACERUN_CACHE", "FACERUN_DEBUG", "FACERUN_GPU_CHECK_CACHE",
    "FACERUN_DECODERS", "FACERUN_DECODER_PRIORITY", "FACERUN_POST_THREADS", "FACERUN_PROCESSES_FROM",
    "FACERUN_PROCESS_START", "FACERUN_PARENT_RUNS", "FACERUN_JPEG",
})


@dataclass(frozen=True)
class Found:
    """A passing check's findings: the kernel variants that agreed with the CPU, and the other checks that held
    (`held`: photo.PhotoChecks.FINDINGS, such as "masks_agree": a photo masked in a larger program gave its own
    program's outputs, and checked.FACES_LAYOUT)."""

    verified: frozenset[str]
    held: frozenset[str] = frozenset()


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of every .py and .wgsl file of the facerun package (read once a process, when a GPU model is loaded:
    5-15 ms)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".wgsl") and path.is_file():
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def settings_in_key(environ=None) -> dict[str, str]:
    """The FACERUN_* variables set that may change what a run computes (all but NOT_IN_KEY)."""
    return {k: v for k, v in settings.facerun_variables(environ).items() if k not in NOT_IN_KEY}


def key_of(device: dict, model_sha256: str, parts: dict, environ=None) -> str:
    """The findings' key: a hash of the device's identity, facerun's code, the settings, the model and `parts`."""
    text = json.dumps({"format": FORMAT, "device": device, "code": code_fingerprint(),
                       "settings": settings_in_key(environ), "model": model_sha256, "parts": parts},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Verdicts:
    """One model's kept findings on one device: `load` what an earlier process kept, `keep` this one's (merged
    with what is there). path None: nothing is kept (FACERUN_GPU_CHECK_CACHE=off)."""

    def __init__(self, path: Path | None):
        self.path = path

    @property
    def kept(self) -> bool:
        """Whether findings are kept at all (FACERUN_GPU_CHECK_CACHE on)."""
        return self.path is not None

    @classmethod
    def for_model(cls, device: dict, model_sha256: str, parts: dict) -> Verdicts:
        """The findings of `model_sha256` on `device` (Device.identity()) with the checker's `parts`."""
        if not settings.get("FACERUN_GPU_CHECK_CACHE"):
            return cls(None)
        return cls(settings.cache_root() / FOLDER / f"{key_of(device, model_sha256, parts)[:40]}.json")

    def load(self) -> Found | None:
        """What an earlier process kept, or None (nothing kept, or a file this version cannot read)."""
        if self.path is None:
            return None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT:
                return None
            found = Found(frozenset(str(k) for k in data["verified"]), frozenset(str(k) for k in data["held"]))
        except (OSError, ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
            return None
        return found if found.verified else None

    def keep(self, found: Found) -> None:
        """Keep `found` with what is kept already (the variants and findings of both). An unwritable cache keeps
        nothing: the next process checks again."""
        if self.path is None or not found.verified:
            return
        before = self.load()
        if before is not None:
            if before.verified >= found.verified and before.held >= found.held:
                return
            found = Found(before.verified | found.verified, before.held | found.held)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, {"format": FORMAT, "verified": sorted(found.verified),
                                   "held": sorted(found.held)}, indent=None)
            counters.bump("gpu_checks_written")
        except (OSError, FacerunError):
            pass


def kept_summary() -> dict:
    """Where kept checks live, how many there are (every device and model), and whether they are used."""
    folder = settings.cache_root() / FOLDER
    try:
        files = sum(1 for p in folder.glob("*.json") if p.is_file())
    except OSError:
        files = 0
    return {"folder": str(folder), "files": files, "used": bool(settings.get("FACERUN_GPU_CHECK_CACHE"))}


__all__ = ["FOLDER", "Found", "NOT_IN_KEY", "Verdicts", "code_fingerprint", "key_of", "kept_summary", "settings_in_key"]
