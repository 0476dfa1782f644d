"""pytest-benchmark suite for late interaction and learned sparse retrieval.

    PYTHONPATH=python python -m pytest bench/bench_late.py --benchmark-only -q

Side-by-side comparisons with peers (maxsim-cpu, numpy, scipy.sparse) live in
compare_maxsim.py and compare_splade.py; results in late.md.
"""

from __future__ import annotations

import numpy as np
import pytest

import ragfind


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def query():
    return _unit(np.random.default_rng(0).standard_normal((32, 128)))


@pytest.fixture(scope="module", params=["fixed512", "var128-1536"])
def docs(request):
    rng = np.random.default_rng(1)
    lengths = [512] * 1000 if request.param == "fixed512" else rng.integers(128, 1537, size=1000)
    return [_unit(rng.standard_normal((int(n), 128))) for n in lengths]


def test_maxsim_float32(benchmark, query, docs):
    benchmark(ragfind.maxsim, query, docs)


def test_maxsim_float16(benchmark, query, docs):
    d16 = [d.astype(np.float16) for d in docs]
    benchmark(ragfind.maxsim, query, d16)


def test_late_interaction_rerank_top100(benchmark, query, docs):
    index = ragfind.LateInteractionIndex(dim=128, dtype="float16")
    index.add(docs)
    candidates = np.random.default_rng(2).choice(len(docs), size=100, replace=False)
    benchmark(index.rerank, query, candidates, 10)


def test_sparse_search_batch(benchmark):
    rng = np.random.default_rng(3)
    n, vocab = 20_000, 30522
    rows = np.repeat(np.arange(n), rng.poisson(120, size=n))
    pairs = np.unique(rows * vocab + (rng.zipf(1.15, size=len(rows)) * 7919) % vocab)
    docs = ragfind.SparseEmbeddings(
        np.concatenate([[0], np.cumsum(np.bincount(pairs // vocab, minlength=n))]).astype(np.int64),
        (pairs % vocab).astype(np.int32),
        (rng.gamma(1.2, 0.7, size=len(pairs)) + 0.05).astype(np.float32),
        vocab,
    )
    index = ragfind.SparseVectorIndex(vocab)
    index.add(docs)
    queries = [(np.unique(rng.integers(0, vocab, size=30)), None) for _ in range(200)]
    queries = [(t, rng.random(len(t)).astype(np.float32) + 0.1) for t, _ in queries]
    benchmark(index.search_batch_padded, queries, 10)
