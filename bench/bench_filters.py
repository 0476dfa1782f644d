"""pytest-benchmark suite for metadata filters right after a one-document write
(run: PYTHONPATH=python pytest bench/bench_filters.py --benchmark-columns=median,iqr,rounds).

The index + filter path of bench/compare_metadata_filters.py (BM25Index and the Retriever's
MetadataFilters/FilterCompiler, chunk id = document number) at RAGFIND_BENCH_FILTER_DOCS
documents (default 1,000,000): each round writes one document (setup, untimed), then times the
search, so every filter is evaluated and compiled into the index's allowed-set again. Compare
each filter's median with ``test_unfiltered``'s (target: <= 2x).
"""

from __future__ import annotations

import os
import types

import numpy as np
import pytest

import ragfind
from compare_metadata_filters import FILTERS, Corpus
from ragfind.pipeline.filters import FilterCompiler, MetadataFilters

N_DOCS = int(os.environ.get("RAGFIND_BENCH_FILTER_DOCS", "1000000"))


@pytest.fixture(scope="module")
def setup():
    corpus = Corpus(N_DOCS)
    bm25 = ragfind.BM25Index()
    meta = MetadataFilters()
    for start in range(0, N_DOCS, 100_000):
        stop = min(start + 100_000, N_DOCS)
        ids = np.arange(start, stop, dtype=np.int64)
        bm25.add(corpus.texts(start, stop), ids=ids)
        meta.add(
            ids, [f"d{i}" for i in range(start, stop)], [""] * (stop - start), corpus.metadata(start, stop)
        )
    store = types.SimpleNamespace(fields={"tenant", "score", "lang"}, kinds={}, kinds_version=0, generation=0)
    compiler = FilterCompiler(meta, store, max_entries=0)
    rng = np.random.default_rng(7)
    queries = [" ".join(corpus.vocab[rng.integers(0, 300, 3)]) for _ in range(40)]

    def write_one():
        texts, md = corpus.grow(1)
        ids = np.asarray([corpus.n - 1], np.int64)
        bm25.add(texts, ids=ids)
        meta.add(ids, [f"d{corpus.n - 1}"], [""], md)
        store.generation += 1

    return bm25, compiler, queries, write_one


def _run(benchmark, setup, flt):
    bm25, compiler, queries, write_one = setup
    it = iter(range(1 << 30))

    def before():
        write_one()
        return (queries[next(it) % len(queries)],), {}

    if flt is None:
        benchmark.pedantic(lambda q: bm25.search(q, k=10), setup=before, rounds=120)
    else:
        benchmark.pedantic(lambda q: bm25.search(q, k=10, filter=compiler(flt)), setup=before, rounds=120)


def test_unfiltered(benchmark, setup):
    _run(benchmark, setup, None)


@pytest.mark.parametrize("name", list(FILTERS))
def test_filtered(benchmark, setup, name):
    _run(benchmark, setup, FILTERS[name])
