"""Side-by-side fusion: ragfind.rrf / ragfind.fuse_scores vs ranx.fuse vs plain Python, one run.

Usage:
    PYTHONPATH=python python bench/compare_fusion.py [--lists 3] [--n 1000] [--reps 2000]

Three ranked lists of 1,000 candidates each drawn from 3,000 ids (so ~2,100 distinct fused ids),
as a hybrid retriever hands them over. ranx gets its runs prebuilt (only ``fuse`` is timed, one
query); ragfind is timed with int64 ids (the Retriever's case) and str ids. Every method returns
the full fused ranking (and the top 100, where it can stop early). Prints a markdown table of
medians and the ratio against ranx measured in the same run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings

import numpy as np

import ragfind


def median_us(fn, reps: int) -> float:
    for _ in range(min(50, reps)):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def python_rrf(lists, k=60):
    scores: dict = {}
    for ids in lists:
        for r, d in enumerate(ids):
            scores[d] = scores.get(d, 0.0) + 1.0 / (k + r + 1)
    return sorted(scores.items(), key=lambda x: -x[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lists", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    universe = args.n * args.lists
    lists = [rng.permutation(universe)[: args.n].astype(np.int64) for _ in range(args.lists)]
    scores = [np.sort(rng.random(args.n))[::-1].copy() for _ in range(args.lists)]
    str_lists = [[f"doc{i}" for i in ids.tolist()] for ids in lists]
    py_lists = [ids.tolist() for ids in lists]
    pairs = list(zip(lists, scores))

    rows = []
    rows.append(("ragfind.rrf, int64 ids", median_us(lambda: ragfind.rrf(lists), args.reps)))
    rows.append(
        ("ragfind.rrf, int64 ids, top 100", median_us(lambda: ragfind.rrf(lists, top_k=100), args.reps))
    )
    rows.append(("ragfind.rrf, str ids", median_us(lambda: ragfind.rrf(str_lists), args.reps)))
    rows.append(("ragfind.rrf, Python int lists", median_us(lambda: ragfind.rrf(py_lists), args.reps)))
    rows.append(("ragfind.fuse_scores min-max sum", median_us(lambda: ragfind.fuse_scores(pairs), args.reps)))
    rows.append(
        (
            "ragfind.fuse_scores z-score sum",
            median_us(lambda: ragfind.fuse_scores(pairs, norm="z-score"), args.reps),
        )
    )
    rows.append(("plain Python dict RRF", median_us(lambda: python_rrf(py_lists), max(50, args.reps // 20))))

    ranx_rows = []
    try:
        import ranx

        runs = [ranx.Run({"q": {s: float(v) for s, v in zip(sl, sc)}}) for sl, sc in zip(str_lists, scores)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ranx.fuse(runs, norm=None, method="rrf")  # numba compile outside the timing
            ranx.fuse(runs, norm="min-max", method="wsum", params={"weights": [1.0] * args.lists})
            reps = max(20, args.reps // 20)
            ranx_rrf = median_us(lambda: ranx.fuse(runs, norm=None, method="rrf"), reps)
            ranx_wsum = median_us(
                lambda: ranx.fuse(
                    runs, norm="min-max", method="wsum", params={"weights": [1.0] * args.lists}
                ),
                reps,
            )
        ranx_rows = [("ranx.fuse rrf", ranx_rrf), ("ranx.fuse min-max wsum", ranx_wsum)]
    except ImportError:
        ranx_rrf = ranx_wsum = None

    print(
        f"## Fusion: {args.lists} lists x {args.n} candidates ({len(set(np.concatenate(lists).tolist()))} "
        f"distinct ids), median of {args.reps} calls\n"
    )
    print(
        f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, "
        f"Python {platform.python_version()}\n"
    )
    py_us = dict(rows)["plain Python dict RRF"]
    print("| method | median (us) | ranx time / this (same fusion) | plain-Python RRF time / this |")
    print("|---|---:|---:|---:|")
    for name, us in rows + ranx_rows:
        peer = ranx_wsum if ("fuse_scores min-max" in name or "wsum" in name) else ranx_rrf
        same_fusion = name.startswith("ragfind") and "z-score" not in name
        vs_ranx = f"{peer / us:.0f}x" if peer and same_fusion else ""
        vs_py = f"{py_us / us:.1f}x" if name.startswith("ragfind.rrf") else ""
        print(f"| {name} | {us:.1f} | {vs_ranx} | {vs_py} |")


if __name__ == "__main__":
    main()
