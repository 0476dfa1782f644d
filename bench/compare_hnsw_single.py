"""Focused A/B: single-query ``DenseIndex(kind="hnsw").search`` vs raw ``hnswlib.knn_query``.

Both sides query the *same* hnswlib graph (the wrapper's own ``hnswlib.Index``), so the
difference is the wrapper's per-call work alone (validation, cosine norm, lock, id mapping,
score conversion), not the luck of two separately built graphs. Queries are interleaved one
by one (the order of the two calls alternates), in a shuffled order per round; the raw side
gets pre-normalised float32 queries, the wrapper the raw MiniLM query vectors.

Usage:
    PYTHONPATH=python python bench/compare_hnsw_single.py [--rounds 5] [--k 10] [--ef 64]

Prints per-round medians (us) over all SciFact queries and the median of the per-query paired
difference, plus the wrapper's pure Python cost with hnswlib replaced by a stub that returns
precomputed results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from ragfind import DenseIndex


class _StubHnsw:
    """Stands in for hnswlib.Index: returns one precomputed result (measures wrapper cost)."""

    def __init__(self, labels: np.ndarray, dist: np.ndarray) -> None:
        self._labels, self._dist = labels, dist

    def knn_query(self, q, k=1, num_threads=-1, filter=None):  # noqa: A002, ARG002
        return self._labels.copy(), self._dist.copy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--ef", type=int, default=64)
    args = ap.parse_args()
    default_root = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    root = Path(os.environ.get("RAGFIND_DATA", default_root))
    emb = root / "scifact" / "embeddings" / "all-MiniLM-L6-v2"
    X = np.load(emb / "corpus.npy").astype(np.float32)
    Q = np.ascontiguousarray(np.load(emb / "queries.npy"), dtype=np.float32)
    Qn = np.ascontiguousarray(Q / np.linalg.norm(Q, axis=1, keepdims=True), dtype=np.float32)
    n, d = X.shape
    k = args.k

    t0 = time.perf_counter()
    ours = DenseIndex(d, metric="cosine", kind="hnsw", M=16, ef_construction=200, ef=args.ef)
    ours.add(X)
    build_s = time.perf_counter() - t0
    raw = ours._backend._hnsw  # the very same graph, space='ip', same ef
    queries = [Q[i] for i in range(len(Q))]
    nqueries = [Qn[i] for i in range(len(Q))]

    # Same results from both sides (same graph; scores differ only by float rounding).
    mismatch = 0
    for i in range(len(Q)):
        lab, _ = raw.knn_query(nqueries[i], k=k, num_threads=1)
        ids, _ = ours.search(queries[i], k=k)
        mismatch += int(not np.array_equal(lab[0].astype(np.int64), ids))
    rng = np.random.default_rng(0)
    pc = time.perf_counter_ns
    round_raw, round_ours, paired = [], [], []
    for r in range(args.rounds):
        t_raw = np.empty(len(Q))
        t_ours = np.empty(len(Q))
        for j, i in enumerate(rng.permutation(len(Q))):
            qn, q = nqueries[i], queries[i]
            if (j + r) & 1:
                a = pc()
                raw.knn_query(qn, k=k, num_threads=1)
                b = pc()
                ours.search(q, k=k)
                c = pc()
                t_raw[j], t_ours[j] = b - a, c - b
            else:
                a = pc()
                ours.search(q, k=k)
                b = pc()
                raw.knn_query(qn, k=k, num_threads=1)
                c = pc()
                t_ours[j], t_raw[j] = b - a, c - b
        round_raw.append(float(np.median(t_raw)) / 1e3)
        round_ours.append(float(np.median(t_ours)) / 1e3)
        paired.append(float(np.median(t_ours - t_raw)) / 1e3)

    # Wrapper-only cost: hnswlib replaced by a stub returning a precomputed result.
    lab, dist = raw.knn_query(nqueries[0], k=k, num_threads=1)
    ours._backend._hnsw = _StubHnsw(lab, dist)
    stub = []
    for _ in range(args.rounds):
        ts = np.empty(len(Q))
        for j in range(len(Q)):
            a = pc()
            ours.search(queries[j], k=k)
            ts[j] = pc() - a
        stub.append(float(np.median(ts)) / 1e3)
    stub_raw = _StubHnsw(lab, dist)
    sraw = []
    for _ in range(args.rounds):
        ts = np.empty(len(Q))
        for j in range(len(Q)):
            a = pc()
            stub_raw.knn_query(nqueries[j], k=k, num_threads=1)
            ts[j] = pc() - a
        sraw.append(float(np.median(ts)) / 1e3)
    ours._backend._hnsw = raw

    med_raw, med_ours = statistics.median(round_raw), statistics.median(round_ours)
    print(
        f"SciFact MiniLM {n:,} x {d}, {len(Q)} queries, cosine/ip, M=16, ef_construction=200, "
        f"ef={args.ef}, top-{k}, {args.rounds} rounds; build {build_s:.2f} s; "
        f"result mismatches vs raw: {mismatch}"
    )
    print("| round | raw hnswlib us | DenseIndex us | overhead (ratio of medians) | median paired diff us |")
    print("|---:|---:|---:|---:|---:|")
    for r in range(args.rounds):
        print(
            f"| {r + 1} | {round_raw[r]:.1f} | {round_ours[r]:.1f} | "
            f"{100 * (round_ours[r] / round_raw[r] - 1):+.1f}% | {paired[r]:+.1f} |"
        )
    print(
        f"| median | {med_raw:.1f} | {med_ours:.1f} | {100 * (med_ours / med_raw - 1):+.1f}% | "
        f"{statistics.median(paired):+.1f} |"
    )
    print(
        f"Wrapper Python cost with hnswlib stubbed out: {statistics.median(stub):.2f} us per search "
        f"(stub call alone {statistics.median(sraw):.2f} us); medians of {args.rounds} rounds."
    )


if __name__ == "__main__":
    main()
