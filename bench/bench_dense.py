"""pytest-benchmark suite for dense search (run: PYTHONPATH=python pytest bench/bench_dense.py).

Random unit vectors (50,000 x 384 by default, RAGFIND_BENCH_DENSE_N to change) so it runs
anywhere; bench/compare_dense.py has the side-by-side comparison with numpy/faiss/hnswlib.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from ragfind import DenseIndex

N = int(os.environ.get("RAGFIND_BENCH_DENSE_N", "50000"))
D = 384
K = 10


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D), dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Q = X[rng.integers(0, N, 256)] + 0.05 * rng.standard_normal((256, D), dtype=np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    return X, Q


@pytest.fixture(scope="module")
def exact_indexes(vectors):
    X, _ = vectors
    out = {}
    for dtype in ("f32", "f16", "i8"):
        idx = DenseIndex(D, metric="ip", dtype=dtype)
        idx.add(X)
        out[dtype] = idx
    return out


@pytest.fixture(scope="module")
def hnsw_index(vectors):
    X, _ = vectors
    idx = DenseIndex(D, metric="cosine", kind="hnsw")
    idx.add(X[:20000])
    return idx


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
@pytest.mark.parametrize("threads", [1, 2])
def test_exact_single_query(benchmark, exact_indexes, vectors, dtype, threads):
    _, Q = vectors
    idx = exact_indexes[dtype]
    benchmark.group = f"exact single query, {N} x {D}"
    ids, _ = benchmark(idx.search, Q[0], K, threads=threads)
    assert len(ids) == K


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
def test_exact_batch_256(benchmark, exact_indexes, vectors, dtype):
    _, Q = vectors
    idx = exact_indexes[dtype]
    benchmark.group = f"exact batch of 256, {N} x {D}"
    ids, _ = benchmark.pedantic(
        idx.search_batch_padded, args=(Q, K), kwargs={"threads": 0}, rounds=3, iterations=1
    )
    assert ids.shape == (256, K)


def test_numpy_single_query(benchmark, vectors):
    X, Q = vectors
    benchmark.group = f"exact single query, {N} x {D}"

    def run(q):
        s = X @ q
        i = np.argpartition(-s, K)[:K]
        return i[np.argsort(-s[i])]

    assert len(benchmark(run, Q[0])) == K


def test_hnsw_single_query(benchmark, hnsw_index, vectors):
    _, Q = vectors
    benchmark.group = "hnsw single query, 20000 x 384"
    ids, _ = benchmark(hnsw_index.search, Q[0], K)
    assert len(ids) == K


def test_raw_hnswlib_single_query(benchmark, hnsw_index, vectors):
    _, Q = vectors
    benchmark.group = "hnsw single query, 20000 x 384"
    raw = hnsw_index._backend.graph  # the same graph, without the wrapper
    labels, _ = benchmark(raw.knn_query, Q[0], k=K, num_threads=1)
    assert labels.shape == (1, K)
