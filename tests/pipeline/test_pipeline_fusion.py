"""ragfind.rrf / ragfind.fuse_scores against an obvious Python reference and against ranx."""

from __future__ import annotations

import math
import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragfind

# --- the slow, obvious references -----------------------------------------------------------


def ref_rrf(lists, k=60, weights=None, top_k=None):
    scores, first = {}, {}
    for li, ids in enumerate(lists):
        w = 1.0 if weights is None else weights[li]
        for r, d in enumerate(ids):
            first.setdefault(d, len(first))
            scores[d] = scores.get(d, 0.0) + w * (1.0 / (k + r + 1))
    ranked = sorted(scores, key=lambda d: (-scores[d], first[d]))
    if top_k:
        ranked = ranked[:top_k]
    return ranked, [scores[d] for d in ranked]


def ref_norm(scores, norm):
    s = np.asarray(scores, dtype=np.float64)
    if len(s) == 0 or norm == "none":
        return s
    if norm == "min-max":
        lo, hi = s.min(), s.max()
        return (s - lo) / (hi - lo) if hi > lo else np.ones_like(s)
    if norm == "z-score":
        sd = s.std()
        return (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)
    if norm == "max":
        return s / s.max() if s.max() > 0 else s
    if norm == "sum":
        t = (s - s.min()).sum()
        return (s - s.min()) / t if t > 0 else np.full_like(s, 1.0 / len(s))
    raise AssertionError(norm)


def ref_fuse(pairs, norm="min-max", method="sum", weights=None):
    acc, count, first = {}, {}, {}
    for li, (ids, sc) in enumerate(pairs):
        w = 1.0 if weights is None else weights[li]
        for d, v in zip(ids, ref_norm(sc, norm)):
            first.setdefault(d, len(first))
            v = w * v
            if method == "max":
                acc[d] = max(acc.get(d, -math.inf), v)
            else:
                acc[d] = acc.get(d, 0.0) + v
            count[d] = count.get(d, 0) + 1
    if method == "mnz":
        acc = {d: v * count[d] for d, v in acc.items()}
    ranked = sorted(acc, key=lambda d: (-acc[d], first[d]))
    return ranked, [acc[d] for d in ranked]


def random_lists(rng, n_lists=3, n=1000, universe=3000):
    return [rng.permutation(universe)[:n].astype(np.int64) for _ in range(n_lists)]


# --- rrf ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 60, 1000.5])
def test_rrf_matches_reference(k):
    rng = np.random.default_rng(1)
    lists = random_lists(rng)
    ids, scores = ragfind.rrf(lists, k=k)
    ref_ids, ref_scores = ref_rrf([x.tolist() for x in lists], k=k)
    assert ids.dtype == np.int64 and scores.dtype == np.float64
    assert ids.tolist() == ref_ids
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-12)


def test_rrf_weights_and_top_k():
    rng = np.random.default_rng(2)
    lists = random_lists(rng, n_lists=4, n=300, universe=700)
    w = [0.5, 2.0, 1.0, 0.0]
    ids, scores = ragfind.rrf(lists, weights=w, top_k=50)
    ref_ids, ref_scores = ref_rrf([x.tolist() for x in lists], weights=w, top_k=50)
    assert ids.tolist() == ref_ids
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(-50, 50), max_size=40, unique=True), min_size=1, max_size=5),
    st.floats(0, 100),
)
def test_rrf_property(lists, k):
    ids, scores = ragfind.rrf(lists, k=k)
    ref_ids, ref_scores = ref_rrf(lists, k=k)
    assert ids.tolist() == ref_ids
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-12)


# The C++ core picks its path from the input: ids in [0, 4 x total) go through a direct-mapped
# array, others through a hash table; equal positive weights rank single-list ids by rank and place
# multi-list ids among them, other weights radix-sort everything. All must give the reference
# ranking exactly, ties by first appearance included.


def _check_exact(lists, **kwargs):
    ids, scores = ragfind.rrf(lists, **kwargs)
    ref_ids, ref_scores = ref_rrf([np.asarray(x).tolist() for x in lists], **kwargs)
    assert ids.tolist() == ref_ids
    assert scores.tolist() == ref_scores  # same additions in the same order: bit-identical


@pytest.mark.parametrize("shift", [0, 1, -5, 10**12, -(10**15)])
@pytest.mark.parametrize("weights", [None, [2.5, 2.5, 2.5], [1.0, 0.5, 2.0], [0.0, 0.0, 0.0], [-1.0] * 3])
def test_rrf_paths_exact(shift, weights):
    rng = np.random.default_rng(11)
    for n, universe in [(1000, 3000), (50, 60), (7, 400)]:
        lists = [x + shift for x in random_lists(rng, n=n, universe=universe)]
        _check_exact(lists, weights=weights)
        _check_exact(lists, weights=weights, top_k=n // 2)


def test_rrf_exact_ties_between_single_and_multi_list_ids():
    # k = 0: 1/2 + 1/2 == 1/1 exactly, so x (two lists) ties a and b (one list each).
    _check_exact([[10, 11], [12, 11]], k=0)
    _check_exact([[12, 11], [10, 11]], k=0)
    rng = np.random.default_rng(12)
    for trial in range(300):  # small k and short lists: many exact ties of every kind
        n_lists = int(rng.integers(1, 6))
        lists = [rng.permutation(12)[: int(rng.integers(0, 9))] for _ in range(n_lists)]
        _check_exact(lists, k=float(trial % 4))
        _check_exact([[f"s{d}" for d in x.tolist()] for x in lists], k=float(trial % 4))


def test_rrf_uneven_and_many_lists():
    rng = np.random.default_rng(13)
    for n_lists in (2, 3, 4, 9, 12):
        lists = [rng.permutation(500)[: int(rng.integers(0, 200))] for _ in range(n_lists)]
        _check_exact(lists)
        _check_exact(lists, top_k=17)
        _check_exact(lists, k=0)


def test_rrf_id_range_boundary_and_growth():
    # max id just inside / just past 4 x total; then ranges that grow the direct-mapped array.
    total = 6
    for top in (4 * total - 1, 4 * total, 4 * total + 1):
        _check_exact([[top, 0, 1], [2, top, 3]])
    for scale in (1, 3, 1, 50, 2):
        rng = np.random.default_rng(scale)
        _check_exact([rng.permutation(300 * scale)[:300] for _ in range(3)])


def test_rrf_after_duplicate_error_still_exact():
    rng = np.random.default_rng(14)
    lists = random_lists(rng, n=300, universe=600)
    for bad in ([[1, 2], [3, 4, 3]], [[10**15, 7], [7, 10**15, 7]]):
        with pytest.raises(ValueError, match="twice"):
            ragfind.rrf(bad)
        _check_exact(lists)
        _check_exact([x * 10**9 for x in lists])


def test_rrf_ties_break_by_first_appearance():
    # Every id sits at one rank of one list, so ranks tie across lists: 7 (list 0) before 3.
    ids, scores = ragfind.rrf([[7, 8], [3, 4]])
    assert ids.tolist() == [7, 3, 8, 4]
    assert scores[0] == scores[1] and scores[2] == scores[3]


def test_rrf_input_kinds_agree():
    a, b = [5, 1, 9, 2], [9, 5, 4]
    expect = ragfind.rrf([np.array(a), np.array(b)])
    for lists in (
        [a, b],
        [tuple(a), tuple(b)],
        [np.array(a, dtype=np.int32), np.array(b, dtype=np.uint16)],
        [(np.array(a), np.zeros(4)), (b, [1.0, 2.0, 3.0])],  # (ids, scores) pairs from search()
        [[np.int64(x) for x in a], b],
    ):
        ids, scores = ragfind.rrf(lists)
        assert ids.tolist() == expect[0].tolist()
        np.testing.assert_array_equal(scores, expect[1])


def test_rrf_str_ids_match_int_ids():
    rng = np.random.default_rng(3)
    lists = random_lists(rng, n=500, universe=900)
    int_ids, int_scores = ragfind.rrf(lists)
    # Separate str objects per list (equal strings, different objects) exercise the memcmp path.
    str_lists = [[f"doc-{i}" for i in x.tolist()] for x in lists]
    ids, scores = ragfind.rrf(str_lists)
    assert ids.dtype == object
    assert ids.tolist() == [f"doc-{i}" for i in int_ids.tolist()]
    np.testing.assert_array_equal(scores, int_scores)
    ids2, _ = ragfind.rrf([np.array(x) for x in str_lists])  # numpy unicode arrays
    assert ids2.tolist() == ids.tolist()
    ids3, _ = ragfind.rrf([np.array(x, dtype=object) for x in str_lists])
    assert ids3.tolist() == ids.tolist()


def test_rrf_unicode_ids():
    lists = [["é", "日本", "a", "\U0001f600"], ["a", "日本", "e\u0301"]]
    ids, _ = ragfind.rrf(lists)
    assert ids.tolist() == ref_rrf(lists)[0]
    assert len(ids) == 5  # "é" and "e" + combining accent are different ids


def test_rrf_empty_lists():
    ids, scores = ragfind.rrf([[], np.array([], dtype=np.int64)])
    assert len(ids) == 0 and len(scores) == 0
    ids, _ = ragfind.rrf([[], ["x"]])
    assert ids.tolist() == ["x"]


@pytest.mark.parametrize(
    "lists, kwargs, exc, match",
    [
        ([], {}, ValueError, "lists is empty"),
        ([[1, 2, 1]], {}, ValueError, r"lists\[0\] holds id 1 twice"),
        ([["a", "b"], ["b", "b"]], {}, ValueError, r"lists\[1\] holds id 'b' twice"),
        ([[1, 2], ["a"]], {}, TypeError, "mixes id types"),
        ([[1, "a"]], {}, TypeError, r"lists\[0\]\[1\]"),
        ([[1.5, 2.0]], {}, TypeError, "expected int"),
        ([np.array([1.5])], {}, TypeError, "dtype float64"),
        ([np.zeros((2, 2), dtype=np.int64)], {}, ValueError, "1-D"),
        ("abc", {}, TypeError, "lists is a str"),
        ([5], {}, TypeError, r"lists\[0\] is a int"),
        ([[1], [2]], {"weights": [1.0]}, ValueError, "one weight per list"),
        ([[1], [2]], {"weights": [1.0, float("nan")]}, ValueError, "not finite"),
        ([[1]], {"k": -1}, ValueError, "k = "),
        ([[1]], {"top_k": 0}, ValueError, "top_k"),
        ([[2**70]], {}, ValueError, "int64"),
    ],
)
def test_rrf_bad_input(lists, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ragfind.rrf(lists, **kwargs)


def test_rrf_agrees_with_ranx():
    ranx = pytest.importorskip("ranx")
    rng = np.random.default_rng(4)
    lists = random_lists(rng, n=200, universe=500)
    runs = [ranx.Run({"q": {f"d{d}": float(len(x) - r) for r, d in enumerate(x.tolist())}}) for x in lists]
    with warnings.catch_warnings():  # numba type-safety warnings inside ranx
        warnings.simplefilter("ignore")
        fused = ranx.fuse(runs, norm=None, method="rrf", params={"k": 60}).to_dict()["q"]
    ids, scores = ragfind.rrf([[f"d{d}" for d in x.tolist()] for x in lists], k=60)
    assert set(fused) == set(ids.tolist())
    for d, s in zip(ids.tolist(), scores.tolist()):
        assert fused[d] == pytest.approx(s, rel=1e-12)


def test_rrf_concurrent_threads_agree():
    rng = np.random.default_rng(5)
    cases = [random_lists(rng, n=400, universe=1000) for _ in range(8)]
    expected = [ragfind.rrf(c) for c in cases]
    errors = []

    def work(i):
        for _ in range(20):
            ids, scores = ragfind.rrf(cases[i])
            if ids.tolist() != expected[i][0].tolist() or not np.array_equal(scores, expected[i][1]):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# --- score fusion -------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["min-max", "z-score", "max", "sum", "none"])
@pytest.mark.parametrize("method", ["sum", "mnz", "max"])
def test_fuse_scores_matches_reference(norm, method):
    rng = np.random.default_rng(6)
    pairs = [(ids, rng.random(len(ids)) * 10 + 0.5) for ids in random_lists(rng, n=300, universe=600)]
    w = [1.0, 0.3, 2.0]
    ids, scores = ragfind.fuse_scores(pairs, norm=norm, method=method, weights=w)
    ref_ids, ref_scores = ref_fuse([(i.tolist(), s) for i, s in pairs], norm, method, w)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-9, atol=1e-12)
    assert ids.tolist() == ref_ids


def test_fuse_scores_exact_order_for_near_ties():
    # Scores that differ only in their last bits share the radix key: the fix-up pass orders them.
    n = 3000
    base = 1.0 + np.arange(n) * 2.0**-50
    rng = np.random.default_rng(7)
    perm = rng.permutation(n)
    ids, scores = ragfind.fuse_scores([(perm, base[perm])], norm="none")
    ref_ids, _ = ref_fuse([(perm.tolist(), base[perm])], "none")
    assert ids.tolist() == ref_ids
    assert np.all(np.diff(scores) <= 0)


@pytest.mark.parametrize(
    "scores",
    [
        np.geomspace(1e-300, 1e300, 500),  # many binades
        np.concatenate([np.full(250, 1e6), np.linspace(0, 1, 250)]),  # an outlier block
        np.concatenate([np.full(300, 2.0), np.full(200, -2.0)]),  # two big tie groups
        np.arange(500) * 5e-324,  # denormals: max - min too small to scale
        np.concatenate([[1e308, -1e308], np.linspace(-1, 1, 498)]),  # max - min overflows
    ],
)
def test_fuse_scores_rank_prefix_edge_cases(scores):
    rng = np.random.default_rng(8)
    pairs = []
    for _ in range(3):
        perm = rng.permutation(len(scores))[:400]
        pairs.append((perm, scores[perm]))
    for method in ("sum", "max"):
        ids, fused = ragfind.fuse_scores(pairs, norm="none", method=method)
        with np.errstate(over="ignore"):  # 1e308 + 1e308 = inf, in the reference as in C++
            ref_ids, ref_scores = ref_fuse([(p.tolist(), s) for p, s in pairs], "none", method)
        assert ids.tolist() == ref_ids
        assert fused.tolist() == ref_scores


def test_fuse_scores_infinite_fused_scores_rank():
    # Finite inputs and weights whose weighted sum overflows: +inf ties break by first appearance.
    pairs = [([1, 2, 3], [1.0, 0.5, 0.0]), ([3, 2, 1], [1.0, 0.9, 0.1])]
    ids, fused = ragfind.fuse_scores(pairs, norm="none", weights=[1e308, 1e308])
    with np.errstate(over="ignore"):
        ref_ids, ref_scores = ref_fuse([(list(i), s) for i, s in pairs], "none", weights=[1e308, 1e308])
    assert ids.tolist() == ref_ids
    assert fused.tolist() == ref_scores


def test_fuse_scores_negative_and_zero_scores_sort():
    ids, scores = ragfind.fuse_scores([([1, 2, 3, 4, 5], [-0.0, -5.0, 3.0, 0.0, -1e-300])], norm="none")
    assert ids.tolist() == [3, 1, 4, 5, 2]  # -0.0 ties +0.0: first appearance wins


def test_fuse_scores_constant_list():
    ids, scores = ragfind.fuse_scores([([1, 2], [3.0, 3.0])], norm="min-max")
    np.testing.assert_array_equal(scores, [1.0, 1.0])
    ids, scores = ragfind.fuse_scores([([1, 2], [3.0, 3.0])], norm="z-score")
    np.testing.assert_array_equal(scores, [0.0, 0.0])


@pytest.mark.parametrize(
    "norm, ranx_norm", [("min-max", "min-max"), ("z-score", "zmuv"), ("max", "max"), ("sum", "sum")]
)
@pytest.mark.parametrize("method, ranx_method", [("sum", "wsum"), ("mnz", "mnz"), ("max", "max")])
def test_fuse_scores_agrees_with_ranx(norm, ranx_norm, method, ranx_method):
    ranx = pytest.importorskip("ranx")
    rng = np.random.default_rng(8)
    lists = random_lists(rng, n=150, universe=300)
    pairs = [(ids, np.sort(rng.random(len(ids)) * 5 + 1)[::-1].copy()) for ids in lists]
    runs = [ranx.Run({"q": {f"d{d}": float(s) for d, s in zip(ids.tolist(), sc)}}) for ids, sc in pairs]
    params = {"weights": [1.0, 1.0, 1.0]} if ranx_method == "wsum" else {}
    with warnings.catch_warnings():  # numba type-safety warnings inside ranx
        warnings.simplefilter("ignore")
        fused = ranx.fuse(runs, norm=ranx_norm, method=ranx_method, params=params).to_dict()["q"]
    ids, scores = ragfind.fuse_scores(
        [([f"d{d}" for d in i.tolist()], s) for i, s in pairs], norm=norm, method=method
    )
    assert set(fused) == set(ids.tolist())
    for d, s in zip(ids.tolist(), scores.tolist()):
        assert fused[d] == pytest.approx(s, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize(
    "lists, kwargs, exc, match",
    [
        ([[1, 2]], {}, TypeError, r"needs \(ids, scores\) pairs"),
        ([([1, 2], [1.0])], {}, ValueError, "2 ids but 1 scores"),
        ([([1, 2], [1.0, float("nan")])], {}, ValueError, "expected finite scores"),
        ([([1, 2], [1.0, float("inf")])], {}, ValueError, "expected finite scores"),
        ([([1, 2], np.array(["a", "b"]))], {}, TypeError, "real number dtype"),
        ([([1], [1.0])], {"norm": "l2"}, ValueError, "norm = 'l2'"),
        ([([1], [1.0])], {"method": "borda"}, ValueError, "method = 'borda'"),
        ([([1, 1], [1.0, 2.0])], {}, ValueError, "twice"),
    ],
)
def test_fuse_scores_bad_input(lists, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ragfind.fuse_scores(lists, **kwargs)
