"""DenseIndex under the index protocol (ragfind/index.py): the search and search_batch
signatures, the padded batch, ids returned by add, explain, the threads check, the old
third argument of search."""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import DenseIndex, IdFilter
from ragfind.errors import UnknownIdError
from ragfind.index import Explanation, Index

KINDS = [
    ("exact", "f32", {}),
    ("exact", "i8", {}),
    ("hnsw", "f32", {"ef": 200}),
    ("ivf", "f32", {"nlist": 8, "nprobe": 3}),
    ("ivf", "f16", {"nlist": 8, "nprobe": 3}),
]


def _build(kind, dtype, extra, metric="cosine", str_ids=False, n=600, dim=16):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((n, dim)).astype(np.float32)
    idx = DenseIndex(dim, metric=metric, kind=kind, dtype=dtype, **extra)
    ids = idx.add(X, ids=[f"d{i}" for i in range(n)] if str_ids else None)
    Q = rng.standard_normal((7, dim)).astype(np.float32) * 3.0
    return idx, X, ids, Q


@pytest.mark.parametrize("kind,dtype,extra", KINDS)
@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_search_batch_items_equal_search_exactly(kind, dtype, extra, metric):
    idx, _, ids, Q = _build(kind, dtype, extra, metric)
    assert isinstance(idx, Index)
    flt = IdFilter(ids[::3].tolist())
    threshold = {"max_distance": 30.0} if metric == "l2" else {"min_score": 0.1}
    for opts in ({}, {"filter": flt}, {"filter": ids[::5].tolist()}, threshold):
        batch = idx.search_batch(Q, 9, **opts, threads=1)
        assert isinstance(batch, list) and len(batch) == len(Q)
        for q, (b_ids, b_scores) in zip(Q, batch):
            s_ids, s_scores = idx.search(q, 9, **opts)
            np.testing.assert_array_equal(b_ids, s_ids)
            np.testing.assert_array_equal(b_scores, s_scores)


@pytest.mark.parametrize("kind,dtype,extra", KINDS)
def test_padded_batch_pads_with_minus_one_and_minus_inf(kind, dtype, extra):
    idx, _, ids, Q = _build(kind, dtype, extra)
    p_ids, p_scores = idx.search_batch_padded(Q, 5, filter=ids[:2].tolist())
    assert p_ids.shape == p_scores.shape == (len(Q), 5)
    assert (p_ids[:, 2:] == -1).all() and np.isneginf(p_scores[:, 2:]).all()
    assert np.isfinite(p_scores[:, :2]).all()
    s_idx, _, _, _ = _build(kind, dtype, extra, str_ids=True)
    s_ids, _ = s_idx.search_batch_padded(Q, 5, filter=["d1"])
    assert s_ids.dtype == object and (s_ids[:, 1:] == None).all()  # noqa: E711


@pytest.mark.parametrize("kind,dtype,extra", KINDS)
def test_add_returns_the_ids_as_an_array(kind, dtype, extra):
    idx, X, ids, _ = _build(kind, dtype, extra, n=300)
    assert ids.dtype == np.int64 and ids.tolist() == list(range(300))
    more = idx.add(X[:2], ids=[1000, 1001])
    assert more.dtype == np.int64 and more.tolist() == [1000, 1001]
    s_idx, _, s_ids, _ = _build(kind, dtype, extra, str_ids=True, n=300)
    assert s_ids.dtype == object and s_ids[:2].tolist() == ["d0", "d1"]


@pytest.mark.parametrize("kind,dtype,extra", KINDS)
@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_explain_score_is_the_search_score(kind, dtype, extra, metric):
    idx, _, _, Q = _build(kind, dtype, extra, metric)
    top_ids, top_scores = idx.search(Q[0], 5)
    for i, s in zip(top_ids.tolist(), top_scores.tolist()):
        ex = idx.explain(Q[0], i)
        assert isinstance(ex, Explanation) and ex.kind == "dense" and ex.id == i
        assert ex.score == pytest.approx(s, rel=1e-5, abs=1e-5)
        assert len(ex.contributions) == 1 and ex.contributions[0].name == metric
        assert ex.contributions[0].value == ex.score
        assert ex.detail == {"metric": metric, "dtype": dtype, "kind": kind}
        assert ex.to_dict()["score"] == ex.score
    if kind == "exact" and dtype == "f32":  # the same scan restricted to the id: equal scores
        assert idx.explain(Q[0], top_ids[0]).score == float(top_scores[0])
    with pytest.raises(UnknownIdError):
        idx.explain(Q[0], 10**9)


def test_a_number_as_third_argument_is_the_old_min_score():
    idx, _, _, Q = _build("exact", "f32", {})
    want = idx.search(Q[0], 50, min_score=0.2)
    with pytest.warns(DeprecationWarning, match="third argument"):
        got = idx.search(Q[0], 50, 0.2)
    np.testing.assert_array_equal(got[0], want[0])
    with pytest.raises(TypeError, match="min_score"):
        idx.search(Q[0], 50, 0.2, min_score=0.3)
    # Anything else there is the filter.
    assert idx.search(Q[0], 5, [3, 4])[0].tolist() in ([3, 4], [4, 3])
    with pytest.raises(TypeError, match="third argument is the filter"):
        idx.search_batch(Q, 5, 2)


@pytest.mark.parametrize("call", ["search", "search_batch", "search_batch_padded"])
def test_bad_threads_gets_the_one_message(call):
    idx, _, _, Q = _build("exact", "f32", {})
    q = Q[0] if call == "search" else Q
    with pytest.raises(ValueError, match=r"^threads: expected None or an int >= 0"):
        getattr(idx, call)(q, 3, threads=-1)
    with pytest.raises(TypeError, match=r"^threads: expected None or an int >= 0"):
        getattr(idx, call)(q, 3, threads=1.5)
    with pytest.raises(ValueError, match="nprobe"):
        getattr(idx, call)(q, 3, nprobe=0)
    for t in (None, 0, 1, 2):
        getattr(idx, call)(q, 3, threads=t)
    with pytest.raises(ValueError, match=r"^threads: expected None or an int >= 0"):
        DenseIndex(4, threads=-1)


def test_a_refused_first_add_leaves_the_id_kind_open():
    idx = DenseIndex(4, kind="ivf", nlist=8)
    with pytest.raises(ValueError, match="needs at least 8 vectors"):
        idx.add(np.ones((3, 4), np.float32), ids=["a", "b", "c"])
    rows = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    assert idx.add(rows).tolist() == list(range(10))
