"""Where facerun finds model files, and how it downloads a known one without ever leaving a wrong file in place.

Search order: an explicit path; the `--models DIR` the caller passes; `$FACERUN_MODELS` (a list joined with
os.pathsep); then the per-user cache folder (`$FACERUN_CACHE/models` when set, else the platform's cache folder).
"""

from __future__ import annotations

import http.client
import os
import socket
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import settings
from ..errors import ModelError
from ..io import check_output_folder, is_stale, remove_stale_temporaries, sha256_of
from ..settings import cache_root  # the one cache-folder rule; here too, where callers have always found it
from .known import KNOWN, KnownModel, by_name, by_sha256

# models inside the package (license-clean defaults: YuNet 2023mar, MobileFaceNet), searched last; see data/README.md
SHIPPED_DIR = Path(__file__).resolve().parent / "data"

ProgressCallback = Callable[[int, "int | None"], None]  # (bytes done, total bytes or None)

_CHUNK = 1 << 16


# ---------------------------------------------------------------------------------------------- where to look


def models_cache_dir(platform: str | None = None, env=None) -> Path:
    """The folder `facerun models fetch` downloads into by default."""
    return cache_root(platform, env) / "models"


_run_models_dir: Path | None = None  # the command line's --models DIR, searched first by every lookup of a run


def use_models_dir(folder) -> None:
    """Search `folder` first in every lookup that names no folder of its own (None: stop)."""
    global _run_models_dir
    _run_models_dir = Path(folder) if folder else None


def search_dirs_with_sources(models_dir=None) -> list[tuple[Path, str]]:
    """The folders searched for models, in order, each with where it came from (for `facerun models list`)."""
    models_dir = models_dir or _run_models_dir
    found: list[tuple[Path, str]] = []
    if models_dir:
        found.append((Path(models_dir).expanduser(), "--models"))
    found += [(folder, "FACERUN_MODELS") for folder in settings.get("FACERUN_MODELS")]
    found.append((models_cache_dir(), "FACERUN_CACHE" if settings.is_set("FACERUN_CACHE") else "cache"))
    found.append((SHIPPED_DIR, "shipped"))
    unique: list[tuple[Path, str]] = []
    seen: set[str] = set()
    for path, source in found:
        key = os.path.normcase(os.path.abspath(path))
        if key not in seen:
            seen.add(key)
            unique.append((path, source))
    return unique


def search_dirs(models_dir=None) -> list[Path]:
    """The folders searched for models, in order (the ones that do not exist are included)."""
    return [path for path, _ in search_dirs_with_sources(models_dir)]


# ------------------------------------------------------------------------------------------------- finding


@dataclass(frozen=True)
class FoundModel:
    path: Path
    size: int
    sha256: str
    known: KnownModel | None


def _onnx_files(folder: Path) -> list[Path]:
    """The .onnx files directly inside a folder (hidden ones, such as downloads in progress, are skipped)."""
    if not folder.is_dir():
        return []
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    return [p for p in entries if p.suffix.lower() == ".onnx" and not p.name.startswith(".") and p.is_file()]


def scan(models_dir=None) -> list[FoundModel]:
    """Every .onnx file in the search folders, hashed and matched against the known table."""
    results: list[FoundModel] = []
    seen: set[Path] = set()
    for folder in search_dirs(models_dir):
        for path in _onnx_files(folder):
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            sha = sha256_of(path)
            results.append(FoundModel(path, path.stat().st_size, sha, by_sha256(sha)))
    return results


def _looks_like_path(text: str) -> bool:
    return os.sep in text or (os.altsep is not None and os.altsep in text) or text.startswith("~")


def _where(dirs: list[Path]) -> str:
    return ", ".join(f"{d}{'' if d.is_dir() else ' (missing)'}" for d in dirs) or "nowhere"


def _find_known(model: KnownModel, dirs: list[Path]) -> Path | None:
    """A file holding `model`: by its canonical name first (size checked), then by sha256 among the .onnx files."""
    shipped = SHIPPED_DIR in dirs
    dirs = [d for d in dirs if d != SHIPPED_DIR]  # the user's folders first, by name and by sha256; then ours
    wrong_size: list[str] = []
    for folder in dirs:
        candidate = folder / model.filename
        if candidate.is_file():
            size = candidate.stat().st_size
            if model.size is None or size == model.size:
                return candidate
            wrong_size.append(f"{candidate} ({size} bytes)")
    for folder in dirs:
        for path in _onnx_files(folder):
            # the size is a free pre-filter that spares hashing unrelated large files
            if model.size is not None and path.stat().st_size != model.size:
                continue
            if sha256_of(path) == model.sha256:
                return path
    if wrong_size:
        raise ModelError(
            f"{model.name}: found {', '.join(wrong_size)} but it should be {model.size} bytes "
            f"(damaged or a different file); replace it with `facerun models fetch {model.name}`"
        )
    candidate = SHIPPED_DIR / model.filename
    if shipped and candidate.is_file():
        if sha256_of(candidate) != model.sha256:  # a damaged install must not pass for the model
            raise ModelError(f"{model.name}: the copy shipped with facerun ({candidate}) does not have its sha256; "
                             f"reinstall facerun or `facerun models fetch {model.name}`")
        return candidate
    return None


def resolve(name_or_path, models_dir=None) -> Path:
    """The model file meant by a path, a known model name ("yunet-2023mar") or a file name in the search folders."""
    text = str(name_or_path).strip()
    if not text:
        raise ModelError("no model given")
    as_path = Path(text).expanduser()
    if as_path.is_file():
        return as_path
    if as_path.is_dir():
        raise ModelError(f"{as_path} is a folder, not a model file")
    if _looks_like_path(text) or as_path.is_absolute():
        raise ModelError(f"no such model file: {as_path}")

    dirs = search_dirs(models_dir)
    model = by_name(text)
    if model is not None:
        found = _find_known(model, dirs)
        if found is not None:
            return found
        how = f"get it with `facerun models fetch {model.name}`" if model.url else "download it by hand"
        raise ModelError(f"model {model.name} ({model.filename}) not found; looked in {_where(dirs)}; {how}")

    for folder in dirs:
        candidate = folder / text
        if candidate.is_file():
            return candidate
    from .replicas import REPLICAS

    known_names = ", ".join(m.name for m in KNOWN)
    raise ModelError(
        f"model '{text}' is not a file, a known model ({known_names}), a built-in replica ({', '.join(REPLICAS)}) "
        f"or a file in {_where(dirs)}; see `facerun models list`"
    )


def default_detector(models_dir=None) -> Path:
    """The detector facerun uses when none is named: YuNet 2023mar."""
    return resolve("yunet-2023mar", models_dir)


# ------------------------------------------------------------------------------------------------- fetching


DEFAULT_DEADLINE = 900.0  # seconds for a whole fetch, retries included


class _Retry(Exception):
    """A failure worth another attempt (the connection dropped, timed out or ended early)."""


def _user_agent() -> str:
    try:
        from importlib.metadata import version

        return f"facerun/{version('facerun')}"
    except Exception:
        return "facerun"


def fetch(
    name: str,
    dest_dir=None,
    url: str | None = None,
    progress: ProgressCallback | None = None,
    *,
    timeout: float = 30.0,
    retries: int = 3,
    backoff: float = 0.5,
    deadline: float | None = DEFAULT_DEADLINE,
) -> Path:
    """Download the known model `name` into `dest_dir` (default: the cache folder) and return its path.

    The bytes go to `<dest>/.<file>.part`; a partial file left by an earlier attempt is resumed with an HTTP Range
    request (a server that answers 200 instead of 206 restarts it from zero). Connection errors, timeouts and short
    reads are retried `retries` times with doubling back-off. Only a file of the right size and sha256 is renamed
    into place; a wrong sha256 deletes the partial file and raises ModelError, so the destination never holds a
    wrong or half-written file. `timeout` bounds every socket operation (connect and each read), `deadline` the
    whole fetch, retries included (a server sending a byte a second never trips `timeout`).

    The partial file is opened without following symbolic links, and only if it is a plain file of this user with
    one link (anything else at that name is removed, never written through); a new one is created exclusively. A
    server sending more than the model's known size is cut off. A lock on the folder makes a second fetch into it
    wait for the first (then find its file) rather than write the same partial at once.

    Under the lock, the folder is cleaned of what interrupted runs left there (`remove_stale_partials`).
    """
    model = by_name(name)
    if model is None:
        raise ModelError(f"unknown model '{name}'; known: {', '.join(m.name for m in KNOWN)}")
    if not model.sha256:
        raise ModelError(f"{model.name} has no published sha256, so facerun cannot check a download; fetch it by hand")
    source = url or model.url
    if not source:
        raise ModelError(f"{model.name} has no download location; pass --url")

    dest = check_output_folder(Path(dest_dir) if dest_dir else models_cache_dir(), "download folder", error=ModelError)
    final = dest / model.filename
    if final.is_file() and sha256_of(final) == model.sha256:
        return final
    part = dest / f".{model.filename}.part"
    ends = None if deadline is None else time.monotonic() + deadline
    with _Lock(dest, ends, model.name):
        if final.is_file() and sha256_of(final) == model.sha256:
            return final  # another fetch finished it while this one waited
        remove_stale_partials(dest)
        return _fetch_locked(model, source, final, part, progress, timeout, retries, backoff, ends, deadline)


def remove_stale_partials(folder: Path) -> int:
    """Remove the leftovers of interrupted runs from a download folder, returning how many: the partial downloads
    of known models (`.<file>.part`) more than a day old (a younger one is resumed; an older one may no longer match
    the server's file), and the temporary files of atomic writes whose process is gone. Only this user's plain
    files with facerun's names are touched. Called with the folder's lock held, so no fetch is writing them."""
    removed = 0
    for known in KNOWN:
        part = Path(folder) / f".{known.filename}.part"
        if is_stale(part):
            part.unlink(missing_ok=True)
            removed += 1
    return removed + remove_stale_temporaries(folder, every_target=True)


def _fetch_locked(model, source, final, part, progress, timeout, retries, backoff, ends, deadline) -> Path:
    last_problem = "no attempt made"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(min(backoff * 2 ** (attempt - 1), 8.0))
        try:
            _download_into(part, source, model.size, progress, timeout, ends, deadline)
            break
        except _Retry as e:
            last_problem = str(e)
    else:
        kept = part.stat().st_size if part.exists() else 0
        resume = f"; {kept} bytes kept in {part} for the next attempt to resume" if kept else ""
        raise ModelError(f"cannot download {model.name} from {source}: {last_problem} ({retries + 1} attempts{resume})")

    size = part.stat().st_size
    if model.size is not None and size != model.size:
        part.unlink(missing_ok=True)
        raise ModelError(f"download of {model.name} from {source} is {size} bytes, expected {model.size}; not kept")
    got = sha256_of(part)
    if got != model.sha256:
        part.unlink(missing_ok=True)
        raise ModelError(
            f"download of {model.name} from {source} has sha256 {got[:16]}…, expected {model.sha256[:16]}…; "
            f"not kept (nothing written to {final})"
        )
    os.replace(part, final)  # atomic on one file system: readers see the old file or the whole new one
    return final


def _download_into(part: Path, url: str, expected: int | None, progress, timeout: float, ends=None,
                   deadline=None) -> None:
    """One attempt: append the missing bytes to `part` (or rewrite it). Raises _Retry or ModelError."""
    offset = _usable_partial(part)
    if expected is not None and offset > expected:  # a stale partial from something else
        part.unlink()
        offset = 0
    if expected is not None and offset == expected:  # finished earlier, only the checks remain
        return

    request = urllib.request.Request(url, headers={"User-Agent": _user_agent(), "Accept-Encoding": "identity"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        left = None if ends is None else ends - time.monotonic()
        if left is not None and left <= 0:
            raise ModelError(f"cannot download {url}: not done within the {deadline:g} s deadline")
        response = urllib.request.urlopen(request, timeout=timeout if left is None else max(min(timeout, left), 0.01))
    except urllib.error.HTTPError as e:
        e.close()
        if e.code == 416 and offset:  # our partial does not fit the server's file: start over
            part.unlink(missing_ok=True)
            raise _Retry("the server refused to resume; restarting") from None
        if e.code in (408, 425, 429) or e.code >= 500:
            raise _Retry(f"HTTP {e.code} {e.reason}") from None
        raise ModelError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        reason = e.reason
        raise _Retry(getattr(reason, "strerror", None) or str(reason)) from None
    except (OSError, http.client.HTTPException) as e:
        raise _Retry(_describe(e)) from None

    with response:
        status = getattr(response, "status", None) or 200
        if offset and status == 206:
            start = _content_range_start(response.headers.get("Content-Range"))
            if start != offset:
                part.unlink(missing_ok=True)
                raise _Retry(f"the server resumed at byte {start}, not {offset}; restarting")
            mode = "ab"
        else:  # 200: the whole file again, so the partial is discarded
            offset, mode = 0, "wb"
        length = response.headers.get("Content-Length")
        remaining = int(length) if length and length.isdigit() else None
        total = offset + remaining if remaining is not None else expected
        done = offset
        if progress:
            progress(done, total)
        if mode == "wb":
            part.unlink(missing_ok=True)
        try:
            sock = _socket_of(response)
            with _open_partial(part, append=mode == "ab") as out:
                while True:
                    late = ModelError(f"cannot download {url}: not done within the {deadline:g} s deadline "
                                      f"({done} bytes so far)")
                    left = None if ends is None else ends - time.monotonic()
                    if left is not None and left <= 0:
                        raise late
                    if sock is not None and left is not None:
                        sock.settimeout(max(min(timeout, left), 0.01))  # a silent server cannot outlast the deadline
                    try:
                        # read1: whatever has arrived (at most a chunk), so a server sending a byte at a time meets
                        # the deadline check above after each byte, not after a whole chunk
                        chunk = response.read1(_CHUNK)
                    except (OSError, http.client.HTTPException) as e:
                        if ends is not None and time.monotonic() >= ends:
                            raise late from None
                        raise _Retry(_describe(e)) from None
                    if not chunk:
                        break
                    if expected is not None and done + len(chunk) > expected:
                        out.close()
                        part.unlink(missing_ok=True)
                        raise ModelError(f"cannot download {url}: the server sends more than the model's "
                                         f"{expected} bytes; stopped and not kept")
                    out.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
                out.flush()
                os.fsync(out.fileno())
        except OSError as e:  # the network errors were turned into _Retry above: this is the disk
            raise ModelError(f"cannot write {part}: {e.strerror or e}") from None
    if total is not None and done < total:
        raise _Retry(f"the connection ended after {done} of {total} bytes")


def _socket_of(response):
    """The socket under an urllib response (its reads' timeout is set from what is left of the deadline), or None
    where the response is not over a plain socket."""
    raw = getattr(getattr(response, "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    return sock if hasattr(sock, "settimeout") else None


def _usable_partial(part: Path) -> int:
    """The size of a partial download to resume, 0 when there is none; whatever else holds the name (a symbolic
    link, a folder entry of another user, a file with other hard links) is removed without being read or followed."""
    try:
        st = os.lstat(part)
    except FileNotFoundError:
        return 0
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and mine:
        return st.st_size
    try:
        part.unlink()  # removes a link itself, never its target
    except OSError as e:
        raise ModelError(f"{part} is not a partial download of facerun's and cannot be removed: {e.strerror}") from None
    return 0


def _open_partial(part: Path, append: bool):
    """The partial file for writing: appended to (it was checked by _usable_partial), or created anew; never through
    a symbolic link, and a new one only if nothing took the name meanwhile."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    flags = os.O_WRONLY | nofollow | getattr(os, "O_BINARY", 0)
    flags |= os.O_APPEND if append else os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(part, flags, 0o644)
    except FileExistsError:
        raise ModelError(f"{part} appeared while facerun was about to create it; not written") from None
    except OSError as e:
        raise ModelError(f"cannot write {part}: {e.strerror or e}") from None
    return os.fdopen(fd, "ab" if append else "wb")


class _Lock:
    """An exclusive lock on the download folder `path` (flock on the folder itself, so no lock file is left behind):
    a second fetch into it waits, until `ends` at most."""

    def __init__(self, path: Path, ends: float | None, name: str):
        self.path, self.ends, self.name, self.fd = path, ends, name, None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # Windows: no flock; a concurrent fetch is caught by the exclusive create
            return self
        try:
            self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as e:
            raise ModelError(f"cannot lock {self.path}: {e.strerror or e}") from None
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if self.ends is not None and time.monotonic() > self.ends:
                    os.close(self.fd)
                    raise ModelError(f"another facerun is fetching into {self.path}; it did not finish before the "
                                     f"deadline, so {self.name} was not fetched") from None
                time.sleep(0.2)

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing drops the lock


def _content_range_start(header: str | None) -> int | None:
    # "bytes 1000-1999/2000"
    if not header or not header.startswith("bytes "):
        return None
    first = header[6:].split("-", 1)[0].strip()
    return int(first) if first.isdigit() else None


def _describe(e: BaseException) -> str:
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, http.client.IncompleteRead):
        return "the connection ended early"
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


__all__ = [
    "FoundModel",
    "cache_root",
    "models_cache_dir",
    "search_dirs",
    "search_dirs_with_sources",
    "use_models_dir",
    "resolve",
    "scan",
    "default_detector",
    "fetch",
    "remove_stale_partials",
]
