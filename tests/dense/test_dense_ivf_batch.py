"""DenseIndex(kind="ivf").search_batch, which groups the queries by list, against its
definition: search() on each query. Ids and scores must be equal bit for bit for every dtype,
metric, filter form, deletes, threshold, k (also above the rows), nprobe, thread count, data
seed and SIMD level. (The C++ test test_ivf_batch checks the kernel-level search the same way.)"""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import DenseIndex, IdFilter

DIM = 24  # not a multiple of 8 or 16: every kernel runs its tail


def structured(n: int, seed: int, latent: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    W = np.random.default_rng(1000 + seed).standard_normal((latent, DIM))
    return (rng.standard_normal((n, latent)) @ W + 0.4 * rng.standard_normal((n, DIM))).astype(np.float32)


def built(dtype: str, metric: str, seed: int, n: int = 1500, **kw) -> DenseIndex:
    ivf = DenseIndex(DIM, metric=metric, kind="ivf", dtype=dtype, nlist=24, **kw)
    ivf.add(structured(n, seed), ids=np.arange(n) * 3 + 1)
    ivf.delete(np.arange(0, n, 7) * 3 + 1)  # deletes: holes in every list
    return ivf


def assert_equal_to_single(ivf: DenseIndex, Q: np.ndarray, k: int, **kw) -> None:
    got = ivf.search_batch(Q, k, **kw)
    single_kw = dict(kw, threads=1)
    assert len(got) == Q.shape[0]
    for q, (ids, scores) in zip(Q, got):
        want_ids, want_scores = ivf.search(q, k, **single_kw)
        np.testing.assert_array_equal(ids, want_ids)
        assert scores.dtype == np.float32
        np.testing.assert_array_equal(scores.view(np.uint32), want_scores.view(np.uint32))


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_batch_equals_single_searches_at_every_simd_level(simd_level, dtype, metric):
    for seed in (0, 1):
        ivf = built(dtype, metric, seed)
        Q = structured(23, 100 + seed) * np.float32(1.7)  # not unit length: cosine rescales
        for nprobe in (1, 3, 24):
            for k in (1, 10):
                for threads in (1, 3):
                    assert_equal_to_single(ivf, Q, k, nprobe=nprobe, threads=threads)


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_filters_thresholds_and_large_k_equal_single_searches(dtype, metric):
    ivf = built(dtype, metric, 2)
    Q = structured(17, 7) * np.float32(0.6)
    ids_all = np.arange(1500) * 3 + 1
    rng = np.random.default_rng(3)
    half = IdFilter(rng.choice(ids_all, 750, replace=False).tolist())
    few = rng.choice(ids_all, 12, replace=False).tolist()  # the gather path, fewer than k
    filters = [None, half, few, lambda x: x % 2 == 0]
    # A threshold near the 5th score of the first query.
    s5 = float(ivf.search(Q[0], 5, nprobe=24)[1][-1])
    thr = {"max_distance": s5} if metric == "l2" else {"min_score": s5}
    for flt in filters:
        for k in (10, 40, 5000):  # 5000: more than the index holds, every list probed
            for nprobe in (1, 4):
                assert_equal_to_single(ivf, Q, k, filter=flt, nprobe=nprobe, threads=2)
                assert_equal_to_single(ivf, Q, k, filter=flt, nprobe=nprobe, threads=1, **thr)


@pytest.mark.parametrize("dtype", ["f16", "i8"])
def test_quantised_scores_without_rerank_equal_single_searches(dtype):
    ivf = built(dtype, "ip", 4, rerank=0)
    assert ivf._backend.snapshot.exact is None
    assert_equal_to_single(ivf, structured(19, 8), 10, nprobe=3, threads=2)


def test_padded_batch_ranks_as_search_batch():
    ivf = built("i8", "l2", 5)
    Q = structured(11, 9)
    rows, _scores = ivf.search_batch_padded(Q, 10, nprobe=4)
    for row, (ids, _s) in zip(rows, ivf.search_batch(Q, 10, nprobe=4)):
        np.testing.assert_array_equal(row, ids)


def test_empty_untrained_and_string_ids():
    ivf = DenseIndex(DIM, kind="ivf", nlist=4)
    out = ivf.search_batch(structured(3, 1), 5)
    assert [len(i) for i, _ in out] == [0, 0, 0]
    X = structured(300, 2)
    ivf.add(X, ids=[f"d{i}" for i in range(300)])
    assert_equal_to_single(ivf, structured(9, 3), 7, nprobe=2)
    ivf.delete([f"d{i}" for i in range(300)])
    assert [len(i) for i, _ in ivf.search_batch(structured(2, 4), 5)] == [0, 0]


def test_a_zero_query_with_cosine_is_refused_as_by_search():
    ivf = built("f32", "cosine", 6)
    Q = structured(4, 5)
    Q[2] = 0
    with pytest.raises(ValueError, match="zero vector"):
        ivf.search(Q[2], 5)
    with pytest.raises(ValueError, match="zero vector"):
        ivf.search_batch(Q, 5)


# Every list format, the coded ones included: a batch may read a list once for all the
# queries that probe it or scan each query's lists best first, chosen by the expected queries
# per probed list (batch x nprobe / nlist) and the re-scoring pool (k x rerank). The settings
# below lie on both sides of every such rule (0.4 to 48 queries a list, pools of 20 and 200),
# with deletes and filters.
ALL_FORMATS = {
    "f32": {"dtype": "f32"},
    "f16": {"dtype": "f16"},
    "i8": {"dtype": "i8"},
    "pq4": {"dtype": "pq", "pq_m": 8},
    "pq4-f16": {"dtype": "pq", "pq_m": 8, "rerank_dtype": "f16"},
    "pq8": {"dtype": "pq", "pq_m": 8, "pq_bits": 8},
    "rabitq": {"dtype": "rabitq"},
}


@pytest.mark.parametrize("fmt", list(ALL_FORMATS))
@pytest.mark.parametrize("rerank", [2, 20])
def test_batch_equals_single_on_both_sides_of_list_sharing(fmt, rerank):
    ivf = DenseIndex(DIM, metric="ip", kind="ivf", nlist=20, rerank=rerank, **ALL_FORMATS[fmt])
    ids = np.arange(2000) * 3 + 1
    ivf.add(structured(2000, 11), ids=ids)
    ivf.delete(ids[::5].tolist())  # holes in every list
    rng = np.random.default_rng(12)
    half = IdFilter(rng.choice(ids, 1000, replace=False).tolist())
    Q = structured(60, 13)
    for nq, nprobe in ((8, 1), (60, 1), (60, 16), (12, 20)):  # 0.4, 3, 48, 12 queries per list
        for flt in (None, half):
            for threads in (1, 3):
                assert_equal_to_single(ivf, Q[:nq], 10, nprobe=nprobe, filter=flt, threads=threads)
