"""Faults of the storage under a face database, said in one line: a full disk, a quota, a read-only file system, a
lock another program holds past the busy timeout, an I/O error.

SQLite rolls the transaction in flight back by itself on SQLITE_FULL and SQLITE_IOERR, and every batch committed
before it is durable (WAL), so after any of these the database holds whole photos only and a re-run continues where
this one stopped. The message says so; it never reads "internal error".
"""

from __future__ import annotations

import errno
import sqlite3
from contextlib import contextmanager
from pathlib import Path

from .. import fsnames
from ..errors import FacerunError


class StorageError(FacerunError):
    """The disk or file system under a face database failed a write (full, read-only, locked, I/O error)."""


FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), getattr(errno, "EFBIG", errno.ENOSPC))
READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
STORAGE_ERRNOS = (*FULL, *READ_ONLY, errno.EIO)

# what each stage can promise after the fault, and what to do
AFTER = {
    "open": "; {todo}",
    "index": "; {photos}, every batch committed before it kept: {todo} and run the same command again to continue",
    "write": "; nothing else in the database changed: {todo} and run the command again",
}


def _kind(error: BaseException) -> tuple[str, str] | None:
    """(what happened, what to do) for a storage fault; None for anything else."""
    text = str(error).lower()
    code = getattr(error, "errno", None)
    if isinstance(error, sqlite3.OperationalError):
        name = getattr(error, "sqlite_errorname", "") or ""
        if "full" in text or name.startswith("SQLITE_FULL"):
            return "the disk is full", "free some space"
        if "readonly" in text or "read-only" in text or name.startswith("SQLITE_READONLY"):
            return "the database cannot be written (read-only file or file system)", "make it writable"
        if "locked" in text or "busy" in text or name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            return ("another program holds a lock on it past the busy timeout",
                    "wait for that program to finish (or close it)")
        if "i/o" in text or name.startswith("SQLITE_IOERR"):
            return "a disk I/O error", "check the disk"
        if "unable to open" in text or name.startswith("SQLITE_CANTOPEN"):
            return ("cannot open it or its journal (-wal, -shm) beside it", "check that its folder is writable and "
                    "has free space")
        return None
    if isinstance(error, OSError) and code in STORAGE_ERRNOS:
        if code in FULL:
            return "the disk is full" + (" (quota)" if code == getattr(errno, "EDQUOT", None) else ""), \
                "free some space"
        if code == errno.EROFS:
            return "the file system is read-only", "use a database on a writable disk"
        if code in (errno.EACCES, errno.EPERM):
            return "permission denied", "check the permissions of the database and its folder"
        return "a disk I/O error", "check the disk"
    return None


def is_storage_fault(error: BaseException) -> bool:
    return _kind(error) is not None


def stored_photos(db: Path) -> str:
    """'N photos' now committed in `db`, read by a connection of its own (reading needs no free space); '' if unread."""
    try:
        conn = sqlite3.connect(f"file:{fsnames.exact(Path(db).resolve()).decode('utf-8', 'surrogateescape')}"
                               "?mode=ro", uri=True, timeout=2)
        try:
            n = conn.execute("SELECT COUNT(*) FROM photos").fetchone()[0]
        finally:
            conn.close()
    except (sqlite3.Error, OSError, UnicodeError):
        return "the photos stored so far"
    return f"{n} photo{'' if n == 1 else 's'} stored"


def storage_error(error: BaseException, db, stage: str = "index") -> FacerunError:
    """The one-line error for a fault of `db`'s storage at `stage` ("open", "index", "write"); a fault that is no
    storage fault becomes a plain FacerunError naming the database and SQLite's words."""
    db = Path(db)
    detail = " ".join(str(getattr(error, "strerror", None) or error).split()) or type(error).__name__
    kind = _kind(error)
    where = fsnames.shown(db)
    if kind is None:
        return FacerunError(f"{where}: database error ({detail})")
    what, todo = kind
    if on_read_only_fs(db) and ("open" in what or "read-only" in what):
        what, todo = "the file system is read-only", "copy the database to a writable disk, or mount it read-write"
    after = AFTER.get(stage, AFTER["open"])
    photos = stored_photos(db) if "{photos}" in after else ""
    return StorageError(f"{where}: {what} ({detail})" + after.format(todo=todo, photos=photos))


@contextmanager
def reported(db, stage: str = "index"):
    """Turn a storage fault of `db` (SQLite's or the OS's) inside the block into one StorageError line."""
    try:
        yield
    except sqlite3.OperationalError as e:
        raise storage_error(e, db, stage) from None
    except OSError as e:
        if not is_storage_fault(e):
            raise
        raise storage_error(e, db, stage) from None


def on_read_only_fs(path) -> bool:
    """Whether the folder of `path` is on a file system mounted read-only (a DVD, a read-only share, a snapshot)."""
    import os

    try:
        return bool(os.statvfs(Path(path).parent).f_flag & getattr(os, "ST_RDONLY", 1))
    except (OSError, AttributeError):
        return False


def read_only_connection(db, timeout: float) -> sqlite3.Connection | None:
    """A connection that reads a face database on a read-only file system, where SQLite cannot make the -shm file a
    WAL database needs: opened immutable, which is exact while nothing can write there. None where that does not
    hold (the file system is writable, or a -wal file holds commits not yet in the database file)."""
    db = Path(db)
    wal = Path(str(db) + "-wal")
    if not on_read_only_fs(db) or (wal.exists() and wal.stat().st_size > 0):
        return None
    from urllib.parse import quote

    uri = "file:" + quote(fsnames.exact(db.resolve()).decode("utf-8", "surrogateescape"), safe="/") + \
        "?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
        conn.text_factory = fsnames.from_sql
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        return None
    return conn


JOURNAL = ("-wal", "-shm", "-journal", ".lock")  # the files SQLite (and the writer lock) make beside a database


@contextmanager
def removed_if_new(db):
    """A database this block made is removed again when the block fails before any photo is stored in it (a
    folder that does not exist, a GPU that is not there): a failed first command leaves no file behind. A database
    that was there before, or holds photos now, is never touched."""
    db = Path(db)
    existed = {suffix: Path(str(db) + suffix).exists() for suffix in ("", *JOURNAL)}
    try:
        yield
    except (Exception, KeyboardInterrupt):
        if not existed[""] and db.is_file() and _holds_no_photos(db):
            for suffix, was in existed.items():
                if not was:
                    Path(str(db) + suffix).unlink(missing_ok=True)
        raise


def _holds_no_photos(db: Path) -> bool:
    try:
        conn = sqlite3.connect(str(db), timeout=1)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            return "photos" not in tables or conn.execute("SELECT COUNT(*) FROM photos").fetchone()[0] == 0
        finally:
            conn.close()
    except sqlite3.Error:
        return False  # unreadable now: not ours to judge, leave it


__all__ = ["StorageError", "is_storage_fault", "on_read_only_fs", "read_only_connection", "removed_if_new", "reported",
           "storage_error", "stored_photos"]
