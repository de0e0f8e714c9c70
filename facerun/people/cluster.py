"""Group the faces of an index by person with scikit-learn's HDBSCAN, and keep cluster names across runs.

The embeddings are unit vectors, so Euclidean distance is a monotonic function of cosine distance
(|a - b|^2 = 2 - 2 cos), and HDBSCAN's tree algorithms can run on them directly instead of on a full cosine
distance matrix. scikit-learn is an optional extra (`pip install 'facerun[cluster]'`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import FacerunError, InputError
from .names import FACE_KEYS, name_faces, names_for_clusters

INSTALL_HINT = "clustering needs scikit-learn: pip install 'facerun[cluster]'"


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
    labels: np.ndarray  # per stored face, in `face_ids` order: cluster id, -1 noise
    face_ids: np.ndarray

    def to_dict(self) -> dict:
        return {"clusters": [c.to_dict() for c in self.clusters], "noise": self.noise}


def hdbscan_labels(embeddings: np.ndarray, min_size: int = 2) -> np.ndarray:
    """HDBSCAN labels (-1 noise) of unit embeddings; cluster labels ordered by nothing in particular."""
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


def cluster_index(index, min_size: int = 2, save: bool = True) -> Clustering:
    """Cluster every face of `index` (missing photos' faces left out); with save=True store the result
    (faces.cluster, clusters table), each name going to the new cluster holding most of its person's faces."""
    stored = index.faces()
    raw = hdbscan_labels(stored.embeddings, min_size)
    # ids 1..K by size, largest first, so `cluster 1` is the person seen most
    sizes = {label: int((raw == label).sum()) for label in set(raw.tolist()) if label >= 0}
    ranked = sorted(sizes, key=lambda label: (-sizes[label], label))
    renumber = {old: new for new, old in enumerate(ranked, start=1)}
    labels = np.array([renumber.get(int(v), -1) for v in raw], np.int64)
    names = names_for_clusters(index.conn, stored.ids, labels)

    clusters = {cid: Cluster(id=cid, size=sizes[old], name=names.get(cid)) for old, cid in renumber.items()}
    noise = []
    for face_id, path, box, label in zip(stored.ids, stored.paths, stored.boxes, labels):
        if label < 0:
            noise.append({"image": path, "box": [round(float(v), 2) for v in box], "face_id": int(face_id)})
        else:
            c = clusters[int(label)]
            c.face_ids.append(int(face_id))
            c.images.append(path)
            c.boxes.append(tuple(float(v) for v in box))
    result = Clustering(clusters=[clusters[c] for c in sorted(clusters)], noise=noise, labels=labels,
                        face_ids=stored.ids)
    if save:
        _save(index, result)
    return result


def _save(index, result: Clustering) -> None:
    conn = index.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM clusters")
        conn.executemany("INSERT INTO clusters(id, name, size) VALUES (?, ?, ?)",
                         [(c.id, c.name, c.size) for c in result.clusters])
        # the faces of missing photos were not clustered: their old ids would point at other clusters now
        conn.execute("UPDATE faces SET cluster = NULL WHERE cluster IS NOT NULL AND photo_id IN "
                     "(SELECT photo_id FROM missing)")
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
    noise = []
    for face_id, path, box, label in zip(stored.ids, stored.paths, stored.boxes, stored.clusters):
        c = clusters.get(int(label))
        if c is None:
            noise.append({"image": path, "box": [round(float(v), 2) for v in box], "face_id": int(face_id)})
            continue
        c.size += 1
        c.face_ids.append(int(face_id))
        c.images.append(path)
        c.boxes.append(tuple(float(v) for v in box))
    return Clustering(clusters=[clusters[c] for c in sorted(clusters)], noise=noise, labels=stored.clusters,
                      face_ids=stored.ids)


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
