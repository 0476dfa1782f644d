"""Focused single-query A/B: ragfind f32 and i8 scans vs faiss IndexFlatIP and numpy, 1 thread.

Usage: PYTHONPATH=python python bench/compare_dense_single.py [n]   (default 200000 x 384)

Only four methods, interleaved query by query (order rotated per query), so the comparison
survives a loaded machine better than the full compare_dense.py table. Prints median ms and
the ratios faiss/ours, numpy/ours and f32/i8.
"""

from __future__ import annotations

import statistics
import sys
import time

import faiss
import numpy as np
from threadpoolctl import threadpool_limits

from ragfind import DenseIndex

K = 10


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    d = 384
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d), dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Q = X[rng.integers(0, n, 40)] + 0.05 * rng.standard_normal((40, d), dtype=np.float32)
    faiss.omp_set_num_threads(1)
    fi = faiss.IndexFlatIP(d)
    fi.add(X)
    idx = {dt: DenseIndex(d, metric="ip", dtype=dt) for dt in ("f32", "i8")}
    for v in idx.values():
        v.add(X)

    def numpy_1t(q):
        with threadpool_limits(1):
            s = X @ q
            i = np.argpartition(-s, K)[:K]
            return i[np.argsort(-s[i])]

    methods = {
        "faiss IndexFlatIP": lambda q: fi.search(q[None], K),
        "numpy (BLAS 1 thread)": numpy_1t,
        "ragfind f32": lambda q: idx["f32"].search(q, K, threads=1),
        "ragfind i8": lambda q: idx["i8"].search(q, K, threads=1),
    }
    names = list(methods)
    times: dict = {nm: [] for nm in names}
    for i, q in enumerate(Q):
        for j in range(len(names)):
            nm = names[(i + j) % len(names)]
            t0 = time.perf_counter()
            methods[nm](q)
            times[nm].append(time.perf_counter() - t0)
    med = {nm: statistics.median(v) * 1e3 for nm, v in times.items()}
    print(" | ".join(f"{nm} {ms:.2f} ms" for nm, ms in med.items()))
    f32 = med["ragfind f32"]
    vs_faiss = med["faiss IndexFlatIP"] / f32
    vs_numpy = med["numpy (BLAS 1 thread)"] / f32
    vs_i8 = f32 / med["ragfind i8"]
    print(f"ours f32: {vs_faiss:.2f}x faiss, {vs_numpy:.2f}x numpy; i8 {vs_i8:.2f}x our f32")


if __name__ == "__main__":
    main()
