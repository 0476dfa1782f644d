"""Property tests (hypothesis): DenseIndex exact against numpy, and RRF against a Python RRF.

DenseIndex(kind="exact", dtype="f32"): search/search_batch return numpy's top-k for random
vectors, metrics and k; add/delete sequences equal a rebuild; save/load is the identity (exact
and hnsw). rrf equals a direct Python implementation of Cormack et al.'s formula with
first-appearance tie breaking.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragfind import DenseIndex, rrf

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

metrics = st.sampled_from(["cosine", "ip", "l2"])


@st.composite
def corpus_and_queries(draw):
    dim = draw(st.integers(1, 24))
    n = draw(st.integers(1, 60))
    nq = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, dim)).astype(np.float32)
    if draw(st.booleans()):  # duplicates and exact ties
        X[n // 2 :] = X[: n - n // 2]
    Q = rng.standard_normal((nq, dim)).astype(np.float32)
    return X, Q


def reference_scores(X, q, metric):
    X64, q64 = X.astype(np.float64), q.astype(np.float64)
    if metric == "cosine":
        Xn = X64 / np.linalg.norm(X64, axis=1, keepdims=True)
        return Xn @ (q64 / np.linalg.norm(q64))
    if metric == "ip":
        return X64 @ q64
    return ((X64 - q64) ** 2).sum(axis=1)


def assert_valid_topk(ids, scores, ref, k, metric, ids_of_rows):
    """A correct top-k: right count, scores match the reference, none better left out."""
    higher = metric != "l2"
    sign = 1.0 if higher else -1.0
    tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
    assert len(ids) == min(k, len(ref))
    row_of = {x: r for r, x in enumerate(ids_of_rows)}
    rows = [row_of[x] for x in ids.tolist()]
    assert len(set(rows)) == len(rows)
    np.testing.assert_allclose(scores, ref[rows], atol=tol)
    assert np.all(sign * np.diff(scores.astype(np.float64)) <= tol)
    if rows:
        worst = min(sign * ref[r] for r in rows)
        rest = np.setdiff1d(np.arange(len(ref)), rows)
        assert np.all(sign * ref[rest] <= worst + tol)


@SETTINGS
@given(corpus_and_queries(), metrics, st.integers(1, 70))
def test_exact_search_equals_numpy(data, metric, k):
    X, Q = data
    index = DenseIndex(X.shape[1], metric=metric)
    index.add(X)
    ids_of_rows = list(range(len(X)))
    for q in Q:
        ids, scores = index.search(q, k=k)
        assert_valid_topk(ids, scores, reference_scores(X, q, metric), k, metric, ids_of_rows)
    B_ids, B_scores = index.search_batch_padded(Q, k=k, threads=2)
    kk = min(k, len(X))
    assert B_ids.shape == (len(Q), k)
    assert np.all(B_ids[:, kk:] == -1) and np.all(np.isneginf(B_scores[:, kk:]))
    for i, q in enumerate(Q):
        assert_valid_topk(
            B_ids[i, :kk], B_scores[i, :kk], reference_scores(X, q, metric), k, metric, ids_of_rows
        )


dense_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 8)),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 10_000), min_size=1, max_size=4)),
    ),
    min_size=1,
    max_size=12,
)


@SETTINGS
@given(dense_ops, metrics, st.integers(1, 15), st.integers(0, 2**32 - 1))
def test_exact_add_delete_sequence_equals_rebuild(operations, metric, k, seed):
    rng = np.random.default_rng(seed)
    dim = 6
    index = DenseIndex(dim, metric=metric)
    live: dict[int, np.ndarray] = {}
    for op, arg in operations:
        if op == "add":
            X = rng.standard_normal((arg, dim)).astype(np.float32)
            added = index.add(X)
            live.update(zip(added, X))
        elif live:
            present = sorted(live)
            victims = sorted({present[x % len(present)] for x in arg})
            index.delete(victims)
            for v in victims:
                del live[v]
    assert len(index) == len(live) and sorted(index.ids) == sorted(live)
    q = rng.standard_normal(dim).astype(np.float32)
    ids, scores = index.search(q, k=k)
    if not live:
        assert len(ids) == 0
        return
    order = sorted(live)
    X = np.stack([live[i] for i in order])
    rebuilt = DenseIndex(dim, metric=metric)
    rebuilt.add(X, ids=order)
    r_ids, r_scores = rebuilt.search(q, k=k)
    np.testing.assert_allclose(scores, r_scores, rtol=1e-5, atol=1e-5)
    assert_valid_topk(ids, scores, reference_scores(X, q, metric), k, metric, order)


@SETTINGS
@given(
    corpus_and_queries(),
    metrics,
    st.sampled_from(["f32", "f16", "i8", "hnsw"]),
    st.booleans(),
    st.booleans(),
)
def test_dense_save_load_is_identity(tmp_path_factory, data, metric, storage, str_ids, mmap):
    X, Q = data
    kind = "hnsw" if storage == "hnsw" else "exact"
    dtype = "f32" if storage == "hnsw" else storage
    index = DenseIndex(X.shape[1], metric=metric, dtype=dtype, kind=kind, fingerprint="model-x")
    ids = [f"v{i}" for i in range(len(X))] if str_ids else None
    index.add(X, ids=ids)
    if len(X) > 2:
        index.delete(index.ids[:1])
    path = tmp_path_factory.mktemp("dense") / "index.dense"
    index.save(path)
    loaded = DenseIndex.load(path, mmap=mmap)
    assert (loaded.dim, loaded.metric, loaded.dtype, loaded.kind, loaded.fingerprint) == (
        index.dim,
        index.metric,
        index.dtype,
        index.kind,
        index.fingerprint,
    )
    assert sorted(loaded.ids, key=str) == sorted(index.ids, key=str)
    for q in Q:
        a_ids, a_scores = index.search(q, k=len(X))
        b_ids, b_scores = loaded.search(q, k=len(X))
        # The same (id, score) pairs in the same score order; equal scores (duplicate vectors)
        # may come in another order, and scores may differ in the last bit (the loaded arrays
        # sit at another alignment, which changes the SIMD kernels' summation order).
        np.testing.assert_allclose(a_scores, b_scores, rtol=1e-6, atol=1e-6)
        b_score_of = dict(zip(b_ids.tolist(), b_scores.tolist()))
        assert set(b_score_of) == set(a_ids.tolist())
        for x, sa in zip(a_ids.tolist(), a_scores.tolist()):
            assert abs(b_score_of[x] - sa) <= 1e-6 * max(1.0, abs(sa))


def python_rrf(lists, k, weights):
    scores: dict = {}
    first: dict = {}
    for li, ranked in enumerate(lists):
        for rank, x in enumerate(ranked, start=1):
            scores[x] = scores.get(x, 0.0) + weights[li] / (k + rank)
            first.setdefault(x, len(first))
    return sorted(scores, key=lambda x: (-scores[x], first[x])), scores


ranked_lists = st.lists(st.lists(st.integers(0, 40), max_size=25, unique=True), min_size=1, max_size=5)


@SETTINGS
@given(ranked_lists, st.floats(0.0, 100.0), st.data())
def test_rrf_equals_python_reference(lists, k, data):
    weights = data.draw(st.lists(st.floats(0.0, 3.0), min_size=len(lists), max_size=len(lists)))
    top_k = data.draw(st.one_of(st.none(), st.integers(1, 50)))
    as_str = data.draw(st.booleans())
    given_lists = (
        [[f"d{x}" for x in li] for li in lists] if as_str else [np.asarray(li, np.int64) for li in lists]
    )
    if k == 0.0 and any(len(li) for li in lists):
        pass  # k = 0 is allowed (rank counts from 1)
    ids, scores = rrf(given_lists, k=k, weights=weights, top_k=top_k)
    ref_order, ref_scores = python_rrf([[f"d{x}" for x in li] if as_str else li for li in lists], k, weights)
    if top_k is not None:
        ref_order = ref_order[:top_k]
    got = ids.tolist()
    assert len(got) == len(ref_order)
    np.testing.assert_allclose(scores, [ref_scores[x] for x in ref_order], rtol=1e-12, atol=1e-15)
    # Same ids in the same order, except that near-equal fused scores may swap.
    for g, r in zip(got, ref_order):
        if g != r:
            assert abs(ref_scores[g] - ref_scores[r]) <= 1e-12
    assert set(got) == set(ref_order) or top_k is not None


def test_rrf_rejects_duplicate_ids_in_one_list():
    with pytest.raises(ValueError):
        rrf([[1, 2, 1]])
