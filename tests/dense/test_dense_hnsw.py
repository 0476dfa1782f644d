"""DenseIndex(kind="hnsw"): recall against exact, growth, deletes, filters, threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ragfind import DenseIndex


def _unit(rng, n, d):
    X = rng.standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def test_hnsw_recall_at_10_on_scifact_with_defaults(data_dir):
    emb = data_dir / "scifact" / "embeddings" / "all-MiniLM-L6-v2"
    X = np.load(emb / "corpus.npy")
    Q = np.load(emb / "queries.npy")
    exact = DenseIndex(384)
    exact.add(X)
    hnsw = DenseIndex(384, kind="hnsw")
    hnsw.add(X)
    e_ids, _ = exact.search_batch_padded(Q, k=10)
    h_ids, h_sc = hnsw.search_batch_padded(Q, k=10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(e_ids, h_ids)])
    assert recall >= 0.95, recall
    # single-query path and scores (cosine similarity) are consistent
    ids, sc = hnsw.search(Q[0], k=10)
    np.testing.assert_array_equal(ids, h_ids[0])
    np.testing.assert_allclose(sc, X[ids] @ Q[0], atol=1e-5)


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_hnsw_grows_past_initial_capacity_and_matches_exact(metric):
    rng = np.random.default_rng(0)
    X = _unit(rng, 2600, 16)
    h = DenseIndex(16, metric=metric, kind="hnsw")
    e = DenseIndex(16, metric=metric)
    for lo in range(0, 2600, 650):  # initial capacity is 1024: must resize twice
        h.add(X[lo : lo + 650])
        e.add(X[lo : lo + 650])
    assert len(h) == 2600
    ids_h, sc_h = h.search_batch_padded(X[:50], k=5)
    ids_e, sc_e = e.search_batch_padded(X[:50], k=5)
    recall = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(ids_h, ids_e)])
    assert recall >= 0.95
    if metric == "l2":
        assert np.all(np.diff(sc_h, axis=1) >= 0)
    else:
        assert np.all(np.diff(sc_h, axis=1) <= 1e-7)


def test_hnsw_delete_replaces_slots_and_hides_results():
    rng = np.random.default_rng(1)
    X = _unit(rng, 500, 8)
    h = DenseIndex(8, kind="hnsw")
    h.add(X[:400], ids=[f"d{i}" for i in range(400)])
    h.delete(["d3", "d4"])
    assert len(h) == 398 and "d3" not in h
    ids, _ = h.search(X[3], k=5)
    assert "d3" not in ids.tolist()
    count_before = h._backend.graph.element_count
    h.add(X[400:402], ids=["n0", "n1"])  # fills the two deleted slots
    assert h._backend.graph.element_count == count_before
    assert h.search(X[400], k=1)[0].tolist() == ["n0"]
    h.add(X[3], ids=["d3"])
    assert h.search(X[3], k=1)[0].tolist() == ["d3"]
    with pytest.raises(KeyError):
        h.delete(["zzz"])


def test_hnsw_filter_min_score_ef_and_padding():
    rng = np.random.default_rng(2)
    X = _unit(rng, 1000, 12)
    h = DenseIndex(12, kind="hnsw", ef=20)
    h.add(X)
    assert h.ef == 20
    h.ef = 128
    assert h.ef == 128 and h._backend.graph.ef == 128
    ids, _ = h.search(X[0], k=5, filter=[10, 20, 30])
    assert set(ids.tolist()) <= {10, 20, 30} and len(ids) == 3
    ids, _ = h.search(X[0], k=5, filter=lambda i: i % 2 == 0)
    assert all(i % 2 == 0 for i in ids.tolist()) and len(ids) == 5
    ids, sc = h.search(X[0], k=50, min_score=0.5)
    assert (sc >= 0.5).all() and ids[0] == 0
    bids, bsc = h.search_batch_padded(X[:3], k=5, filter=[7, 8])
    assert bids.shape == (3, 5) and (bids[:, 2:] == -1).all() and np.isneginf(bsc[:, 2:]).all()
    small = DenseIndex(12, kind="hnsw")
    small.add(X[:3])
    bids, bsc = small.search_batch_padded(X[:2], k=5)
    assert (bids[:, 3:] == -1).all() and (bids[:, :3] >= 0).all()
    empty = DenseIndex(12, kind="hnsw")
    assert empty.search(X[0])[0].shape == (0,)
    with pytest.raises(ValueError, match="ef"):
        h.ef = 0


def test_hnsw_concurrent_adds_and_searches():
    rng = np.random.default_rng(3)
    X = _unit(rng, 3000, 16)
    h = DenseIndex(16, kind="hnsw", M=8, ef_construction=50)
    h.add(X[:500])
    errors: list = []

    def writer(lo):
        try:
            for s in range(lo, lo + 500, 50):
                h.add(X[s : s + 50], ids=list(range(s, s + 50)))
        except Exception as e:  # pragma: no cover
            errors.append(e)

    self_hits: list = []

    def reader():
        try:
            for i in range(150):
                ids, scores = h.search(X[i], k=3)
                # Every id maps to its own vector (no torn id mapping): its score is the true one.
                np.testing.assert_allclose(scores, X[ids] @ X[i], rtol=0, atol=1e-5)
                self_hits.append(ids[0] == i)
                h.search_batch_padded(X[:4], k=2)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    def deleter():
        try:
            for i in range(400, 450):
                h.delete([i])
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(lo,)) for lo in (500, 1000, 1500, 2000, 2500)]
    threads += [threading.Thread(target=reader) for _ in range(2)] + [threading.Thread(target=deleter)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # The walk is approximate: a rare graph state can hide one vector from its own query.
    assert np.mean(self_hits) >= 0.95
    assert len(h) == 3000 - 50
    ids, _ = h.search_batch_padded(X[2500:2600], k=1)
    assert (ids[:, 0] == np.arange(2500, 2600)).mean() >= 0.95
