"""One writer per face database: an advisory lock on a file beside it, released by the kernel when its holder dies.

SQLite's own locks last one transaction, so two indexing runs would interleave their batches and do the same work
twice; this lock spans the whole run. `kill -9` of the holder frees it at once (flock/LockFileEx belong to the open
file, not to a name on disk), so a stale lock file never blocks the next run.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..errors import FacerunError


class DatabaseBusy(FacerunError):
    """Another process is writing this face database."""


class WriterLock:
    """Exclusive lock on `<db>.lock`; wait up to `wait` seconds for it (0: refuse at once)."""

    def __init__(self, db_path: Path, wait: float = 0.0):
        self.path = Path(str(db_path) + ".lock")
        self.wait = float(wait)
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        deadline = time.monotonic() + max(self.wait, 0.0)
        while True:
            if _try_lock(fd):
                break
            if time.monotonic() >= deadline:
                holder = _read_holder(fd)
                os.close(fd)
                who = f" (pid {holder})" if holder else ""
                hint = "wait for it or pass --wait SECONDS" if self.wait <= 0 else f"waited {self.wait:g} s"
                raise DatabaseBusy(f"{self.path.with_suffix('')} is being written by another process{who}; {hint}")
            time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            _unlock(self._fd)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def _read_holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 32).decode(errors="replace").strip()
    except OSError:
        return ""


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
