"""MaxSim side by side: ragfind.maxsim vs maxsim-cpu vs a numpy reference.

Query: 32 x 128 (unit rows). Documents: 1,000 of 512 tokens, and 1,000 of 128-1,536 tokens
(uniform), unit rows, float32 (ragfind also with float16 storage). Runs are interleaved
(one of each per round) and the median of the rounds is reported, with ratios against
maxsim-cpu measured in the same rounds. Scores are checked against a float64 reference.

    PYTHONPATH=python python bench/compare_maxsim.py [--rounds 7] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import ragfind


def unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def numpy_maxsim(q, docs):
    return np.array([(d @ q.T).max(axis=0).sum() for d in docs], dtype=np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=None, help="ragfind threads (default: all cores)")
    args = ap.parse_args()
    try:
        import maxsim_cpu
    except ImportError:
        maxsim_cpu = None
    rng = np.random.default_rng(0)
    q = unit(rng.standard_normal((32, 128)))
    shapes = {
        "512 tokens": [512] * args.docs,
        "128-1536 tokens": list(rng.integers(128, 1537, size=args.docs)),
    }
    print(
        f"cpu: {os.cpu_count()} logical cores; ragfind SIMD level {ragfind.capabilities()['active']}; "
        f"rounds {args.rounds}"
    )
    rows = []
    for label, lengths in shapes.items():
        docs = [unit(rng.standard_normal((int(n), 128))) for n in lengths]
        docs16 = [d.astype(np.float16) for d in docs]
        fixed = len(set(lengths)) == 1
        stacked = np.stack(docs) if fixed else None
        ref = np.array([(q.astype(np.float64) @ d.astype(np.float64).T).max(axis=1).sum() for d in docs])
        ref16 = np.array([(q.astype(np.float64) @ d.astype(np.float64).T).max(axis=1).sum() for d in docs16])
        methods = {
            "ragfind f32": lambda docs=docs: ragfind.maxsim(q, docs, threads=args.threads),
            "ragfind f16": lambda docs16=docs16: ragfind.maxsim(q, docs16, threads=args.threads),
            "numpy (BLAS per doc)": lambda docs=docs: numpy_maxsim(q, docs),
        }
        if maxsim_cpu is not None:
            methods["maxsim-cpu"] = (
                (lambda stacked=stacked: maxsim_cpu.maxsim_scores(q, stacked))
                if fixed
                else (lambda docs=docs: maxsim_cpu.maxsim_scores_variable(q, docs))
            )
        times = {m: [] for m in methods}
        errors = {}
        for _ in range(args.rounds):
            for name, fn in methods.items():
                t = time.perf_counter()
                out = fn()
                times[name].append(time.perf_counter() - t)
                want = ref16 if "f16" in name else ref
                errors[name] = float(np.abs(np.asarray(out, dtype=np.float64) - want).max())
        base = np.median(times["maxsim-cpu"]) if "maxsim-cpu" in times else None
        for name in methods:
            med = float(np.median(times[name]))
            rows.append((label, name, len(docs) / med, (base / med) if base else float("nan"), errors[name]))
    print("| documents | method | docs/s (median) | vs maxsim-cpu | max abs error |")
    print("|---|---|---:|---:|---:|")
    for label, name, dps, ratio, err in rows:
        print(f"| {label} | {name} | {dps:,.0f} | {ratio:.2f}x | {err:.1e} |")


if __name__ == "__main__":
    main()
