"""Who is in the photos: a face index (SQLite), identify, cluster and search. `facerun.FaceIndex` is the entry."""

from .index import FaceIndex, UpdateReport

__all__ = ["FaceIndex", "UpdateReport"]
