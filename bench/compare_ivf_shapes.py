"""ragfind's compressed IVF against faiss's on every data shape of ``ivf_shapes.py``: q/s at
recall@10 >= 0.95, one thread, one query per call, and resident bytes a vector.

    PYTHONPATH=python python bench/compare_ivf_shapes.py --n 100000 --nq 200 \\
        --shapes lowdim,clustered,zipf,sphere,real:scifact,real:npl

Engines, all at the same nlist (ragfind's automatic one for the shape's n, or ``--nlist``):
``ragfind-pq`` (dtype "pq", default pq_m: 4-bit codes), ``ragfind-rabitq``, and faiss
IndexIVFPQFastScan at m48 and m96 (4 bits) and IndexIVFRaBitQ, each behind IndexRefineFlat.
ragfind indexes are saved and searched as loaded with ``mmap=True``; faiss ones as built.

For each engine the (nprobe, rerank / k_factor) front is walked as ``DenseIndex.tune`` does:
for each nprobe the smallest rerank reaching the recall target (bisection on batch recall), each
such setting timed (``--repeats`` passes over the queries, the best one), and the fastest kept.
Also reported: ragfind's recall@10 at its defaults (no nprobe, default rerank).

Resident bytes a vector: the file loaded in a fresh process (``compare_ivf_pq.py``'s child)
that runs the queries at the chosen setting, RssAnon after - before, over n. ragfind maps its
rows (only the re-scored ones are read, into the page cache); faiss's IndexRefineFlat holds
every float32 row in memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ivf_shapes import make_shape  # noqa: E402

K = 10
PROBES = [4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048]
RERANKS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([np.isin(t, f).sum() / K for f, t in zip(found, truth)]))


def walk(batch, one, Q, truth, target, probes) -> dict | None:
    """The fastest front setting reaching ``target``: ``batch(p, r)`` gives (nq, K) ids,
    ``one(q, p, r)`` searches one query; None when even the deepest setting misses."""
    memo: dict = {}

    def rec(p: int, r: int) -> float:
        if (p, r) not in memo:
            memo[(p, r)] = recall(batch(p, r), truth)
        return memo[(p, r)]

    best, worse, hi = None, 0, len(RERANKS) - 1
    for p in probes:
        if rec(p, RERANKS[-1]) < target:
            continue
        lo, h = 0, len(RERANKS) - 1 if rec(p, RERANKS[hi]) < target else hi
        while lo < h:
            mid = (lo + h) // 2
            lo, h = (lo, mid) if rec(p, RERANKS[mid]) >= target else (mid + 1, h)
        hi = h
        r = RERANKS[hi]
        t = min(_pass(one, Q, p, r) for _ in range(ARGS.repeats))
        if best is None or t < best["s"]:
            best, worse = {"nprobe": p, "rerank": r, "recall": memo[(p, r)], "s": t}, 0
        else:
            worse += 1
        if hi == 0 or worse >= 2:
            break
    if best is not None:
        best["qps"] = len(Q) / best.pop("s")
    return best


def _pass(one, Q, p, r) -> float:
    t = time.perf_counter()
    for q in Q:
        one(q, p, r)
    return time.perf_counter() - t


def resident(engine: str, path: Path, qpath: Path, p: int, r: int) -> float:
    cmd = [
        sys.executable,
        str(HERE / "compare_ivf_pq.py"),
        "--child",
        engine,
        str(path),
        str(qpath),
        str(p),
        str(r),
    ]
    out = json.loads(
        subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    )
    return (out["after_kb"] - out["before_kb"]) * 1024 / out["n"]


def run_shape(shape: str, folder: Path) -> list[dict]:
    from ragfind import DenseIndex
    from ragfind.dense.ivf import auto_nlist

    X, Q = make_shape(shape, ARGS.n, ARGS.nq, seed=0)
    Q = Q[: ARGS.nq]
    n, dim = X.shape
    truth = np.argsort(-(Q @ X.T), axis=1)[:, :K]
    nlist = ARGS.nlist or auto_nlist(n)
    probes = [p for p in PROBES if p < nlist] + [nlist]
    qpath = folder / "queries.npy"
    np.save(qpath, Q)
    rows = []
    for dtype in ("pq", "rabitq"):
        e = f"ragfind-{dtype}"
        t0 = time.perf_counter()
        ix = DenseIndex(dim, metric="cosine", kind="ivf", dtype=dtype, nlist=nlist)
        ix.add(X)
        build = time.perf_counter() - t0
        path = folder / f"{e}.rfd"
        ix.save(path)
        ix = DenseIndex.load(path, mmap=True)
        got = ix.search_batch(Q, K, threads=1)
        default_recall = recall(np.array([g[0] for g in got]), truth)
        default = (ix.nprobe, ix.rerank)

        def batch(p, r, ix=ix):
            ix.rerank = r
            return ix.search_batch_padded(Q, K, nprobe=p, threads=1)[0]

        def one(q, p, r, ix=ix):
            ix.rerank = r
            return ix.search(q, K, nprobe=p, threads=1)

        best = walk(batch, one, Q, truth, ARGS.target, probes)
        row = {"shape": shape, "engine": e, "n": n, "nlist": nlist, "build_s": build}
        row.update(default_recall=default_recall, default=default)
        rows.append(_finish(row, best, e, path, qpath))
    import faiss

    for e in ARGS.faiss.split(","):
        faiss.omp_set_num_threads(2)
        if e.startswith("faiss-pq"):
            m = int(e[len("faiss-pq") :])
            base = faiss.IndexIVFPQFastScan(
                faiss.IndexFlatIP(dim), dim, nlist, m, 4, faiss.METRIC_INNER_PRODUCT
            )
        else:
            base = faiss.IndexIVFRaBitQ(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        ref = faiss.IndexRefineFlat(base)
        t0 = time.perf_counter()
        ref.train(X)
        ref.add(X)
        build = time.perf_counter() - t0
        path = folder / f"{e}.faiss"
        faiss.write_index(ref, str(path))
        faiss.omp_set_num_threads(1)

        def params(p, r):
            return faiss.IndexRefineSearchParameters(
                k_factor=r, base_index_params=faiss.SearchParametersIVF(nprobe=p)
            )

        def batch(p, r, ref=ref):
            return ref.search(Q, K, params=params(p, r))[1]

        def one(q, p, r, ref=ref):
            return ref.search(q[None, :], K, params=params(p, r))

        best = walk(batch, one, Q, truth, ARGS.target, probes)
        rows.append(
            _finish(
                {"shape": shape, "engine": e, "n": n, "nlist": nlist, "build_s": build}, best, e, path, qpath
            )
        )
    return rows


def _finish(row: dict, best: dict | None, e: str, path: Path, qpath: Path) -> dict:
    if best is not None:
        row.update(best)
        row["resident_B"] = resident(e, path, qpath, best["nprobe"], best["rerank"])
    print(json.dumps(row), flush=True)
    return row


def table(rows: list[dict]) -> str:
    out = [
        f"| shape | engine | q/s at recall >= {ARGS.target} | nprobe, rerank | recall | resident B/vector "
        "| ragfind defaults: recall (nprobe, rerank) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        q = f"{r['qps']:,.0f}" if "qps" in r else "not reached"
        s = f"{r['nprobe']}, {r['rerank']}" if "qps" in r else ""
        rc = f"{r['recall']:.3f}" if "qps" in r else ""
        res = f"{r['resident_B']:.0f}" if "resident_B" in r else ""
        d = f"{r['default_recall']:.3f} {tuple(r['default'])}" if "default_recall" in r else ""
        where = f"{r['shape']} (n {r['n']:,}, nlist {r['nlist']})"
        out.append(f"| {where} | {r['engine']} | {q} | {s} | {rc} | {res} | {d} |")
    return "\n".join(out)


def main() -> None:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--nq", type=int, default=200)
    ap.add_argument("--nlist", type=int, default=0, help="0: ragfind's automatic nlist for n")
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--shapes", default="lowdim,clustered,zipf,sphere,real:scifact,real:npl")
    ap.add_argument("--faiss", default="faiss-pq48,faiss-pq96,faiss-rabitq")
    ARGS = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for shape in ARGS.shapes.split(","):
            folder = Path(d) / shape.replace(":", "_")
            folder.mkdir()
            rows += run_shape(shape, folder)
    print(table(rows))


ARGS: argparse.Namespace

if __name__ == "__main__":
    main()
