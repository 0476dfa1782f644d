"""IVF side by side: ragfind ``DenseIndex(kind="ivf")`` (f32, f16, i8 lists) against faiss
``IndexIVFFlat`` and ``IndexIVFScalarQuantizer`` (SQ8), and ragfind's exact and HNSW paths.

Data: embedding-like vectors, not i.i.d. noise: ``--latent`` Gaussian factors mixed into
``--dim`` dimensions plus isotropic noise, unit-normalised (cosine); queries are fresh draws
from the same law. Ground truth is an exact float32 search.

For every engine the script sweeps nprobe (ef for HNSW) and measures recall@10 and single-thread
q/s (one query per call, threads=1 / faiss.omp_set_num_threads(1)), then batched q/s (all
queries in one call, every core) at the smallest setting reaching each recall target. Every
engine runs in this process, one after another, on the same data; each timing is the median of
``--rounds`` passes over the queries, the passes of all engines interleaved in a shuffled order.

``--batch-sizes 64,256,1000`` adds single-thread batches at each engine's setting for recall
0.95: ragfind's ``search_batch`` (IVF groups the queries by list, each list read once per
batch) and faiss's ``search`` on the same batches, against the same engine one query per call.
``--clock cpu`` (the default) times the single-thread runs in process CPU time, which load from
other processes on a shared machine inflates less than wall time; the every-core batch column
is always wall time.

    PYTHONPATH=python python bench/compare_ivf.py --n 200000 --nlist 1024
    PYTHONPATH=python python bench/compare_ivf.py --n 200000 --nlist 1024 --nq 1000 \\
        --engines ragfind-f32,ragfind-f16,ragfind-i8,faiss-flat --batch-sizes 64,256,1000
    PYTHONPATH=python python bench/compare_ivf.py --n 1000000 --nlist 2048 \\
        --engines ragfind-f32,ragfind-i8,faiss-flat,faiss-sq8

Prints one JSON line per measurement and a summary table (markdown).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import numpy as np

from ragfind import DenseIndex

TARGETS = (0.9, 0.95, 0.99)


def make_data(
    n: int, nq: int, dim: int, latent: int, noise: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((latent, dim)).astype(np.float32)
    # Factors of decreasing strength, as an embedding's leading directions are.
    scale = (1.0 / np.sqrt(1.0 + np.arange(latent))).astype(np.float32)

    def draw(m: int) -> np.ndarray:
        out = np.empty((m, dim), np.float32)
        for s in range(0, m, 100_000):
            e = min(m, s + 100_000)
            Z = rng.standard_normal((e - s, latent)).astype(np.float32) * scale
            B = Z @ W + noise * rng.standard_normal((e - s, dim)).astype(np.float32)
            out[s:e] = B / np.linalg.norm(B, axis=1, keepdims=True)
        return out

    return draw(n), draw(nq)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k].tolist()) & set(t.tolist())) / k for f, t in zip(found, truth)]))


def timed(fn, rounds: int, clock=time.perf_counter) -> float:
    """Median seconds of fn() over rounds, on ``clock`` (wall or process CPU time)."""
    ts = []
    for _ in range(rounds):
        t = clock()
        fn()
        ts.append(clock() - t)
    return statistics.median(ts)


def in_batches(search, Q: np.ndarray, b: int) -> np.ndarray:
    """search(Q[i:i + b]) for consecutive batches of b rows, the results stacked."""
    return np.concatenate([search(Q[i : i + b]) for i in range(0, Q.shape[0], b)])


class RagfindIvf:
    def __init__(self, dtype: str, nlist: int, d: int) -> None:
        self.name = f"ragfind-ivf-{dtype}"
        self.index = DenseIndex(d, metric="cosine", kind="ivf", dtype=dtype, nlist=nlist)

    def build(self, X: np.ndarray) -> dict:
        # add() trains on its own rows first; the k-means step is timed from inside.
        ix = self.index._backend
        split: dict = {}
        train = ix._train_ivf

        def timed_train(*args: object) -> None:
            w, c = time.perf_counter(), time.process_time()
            train(*args)
            split.update(train_s=time.perf_counter() - w, train_cpu_s=time.process_time() - c)

        ix._train_ivf = timed_train
        try:
            self.index.add(X)
        finally:
            del ix._train_ivf
        return split

    def nbytes(self) -> int:
        st = self.index._backend.snapshot
        parts = (st.centroids, st.data, st.scales, st.sqnorms, st.exact, st.ids)
        return sum(a.nbytes for a in parts if a is not None)

    def single(self, Q: np.ndarray, k: int, p: int) -> np.ndarray:
        s = self.index.search
        return np.stack([s(q, k, nprobe=p, threads=1)[0] for q in Q])

    def batch(self, Q: np.ndarray, k: int, p: int, threads: int) -> np.ndarray:
        return self.index.search_batch_padded(Q, k, threads=threads, nprobe=p)[0]

    def grouped(self, Q: np.ndarray, k: int, p: int, b: int) -> np.ndarray:
        """search_batch on batches of b queries, one thread (its results equal search's)."""

        def one(Qb: np.ndarray) -> np.ndarray:
            return np.stack([ids for ids, _ in self.index.search_batch(Qb, k, nprobe=p, threads=1)])

        return in_batches(one, Q, b)

    def sweep(self, Q: np.ndarray, k: int, p: int) -> np.ndarray:
        """The single-query results of every query (search_batch returns exactly those)."""
        return np.stack([ids for ids, _ in self.index.search_batch(Q, k, nprobe=p, threads=0)])


class FaissIvf:
    def __init__(self, kind: str, nlist: int, d: int, like_ragfind: bool = False) -> None:
        import faiss

        self.faiss = faiss
        self.name = f"faiss-{kind}"
        q = faiss.IndexFlatIP(d)
        if kind == "flat":
            self.index = faiss.IndexIVFFlat(q, d, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            self.index = faiss.IndexIVFScalarQuantizer(
                q, d, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
            )
        if like_ragfind:  # ragfind's former training budget: 64 rows per list, 10 iterations
            self.index.cp.max_points_per_centroid = 64
            self.index.cp.niter = 10
        self.quantizer = q

    def build(self, X: np.ndarray) -> dict:
        w, c = time.perf_counter(), time.process_time()
        self.index.train(X)
        split = {"train_s": time.perf_counter() - w, "train_cpu_s": time.process_time() - c}
        self.index.add(X)
        return split

    def nbytes(self) -> int:
        ix = self.index
        return ix.ntotal * (ix.code_size + 8) + ix.nlist * ix.d * 4

    def single(self, Q: np.ndarray, k: int, p: int) -> np.ndarray:
        self.index.nprobe = p
        self.faiss.omp_set_num_threads(1)
        s = self.index.search
        return np.stack([s(q[None, :], k)[1][0] for q in Q])

    def batch(self, Q: np.ndarray, k: int, p: int, threads: int) -> np.ndarray:
        self.index.nprobe = p
        self.faiss.omp_set_num_threads(threads)
        return self.index.search(Q, k)[1]

    def grouped(self, Q: np.ndarray, k: int, p: int, b: int) -> np.ndarray:
        self.index.nprobe = p
        self.faiss.omp_set_num_threads(1)
        return in_batches(lambda Qb: self.index.search(Qb, k)[1], Q, b)

    def sweep(self, Q: np.ndarray, k: int, p: int) -> np.ndarray:
        import os

        return self.batch(Q, k, p, os.cpu_count() or 1)  # per-query results do not depend on it


class RagfindHnsw:
    name = "ragfind-hnsw"

    def __init__(self, d: int) -> None:
        self.index = DenseIndex(d, metric="cosine", kind="hnsw", M=16, ef_construction=200)

    def build(self, X: np.ndarray) -> None:
        self.index.add(X)

    def nbytes(self) -> int:
        n = len(self.index)
        return n * (self.index.dim * 4 + 16 * 2 * 4 + 16)  # vectors + level-0 links, about

    def single(self, Q: np.ndarray, k: int, p: int) -> np.ndarray:
        self.index.ef = p
        s = self.index.search
        return np.stack([s(q, k)[0] for q in Q])

    def batch(self, Q: np.ndarray, k: int, p: int, threads: int) -> np.ndarray:
        self.index.ef = p
        return self.index.search_batch_padded(Q, k, threads=threads)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--nq", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--latent", type=int, default=12)
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="batched searches (0: every core)")
    ap.add_argument(
        "--engines",
        default="ragfind-f32,ragfind-f16,ragfind-i8,faiss-flat,faiss-sq8,ragfind-exact,ragfind-hnsw",
    )
    ap.add_argument(
        "--faiss-train-like-ragfind",
        action="store_true",
        help="train faiss on 64 rows per list for 10 iterations (ragfind's old budget), not its defaults",
    )
    ap.add_argument("--probes", default="1,2,4,8,12,16,24,32,48,64,96,128")
    ap.add_argument(
        "--batch-sizes",
        default="",
        help="single-thread batch sizes timed at each engine's recall-0.95 setting (e.g. 64,256,1000)",
    )
    ap.add_argument(
        "--clock", choices=("cpu", "wall"), default="cpu", help="clock of the single-thread timings"
    )
    ap.add_argument("--efs", default="16,24,32,48,64,96,128,192,256")
    a = ap.parse_args()
    import os

    threads = a.threads or (os.cpu_count() or 1)
    X, Q = make_data(a.n, a.nq, a.dim, a.latent, a.noise, 7)
    print(
        json.dumps(
            {"n": a.n, "dim": a.dim, "latent": a.latent, "noise": a.noise, "nlist": a.nlist, "nq": a.nq}
        )
    )
    exact = DenseIndex(a.dim, metric="cosine")
    exact.add(X)
    truth = exact.search_batch_padded(Q, a.k)[0]
    k = a.k
    probes = [int(x) for x in a.probes.split(",") if int(x) <= a.nlist]
    engines: list[tuple[str, object, list[int], float]] = []
    builds: dict[str, dict] = {}
    import faiss

    for eng in a.engines.split(","):
        gc.collect()
        if eng == "ragfind-exact":
            continue
        if eng.startswith("ragfind-") and eng != "ragfind-hnsw":
            e: object = RagfindIvf(eng.split("-")[1], a.nlist, a.dim)
            sweep = probes
        elif eng.startswith("faiss-"):
            e = FaissIvf(eng.split("-")[1], a.nlist, a.dim, a.faiss_train_like_ragfind)
            sweep = probes
        else:
            e = RagfindHnsw(a.dim)
            sweep = [int(x) for x in a.efs.split(",")]
        faiss.omp_set_num_threads(threads)
        t, c = time.perf_counter(), time.process_time()
        split = e.build(X) or {}  # type: ignore[attr-defined]
        build, build_cpu = time.perf_counter() - t, time.process_time() - c
        info = {"engine": eng, "build_s": build, "build_cpu_s": build_cpu, **split, "mb": e.nbytes() / 2**20}  # type: ignore[attr-defined]
        print(json.dumps(info), flush=True)
        builds[eng] = info
        engines.append((eng, e, sweep, build))
    # Recall sweep (untimed), then the smallest setting reaching each target.
    rows: list[dict] = []
    plan: list[tuple[dict, dict, object]] = []
    for eng, e, sweep, build in engines:
        settings = []
        for p in sweep:
            found = e.sweep(Q, k, p) if hasattr(e, "sweep") else e.single(Q, k, p)  # type: ignore[attr-defined]
            r = recall(found, truth)
            settings.append({"p": p, "recall": r})
            print(json.dumps({"engine": eng, **settings[-1]}), flush=True)
            if r >= 0.995:
                break
        row = {"engine": eng, "build_s": build, "mb": e.nbytes() / 2**20, "settings": settings}  # type: ignore[attr-defined]
        rows.append(row)
        chosen = {id(s): s for s in (_first(settings, tg) for tg in TARGETS) if s is not None}
        plan += [(row, s, e) for s in chosen.values()]
    if "ragfind-exact" in a.engines.split(","):
        s0 = {"p": 0, "recall": 1.0}
        row = {"engine": "ragfind-exact", "build_s": 0.0, "mb": X.nbytes / 2**20, "settings": [s0]}
        rows.append(row)
        plan.append((row, s0, None))
    # Timings interleaved: every round times every (engine, setting) once, in a shuffled
    # order, so load from other processes hits every engine alike; medians over rounds.
    # Single-thread batches at each engine's recall-0.95 setting (grouped by list for ragfind).
    sizes = [int(x) for x in a.batch_sizes.split(",") if x]
    grouped = []
    for row, s, e in plan:
        if sizes and hasattr(e, "grouped") and s is _first(row["settings"], 0.95):
            grouped += [(row, s, e, b) for b in sizes]
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    nq1 = min(a.nq, 300)
    t1s: dict[int, list[float]] = {id(s): [] for _, s, _ in plan}
    tbs: dict[int, list[float]] = {id(s): [] for _, s, _ in plan}
    tgs: dict[tuple, list[float]] = {(id(s), b): [] for _, s, _, b in grouped}
    rng = np.random.default_rng(1)
    for rnd in range(a.rounds):
        for i in rng.permutation(len(plan) + len(grouped)).tolist():
            if i >= len(plan):
                _row, s, e, b = grouped[i - len(plan)]
                tgs[(id(s), b)].append(timed(lambda e=e, p=s["p"], b=b: e.grouped(Q, k, p, b), 1, clock))
                continue
            row, s, e = plan[i]
            if e is None:
                f1 = lambda: [exact.search(q, k, threads=1) for q in Q[:nq1]]  # noqa: E731
                fb = lambda: exact.search_batch_padded(Q, k, threads=threads)  # noqa: E731
            else:
                f1 = lambda e=e, p=s["p"]: e.single(Q[:nq1], k, p)  # noqa: E731
                fb = lambda e=e, p=s["p"]: e.batch(Q, k, p, threads)  # noqa: E731
            t1s[id(s)].append(timed(f1, 1, clock))
            tbs[id(s)].append(timed(fb, 1))
        print(f"round {rnd + 1}/{a.rounds} done", flush=True)
    for row, s, _ in plan:
        s["qps1"] = nq1 / statistics.median(t1s[id(s)])
        s["qpsb"] = a.nq / statistics.median(tbs[id(s)])
        print(json.dumps({"engine": row["engine"], **s}), flush=True)
    for row, s, _e, b in grouped:
        s.setdefault("grouped", {})[b] = a.nq / statistics.median(tgs[(id(s), b)])
        print(
            json.dumps({"engine": row["engine"], "p": s["p"], "batch": b, "qps": s["grouped"][b]}), flush=True
        )
    print_recalls(rows)
    print_table(rows)
    print_grouped(rows, sizes)
    print_builds(builds)


def _first(settings: list, target: float) -> dict | None:
    return next((s for s in settings if s["recall"] >= target), None)


def print_table(rows: list) -> None:
    base = next((r for r in rows if r["engine"] == "faiss-flat"), None)
    base = base if base is not None else {"settings": []}
    print()
    print(
        "| engine | build s | MB | "
        + " | ".join(f"@{t}: p, recall, q/s 1T (x IVFFlat), q/s batch" for t in TARGETS)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(TARGETS))
    for r in rows:
        cells = []
        for t in TARGETS:
            s = r["settings"][0] if r["engine"] == "ragfind-exact" else _first(r["settings"], t)
            if s is None or "qps1" not in s:
                cells.append("not reached")
                continue
            ratio = ""
            b = _first(base["settings"], t)
            if b is not None and "qps1" in b:
                ratio = f" ({s['qps1'] / b['qps1']:.2f}x)"
            cells.append(
                f"{s['p']}, {s['recall']:.3f}, {s['qps1']:,.0f}{ratio}, {s.get('qpsb', float('nan')):,.0f}"
            )
        print(f"| {r['engine']} | {r['build_s']:.1f} | {r['mb']:.0f} | " + " | ".join(cells) + " |")


def print_recalls(rows: list) -> None:
    """recall@k per nprobe of every IVF engine (the sweep stops past 0.995)."""
    ivf = [r for r in rows if r["engine"] not in ("ragfind-exact", "ragfind-hnsw")]
    probes = sorted({st["p"] for r in ivf for st in r["settings"]})
    if not probes:
        return
    print()
    print("| nprobe | " + " | ".join(str(p) for p in probes) + " |")
    print("|---|" + "---|" * len(probes))
    for r in ivf:
        got = {st["p"]: st["recall"] for st in r["settings"]}
        print(f"| {r['engine']} | " + " | ".join(f"{got[p]:.3f}" if p in got else "" for p in probes) + " |")


def print_grouped(rows: list, sizes: list) -> None:
    """Single-thread q/s at recall 0.95: one query per call against batches of each size."""
    if not sizes:
        return
    base = next((r for r in rows if r["engine"] == "faiss-flat"), None)
    bs = _first(base["settings"], 0.95) if base else None
    print()
    print(
        "| engine @0.95 | nprobe | 1 per call | "
        + " | ".join(f"batch {b} (x 1 per call, x IVFFlat batch {b})" for b in sizes)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(sizes))
    for r in rows:
        s = _first(r["settings"], 0.95)
        if s is None or "grouped" not in s:
            continue
        cells = []
        for b in sizes:
            q = s["grouped"][b]
            vs = f", {q / bs['grouped'][b]:.2f}x" if bs is not None and "grouped" in bs else ""
            cells.append(f"{q:,.0f} ({q / s['qps1']:.2f}x{vs})")
        print(f"| {r['engine']} | {s['p']} | {s['qps1']:,.0f} | " + " | ".join(cells) + " |")


def print_builds(builds: dict) -> None:
    """Build times, wall and process CPU (all threads), split into k-means training and add."""
    base = builds.get("faiss-flat")
    print()
    print(
        "| engine | train wall s | train CPU s | add wall s | add CPU s | build wall s "
        "| build CPU s (x IVFFlat) |"
    )
    print("|---|---|---|---|---|---|---|")
    for eng, b in builds.items():
        ratio = f" ({b['build_cpu_s'] / base['build_cpu_s']:.2f}x)" if base else ""
        tw, tc = b.get("train_s", float("nan")), b.get("train_cpu_s", float("nan"))
        print(
            f"| {eng} | {tw:.1f} | {tc:.1f} | {b['build_s'] - tw:.1f} | {b['build_cpu_s'] - tc:.1f} | "
            f"{b['build_s']:.1f} | {b['build_cpu_s']:.1f}{ratio} |"
        )


if __name__ == "__main__":
    main()
