"""Compressed IVF side by side: ``DenseIndex(kind="ivf", dtype="pq")`` (4-bit PQ, fast scan +
exact re-scoring) and ``dtype="rabitq"`` (RaBitQ codes, bound-pruned exact re-scoring) against
faiss ``IndexIVFPQFastScan`` + ``IndexRefineFlat`` and ``IndexIVFRaBitQ`` + ``IndexRefineFlat``, at
faiss's default training, on compare_ivf.py's latent-structured data (cosine). Single thread
(threads=1 / faiss.omp_set_num_threads(1)), one query per call; each timing the median of
``--rounds`` passes, the engines interleaved in every round. For each recall@10 target the table
gives, per engine, the fastest (nprobe, re-scoring depth) that reaches it.

    PYTHONPATH=python python bench/compare_ivf_pq.py --n 200000 --nlist 1024 --pq-m 48

Memory: every engine is saved to a file, then a fresh process per engine loads it (ragfind:
``DenseIndex.load(mmap=True)``; faiss: ``faiss.read_index``), runs the queries at the engine's
0.95 setting and reads RssAnon from /proc/self/status; the table gives (RssAnon after - RssAnon
of the same process before the load) / n. ragfind's re-scoring rows stay mapped from the file
(file-backed, not anonymous); faiss's IndexRefineFlat holds them in memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_ivf import TARGETS, make_data, recall  # noqa: E402

K = 10


def rss_anon_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


def child(engine: str, path: str, qpath: str, nprobe: int, rerank: int) -> None:
    """Loads one engine's file, searches every query, prints RssAnon before and after (kB)."""
    Q = np.load(qpath)
    if engine.startswith("ragfind"):
        from ragfind import DenseIndex

        before = rss_anon_kb()
        ix = DenseIndex.load(path, mmap=True)
        ix.rerank = rerank
        for q in Q:
            ix.search(q, K, nprobe=nprobe, threads=1)
        n = len(ix)
    else:
        import faiss

        before = rss_anon_kb()
        ref = faiss.read_index(path)
        params = faiss.IndexRefineSearchParameters(
            k_factor=rerank, base_index_params=faiss.SearchParametersIVF(nprobe=nprobe)
        )
        for q in Q:
            ref.search(q[None, :], K, params=params)
        n = ref.ntotal
    print(json.dumps({"before_kb": before, "after_kb": rss_anon_kb(), "n": n}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--nq", type=int, default=500)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--latent", type=int, default=12)
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--pq-m", type=int, default=48)
    ap.add_argument("--pq8-m", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--probes", default="8,12,16,24,32,48")
    ap.add_argument("--reranks", default="2,4,8")
    ap.add_argument(
        "--engines",
        default="ragfind-pq,ragfind-rabitq,faiss-pq,faiss-rabitq",
        help="also ragfind-pq-f16, ragfind-pq8, ragfind-pq8-f16",
    )
    ap.add_argument("--dir", default=None, help="folder for the index files (default: a temporary one)")
    ap.add_argument(
        "--child", nargs=5, metavar=("ENGINE", "FILE", "QUERIES", "NPROBE", "RERANK"), help=argparse.SUPPRESS
    )
    a = ap.parse_args()
    if a.child:
        e, path, qpath, p, r = a.child
        child(e, path, qpath, int(p), int(r))
        return
    tmp = tempfile.TemporaryDirectory() if a.dir is None else None
    folder = Path(a.dir or tmp.name)
    folder.mkdir(parents=True, exist_ok=True)
    X, Q = make_data(a.n, a.nq, a.dim, a.latent, a.noise, seed=0)
    truth = np.argsort(-(Q @ X.T), axis=1)[:, :K]
    np.save(folder / "queries.npy", Q)
    probes = [int(p) for p in a.probes.split(",")]
    reranks = [int(r) for r in a.reranks.split(",")]
    engines = a.engines.split(",")
    searchers: dict = {}
    build: dict = {}
    files: dict = {}

    from ragfind import DenseIndex

    for e in [e for e in engines if e.startswith("ragfind")]:
        # ragfind-pq / -pq8 (8-bit codes, --pq8-m sub-spaces) / -rabitq, "-f16": float16 rows
        tok = e.split("-")[1]
        dtype = "pq" if tok.startswith("pq") else tok
        kw = {"pq_m": a.pq8_m, "pq_bits": 8} if tok == "pq8" else {"pq_m": a.pq_m} if dtype == "pq" else {}
        if e.endswith("-f16"):
            kw["rerank_dtype"] = "f16"
        w, c = time.perf_counter(), time.process_time()
        ix = DenseIndex(a.dim, metric="cosine", kind="ivf", dtype=dtype, nlist=a.nlist, **kw)
        ix.add(X)
        build[e] = (time.perf_counter() - w, time.process_time() - c)
        files[e] = folder / f"{e}.rfd"
        ix.save(files[e])
        del ix
        ix = DenseIndex.load(files[e], mmap=True)  # searched as loaded, rows mapped

        def search(q, p, r, ix=ix):
            ix.rerank = r
            return ix.search(q, K, nprobe=p, threads=1)[0]

        searchers[e] = search

    if any(e.startswith("faiss") for e in engines):
        import faiss

        for e in [e for e in engines if e.startswith("faiss")]:
            faiss.omp_set_num_threads(2)
            if e == "faiss-pq":
                base = faiss.IndexIVFPQFastScan(
                    faiss.IndexFlatIP(a.dim), a.dim, a.nlist, a.pq_m, 4, faiss.METRIC_INNER_PRODUCT
                )
            else:
                base = faiss.IndexIVFRaBitQ(
                    faiss.IndexFlatIP(a.dim), a.dim, a.nlist, faiss.METRIC_INNER_PRODUCT
                )
            ref = faiss.IndexRefineFlat(base)
            w, c = time.perf_counter(), time.process_time()
            ref.train(X)
            ref.add(X)
            build[e] = (time.perf_counter() - w, time.process_time() - c)
            files[e] = folder / f"{e}.faiss"
            faiss.write_index(ref, str(files[e]))
            faiss.omp_set_num_threads(1)

            def search(q, p, r, ref=ref):
                params = faiss.IndexRefineSearchParameters(
                    k_factor=r, base_index_params=faiss.SearchParametersIVF(nprobe=p)
                )
                return ref.search(q[None, :], K, params=params)[1][0]

            searchers[e] = search

    # Every (engine, nprobe, rerank) timed once per round, the engines interleaved.
    qps: dict = {}
    found: dict = {}
    for _ in range(a.rounds):
        for p in probes:
            for r in reranks:
                for e in engines:
                    t = time.perf_counter()
                    out = np.stack([searchers[e](q, p, r) for q in Q])
                    qps.setdefault((e, p, r), []).append(len(Q) / (time.perf_counter() - t))
                    found[(e, p, r)] = out
    rows: dict[str, list] = {}
    for (e, p, r), v in qps.items():
        rc = recall(found[(e, p, r)], truth)
        rows.setdefault(e, []).append((p, r, rc, statistics.median(v)))
        print(json.dumps({"engine": e, "nprobe": p, "rerank": r, "recall": rc, "qps": statistics.median(v)}))

    # RssAnon per vector, a fresh process per engine, at its fastest setting reaching 0.95
    # (else its most accurate one).
    rss: dict = {}
    for e in engines:
        ok = [x for x in rows[e] if x[2] >= 0.95]
        p, r, _rc, _q = max(ok, key=lambda x: x[3]) if ok else max(rows[e], key=lambda x: x[2])
        cmd = [
            sys.executable,
            __file__,
            "--child",
            e,
            str(files[e]),
            str(folder / "queries.npy"),
            str(p),
            str(r),
        ]
        out = json.loads(
            subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        )
        rss[e] = (
            (out["after_kb"] - out["before_kb"]) * 1024 / out["n"],
            out["after_kb"] * 1024 / out["n"],
            p,
            r,
        )
        print(json.dumps({"engine": e, "rss_anon": out, "nprobe": p, "rerank": r}))

    print(
        "\n| engine | build wall s / CPU s | RssAnon B/vector after load + queries (process total) | "
        + " | ".join(f"@{t:.2f}: nprobe, rerank, recall, q/s 1T" for t in TARGETS)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(TARGETS))
    for e in engines:
        bw, bc = build[e]
        cells = []
        for t in TARGETS:
            ok = [x for x in rows[e] if x[2] >= t]
            if not ok:
                cells.append("not reached")
                continue
            p, r, rc, q = max(ok, key=lambda x: x[3])
            cells.append(f"{p}, {r}, {rc:.3f}, {q:,.0f}")
        delta, total, _p, _r = rss[e]
        print(f"| {e} | {bw:.1f} / {bc:.1f} | {delta:.0f} ({total:.0f}) | " + " | ".join(cells) + " |")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
