"""The single-query HNSW path (its label -> id shortcut and score conversion) against the batch
path and numpy, across id layouts that do and do not make labels equal ids."""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import DenseIndex


def _data(n: int = 300, d: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    Q = (rng.standard_normal((12, d)) * 3.0).astype(np.float32)  # not unit length
    return X, Q


def _check_single_matches_batch(idx: DenseIndex, Q: np.ndarray, k: int = 5) -> None:
    b_ids, b_scores = idx.search_batch_padded(Q, k=k)
    for i, q in enumerate(Q):
        ids, scores = idx.search(q, k=k)
        assert ids.dtype == b_ids.dtype
        assert ids.tolist() == b_ids[i].tolist()
        np.testing.assert_allclose(scores, b_scores[i], rtol=1e-5, atol=1e-6)
        assert scores.dtype == np.float32


def _id_layouts(n: int) -> dict:
    rng = np.random.default_rng(1)
    return {
        "auto": None,
        "0..n-1 in order": list(range(n)),
        "0..n-1 shuffled": rng.permutation(n).tolist(),
        "offset": list(range(1000, 1000 + n)),
        "strings": [f"doc{i}" for i in range(n)],
    }


@pytest.mark.parametrize("layout", list(_id_layouts(300)))
@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_single_search_ids_and_scores_match_batch_and_numpy(layout, metric):
    X, Q = _data()
    ids_in = _id_layouts(X.shape[0])[layout]
    idx = DenseIndex(X.shape[1], metric=metric, kind="hnsw", ef=300)
    stored = idx.add(X, ids_in)
    _check_single_matches_batch(idx, Q)
    # With ef >= n the graph search is exact here: compare with numpy.
    Xs = X / np.linalg.norm(X, axis=1, keepdims=True) if metric == "cosine" else X
    for q in Q:
        ids, scores = idx.search(q, k=5)
        if metric == "l2":
            ref = ((Xs - q) ** 2).sum(axis=1)
            order = np.argsort(ref)[:5]
        else:
            qq = q / np.linalg.norm(q) if metric == "cosine" else q
            ref = Xs @ qq
            order = np.argsort(-ref)[:5]
        assert ids.tolist() == [stored[j] for j in order]
        np.testing.assert_allclose(scores, ref[order], rtol=1e-4, atol=1e-4)


def test_identity_labels_stop_matching_after_delete_and_re_add():
    X, Q = _data()
    idx = DenseIndex(X.shape[1], metric="cosine", kind="hnsw", ef=300)
    idx.add(X)  # auto ids 0..n-1: labels equal ids
    _check_single_matches_batch(idx, Q)
    target = int(idx.search(Q[0], k=1)[0][0])
    idx.delete([target])
    assert target not in idx.search(Q[0], k=5)[0].tolist()
    _check_single_matches_batch(idx, Q)
    # Re-adding the same id gives it a new label, so label != id from here on.
    idx.add(X[target][None, :] * 2.0, [target])
    ids, scores = idx.search(Q[0], k=1)
    assert ids.tolist() == [target]
    cos = float(np.dot(X[target], Q[0]) / np.linalg.norm(X[target]) / np.linalg.norm(Q[0]))
    assert scores[0] == pytest.approx(cos, abs=1e-5)
    _check_single_matches_batch(idx, Q)
    # More auto ids after that still map correctly.
    more = idx.add(Q[:3])
    for j, q in enumerate(Q[:3]):
        assert idx.search(q, k=1)[0].tolist() == [more[j]]
    _check_single_matches_batch(idx, Q)


def test_single_search_validates_like_before():
    X, _ = _data()
    idx = DenseIndex(X.shape[1], metric="cosine", kind="hnsw")
    idx.add(X)
    q = X[0].copy()
    bad = q.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        idx.search(bad)
    with pytest.raises(ValueError, match="zero vector"):
        idx.search(np.zeros_like(q))
    with pytest.raises(TypeError, match="floating-point"):
        idx.search(q.astype(np.int32))
    with pytest.raises(ValueError, match="shape"):
        idx.search(q[:-1])
    # Non-contiguous, big-endian and float64 inputs take the full check and give the same answer.
    ref = idx.search(q, k=3)
    for variant in (np.repeat(q, 2)[::2], q.astype(">f4"), q.astype(np.float64), q[None, :]):
        got = idx.search(variant, k=3)
        assert got[0].tolist() == ref[0].tolist()
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-6)
