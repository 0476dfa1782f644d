"""DenseIndex (exact): top-k against numpy, dtypes, ids, filters, deletes, bad input, threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ragfind import DenseIndex


def _unit(rng, n, d):
    X = rng.standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _numpy_topk(X, q, k, metric):
    X64, q64 = X.astype(np.float64), q.astype(np.float64)
    if metric == "cosine":
        X64 = X64 / np.linalg.norm(X64, axis=1, keepdims=True)
        q64 = q64 / np.linalg.norm(q64)
    if metric == "l2":
        s = ((X64 - q64) ** 2).sum(axis=1)
        order = np.argsort(s, kind="stable")
    else:
        s = X64 @ q64
        order = np.argsort(-s, kind="stable")
    return order[:k], s[order[:k]], s


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
@pytest.mark.parametrize("n", [1, 5, 1023, 2500])
def test_exact_topk_equals_numpy_argsort(simd_level, metric, n):
    rng = np.random.default_rng(n)
    d = 37
    X = rng.standard_normal((n, d)).astype(np.float32)
    Q = rng.standard_normal((7, d)).astype(np.float32)
    idx = DenseIndex(d, metric=metric)
    idx.add(X)
    k = 10
    for q in Q:
        ids, scores = idx.search(q, k=k)
        ref_ids, ref_scores, _ = _numpy_topk(X, q, k, metric)
        assert ids.dtype == np.int64 and scores.dtype == np.float32
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-5)
    bids, bscores = idx.search_batch_padded(Q, k=k)
    kk = min(k, n)
    for i, q in enumerate(Q):
        ref_ids, ref_scores, _ = _numpy_topk(X, q, kk, metric)
        np.testing.assert_array_equal(bids[i, :kk], ref_ids)
        np.testing.assert_allclose(bscores[i, :kk], ref_scores, rtol=1e-5, atol=1e-5)
        assert (bids[i, kk:] == -1).all() and np.isneginf(bscores[i, kk:]).all()


@pytest.mark.parametrize("dtype", ["f16", "i8"])
@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_compressed_storage_recall_on_scifact(data_dir, dtype, metric):
    emb = data_dir / "scifact" / "embeddings" / "all-MiniLM-L6-v2"
    X = np.load(emb / "corpus.npy")
    Q = np.load(emb / "queries.npy")[:200]
    exact = DenseIndex(384, metric=metric, dtype="f32")
    exact.add(X)
    comp = DenseIndex(384, metric=metric, dtype=dtype)
    comp.add(X)
    e_ids, e_sc = exact.search_batch_padded(Q, k=10)
    c_ids, c_sc = comp.search_batch_padded(Q, k=10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(e_ids, c_ids)])
    assert recall >= 0.99, recall
    # single-query path agrees with the batch path on the same storage
    for i in range(0, 200, 40):
        s_ids, s_sc = comp.search(Q[i], k=10)
        assert len(set(s_ids) & set(c_ids[i])) >= 9
        np.testing.assert_allclose(s_sc, c_sc[i], atol=2e-3)


def test_batch_and_single_paths_and_threads_agree(simd_level):
    rng = np.random.default_rng(3)
    X = _unit(rng, 5000, 64)
    Q = _unit(rng, 70, 64)  # > the 64-query block
    for dtype in ("f32", "f16", "i8"):
        idx = DenseIndex(64, metric="ip", dtype=dtype)
        idx.add(X)
        b1, s1 = idx.search_batch_padded(Q, k=5, threads=1)
        b2, s2 = idx.search_batch_padded(Q, k=5, threads=2)
        np.testing.assert_array_equal(b1, b2)
        for i in range(0, 70, 9):
            one, sc1 = idx.search(Q[i], k=5, threads=1)
            two, sc2 = idx.search(Q[i], k=5, threads=2)
            np.testing.assert_array_equal(one, two)
            if dtype != "i8":  # i8 single queries are int16-quantised, batches are not
                np.testing.assert_array_equal(one, b1[i])
            np.testing.assert_allclose(sc1, s1[i], atol=2e-3)


def test_string_ids_and_auto_ids():
    rng = np.random.default_rng(0)
    X = _unit(rng, 20, 8)
    idx = DenseIndex(8)
    assert idx.add(X[:3]).tolist() == [0, 1, 2]
    assert idx.add(X[3:5], ids=[10, 11]).tolist() == [10, 11]
    assert idx.add(X[5:6]).tolist() == [12]
    ids, _ = idx.search(X[4], k=1)
    assert ids.tolist() == [11]
    s = DenseIndex(8)
    s.add(X[:4], ids=["a", "b", "c", "d"])
    ids, scores = s.search(X[2], k=2)
    assert ids.dtype == object and ids[0] == "c"
    assert scores[0] == pytest.approx(1.0, abs=1e-6)
    bids, _ = s.search_batch_padded(X[:2], k=6)
    assert bids.shape == (2, 6) and bids[0, 0] == "a" and bids[0, 5] is None
    with pytest.raises(TypeError, match="str ids; pass ids="):
        s.add(X[5:6])
    with pytest.raises(TypeError, match="has str ids, got int"):
        s.add(X[5:6], ids=[5])


def test_min_score_max_distance_and_filters():
    rng = np.random.default_rng(1)
    X = _unit(rng, 300, 16)
    idx = DenseIndex(16, metric="cosine")
    idx.add(X, ids=[f"d{i}" for i in range(300)])
    q = X[7]
    ids, scores = idx.search(q, k=300, min_score=0.3)
    assert (scores >= 0.3).all() and ids[0] == "d7"
    ref = (X @ q >= 0.3).sum()
    assert len(ids) == ref
    allowed = {"d1", "d2", "d3", "nope"}
    ids, _ = idx.search(q, k=10, filter=allowed)
    assert set(ids) == {"d1", "d2", "d3"}
    ids, _ = idx.search(q, k=10, filter=lambda i: i.endswith("5"))
    assert all(i.endswith("5") for i in ids) and len(ids) == 10
    bids, bsc = idx.search_batch_padded(X[:3], k=4, filter=["d1", "d2"])
    assert set(bids[0, :2]) == {"d1", "d2"} and (bids[:, 2:] == None).all()  # noqa: E711
    l2 = DenseIndex(16, metric="l2")
    l2.add(X)
    ids, d2 = l2.search(q, k=300, max_distance=1.0)
    assert (d2 <= 1.0).all() and np.all(np.diff(d2) >= 0) and ids[0] == 7
    with pytest.raises(ValueError, match="max_distance"):
        l2.search(q, min_score=0.1)
    with pytest.raises(ValueError, match="min_score"):
        idx.search(q, max_distance=0.1)


def test_delete_and_readd_and_compaction():
    rng = np.random.default_rng(2)
    X = _unit(rng, 3000, 12)
    idx = DenseIndex(12, metric="ip")
    idx.add(X)
    idx.delete([5, 6])
    assert len(idx) == 2998 and 5 not in idx
    ids, _ = idx.search(X[5], k=3)
    assert 5 not in ids.tolist()
    with pytest.raises(ValueError, match="already"):
        idx.add(X[7], ids=[7])
    idx.add(X[5], ids=[5])  # re-adding a deleted id is allowed
    assert idx.search(X[5], k=1)[0].tolist() == [5]
    # deleting more than half compacts the storage; results stay right
    idx.delete(list(range(100, 2000)))
    assert idx._backend.snapshot.live is None and len(idx) == 3000 - 2 + 1 - 1900
    ids, _ = idx.search(X[2500], k=1)
    assert ids.tolist() == [2500]
    ids, _ = idx.search(X[150], k=50)
    assert not (set(ids.tolist()) & set(range(100, 2000)))


def test_empty_index_returns_empty_results():
    idx = DenseIndex(4)
    ids, scores = idx.search(np.ones(4, np.float32), k=3)
    assert ids.shape == (0,) and scores.shape == (0,)
    bids, bsc = idx.search_batch_padded(np.ones((2, 4), np.float32), k=3)
    assert bids.shape == (2, 3) and (bids == -1).all() and np.isneginf(bsc).all()


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_huge_k_beyond_the_index_is_a_clear_error_not_gigabytes_of_padding(kind):
    X = np.random.default_rng(3).standard_normal((50, 8)).astype(np.float32)
    idx = DenseIndex(8, kind=kind)
    idx.add(X)
    with pytest.raises(ValueError, match=r"k=10000000 exceeds the 50 vectors"):
        idx.search_batch_padded(X[:8], k=10**7)
    ids, _ = idx.search_batch_padded(X[:8], k=60)  # small padding stays allowed
    assert ids.shape == (8, 60) and (ids[:, 50:] == -1).all()


def _snapshot(idx, q):
    return len(idx), idx.search(q, k=5)[0].tolist()


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
def test_bad_input_is_rejected_and_changes_nothing(dtype):
    rng = np.random.default_rng(4)
    X = _unit(rng, 10, 6)
    idx = DenseIndex(6, dtype=dtype)
    idx.add(X, ids=list(range(10)))
    q = X[0]
    before = _snapshot(idx, q)
    bad = X[:3].copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="row 1 contains NaN or infinity"):
        idx.add(bad, ids=[20, 21, 22])
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or infinity"):
        idx.add(bad, ids=[20, 21, 22])
    with pytest.raises(ValueError, match="dimension 6"):
        idx.add(np.ones((2, 5), np.float32), ids=[20, 21])
    with pytest.raises(TypeError, match="floating-point"):
        idx.add(np.ones((2, 6), np.int32), ids=[20, 21])
    with pytest.raises(TypeError, match="floating-point"):
        idx.add([["a"] * 6], ids=[20])
    with pytest.raises(ValueError, match="empty"):
        idx.add(np.ones((0, 6), np.float32), ids=[])
    with pytest.raises(ValueError, match="id 20 is repeated"):
        idx.add(X[:2], ids=[20, 20])
    with pytest.raises(ValueError, match=r"\[3\] already in the index"):
        idx.add(X[:2], ids=[20, 3])
    with pytest.raises(ValueError, match="2 entries but there are 3"):
        idx.add(X[:3], ids=[20, 21])
    with pytest.raises(TypeError, match="all int or all str"):
        idx.add(X[:2], ids=[20, "x"])
    with pytest.raises(TypeError, match="int or str"):
        idx.add(X[:1], ids=[1.5])
    with pytest.raises(ValueError, match="zero vector"):
        idx.add(np.zeros((1, 6), np.float32), ids=[30])
    with pytest.raises(KeyError, match="99"):
        idx.delete([1, 99])
    assert 1 in idx
    assert _snapshot(idx, q) == before
    # query-side errors
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        idx.search(np.ones(5, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        idx.search(np.full(6, np.nan, np.float32))
    with pytest.raises(TypeError, match="floating-point"):
        idx.search(np.ones(6, np.int64))
    with pytest.raises(ValueError, match="k must be a positive int"):
        idx.search(q, k=0)
    with pytest.raises(ValueError, match="zero vector"):
        idx.search(np.zeros(6, np.float32))
    with pytest.raises(ValueError, match="queries is empty"):
        idx.search_batch_padded(np.ones((0, 6), np.float32))
    with pytest.raises(ValueError, match="threads"):
        idx.search_batch_padded(X, threads=-1)


def test_constructor_validation_and_f16_range():
    with pytest.raises(ValueError, match="dim"):
        DenseIndex(0)
    with pytest.raises(ValueError, match="metric"):
        DenseIndex(4, metric="dot")
    with pytest.raises(ValueError, match="dtype"):
        DenseIndex(4, dtype="f64")
    with pytest.raises(ValueError, match="kind"):
        DenseIndex(4, kind="annoy")
    with pytest.raises(ValueError, match="hnsw"):
        DenseIndex(4, kind="hnsw", dtype="i8")
    idx = DenseIndex(2, metric="ip", dtype="f16")
    with pytest.raises(ValueError, match="float16 range"):
        idx.add(np.array([[1e6, 1.0]], np.float32))
    assert len(idx) == 0
    idx.add(np.array([[60000.0, 1.0]], np.float32))
    assert len(idx) == 1


def test_fingerprint_check():
    idx = DenseIndex(3, fingerprint="minilm-l6-v2@abc")
    idx.add(np.eye(3, dtype=np.float32))
    assert idx.fingerprint == "minilm-l6-v2@abc"
    idx.check_fingerprint("minilm-l6-v2@abc")
    idx.check_fingerprint(None)
    with pytest.raises(ValueError, match="built with 'minilm-l6-v2@abc'"):
        idx.check_fingerprint("bge-small@1")
    with pytest.raises(ValueError, match="bge-small"):
        idx.search(np.ones(3, np.float32), fingerprint="bge-small@1")
    assert idx.search(np.ones(3, np.float32), k=1, fingerprint="minilm-l6-v2@abc")[0].shape == (1,)


def test_concurrent_adds_and_searches_exact():
    rng = np.random.default_rng(5)
    X = _unit(rng, 4000, 32)
    idx = DenseIndex(32)
    idx.add(X[:1000])
    errors: list = []

    def writer(lo):
        try:
            for s in range(lo, lo + 1000, 100):
                idx.add(X[s : s + 100], ids=list(range(s, s + 100)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            for i in range(200):
                ids, sc = idx.search(X[i], k=3)
                assert ids[0] == i
                idx.search_batch_padded(X[:8], k=2)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(lo,)) for lo in (1000, 2000, 3000)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(idx) == 4000
    ids, _ = idx.search_batch_padded(X[::97], k=1)
    np.testing.assert_array_equal(ids[:, 0], np.arange(0, 4000, 97))
