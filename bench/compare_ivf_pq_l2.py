"""DenseIndex(kind="ivf", dtype="pq") with metric "l2" beside the same index with metric "ip",
on compare_ivf.py's latent-structured data left unnormalised: recall@10 against the exact
squared-distance (l2) or inner-product (ip) top 10, and CPU-time q/s, single thread, one query
per call, median of ``--rounds`` interleaved rounds. l2 builds one table per probed list (for
the query's residual to that list's centroid), ip one per query.

    PYTHONPATH=python python bench/compare_ivf_pq_l2.py --n 200000 --nlist 1024
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_ivf import make_data, recall  # noqa: E402
from ragfind import DenseIndex  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--nq", type=int, default=300)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settings", default="16:16,24:16,24:32,32:32,48:64", help="nprobe:rerank,...")
    a = ap.parse_args()
    X, Q = make_data(a.n, a.nq, a.dim, 12, 0.25, seed=0)
    scale = np.linspace(0.5, 1.5, a.n, dtype=np.float32)[np.random.default_rng(1).permutation(a.n)]
    X = X * scale[:, None]  # norms vary, so l2 and ip rank differently
    ip_truth = np.argsort(-(Q @ X.T), axis=1)[:, :10]
    d2 = (X * X).sum(1)[None, :] - 2 * (Q @ X.T)
    l2_truth = np.argsort(d2, axis=1)[:, :10]
    settings = [tuple(int(v) for v in s.split(":")) for s in a.settings.split(",")]
    engines = {}
    for name, metric, kw in (
        ("pq4-f16 l2", "l2", {}),
        ("pq4-f16 ip", "ip", {}),
        ("pq8m24-f16 l2", "l2", {"pq_bits": 8, "pq_m": 24}),
        ("pq8m24-f16 ip", "ip", {"pq_bits": 8, "pq_m": 24}),
    ):
        ix = DenseIndex(a.dim, metric=metric, kind="ivf", dtype="pq", nlist=a.nlist, rerank_dtype="f16", **kw)
        ix.add(X)
        engines[name] = (ix, l2_truth if metric == "l2" else ip_truth)
    cpu: dict = {}
    rec: dict = {}
    for _ in range(a.rounds):
        for p, r in settings:
            for name, (ix, truth) in engines.items():
                ix.rerank = r
                c = time.process_time()
                found = np.stack([ix.search(q, 10, nprobe=p, threads=1)[0] for q in Q])
                cpu.setdefault((name, p, r), []).append(len(Q) / (time.process_time() - c))
                rec[(name, p, r)] = recall(found, truth)
    print("| engine | " + " | ".join(f"nprobe {p}, rerank {r}: recall, CPU q/s" for p, r in settings) + " |")
    print("|---|" + "---|" * len(settings))
    for name in engines:
        cells = [f"{rec[(name, p, r)]:.3f}, {statistics.median(cpu[(name, p, r)]):,.0f}" for p, r in settings]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
