"""The photos `facerun index` finds under its roots, and what it skipped on the way (links, unreadable folders).

Symlink policy: a root given on the command line is resolved. Beneath it, links to files and to folders are
followed (a library organised with links is indexed whole), and each photo keeps the path it was found at, so a
photo under `lib/linked/` belongs to the root `lib` even when the link points elsewhere. The real tree is walked
first and links after it, so a photo reachable both ways is indexed once, at its real path; a folder is walked once
by (st_dev, st_ino), which stops link loops. Skipped, and counted: links to an enclosing folder (loops), links to a
photo or folder already listed (duplicates), broken links, and folders that cannot be read (their indexed photos are
left as they are: unreadable is not gone).
"""

from __future__ import annotations

import os
import stat
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

SKIP_REASONS = ("link_loops", "duplicate_links", "broken_links", "unreadable_folders")


@dataclass
class Listing:
    """What a walk over the roots found."""

    photos: list[Path] = field(default_factory=list)  # absolute paths, sorted
    folders: list[Path] = field(default_factory=list)  # the folder roots, resolved
    files: list[Path] = field(default_factory=list)  # the file roots, resolved
    unreadable_roots: dict[Path, str] = field(default_factory=dict)  # folder root -> reason
    unreadable: list[Path] = field(default_factory=list)  # folders below a root that could not be read
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason in SKIP_REASONS)
    links_followed: int = 0

    def counts(self) -> dict[str, int]:
        return {reason: sum(1 for _, r in self.skipped if r == reason) for reason in SKIP_REASONS}

    def under(self, root: Path) -> list[Path]:
        prefix = str(root).rstrip(os.sep) + os.sep
        return [p for p in self.photos if str(p).startswith(prefix)]


def list_photos(sources, extensions) -> Listing:
    """Walk `sources` (files and folders) as the module docstring says; `extensions`: lower-case, with the dot."""
    listing = Listing()
    seen_files: set[tuple[int, int]] = set()
    seen_dirs: set[tuple[int, int]] = set()
    found: list[Path] = []

    def take(path: Path, st: os.stat_result) -> bool:
        key = (st.st_dev, st.st_ino)
        if key in seen_files:
            listing.skipped.append((str(path), "duplicate_links"))
            return False
        seen_files.add(key)
        found.append(path)
        return True

    # each queued link: (path as found, the stat of its target, the keys of the folders enclosing it)
    links: deque = deque()
    for raw in sources:
        root = Path(raw).resolve()
        if not root.is_dir():
            listing.files.append(root)
            try:
                take(root, root.stat())
            except OSError:
                found.append(root)  # reported as unreadable when it is indexed
            continue
        listing.folders.append(root)
        st = root.stat()
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            continue  # the same root twice
        seen_dirs.add(key)
        error = _walk(root, (key,), extensions, take, links, seen_dirs, listing)
        if error is not None:
            listing.unreadable_roots[root] = error
    # links last, so that whatever the real tree holds is listed at its real path first
    while links:
        path, st, enclosing = links.popleft()
        if not stat.S_ISDIR(st.st_mode):
            listing.links_followed += take(path, st)
            continue
        key = (st.st_dev, st.st_ino)
        if key in enclosing:
            listing.skipped.append((str(path), "link_loops"))
            continue
        if key in seen_dirs:
            listing.skipped.append((str(path), "duplicate_links"))
            continue
        seen_dirs.add(key)
        listing.links_followed += 1
        if _walk(path, (*enclosing, key), extensions, take, links, seen_dirs, listing) is not None:
            listing.unreadable.append(path)
            listing.skipped.append((str(path), "unreadable_folders"))
    listing.photos = sorted(found)
    return listing


def _walk(top: Path, enclosing: tuple, extensions, take, links: deque, seen_dirs: set, listing: Listing) -> str | None:
    """Walk the real folders under `top` (links queued in `links`); the reason when `top` itself cannot be read."""
    stack = [(top, enclosing)]
    while stack:
        folder, chain = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            if folder == top:
                return e.strerror or str(e)
            listing.unreadable.append(folder)
            listing.skipped.append((str(folder), "unreadable_folders"))
            continue
        below = []
        for entry in entries:
            path = folder / entry.name
            try:
                is_link = entry.is_symlink()
                st = os.stat(entry.path)  # follows a link
            except OSError:
                if is_link:
                    listing.skipped.append((str(path), "broken_links"))
                continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if is_link:
                    links.append((path, st, chain))
                elif key not in seen_dirs:  # a bind mount could show one folder twice
                    seen_dirs.add(key)
                    below.append((path, (*chain, key)))
            elif stat.S_ISREG(st.st_mode) and Path(entry.name).suffix.lower() in extensions:
                if is_link:
                    links.append((path, st, chain))
                else:
                    take(path, st)
        stack.extend(reversed(below))
    return None


__all__ = ["SKIP_REASONS", "Listing", "list_photos"]
