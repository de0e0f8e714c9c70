"""Who is who at library scale: faces grouped into people over a k-nearest-neighbour graph, and new faces given to
the people they resemble, without clustering everything again.

Pure functions over arrays (row-aligned unit embeddings and labels); nothing here reads or writes the database.
Labels: a person id >= 0, -1 noise (seen, no person), -2 not clustered yet (StoredFaces.clusters' convention).

- `group_all(vectors)`: every face's k nearest neighbours (exact below GRAPH_ANN_MIN faces, faiss IVF above), an
  edge from a face to each neighbour whose cosine reaches `edge_cosine`, and people = the connected components of
  those edges (smaller than `min_size`: noise). Chosen by measurement (docs/bench/vector-index-2core.txt): on the shared
  identity photos (MobileFaceNet, k = 10) these components, mutual-k-NN components and Chinese whispers all give
  purity 1.000 and ARI 1.000 at cosine 0.50-0.55 (at 0.45 all components chain two people through one impostor
  pair at 0.454, the highest there; whispers does not). On synthetic identities with hundreds to thousands of faces
  a person, mutual edges and shared-neighbour edges break each person into hundreds of pieces (in 128-d a face's
  neighbours rarely name it back), while these components stay exact. Whispers is a sequential per-face loop
  (minutes at a million faces in Python); components are a few vectorised passes. The threshold is the guard
  against chaining: genuine pairs below 0.50 are 1.2% of the shared ones, impostor pairs above it none.
- `assign_new(vectors, labels)`: each face not yet in a person joins the person most of its near neighbours are in
  (cosine >= `assign_cosine`, at least `min_agree` of them agreeing, or all of that person's faces when it has
  fewer), repeated while faces join; the faces left are grouped among themselves as `group_all` would and become
  new people (ids after the largest one given).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

GRAPH_ANN_MIN = 5_000  # faces: below, the k-NN graph is an exact blocked product (above, building cells is cheaper)

Neighbours = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]  # (queries, k) -> (rows, cosines)


@dataclass(frozen=True)
class Grouping:
    """The knobs; defaults chosen on the shared identity photos (MobileFaceNet; docs/bench/vector-index-2core.txt)."""

    k: int = 10  # neighbours per face in the graph
    edge_cosine: float = 0.50  # a graph edge needs at least this cosine
    min_size: int = 2  # faces: smaller groups are noise
    assign_cosine: float = 0.50  # incremental: a neighbour within this cosine votes
    min_agree: int = 3  # incremental: neighbours that must agree on one person

    def check(self) -> None:
        if self.k < 1 or self.min_size < 1 or self.min_agree < 1:
            raise InputError("grouping: k, min_size and min_agree must be 1 or more")
        if not (-1 <= self.edge_cosine <= 1 and -1 <= self.assign_cosine <= 1):
            raise InputError("grouping: cosine thresholds must be from -1 to 1")


DEFAULT = Grouping()


# ------------------------------------------------------------------------------------------------ neighbours
def exact_neighbours(vectors: np.ndarray) -> Neighbours:
    from .vectors import exact_search

    return lambda queries, k: exact_search(vectors, queries, k)


def index_neighbours(vectors: np.ndarray) -> Neighbours:
    """Neighbours from a transient faiss IVF index over `vectors` (rows as ids); exact when faiss is missing or
    the faces are few."""
    from .vectors import VectorIndex, have_faiss

    if len(vectors) < GRAPH_ANN_MIN or not have_faiss():
        return exact_neighbours(vectors)
    from .vectors import GRAPH_PROBES

    index = VectorIndex(np.arange(len(vectors)), vectors, ann=True, ann_min=GRAPH_ANN_MIN)
    probes = index.probes(GRAPH_PROBES)
    return lambda queries, k: index.search(np.atleast_2d(queries), k, nprobe=probes)


def neighbours_of(index, ids: np.ndarray, nprobe: int | None = None) -> Neighbours:
    """Neighbours through a facerun VectorIndex that holds (at least) the faces `ids`, as rows into `ids`; a
    neighbour outside `ids` comes back as row -1 (cosine -inf). nprobe: the index's search default unless given
    (`index.probes(GRAPH_PROBES)` for a graph over every face)."""
    ids = np.asarray(ids, np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]

    def search(queries, k):
        found, cosines = index.search(np.atleast_2d(queries), k, nprobe=nprobe)
        pos = np.clip(np.searchsorted(sorted_ids, found), 0, max(0, len(ids) - 1))
        hit = (sorted_ids[pos] == found) & (found >= 0) if len(ids) else np.zeros(found.shape, bool)
        rows = np.where(hit, order[pos] if len(ids) else -1, -1)
        return rows, np.where(hit, cosines, -np.inf).astype(np.float32)

    return search


def knn_graph(vectors: np.ndarray, k: int, neighbours: Neighbours | None = None,
              batch: int = 16_384) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cosines) n x k: each face's k nearest other faces (-1 / -inf where fewer were found)."""
    n = len(vectors)
    neighbours = neighbours or index_neighbours(vectors)
    rows = np.full((n, k), -1, np.int64)
    cosines = np.full((n, k), -np.inf, np.float32)
    for s in range(0, n, batch):
        q = np.ascontiguousarray(vectors[s : s + batch])
        found, cos = neighbours(q, k + 1)
        self_row = found == np.arange(s, s + len(q))[:, None]
        # drop the face itself, or the farthest when the search missed it (an exact duplicate, say)
        drop = np.where(self_row.any(1), self_row.argmax(1), found.shape[1] - 1)
        keep = np.ones(found.shape, bool)
        keep[np.arange(len(q)), drop] = False
        width = min(k, found.shape[1] - 1)
        rows[s : s + len(q), :width] = found[keep].reshape(len(q), -1)[:, :width]
        cosines[s : s + len(q), :width] = cos[keep].reshape(len(q), -1)[:, :width]
    return rows, cosines


# ------------------------------------------------------------------------------------------------ grouping
def components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected component of each of n nodes over edges a[i]-b[i]: the smallest node of each component."""
    parent = np.arange(n, dtype=np.int64)
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    while True:  # hook each edge's larger root under its smaller one, then jump pointers until flat
        ra, rb = parent[a], parent[b]
        low, high = np.minimum(ra, rb), np.maximum(ra, rb)
        moving = low != high
        if not moving.any():
            return parent
        np.minimum.at(parent, high[moving], low[moving])
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped


def knn_edges(rows: np.ndarray, cosines: np.ndarray, edge_cosine: float) -> tuple[np.ndarray, np.ndarray]:
    """Edges (face, neighbour) of the k-NN graph whose cosine reaches edge_cosine."""
    n, k = rows.shape
    src = np.repeat(np.arange(n, dtype=np.int64), k)
    dst = rows.ravel()
    ok = (dst >= 0) & (cosines.ravel() >= edge_cosine) & (dst != src)
    return src[ok], dst[ok]


def ranked_labels(roots: np.ndarray, min_size: int, first: int = 0) -> np.ndarray:
    """Components renumbered first, first+1, ... by size (largest first, then by smallest member), -1 below
    min_size."""
    uniq, inverse, sizes = np.unique(roots, return_inverse=True, return_counts=True)
    order = np.lexsort((uniq, -sizes))
    rank = np.empty(len(uniq), np.int64)
    rank[order] = np.arange(len(uniq))
    labels = rank[inverse] + first
    return np.where(sizes[inverse] >= min_size, labels, -1)


def group_all(vectors: np.ndarray, params: Grouping = DEFAULT, neighbours: Neighbours | None = None,
              graph: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Person labels 0..K-1 (largest first) or -1 for every face, from scratch."""
    params.check()
    vectors = np.asarray(vectors, np.float32)
    n = len(vectors)
    if n == 0:
        return np.zeros(0, np.int64)
    rows, cosines = graph if graph is not None else knn_graph(vectors, params.k, neighbours)
    a, b = knn_edges(rows, cosines, params.edge_cosine)
    return ranked_labels(components(n, a, b), params.min_size)


def assign_new(vectors: np.ndarray, labels: np.ndarray, params: Grouping = DEFAULT,
               neighbours: Neighbours | None = None, rounds: int = 10) -> np.ndarray:
    """Labels for every face: those >= 0 kept, the others (-1 noise, -2 new) given to a person or grouped anew."""
    params.check()
    vectors = np.asarray(vectors, np.float32)
    labels = np.asarray(labels, np.int64).copy()
    if len(labels) != len(vectors):
        raise InputError(f"grouping: {len(labels)} labels for {len(vectors)} faces")
    if (labels >= 0).all():
        return labels
    if not (labels >= 0).any():
        return group_all(vectors, params, neighbours)
    neighbours = neighbours or index_neighbours(vectors)
    sizes = np.bincount(labels[labels >= 0])
    pending = np.flatnonzero(labels < 0)
    found, cos = _neighbours_of_rows(vectors, pending, params.k, neighbours)
    for _ in range(rounds):
        votes = np.where((found >= 0) & (cos >= params.assign_cosine), labels[np.maximum(found, 0)], -1)
        joined = _vote(votes, sizes, params.min_agree)
        free = labels[pending] < 0
        take = free & (joined >= 0)
        if not take.any():
            break
        labels[pending[take]] = joined[take]
    rest = pending[labels[pending] < 0]
    if len(rest):
        sub = group_all(vectors[rest], params, None)
        first = int(labels.max()) + 1
        labels[rest] = np.where(sub >= 0, sub + first, -1)
    return labels


def _neighbours_of_rows(vectors, rows, k, neighbours):
    """k nearest other faces of the faces at `rows`, as rows into `vectors`."""
    found, cos = neighbours(np.ascontiguousarray(vectors[rows]), k + 1)
    self_row = found == rows[:, None]
    cos = np.where(self_row, -np.inf, cos)
    return np.where(self_row, -1, found), cos


def _vote(votes: np.ndarray, sizes: np.ndarray, min_agree: int) -> np.ndarray:
    """Per row, the person most votes name when they are at least min(min_agree, that person's faces) and more
    than any other person's; else -1."""
    out = np.full(len(votes), -1, np.int64)
    for i, row in enumerate(votes):
        row = row[row >= 0]
        if not len(row):
            continue
        people, counts = np.unique(row, return_counts=True)
        best = counts.argmax()
        if (counts == counts[best]).sum() > 1:
            continue  # a tie between two people: leave it to the user or a full re-cluster
        if counts[best] >= min(min_agree, int(sizes[people[best]])):
            out[i] = people[best]
    return out


__all__ = ["DEFAULT", "GRAPH_ANN_MIN", "Grouping", "assign_new", "components", "exact_neighbours", "group_all",
           "index_neighbours", "knn_edges", "knn_graph", "neighbours_of", "ranked_labels"]
