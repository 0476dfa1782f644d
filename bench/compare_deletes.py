"""Single-document deletes and filtered search, measured in one run (prints a small table).

    python bench/make_synthetic.py --docs 200000 --out bench/data/synthetic_200k   # once
    python bench/compare_deletes.py                       # BM25: deletes + filtered search
    python bench/compare_deletes.py --baseline /path/to/old/python   # the same delete run on
                                                          # another ragfind build, for a before/after
    python bench/compare_deletes.py --dense               # also a 200,000 x 384 DenseIndex (exact)
    python bench/compare_deletes.py --query-speed --baseline /path/to/old/python
                                                          # unfiltered q/s, this build vs the baseline

BM25 delete: a BM25Index over the first --docs documents of the synthetic corpus (from strings,
default analyzer, int ids 0..n-1); then --deletes single-document ``delete([id])`` calls, ids
drawn at random, each timed alone; the median is reported. Afterwards the top-10 ids and scores
of --check-queries queries are compared with a fresh index built over the live documents (same
insertion order): they must be equal.

Filtered search: a BM25Index over --filter-docs documents; one IdFilter of 1% of the ids,
reused; the median per-query time of the queries with and without the filter (several passes,
the first untimed), single thread, top-10.

Dense delete (--dense): a DenseIndex(384, kind="exact") of 200,000 random unit vectors, the same
single-delete timing, then top-10 checked against a fresh index over the live vectors.

Query speed (--query-speed, needs --baseline): SciFact (5,183 docs, its 300 test queries) and
the synthetic corpus (--docs): each index is built and saved once, then each build (this one and
the baseline) loads it (mmap) in its own process and times every query end to end (strings,
top-10, single thread), --passes passes after one untimed pass; --rounds processes per build,
alternating. Reported: q/s from the median pass (wall clock, and CPU time of the searching
thread, steadier on a busy machine), median over the processes, and the ratios.

Every engine runs in its own process (``--worker`` mode), one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_CORPUS = HERE / "data" / "synthetic_200k"


def read_lines(path: Path, n: int) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            out.append(line.rstrip("\n"))
            if len(out) >= n:
                break
    return out


def bm25_delete_worker(args) -> dict:
    import numpy as np

    from ragfind import BM25Index

    docs = read_lines(Path(args.corpus) / "docs.txt", args.docs)
    queries = read_lines(Path(args.corpus) / "queries.txt", args.check_queries)
    t0 = time.perf_counter()
    index = BM25Index()
    index.add(docs)
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    victims = rng.choice(len(docs), size=args.deletes, replace=False).tolist()
    index.search(queries[0], k=10)  # bounds and caches warm, as in a serving index
    times = []
    for v in victims:
        t = time.perf_counter()
        index.delete([v])
        times.append(time.perf_counter() - t)
    out = {
        "engine": "bm25",
        "build_s": build_s,
        "docs": len(docs),
        "deletes": len(times),
        "median_ms": 1e3 * statistics.median(times),
        "p90_ms": 1e3 * sorted(times)[int(0.9 * len(times))],
        "max_ms": 1e3 * max(times),
    }
    if args.check_queries:
        gone = set(victims)
        live_ids = [i for i in range(len(docs)) if i not in gone]
        assert index.ids.tolist() == live_ids
        fresh = BM25Index()
        fresh.add([docs[i] for i in live_ids], ids=live_ids)
        mismatches = 0
        for q in queries:
            a_ids, a_scores = index.search(q, k=10)
            b_ids, b_scores = fresh.search(q, k=10)
            if not (np.array_equal(a_ids, b_ids) and np.array_equal(a_scores, b_scores)):
                mismatches += 1
        out["checked_queries"] = len(queries)
        out["mismatches"] = mismatches
    return out


def bm25_filter_worker(args) -> dict:
    import numpy as np

    from ragfind import BM25Index
    from ragfind.ids import IdFilter

    docs = read_lines(Path(args.corpus) / "docs.txt", args.filter_docs)
    queries = read_lines(Path(args.corpus) / "queries.txt", args.filter_queries)
    index = BM25Index()
    index.add(docs)
    rng = np.random.default_rng(1)
    allowed = IdFilter(rng.choice(len(docs), size=max(1, len(docs) // 100), replace=False))
    allowed_set = set(allowed.ids.tolist())

    def per_query(flt) -> float:
        t = time.perf_counter()
        for q in queries:
            index.search(q, k=10, filter=flt)
        return (time.perf_counter() - t) / len(queries)

    per_query(None)
    per_query(allowed)
    plain, filtered = [], []
    for _ in range(args.passes):
        plain.append(per_query(None))
        filtered.append(per_query(allowed))
    # Correctness of what was timed: the unfiltered exhaustive ranking restricted to the set.
    bad = 0
    for q in queries[:50]:
        ids, scores = index.search(q, k=10, filter=allowed)
        full_ids, full_scores = index.search(q, k=len(docs), algorithm="exhaustive")
        keep = np.fromiter((i in allowed_set for i in full_ids.tolist()), dtype=bool, count=len(full_ids))
        if not (
            np.array_equal(ids, full_ids[keep][:10])
            and np.allclose(scores, full_scores[keep][:10], rtol=1e-6)
        ):
            bad += 1
    p, f = statistics.median(plain), statistics.median(filtered)
    return {
        "engine": "bm25-filter",
        "docs": len(docs),
        "allowed": len(allowed),
        "queries": len(queries),
        "unfiltered_us": 1e6 * p,
        "filtered_us": 1e6 * f,
        "ratio": f / p,
        "mismatches": bad,
    }


def dense_delete_worker(args) -> dict:
    import numpy as np

    from ragfind import DenseIndex

    rng = np.random.default_rng(2)
    n, dim = args.dense_docs, 384
    X = rng.standard_normal((n, dim), dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    t0 = time.perf_counter()
    index = DenseIndex(dim, kind="exact")
    index.add(X)
    build_s = time.perf_counter() - t0
    victims = rng.choice(n, size=args.deletes, replace=False).tolist()
    Q = rng.standard_normal((args.check_queries or 1, dim), dtype=np.float32)
    index.search(Q[0], k=10)
    times = []
    for v in victims:
        t = time.perf_counter()
        index.delete([v])
        times.append(time.perf_counter() - t)
    out = {
        "engine": "dense-exact",
        "build_s": build_s,
        "docs": n,
        "deletes": len(times),
        "median_ms": 1e3 * statistics.median(times),
        "p90_ms": 1e3 * sorted(times)[int(0.9 * len(times))],
        "max_ms": 1e3 * max(times),
    }
    if args.check_queries:
        gone = set(victims)
        live = np.array([i for i in range(n) if i not in gone])
        fresh = DenseIndex(dim, kind="exact")
        fresh.add(X[live], ids=live.tolist())
        mismatches = 0
        for q in Q:
            a_ids, a_scores = index.search(q, k=10)
            b_ids, b_scores = fresh.search(q, k=10)
            if not (np.array_equal(a_ids, b_ids) and np.allclose(a_scores, b_scores, rtol=1e-6)):
                mismatches += 1
        out["checked_queries"] = len(Q)
        out["mismatches"] = mismatches
    return out


def scifact_texts(data: Path) -> tuple[list[str], list[str]]:
    docs = []
    with open(data / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append(f"{d.get('title') or ''} {d.get('text') or ''}".strip())
    test = set()
    with open(data / "qrels" / "test.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            test.add(line.split("\t")[0])
    with open(data / "queries.jsonl", encoding="utf-8") as f:
        queries = [q["text"] for q in map(json.loads, f) if q["_id"] in test]
    return docs, queries


def query_worker(args) -> dict:
    from ragfind import BM25Index

    queries = json.loads(Path(args.index_path + ".queries.json").read_text())
    index = BM25Index.load(args.index_path)
    for q in queries:
        index.search(q, k=10)
    passes, cpu = [], []
    for _ in range(args.passes):
        t, c = time.perf_counter(), time.thread_time()
        for q in queries:
            index.search(q, k=10)
        passes.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    return {"qps": len(queries) / statistics.median(passes), "cpu_qps": len(queries) / statistics.median(cpu)}


WORKERS = {
    "query": query_worker,
    "bm25": bm25_delete_worker,
    "bm25-filter": bm25_filter_worker,
    "dense": dense_delete_worker,
}


def run_worker(kind: str, args, python_path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=python_path, OMP_NUM_THREADS="1")
    cmd = [sys.executable, __file__, "--worker", kind] + [
        f"--{k.replace('_', '-')}={v}"
        for k, v in vars(args).items()
        if k not in ("worker", "dense", "baseline", "json", "query_speed") and v is not None
    ]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"worker {kind} failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="a bench/make_synthetic.py folder")
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--deletes", type=int, default=60)
    ap.add_argument("--check-queries", type=int, default=100)
    ap.add_argument("--filter-docs", type=int, default=50_000)
    ap.add_argument("--filter-queries", type=int, default=300)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--dense-docs", type=int, default=200_000)
    ap.add_argument("--dense", action="store_true", help="also time deletes on a DenseIndex (exact)")
    ap.add_argument("--baseline", help="the python/ folder of another ragfind build: its BM25 delete run too")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--query-speed", action="store_true", help="unfiltered q/s of this build vs --baseline")
    ap.add_argument("--rounds", type=int, default=3, help="--query-speed: processes per build")
    ap.add_argument("--scifact", default=str(REPO.parent / "shared" / "data" / "scifact"))
    ap.add_argument("--index-path", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return
    if not (Path(args.corpus) / "docs.txt").exists():
        raise SystemExit(
            f"{args.corpus}/docs.txt not found: run "
            f"bench/make_synthetic.py --docs {args.docs} --out {args.corpus}"
        )
    here = str(REPO / "python")
    if args.query_speed:
        if not args.baseline:
            raise SystemExit("--query-speed needs --baseline")
        query_speed(args, here)
        return
    rows = []
    if args.baseline:
        r = run_worker("bm25", args, args.baseline)
        r["engine"] = "bm25 (baseline)"
        rows.append(r)
    rows.append(run_worker("bm25", args, here))
    if args.dense:
        rows.append(run_worker("dense", args, here))
    filt = run_worker("bm25-filter", args, here)

    print(
        f"\nSingle-document delete, median of {args.deletes} deletes (top-10 after the deletes vs a rebuild)"
    )
    print(
        f"{'engine':<18} {'docs':>8} {'median ms':>10} {'p90 ms':>8} {'max ms':>8} "
        f"{'checked':>8} {'mismatch':>8}"
    )
    for r in rows:
        print(
            f"{r['engine']:<18} {r['docs']:>8} {r['median_ms']:>10.3f} {r['p90_ms']:>8.3f} "
            f"{r['max_ms']:>8.2f} "
            f"{r.get('checked_queries', 0):>8} {r.get('mismatches', 0):>8}"
        )
    print(
        f"\nFiltered BM25 search: {filt['allowed']} of {filt['docs']} docs allowed (IdFilter reused), "
        f"{filt['queries']} queries, top-10, median of {args.passes} passes"
    )
    print(f"{'unfiltered us/q':>16} {'filtered us/q':>14} {'ratio':>6} {'mismatch':>8}")
    print(
        f"{filt['unfiltered_us']:>16.1f} {filt['filtered_us']:>14.1f} {filt['ratio']:>6.2f} "
        f"{filt['mismatches']:>8}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"deletes": rows, "filter": filt}, indent=2))


def query_speed(args, here: str) -> None:
    import tempfile

    sys.path.insert(0, here)
    from ragfind import BM25Index

    corpora = {}
    if (Path(args.scifact) / "corpus.jsonl").exists():
        corpora["scifact"] = scifact_texts(Path(args.scifact))
    corpora[f"synthetic {args.docs // 1000}k"] = (
        read_lines(Path(args.corpus) / "docs.txt", args.docs),
        read_lines(Path(args.corpus) / "queries.txt", 1000),
    )
    print(
        f"\nUnfiltered search q/s, single thread, top-10, "
        f"median of {args.rounds} processes x {args.passes} passes"
    )
    print(
        f"{'corpus':<16} {'docs':>8} {'queries':>8} {'baseline q/s':>13} {'this q/s':>10} {'ratio':>6}"
        f" {'base cpu q/s':>13} {'this cpu q/s':>13} {'ratio':>6}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, (docs, queries) in corpora.items():
            path = str(Path(tmp) / "index.bm25")
            index = BM25Index()
            index.add(docs)
            index.save(path)
            del index
            Path(path + ".queries.json").write_text(json.dumps(queries))
            args.index_path = path
            got = {"base": [], "this": []}
            for _ in range(args.rounds):
                got["base"].append(run_worker("query", args, args.baseline))
                got["this"].append(run_worker("query", args, here))

            def med(who, key):
                return statistics.median(r[key] for r in got[who])  # noqa: B023 - called at once

            b, t, bc, tc = (
                med("base", "qps"),
                med("this", "qps"),
                med("base", "cpu_qps"),
                med("this", "cpu_qps"),
            )
            print(
                f"{name:<16} {len(docs):>8} {len(queries):>8} {b:>13.0f} {t:>10.0f} {t / b:>6.3f}"
                f" {bc:>13.0f} {tc:>13.0f} {tc / bc:>6.3f}"
            )


if __name__ == "__main__":
    main()
