"""Group the faces of an index by person, incrementally or all over again, and keep people's names across runs.

- `cluster_index(index)` (plain `facerun cluster`): faces already in a person stay there; the others (new, noise,
  or above the quality gate again) join the person their near neighbours are in, through the database's vector
  index, and the rest are grouped among themselves into new people (facerun.people.grouping.assign_new).
- `cluster_index(index, full=True)` (`cluster --all`): every face grouped from scratch (grouping.group_all: a k-NN
  graph's components above a cosine) and numbered 1, 2, ... by size; each name goes to the new cluster holding most
  of its person's faces (facerun.people.names).
HDBSCAN (scikit-learn) is no longer used for clustering: on the shared identity photos it gave purity 1.000, ARI
0.952 and 5 of 88 labelled faces noise, the k-NN graph purity 1.000, ARI 1.000 and 4 noise (`python -m
facerun.people.measure`), and HDBSCAN grows as about n^2.3. Faces below the quality gate (facerun.people.quality)
go to the unsorted group, never into a person.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import FacerunError, InputError
from .names import FACE_KEYS, name_faces, names_for_clusters
from .quality import DEFAULT_GATE, UNSORTED, Gate

INSTALL_HINT = "this needs scikit-learn: pip install 'facerun[cluster]'"


@dataclass
class Cluster:
    id: int
    size: int
    name: str | None
    face_ids: list[int] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    boxes: list[tuple] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "size": self.size,
                "faces": [{"image": i, "box": [round(float(v), 2) for v in b], "face_id": f}
                          for i, b, f in zip(self.images, self.boxes, self.face_ids)]}


@dataclass
class Clustering:
    clusters: list[Cluster]
    noise: list[dict]  # {"image", "box", "face_id"}
    labels: np.ndarray  # per stored face, in `face_ids` order: cluster id, -1 noise, -3 unsorted
    face_ids: np.ndarray
    unsorted: list[dict] = field(default_factory=list)  # faces below the quality gate
    new_faces: int = 0  # faces this run placed (all of them with full=True)

    def to_dict(self) -> dict:
        return {"clusters": [c.to_dict() for c in self.clusters], "noise": self.noise, "unsorted": self.unsorted}


def hdbscan_labels(embeddings: np.ndarray, min_size: int = 2) -> np.ndarray:
    """HDBSCAN labels (-1 noise) of unit embeddings, for comparison (measure.py); cluster labels in no order."""
    try:
        from sklearn.cluster import HDBSCAN
    except ImportError:
        raise FacerunError(INSTALL_HINT) from None
    if min_size < 2:
        raise InputError(f"--min-size must be 2 or more, not {min_size}")
    if len(embeddings) < min_size:
        return np.full(len(embeddings), -1, np.int64)
    model = HDBSCAN(min_cluster_size=min_size, min_samples=1, metric="euclidean", copy=True)
    return model.fit_predict(np.asarray(embeddings, np.float64)).astype(np.int64)


def cluster_index(index, min_size: int = 2, save: bool = True, full: bool = False,
                  gate: Gate = DEFAULT_GATE) -> Clustering:
    """Cluster the faces of `index` (missing photos' faces left out): incrementally, or everything with full=True;
    with save=True store the result (faces.cluster, the clusters table)."""
    from .grouping import DEFAULT, assign_new, group_all, neighbours_of
    from .vectors import GRAPH_PROBES

    if min_size < 1:
        raise InputError(f"--min-size must be 1 or more, not {min_size}")
    stored = index.faces()
    ok = gate.passes(stored.boxes, stored.scores)
    rows = np.flatnonzero(ok)
    params = replace(DEFAULT, min_size=min_size)
    vectors = index.vectors() if len(rows) else None
    # a large database's ANN index answers the neighbour queries; below ANN_MIN the grouping's own exact product
    # over the gated faces is exact and no slower
    neighbours = (neighbours_of(vectors, stored.ids[rows], nprobe=vectors.probes(GRAPH_PROBES))
                  if vectors is not None and vectors.kind != "exact" else None)
    known = {cid: name for cid, name in index.conn.execute("SELECT id, name FROM clusters")}
    before = stored.clusters[rows]
    held = np.where(np.isin(before, list(known)) & (before >= 1), before, -2) if not full else np.full(len(rows), -2)
    if (held >= 1).any():
        got = assign_new(stored.embeddings[rows], held, params, neighbours)
    else:
        got = group_all(stored.embeddings[rows], params, neighbours)
        got = np.where(got >= 0, got + 1, -1)  # ids 1..K, largest first: `cluster 1` is the person seen most
        known = {}
    labels = np.full(len(stored), UNSORTED, np.int64)
    labels[rows] = got
    names = {cid: known[cid] for cid in set(got.tolist()) if cid in known}
    fresh = [cid for cid in set(got.tolist()) if cid >= 1 and names.get(cid) is None]
    if fresh:
        # a new cluster takes the name recorded on most of its faces, unless a kept cluster has that name
        carried = names_for_clusters(index.conn, stored.ids, np.where(np.isin(labels, fresh), labels, -1))
        taken = set(names.values())
        names.update({cid: name for cid, name in carried.items() if name not in taken})
    result = _clustering(stored, labels, names)
    result.new_faces = int((held < 1).sum())
    if save:
        _save(index, result, full)
    return result


def _clustering(stored, labels: np.ndarray, names: dict) -> Clustering:
    clusters: dict[int, Cluster] = {}
    noise, unsorted = [], []
    for face_id, path, box, label in zip(stored.ids, stored.paths, stored.boxes, labels):
        label = int(label)
        if label < 1:
            face = {"image": path, "box": [round(float(v), 2) for v in box], "face_id": int(face_id)}
            (unsorted if label == UNSORTED else noise).append(face)
            continue
        c = clusters.setdefault(label, Cluster(id=label, size=0, name=names.get(label)))
        c.size += 1
        c.face_ids.append(int(face_id))
        c.images.append(path)
        c.boxes.append(tuple(float(v) for v in box))
    return Clustering(clusters=[clusters[c] for c in sorted(clusters)], noise=noise, labels=labels,
                      face_ids=stored.ids, unsorted=unsorted)


def _save(index, result: Clustering, full: bool) -> None:
    conn = index.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM clusters")
        conn.executemany("INSERT INTO clusters(id, name, size) VALUES (?, ?, ?)",
                         [(c.id, c.name, c.size) for c in result.clusters])
        # the faces of missing photos were not clustered: an id of theirs that is gone may name another person later
        gone = "" if full else " AND cluster NOT IN (SELECT id FROM clusters)"
        conn.execute("UPDATE faces SET cluster = NULL WHERE cluster IS NOT NULL AND photo_id IN "
                     "(SELECT photo_id FROM missing)" + gone)
        conn.executemany("UPDATE faces SET cluster = ? WHERE id = ?",
                         [(int(label), int(face_id)) for label, face_id in zip(result.labels, result.face_ids)])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def stored_clusters(index) -> Clustering:
    """The clustering last saved in `index`, without clustering again."""
    stored = index.faces()
    named = {cid: (name, size) for cid, name, size in index.conn.execute("SELECT id, name, size FROM clusters")}
    clusters = {cid: Cluster(id=cid, size=0, name=name) for cid, (name, _) in named.items()}
    noise, unsorted = [], []
    for face_id, path, box, label in zip(stored.ids, stored.paths, stored.boxes, stored.clusters):
        c = clusters.get(int(label))
        if c is None:
            face = {"image": path, "box": [round(float(v), 2) for v in box], "face_id": int(face_id)}
            (unsorted if label == UNSORTED else noise).append(face)
            continue
        c.size += 1
        c.face_ids.append(int(face_id))
        c.images.append(path)
        c.boxes.append(tuple(float(v) for v in box))
    return Clustering(clusters=[clusters[c] for c in sorted(clusters) if clusters[c].size], noise=noise,
                      labels=stored.clusters, face_ids=stored.ids, unsorted=unsorted)


def name_cluster(index, cluster_id: int, name: str | None) -> None:
    row = index.conn.execute("SELECT id FROM clusters WHERE id = ?", (int(cluster_id),)).fetchone()
    if row is None:
        count = index.conn.execute("SELECT COUNT(*) FROM clusters").fetchone()[0]
        hint = f"ids are 1 to {count}" if count else "run `facerun cluster --db DB` first"
        raise InputError(f"{index.path}: no cluster {cluster_id} ({hint})")
    conn = index.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        # every face of the cluster, the missing photos' too: the name is recorded against each (see names.py)
        faces = conn.execute(FACE_KEYS + " WHERE f.cluster = ?", (int(cluster_id),)).fetchall()
        name_faces(conn, faces, name or None)
        conn.execute("UPDATE clusters SET name = ? WHERE id = ?", (name or None, int(cluster_id)))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def purity_and_ari(labels_true: list[str], labels_pred: np.ndarray) -> dict:
    """Cluster purity (each cluster counted by its most common true label, noise faces counted as wrong) and the
    adjusted Rand index (noise faces as singletons) of predicted labels against true ones."""
    try:
        from sklearn.metrics import adjusted_rand_score
    except ImportError:
        raise FacerunError(INSTALL_HINT) from None
    pred = np.asarray(labels_pred)
    n = len(pred)
    correct = 0
    for label in set(pred.tolist()) - {-1}:
        members = [t for t, p in zip(labels_true, pred) if p == label]
        correct += max(members.count(t) for t in set(members))
    singletons = np.where(pred < 0, pred.max(initial=0) + 1 + np.arange(n), pred)
    clustered = int((pred >= 0).sum())
    return {"faces": n, "clustered": clustered, "noise": n - clustered,
            "purity": correct / clustered if clustered else 0.0,
            "purity_all": correct / n if n else 0.0,
            "ari": float(adjusted_rand_score(labels_true, singletons))}


__all__ = [
    "INSTALL_HINT",
    "Cluster",
    "Clustering",
    "cluster_index",
    "hdbscan_labels",
    "name_cluster",
    "purity_and_ari",
    "stored_clusters",
]
