"""DenseIndex filters and deletes: a baseline checkout vs this one, in one run.

Usage: PYTHONPATH=python python bench/compare_dense_filter.py [BASELINE_PYTHON_DIR] [rounds]

Runs each side in its own process (both are a package named ragfind), alternating rounds so
machine load hits both alike, and prints medians over rounds of per-query medians:

* exact f32 scan, 200,000 x 384, ip, 1 thread, unfiltered;
* the same with an IdFilter of 1% of the ids (built once, reused), at 50,000 and 200,000 rows;
* single-id deletes on the 200,000-row index (median, p99, max), then top-10 ids and scores
  compared with a rebuild from the live rows; then 200 single deletes past half dead, where
  the index compacts.

``--crossover`` (this checkout only) times the gathered-rows path against the masked scan at
several allowed fractions; ``--hnsw`` times HNSW filtered walks against the exact scan of the
allowed subset and HNSW deletes.
"""

# The timed lambdas run at once inside _med_ms, so binding loop variables late is intended.
# ruff: noqa: B023

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

D = 384
K = 10


def _data(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D), dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def _med_ms(fn, args) -> float:
    ts = []
    for a in args:
        t0 = time.perf_counter()
        fn(a)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def worker() -> dict:
    from ragfind import DenseIndex
    from ragfind.ids import IdFilter

    out: dict = {}
    rng = np.random.default_rng(1)
    X = _data(200_000)
    Q = X[rng.integers(0, len(X), 30)] + 0.05 * rng.standard_normal((30, D), dtype=np.float32)
    for n in (50_000, 200_000):
        idx = DenseIndex(D, metric="ip")
        idx.add(X[:n])
        flt = IdFilter(rng.choice(n, n // 100, replace=False))
        idx.search(Q[0], K, threads=1, filter=flt)  # compile once
        out[f"unfiltered_{n}"] = _med_ms(lambda q: idx.search(q, K, threads=1), Q)
        out[f"filtered_1pct_{n}"] = _med_ms(lambda q: idx.search(q, K, threads=1, filter=flt), Q)
    # Deletes on the 200,000-row index (the last one built).
    victims = rng.choice(200_000, 3000, replace=False).tolist()
    ts = []
    for v in victims:
        t0 = time.perf_counter()
        idx.delete([v])
        ts.append(time.perf_counter() - t0)
    ts_ms = np.asarray(ts) * 1e3
    out["delete_median"] = float(np.median(ts_ms))
    out["delete_p99"] = float(np.percentile(ts_ms, 99))
    out["delete_max"] = float(ts_ms.max())
    live = np.setdiff1d(np.arange(200_000), victims)
    ref = DenseIndex(D, metric="ip")
    ref.add(X[live], ids=live)
    same = True
    for q in Q[:10]:
        a, b = idx.search(q, K), ref.search(q, K)
        same &= a[0].tolist() == b[0].tolist() and np.array_equal(a[1], b[1])
    out["delete_top10_equals_rebuild"] = bool(same)
    # Past half dead: the deletes that compact (one copy of every live row, or chunks of it).
    rest = np.setdiff1d(np.arange(200_000), victims)
    rng.shuffle(rest)
    idx.delete(rest[: 100_000 - 3000 - 5].tolist())
    ts = []
    for v in rest[100_000 - 3000 - 5 : 100_000 - 3000 + 195].tolist():
        t0 = time.perf_counter()
        idx.delete([v])
        ts.append(time.perf_counter() - t0)
    ts_ms = np.asarray(ts) * 1e3
    out["compacting_delete_median"] = float(np.median(ts_ms))
    out["compacting_delete_p99"] = float(np.percentile(ts_ms, 99))
    out["compacting_delete_max"] = float(ts_ms.max())
    live = np.setdiff1d(np.arange(200_000), np.concatenate([victims, rest[: 100_000 - 3000 + 195]]))
    ref = DenseIndex(D, metric="ip")
    ref.add(X[live], ids=live)
    same = True
    for q in Q[:10]:
        a, b = idx.search(q, K), ref.search(q, K)
        same &= a[0].tolist() == b[0].tolist() and np.array_equal(a[1], b[1])
    out["compacted_top10_equals_rebuild"] = bool(same)
    return out


def crossover() -> None:
    from ragfind import _core
    from ragfind.dense._common import quantise_i8

    X = _data(200_000)
    q = X[7] + 0.01
    rng = np.random.default_rng(3)
    stores = {"f32": (X, None), "f16": (X.astype(np.float16), None), "i8": quantise_i8(X)}
    print("dtype | allowed fraction | masked scan ms | gathered rows ms")
    for dt, (data, scales) in stores.items():
        for frac in (0.01, 0.1, 0.3, 0.5, 0.7, 0.9):
            sub = np.sort(rng.choice(len(X), int(frac * len(X)), replace=False)).astype(np.int64)
            mask = np.zeros(len(X), np.uint8)
            mask[sub] = 1
            args = range(9)
            tm = _med_ms(
                lambda _: _core.dense_search(data, dt, scales, None, q, K, "ip", mask, None, 1), args
            )
            tg = _med_ms(
                lambda _: _core.dense_search(data, dt, scales, None, q, K, "ip", None, None, 1, sub), args
            )
            print(f"{dt:>5} | {frac:>16} | {tm:14.2f} | {tg:16.2f}")


def hnsw() -> None:
    import ragfind.dense.hnsw as di
    from ragfind import DenseIndex
    from ragfind.ids import IdFilter

    n, d = 20_000, 64
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d), dtype=np.float32)
    idx = DenseIndex(d, kind="hnsw", M=16, ef_construction=100)
    t0 = time.perf_counter()
    idx.add(X)
    print(f"hnsw build {n} x {d}: {time.perf_counter() - t0:.1f} s")
    Q = rng.standard_normal((20, d), dtype=np.float32)
    print("allowed | walk ms | exact ms")
    for a in (200, 1000, 2000, 5000, 10000):
        flt = IdFilter(rng.choice(n, a, replace=False))
        di._HNSW_EXACT_FILTER_MIN, di._HNSW_EXACT_FILTER_FRACTION = 0, 0.0
        tw = _med_ms(lambda q: idx.search(q, K, filter=flt), Q)
        di._HNSW_EXACT_FILTER_MIN = n
        te = _med_ms(lambda q: idx.search(q, K, filter=flt), Q)
        print(f"{a:>7} | {tw:7.2f} | {te:8.2f}")
    victims = rng.choice(n, 2000, replace=False).tolist()
    ts = []
    for v in victims:
        t0 = time.perf_counter()
        idx.delete([v])
        ts.append(time.perf_counter() - t0)
    ts_ms = np.asarray(ts) * 1e3
    print(f"hnsw delete: median {np.median(ts_ms):.4f} ms, p99 {np.percentile(ts_ms, 99):.4f} ms")


def main() -> None:
    if "--worker" in sys.argv:
        print(json.dumps(worker()))
        return
    if "--crossover" in sys.argv:
        crossover()
        return
    if "--hnsw" in sys.argv:
        hnsw()
        return
    base = sys.argv[1] if len(sys.argv) > 1 else "/work/scratch/h4-base-python"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
    res: dict = {"baseline": [], "this": []}
    for _ in range(rounds):
        for side, path in (("baseline", base), ("this", here)):
            env = dict(os.environ, PYTHONPATH=path)
            p = subprocess.run(
                [sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True, check=True
            )
            res[side].append(json.loads(p.stdout.strip().splitlines()[-1]))
    keys = list(res["this"][0])
    print(f"{'measure':32} {'baseline':>10} {'this':>10} {'this/base':>10}")
    for key in keys:
        vals = [statistics.median([r[key] for r in res[s]]) for s in ("baseline", "this")]
        if isinstance(vals[0], bool):
            flags = [all(r[key] for r in res[s]) for s in ("baseline", "this")]
            print(f"{key:32} {flags[0]!s:>10} {flags[1]!s:>10}")
            continue
        print(f"{key:32} {vals[0]:10.3f} {vals[1]:10.3f} {vals[1] / vals[0]:10.2f}")
    for s in ("this", "baseline"):
        for n in (50_000, 200_000):
            r = statistics.median([x[f"filtered_1pct_{n}"] / x[f"unfiltered_{n}"] for x in res[s]])
            print(f"{s}: filtered 1% / unfiltered at {n}: {r:.3f}")


if __name__ == "__main__":
    main()
