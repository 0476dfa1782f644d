"""Concurrent readers and a writer on one index (BM25Index, DenseIndex exact and hnsw).

Reader threads run ``search`` and ``search_batch`` (itself multi-threaded) while a writer adds
and deletes documents. Every result must equal what a serial run returns over one of the
states the index passed through while the query ran (see tests/reliability/_concurrency_harness.py): no
crash, no exception, no torn result. The full-size run (8 threads x 10,000 queries per index
kind) is tools/stress_concurrency.py; this CI-sized one uses 4 threads x 1,000 queries.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from _concurrency_harness import BM25Workload, DenseWorkload, run_stress


@pytest.mark.parametrize("kind", ["bm25", "exact", "hnsw"])
def test_readers_see_consistent_states_while_a_writer_runs(kind):
    workload = (
        BM25Workload(seed=1, n_ops=120) if kind == "bm25" else DenseWorkload(seed=1, kind=kind, n_ops=120)
    )
    report = run_stress(workload, readers=4, queries_per_reader=1_000, batch_every=25)
    assert report.errors == [], report.errors[:5]
    assert report.queries + report.batch_queries >= 4_000
    assert report.writes > 0
    # The readers really interleaved with the writer (more than the first and last state seen).
    assert len(report.states_seen) > 2, report.summary()


def test_bm25_search_batch_from_many_threads_matches_serial():
    workload = BM25Workload(seed=2, n_ops=0)
    index = workload.new_index()
    queries = [" ".join(q) for q in workload.queries]
    expected = [index.search(q, k=7) for q in queries]
    errors: list = []

    def worker():
        try:
            for _ in range(20):
                for (ids, scores), (e_ids, e_scores) in zip(
                    index.search_batch(queries, k=7, threads=3), expected
                ):
                    if not (np.array_equal(ids, e_ids) and np.array_equal(scores, e_scores)):
                        errors.append((ids, e_ids))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_dense_search_batch_from_many_threads_matches_serial(kind):
    workload = DenseWorkload(seed=3, kind=kind, n_ops=0)
    index = workload.new_index()
    expected = index.search_batch_padded(workload.queries, k=7, threads=1)
    errors: list = []

    def worker():
        try:
            for _ in range(20):
                ids, scores = index.search_batch_padded(workload.queries, k=7, threads=3)
                if not np.array_equal(ids, expected[0]) or not np.allclose(
                    scores, expected[1], equal_nan=True
                ):
                    errors.append("mismatch")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
