"""IVF with automatic nlist built by many small adds against one bulk add of the same vectors.

Three indexes over the same data (compare_ivf.py's embedding-like vectors, cosine, f32):
``one-add`` (one add of n: nlist = auto_nlist(n)), ``small-adds`` (``--batches`` adds of
n / batches: retrained as it grows) and ``small-adds, nlist frozen`` (explicit
nlist = auto_nlist(n / batches), what the first small add chose before retraining existed).
For each: total add wall and CPU seconds, final nlist, recall@10 and single-thread q/s
(threads=1, one query per call, median of ``--rounds`` passes) at the default nprobe.

    PYTHONPATH=python python bench/compare_ivf_growth.py --n 200000 --batches 100
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from compare_ivf import make_data, recall
from ragfind import DenseIndex
from ragfind.dense.ivf import auto_nlist


def build(X: np.ndarray, batches: int, nlist: int | None) -> tuple[DenseIndex, float, float]:
    idx = DenseIndex(X.shape[1], kind="ivf", nlist=nlist)
    step = -(-X.shape[0] // batches)
    w, c = time.perf_counter(), time.process_time()
    for b in range(0, X.shape[0], step):
        idx.add(X[b : b + step], ids=np.arange(b, min(X.shape[0], b + step)))
    return idx, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--nq", type=int, default=500)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    X, Q = make_data(a.n, a.nq, a.dim, 12, 0.25, 0)
    exact = DenseIndex(a.dim)
    exact.add(X)
    truth = exact.search_batch_padded(Q, 10)[0]
    rows = []
    for name, batches, nlist in (
        ("one add", 1, None),
        (f"{a.batches} adds", a.batches, None),
        (f"{a.batches} adds, nlist frozen", a.batches, auto_nlist(a.n // a.batches)),
    ):
        idx, wall, cpu = build(X, batches, nlist)
        found = np.stack([idx.search(q, 10, threads=1)[0] for q in Q])
        times = []
        for _ in range(a.rounds):
            t = time.process_time()
            for q in Q:
                idx.search(q, 10, threads=1)
            times.append(time.process_time() - t)
        row = {
            "index": name,
            "nlist": idx.nlist,
            "nprobe": idx.nprobe,
            "add_wall_s": round(wall, 2),
            "add_cpu_s": round(cpu, 2),
            "recall@10": round(recall(found, truth), 4),
            "qps_cpu_1T": round(a.nq / statistics.median(times), 1),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
        del idx
    base = rows[0]
    print(
        "\n| index | nlist | nprobe | add wall s | add CPU s (x one add) | recall@10 "
        "| q/s 1T, CPU (x one add) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['index']} | {r['nlist']} | {r['nprobe']} | {r['add_wall_s']:.1f} | "
            f"{r['add_cpu_s']:.1f} ({r['add_cpu_s'] / base['add_cpu_s']:.2f}x) | {r['recall@10']:.3f} | "
            f"{r['qps_cpu_1T']:,.0f} ({r['qps_cpu_1T'] / base['qps_cpu_1T']:.2f}x) |"
        )


if __name__ == "__main__":
    main()
