"""The face database's tables, and the upgrade of databases an older facerun wrote (every row kept).

Version 2 added the table `missing` (a photo no longer found is kept, marked there, until `index --prune`; a
table rather than a column, so `photos` stays as users' queries know it) and the tables `people` and
`person_faces`: a name is attached to faces by their photo's sha256 and box (and face id), not to a cluster
number, so it survives photos going missing, being indexed again, and clustering again.
"""

from __future__ import annotations

import sqlite3

from ..errors import InputError

SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS photos (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,          -- absolute path (as found: links below the root are not resolved)
    size INTEGER NOT NULL,              -- bytes
    mtime REAL NOT NULL,                -- seconds since the epoch
    sha256 TEXT NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    indexed_at TEXT NOT NULL            -- ISO 8601, UTC
);
CREATE TABLE IF NOT EXISTS missing (     -- photos not found by a later run: kept, left out of results, until --prune
    photo_id INTEGER PRIMARY KEY REFERENCES photos(id) ON DELETE CASCADE,
    since TEXT NOT NULL                 -- ISO 8601, UTC
);
CREATE TABLE IF NOT EXISTS faces (
    id INTEGER PRIMARY KEY,
    photo_id INTEGER NOT NULL REFERENCES photos(id) ON DELETE CASCADE,
    x REAL NOT NULL, y REAL NOT NULL, w REAL NOT NULL, h REAL NOT NULL,   -- box in photo pixels, top-left + size
    score REAL NOT NULL,
    landmarks TEXT NOT NULL,            -- JSON [[x, y] x 5]: right eye, left eye, nose, right and left mouth corner
    model TEXT NOT NULL,
    embedding BLOB NOT NULL,            -- float32 little-endian, unit length
    cluster INTEGER                     -- clusters.id; -1 noise; NULL not clustered yet
);
CREATE INDEX IF NOT EXISTS faces_photo ON faces(photo_id);
CREATE TABLE IF NOT EXISTS clusters (id INTEGER PRIMARY KEY, name TEXT, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS people (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS person_faces (   -- the faces a name was given to: kept when the faces are deleted
    person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    face_id INTEGER NOT NULL,           -- faces.id when named (ids can be reused: matched with the sha256)
    sha256 TEXT NOT NULL,               -- the photo's
    x REAL NOT NULL, y REAL NOT NULL, w REAL NOT NULL, h REAL NOT NULL,
    PRIMARY KEY (sha256, x, y, w, h)
);
"""

# version 1 -> 2, in one transaction; named clusters become people holding their faces
_UPGRADE_1 = """
CREATE TABLE missing (photo_id INTEGER PRIMARY KEY REFERENCES photos(id) ON DELETE CASCADE, since TEXT NOT NULL);
CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE person_faces (person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
    face_id INTEGER NOT NULL, sha256 TEXT NOT NULL, x REAL NOT NULL, y REAL NOT NULL, w REAL NOT NULL,
    h REAL NOT NULL, PRIMARY KEY (sha256, x, y, w, h));
INSERT INTO people(name) SELECT DISTINCT name FROM clusters WHERE name IS NOT NULL AND name != '';
INSERT OR IGNORE INTO person_faces(person, face_id, sha256, x, y, w, h)
    SELECT pe.id, f.id, p.sha256, f.x, f.y, f.w, f.h FROM faces f JOIN photos p ON p.id = f.photo_id
    JOIN clusters c ON c.id = f.cluster JOIN people pe ON pe.name = c.name;
UPDATE meta SET value = '2' WHERE key = 'schema_version';
"""


def check_schema(conn: sqlite3.Connection, path) -> None:
    """Make the tables of a new database, upgrade an older one in place, refuse anything else."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables and "photos" not in tables:
        raise InputError(f"{path}: an SQLite file, but not a facerun face database")
    if not tables:
        conn.executescript("BEGIN;" + SCHEMA + f"INSERT INTO meta(key, value) VALUES ('schema_version', "
                           f"'{SCHEMA_VERSION}');COMMIT;")
    version = _version(conn)
    if version == "1":
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _version(conn) == "1":  # another process may have upgraded it while this one waited
                for statement in _UPGRADE_1.split(";"):
                    if statement.strip():
                        conn.execute(statement)
            conn.execute("COMMIT")
        except sqlite3.OperationalError as e:
            conn.execute("ROLLBACK")
            raise InputError(f"{path}: face database schema 1 needs upgrading to {SCHEMA_VERSION}, which failed "
                             f"({e}); nothing was changed") from None
        version = _version(conn)
    if version != str(SCHEMA_VERSION):
        raise InputError(f"{path}: face database schema {version}, this facerun reads {SCHEMA_VERSION}")


def _version(conn) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return row[0] if row else None


__all__ = ["SCHEMA", "SCHEMA_VERSION", "check_schema"]
