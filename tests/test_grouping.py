"""Grouping faces into people over a k-NN graph, from scratch and incrementally: seeded synthetic identities and the
shared identity photos (MobileFaceNet)."""

from __future__ import annotations

import numpy as np
import pytest
from people_fixtures import FACES, NEAR_COPIES

from facerun.people import grouping as G
from facerun.people import vectors as V

sklearn = pytest.importorskip("sklearn")
from sklearn.metrics import adjusted_rand_score  # noqa: E402


def identities(n, dim=128, per=20, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n // per, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    truth = rng.permutation(np.arange(n) % len(centres))
    x = centres[truth] + noise * rng.standard_normal((n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), truth


def same_partition(a, b) -> bool:
    return adjusted_rand_score(a, b) == 1.0 and np.array_equal(a < 0, b < 0)


def test_components_and_edges():
    assert G.components(6, np.array([0, 1, 4]), np.array([1, 2, 5])).tolist() == [0, 0, 0, 3, 4, 4]
    # a long chain given in the worst order still collapses to one component
    chain = np.arange(999, 0, -1)
    assert (G.components(1000, chain, chain - 1) == 0).all()
    rows = np.array([[1, 2], [0, 2], [-1, 1]])
    cos = np.array([[0.9, 0.2], [0.9, 0.6], [-np.inf, 0.6]], np.float32)
    a, b = G.knn_edges(rows, cos, 0.5)
    assert list(zip(a.tolist(), b.tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    assert G.ranked_labels(np.array([5, 5, 2, 7, 7, 7]), 2).tolist() == [1, 1, -1, 0, 0, 0]


def test_synthetic_identities_are_recovered():
    x, truth = identities(2000)
    labels = G.group_all(x)
    assert (labels >= 0).all() and same_partition(labels, truth)
    assert np.bincount(labels).max() == 20 and labels.max() == 99


def test_large_people_stay_whole():
    """500 faces a person in 128-d: a face's neighbours rarely name it back there, which broke mutual-k-NN
    grouping into hundreds of pieces; k-NN edges over the threshold keep each person one group."""
    x, truth = identities(5000, dim=128, per=500, noise=0.08, seed=2)
    assert same_partition(G.group_all(x), truth)


def test_the_edge_threshold_decides_whether_a_look_alike_joins_two_people():
    x, truth = identities(200, dim=32, seed=3)
    between = x[truth == 0][0] + x[truth == 1][0]  # a face halfway: cosine ~0.75 to one face of each person
    odd = np.concatenate([x, [between / np.linalg.norm(between)]])
    apart = G.group_all(odd, G.Grouping(edge_cosine=0.8))
    assert same_partition(apart[:200], truth) and apart[200] == -1
    joined = G.group_all(odd, G.Grouping(edge_cosine=0.5))
    assert joined[200] >= 0 and len(set(joined[:200].tolist())) == 9  # the two people became one


@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_equals_full_on_the_same_data(seed):
    x, truth = identities(3000, seed=seed)
    full = G.group_all(x)
    old = np.random.default_rng(seed).random(3000) < 0.6  # 60% clustered before, the rest arrives
    labels = np.full(3000, -2)
    labels[old] = G.group_all(x[old])
    before = labels.copy()
    after = G.assign_new(x, labels)
    assert np.array_equal(after[old], before[old])  # people already given keep their ids
    assert same_partition(after, full) and same_partition(after, truth)


def test_agreement_is_needed_to_join_a_person():
    x, truth = identities(400, dim=32, seed=4)
    labels = G.group_all(x)
    person = labels[truth == 0][0]
    face = x[truth == 0][:1]
    new = np.concatenate([x, face])
    joined = G.assign_new(new, np.concatenate([labels, [-2]]))
    assert joined[-1] == person
    # a person with fewer faces than min_agree is joined when all of its faces agree
    small = np.concatenate([x[truth != 0], x[truth == 0][:2]])
    small_labels = G.group_all(small)
    joined = G.assign_new(np.concatenate([small, face]), np.concatenate([small_labels, [-2]]))
    assert joined[-1] == small_labels[-1] >= 0
    # with fewer neighbours looked at than must agree, the face cannot join, and alone it is noise
    alone = G.assign_new(new, np.concatenate([labels, [-2]]), G.Grouping(k=2, min_agree=3, min_size=2))
    assert alone[-1] == -1


def test_the_graph_from_the_ivf_index_groups_like_the_exact_one(monkeypatch):
    if not V.have_faiss():
        pytest.skip("faiss-cpu not installed")
    x, truth = identities(4000, seed=5)
    exact = G.group_all(x, neighbours=G.exact_neighbours(x))
    monkeypatch.setattr(G, "GRAPH_ANN_MIN", 1000)
    ivf = G.group_all(x)  # index_neighbours: a transient IVF index above GRAPH_ANN_MIN
    assert same_partition(ivf, exact) and same_partition(ivf, truth)


def test_neighbours_through_a_vector_index_are_rows_of_the_given_ids():
    x, _ = identities(300, dim=32, seed=6)
    ids = np.arange(300) * 3 + 10
    index = V.VectorIndex(ids, x, ann=False)
    rows, cos = G.neighbours_of(index, ids[::-1])(x[:5], 3)  # rows into a reversed id list
    assert rows[:, 0].tolist() == [299 - i for i in range(5)] and np.allclose(cos[:, 0], 1, atol=1e-5)
    rows, cos = G.neighbours_of(index, ids[:100])(x[200:202], 1)  # nearest held outside the given ids
    assert rows.tolist() == [[-1], [-1]] and np.isinf(cos).all()


def test_the_shared_identity_photos_at_purity_one_from_both_paths(faces_db):
    from facerun.people.cluster import purity_and_ari
    from facerun.people.index import FaceIndex
    from facerun.people.measure import labelled_faces

    with FaceIndex(faces_db) as index:
        stored = index.faces()
        identities_, rows, _, _ = labelled_faces(index, FACES, NEAR_COPIES)
    x = stored.embeddings
    full = G.group_all(x)
    scores = purity_and_ari(identities_, full[rows])
    assert scores["purity"] == 1.0 and scores["ari"] >= 0.95 and scores["noise"] <= 0.1 * len(rows)
    # the first half of the faces (by id: the photos indexed first) clustered, then the rest added
    labels = np.full(len(x), -2)
    half = len(x) // 2
    labels[:half] = G.group_all(x[:half])
    inc = G.assign_new(x, labels)
    assert purity_and_ari(identities_, inc[rows]) == scores
