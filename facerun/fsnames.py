"""File names as the filesystem gives them, which need not be UTF-8 (`caf\\xe9.jpg` from a Latin-1 system or an old
camera card).

Python hands such a name over as a str with its undecodable bytes as lone surrogates (surrogateescape), which no
UTF-8 writer accepts. Three forms, one rule each:
- the face database keeps the exact bytes (`to_sql` binds them, the connection's `text_factory` reads them back), so
  a re-run finds the same file again;
- people see the name with each such byte as `\\xNN` (`shown`): tables, messages, JSON, CSV;
- `exact` gives the bytes back from a stored or listed name, for a caller that must open the very file.
"""

from __future__ import annotations

import os


def is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(name) -> str:
    """`name` (a str or a path) printable anywhere: valid UTF-8, each byte that was not UTF-8 written as \\xNN."""
    text = os.fspath(name) if not isinstance(name, str) else name
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    if is_utf8(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte (made in Python, not by the filesystem)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown_all(obj):
    """`obj` (dicts, lists, tuples of strs and other values) with every str `shown`: what JSON output prints."""
    if isinstance(obj, str):
        return obj if is_utf8(obj) else shown(obj)
    if isinstance(obj, dict):
        return {shown_all(k): shown_all(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [shown_all(v) for v in obj]
    return obj


def exact(name) -> bytes:
    """The bytes of a name as the filesystem has them."""
    return os.fsencode(name)


def to_sql(name) -> str | bytes:
    """A path as an SQL parameter: the str when it is UTF-8, else its bytes; bind it as `CAST(? AS TEXT)`, which
    stores those bytes as the TEXT value unchanged (SQLite does not check UTF-8), so the column stays TEXT."""
    text = os.fspath(name)
    return text if isinstance(text, str) and is_utf8(text) else os.fsencode(text)


def from_sql(data: bytes) -> str:
    """The connection's text_factory: TEXT back to str, bytes that are not UTF-8 as surrogates (os.fsdecode's form),
    so a stored name compares equal to the same name listed again."""
    return data.decode("utf-8", "surrogateescape")


__all__ = ["exact", "from_sql", "is_utf8", "shown", "shown_all", "to_sql"]
