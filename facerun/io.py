"""Files facerun writes and reads whole: atomic writes, checks of output paths before any work, file hashes.

Every file facerun writes (embeddings, their index, drawings, benchmark results, replica models) goes through
`write_together`: each target is written to a hidden temporary file beside it, flushed to disk, then renamed into
place, so a reader sees the old file or the whole new one, and a failure (a full disk, an interrupt) leaves no
temporary file and no half-written target behind. Several targets written together are renamed only once all of
them are written. A process killed outright (kill -9, a power cut) cannot clean up: its temporary file carries its
pid (`.<name>.<pid>.<random>.part`), and the next write of the same target removes it once that process is gone or
the file is a day old.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import FacerunError, InputError

Writer = Callable[[BinaryIO], None]


# -------------------------------------------------------------------------------------------- atomic writes


def write_together(targets: list[tuple[Path, Writer]], error: type[FacerunError] = FacerunError) -> list[Path]:
    """Write each (path, writer) to a temporary file beside its path, then rename them all into place.

    A writer gets a binary file object. An OSError on the way (from the disk or from a writer) removes every
    temporary file and raises `error` with one line; any other exception removes them too and propagates."""
    temps: list[tuple[str, Path]] = []
    try:
        for path, write in targets:
            path = Path(path)
            remove_stale_temporaries(path)
            fd, temp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".part", dir=_folder(path))
            temps.append((temp, path))
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
        mode = 0o666 & ~_umask()  # mkstemp makes 0600 files; give them the permissions a plain open would
        for temp, path in temps:
            os.chmod(temp, mode)
            os.replace(temp, path)
    except BaseException as e:
        for temp, _ in temps:
            Path(temp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            failed = temps[-1][1] if temps else Path(targets[0][0])
            raise error(f"cannot write {failed}: {e.strerror or e}") from None
        raise
    return [path for _, path in temps]


def atomic_write(path, write: Writer, error: type[FacerunError] = FacerunError) -> Path:
    """One file, written by `write(binary_file)`; see `write_together`."""
    return write_together([(Path(path), write)], error)[0]


def write_bytes(path, data: bytes, error: type[FacerunError] = FacerunError) -> Path:
    return atomic_write(path, lambda f: f.write(data), error)


def write_text(path, text: str, error: type[FacerunError] = FacerunError) -> Path:
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")), error)


STALE_AFTER = 24 * 3600.0  # seconds: a partial file this old is left over, whoever made it
_TEMPORARY = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.part")


def is_stale(path, pid: int | None = None) -> bool:
    """Whether a partial file facerun left is stale: this user's plain file, a day old or made by process `pid`
    (not this one) that is gone. Anything else (another user's file, a link, a folder) is never stale."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        return False
    if time.time() - st.st_mtime > STALE_AFTER:
        return True
    return pid is not None and pid != os.getpid() and not _alive(pid)


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill would end the process there; only the age rule applies
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but another user's
        return True
    return True


def remove_stale_temporaries(path, every_target: bool = False) -> int:
    """Remove the temporary files that writes of `path` (with `every_target`: of any file in its folder) left when
    their process was killed; returns how many were removed."""
    path = Path(path)
    folder = path if every_target else _folder(path)
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        found = _TEMPORARY.fullmatch(entry.name)
        if found is None or not (every_target or found["target"] == path.name):
            continue
        if is_stale(entry.path, int(found["pid"])):
            try:
                os.unlink(entry.path)
                removed += 1
            except OSError:
                pass  # gone already, or not ours to remove after all
    return removed


def finite_json(obj):
    """obj with every NaN or infinity as None: JSON has no such numbers, and a bare `NaN` is invalid JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def json_writer(obj, indent: int | None = 2) -> Writer:
    """A writer of one JSON document and a final newline."""

    def write(handle: BinaryIO) -> None:
        text = io.TextIOWrapper(handle, encoding="utf-8", newline="\n")
        json.dump(finite_json(obj), text, indent=indent, allow_nan=False)
        text.write("\n")
        text.flush()
        text.detach()  # leave the binary handle open for the caller to flush and close

    return write


def jsonl_writer(rows) -> Writer:
    """A writer of one JSON object per line."""

    def write(handle: BinaryIO) -> None:
        for row in rows:
            handle.write((json.dumps(finite_json(row), allow_nan=False) + "\n").encode("utf-8"))

    return write


def npy_writer(array) -> Writer:
    def write(handle: BinaryIO) -> None:
        import numpy as np

        np.save(handle, array)

    return write


def write_json(path, obj, error: type[FacerunError] = FacerunError, indent: int | None = 2) -> Path:
    return atomic_write(path, json_writer(obj, indent), error)


def write_npy(path, array, error: type[FacerunError] = FacerunError) -> Path:
    return atomic_write(path, npy_writer(array), error)


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# ---------------------------------------------------------------------------------------------- path checks


def check_output_file(path, option: str, error: type[FacerunError] = InputError) -> Path:
    """Check, before any work, that a file can be written at `path`: not a folder, and in an existing folder one
    may write to. `option` names the argument in the message."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{option} {path}: is a folder")
    folder = _folder(path)
    if not folder.is_dir():
        raise error(f"{option} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise error(f"{option} {path}: folder {folder} is not writable")
    _try_writing_in(folder, f"{option} {path}", error)
    return path


def check_output_folder(path, option: str, create: bool = True, error: type[FacerunError] = InputError) -> Path:
    """Check that files can be written into the folder `path`, creating it (and its parents) when `create`."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise error(f"{option} {path}: is a file, not a folder")
    if not path.exists():
        if not create:
            raise error(f"{option} {path}: no such folder")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise error(f"{option} {path}: cannot create folder ({e.strerror or e})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise error(f"{option} {path}: folder is not writable")
    _try_writing_in(path, f"{option} {path}", error)
    return path


def _try_writing_in(folder: Path, what: str, error: type[FacerunError]) -> None:
    """Create and remove a file in `folder`: permission bits do not tell everything (root on a read-only mount,
    /proc, a full quota), and a failure found after the work would lose its results."""
    try:
        fd, probe = tempfile.mkstemp(prefix=f".facerun-probe.{os.getpid()}.", suffix=".part", dir=folder)
    except OSError as e:
        raise error(f"{what}: cannot create a file in {folder} ({e.strerror or e})") from None
    os.close(fd)
    Path(probe).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------- hashing

# (resolved path, size, mtime_ns) -> sha256; a changed file gets a new key, so it is hashed again
_sha_memo: dict[tuple[str, int, int], str] = {}
_sha_lock = threading.Lock()
_CHUNK = 1 << 20


def sha256_of(path) -> str:
    """Lower-case hex sha256 of a file, read in chunks; remembered while the file's size and mtime are unchanged."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _sha_lock:
        cached = _sha_memo.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    result = digest.hexdigest()
    with _sha_lock:
        _sha_memo[key] = result
    return result


def forget_sha256(path=None) -> None:
    """Drop memoised hashes (of one file, or all): for callers that rewrite a file within one mtime tick."""
    with _sha_lock:
        if path is None:
            _sha_memo.clear()
            return
        resolved = str(Path(path).resolve())
        for key in [k for k in _sha_memo if k[0] == resolved]:
            del _sha_memo[key]


__all__ = [
    "atomic_write",
    "check_output_file",
    "check_output_folder",
    "forget_sha256",
    "is_stale",
    "remove_stale_temporaries",
    "json_writer",
    "jsonl_writer",
    "npy_writer",
    "sha256_of",
    "write_bytes",
    "write_json",
    "write_npy",
    "write_text",
    "write_together",
]
