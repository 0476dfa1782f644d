"""Single-query and batch q/s of DenseIndex (exact and IVF) for two checkouts in the same run.

Before/after check of a change to the Python side of ``ragfind.dense``: each round runs one
process per checkout (alternating which goes first), and the medians over rounds are printed.

    python bench/compare_dense_face.py --old /tmp/dense_old/python --new python --rounds 3

(``/tmp/dense_old`` from ``git archive <commit> python/ragfind | tar -x -C /tmp/dense_old`` plus
the built ``_core*.so``.) Defaults: 100,000 x 384 random float32, cosine, one thread; q/s per
CPU second, best of 3 runs per process, median over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def _best_rate(fn, count: int, repeats: int = 3) -> float:
    """Queries per CPU second of the best of ``repeats`` runs: one thread does all the work, so
    CPU time leaves out the time other processes on a shared machine take from this one."""
    best = 0.0
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = max(best, count / max(time.process_time() - t, 1e-9))
    return best


def measure(n: int, dim: int, nq: int, batch: int) -> dict:
    import numpy as np

    from ragfind import DenseIndex

    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, dim)).astype(np.float32)
    Q = rng.standard_normal((nq, dim)).astype(np.float32)
    out = {}
    for kind, extra in (("exact", {}), ("ivf", {"nlist": 256, "nprobe": 16})):
        d = DenseIndex(dim, kind=kind, threads=1, **extra)
        d.add(X)
        padded = getattr(d, "search_batch_padded", d.search_batch)
        for q in Q[:5]:
            d.search(q, k=10)

        def single(d=d) -> None:
            for q in Q:
                d.search(q, k=10)

        def batched(padded=padded) -> None:
            for b in range(0, nq, batch):
                padded(Q[b : b + batch], k=10, threads=1)

        out[f"{kind} single q/s"] = _best_rate(single, nq)
        out[f"{kind} batch q/s"] = _best_rate(batched, nq)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True, help="folder holding the old ragfind package")
    ap.add_argument("--new", required=True, help="folder holding the new ragfind package")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--nq", type=int, default=300)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, a.child)
        print(json.dumps(measure(a.n, a.dim, a.nq, a.batch)))
        return
    runs: dict = {"old": [], "new": []}
    for r in range(a.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for name in order:
            cmd = [sys.executable, __file__, "--old", a.old, "--new", a.new, "--child", getattr(a, name)]
            cmd += ["--n", str(a.n), "--dim", str(a.dim), "--nq", str(a.nq), "--batch", str(a.batch)]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            runs[name].append(res)
    print(f"{'':22} {'old':>10} {'new':>10} {'new/old':>8}   ({a.rounds} rounds, medians)")
    for key in runs["old"][0]:
        o = statistics.median(x[key] for x in runs["old"])
        n = statistics.median(x[key] for x in runs["new"])
        print(f"{key:22} {o:10.1f} {n:10.1f} {n / o:8.3f}")


if __name__ == "__main__":
    main()
