"""BM25 side by side: ragfind vs bm25s (numpy, numba) vs rank_bm25, measured in the same run.

    python bench/make_synthetic.py            # once: bench/data/synthetic_1m (1M docs)
    python bench/compare_bm25.py              # SciFact + synthetic 1M + quality, ~10 min
    python bench/compare_bm25.py --skip-synthetic
    python bench/compare_bm25.py --json bench/data/bm25_results.json

Every measurement of speed or memory runs in its own fresh Python process, one engine at a
time, single-threaded (NUMBA_NUM_THREADS=OMP_NUM_THREADS=1, n_threads=1):

- build: read the texts, then time tokenization + indexing from strings (end to end) and save
  the index; the build process's peak RSS is reported too.
- query: load the saved index (ragfind with ``mmap=True``, bm25s with its default), then time
  string queries end to end at top-10 (tokenization included). The process's peak RSS
  (``ru_maxrss``) is the "loaded index" memory, shown beside the RSS after imports.
  ragfind answers one query per ``search`` call; bm25s gets its best case, one batched
  ``tokenize`` + ``retrieve`` over all queries; bm25s's numba JIT is warmed up first.
  rank_bm25 has no save format: it is built in the query process and timed on a sample.

Times are medians over ``--repeats`` timed passes. Quality (nDCG@10, Recall@100 with the
settings of ../shared/data/README.md) is computed in this process with ragfind.eval.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = Path(os.environ.get("RAGFIND_DATA", REPO.parent / "shared" / "data"))
TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s's default
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(REPO / "python"))


# ----------------------------------------------------------------------------------------------
# Corpora (read in the worker processes, outside the timed sections)
# ----------------------------------------------------------------------------------------------


def read_corpus(spec: dict, texts_too: bool = True) -> tuple[list[str], list[str]]:
    """(texts, queries) of a corpus spec: {"kind": "beir", "path"} or {"kind": "lines", "path"};
    texts is empty unless ``texts_too`` (query processes never hold the corpus text)."""
    path = Path(spec["path"])
    texts: list[str] = []
    if spec["kind"] == "beir":
        if texts_too:
            with open(path / "corpus.jsonl", encoding="utf-8") as f:
                for line in f:
                    d = json.loads(line)
                    texts.append(f"{d.get('title') or ''} {d.get('text') or ''}".strip())
        with open(path / "queries.jsonl", encoding="utf-8") as f:
            queries = [json.loads(line)["text"] for line in f if line.strip()]
    else:
        if texts_too:
            with open(path / "docs.txt", encoding="utf-8") as f:
                texts = f.read().splitlines()
        with open(path / "queries.txt", encoding="utf-8") as f:
            queries = f.read().splitlines()
    if spec.get("max_queries"):
        queries = queries[: spec["max_queries"]]
    return texts, queries


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def current_rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def dir_size_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


# ----------------------------------------------------------------------------------------------
# Workers: each runs in a fresh process and prints one JSON object on its last stdout line
# ----------------------------------------------------------------------------------------------


def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def worker_build(task: dict) -> dict:
    texts, _ = read_corpus(task["corpus"])
    out = Path(task["out"])
    engine = task["engine"]
    if engine == "ragfind":
        from ragfind import BM25Index

        start, cpu_start = time.perf_counter(), time.process_time()
        index = BM25Index(method="lucene", k1=1.2, b=0.75)
        index.add(texts)
        build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
        index.save(str(out))
    elif engine == "bm25s":
        import bm25s

        stemmer = _stemmer()
        start, cpu_start = time.perf_counter(), time.process_time()
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
        retriever.index(tokens, show_progress=False)
        build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
        retriever.save(str(out))
    else:
        raise ValueError(f"unknown engine {engine!r}")
    return {
        "build_s": build_s,
        "build_cpu_s": build_cpu_s,
        "docs": len(texts),
        "build_peak_rss_mb": peak_rss_mb(),
        "disk_mb": dir_size_mb(out),
    }


def worker_query(task: dict) -> dict:
    import numpy as np

    engine, k, repeats = task["engine"], task["k"], task["repeats"]
    texts, queries = read_corpus(task["corpus"], texts_too=engine == "rank_bm25")
    if engine.startswith("bm25s"):
        import bm25s
    if engine == "ragfind":
        from ragfind import BM25Index
    if engine == "rank_bm25":
        from rank_bm25 import BM25Okapi
    stemmer = _stemmer()
    import gc

    gc.collect()
    rss_after_imports = current_rss_mb()
    result: dict = {"queries": len(queries), "rss_after_imports_mb": rss_after_imports}

    start = time.perf_counter()
    if engine == "ragfind":
        index = BM25Index.load(task["index"], mmap=True)
    elif engine in ("bm25s-numpy", "bm25s-numba"):
        backend = engine.split("-")[1]
        index = bm25s.BM25.load(task["index"], backend=backend, show_progress=False)
    else:
        # rank_bm25 with bm25s's tokenization (same regex, stopwords and stemmer)
        import bm25s.stopwords as sw

        stop = set(sw.STOPWORDS_EN)
        pattern = re.compile(TOKEN_PATTERN)

        def tokenize(text: str) -> list[str]:
            return stemmer.stemWords([t for t in pattern.findall(text.lower()) if t not in stop])

        index = BM25Okapi([tokenize(t) for t in texts], k1=1.2, b=0.75)
        del texts
    result["load_s"] = time.perf_counter() - start

    timings = []
    if engine == "ragfind":

        def one_pass():
            for q in queries:
                index.search(q, k=k)

        def batch_pass():
            index.search_batch(queries, k=k, threads=1)

        batch_times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            batch_pass()
            batch_times.append(time.perf_counter() - t0)
        result["batch_qps"] = len(queries) / statistics.median(batch_times)
    elif engine.startswith("bm25s"):

        def run_batch(qs):
            tokens = bm25s.tokenize(qs, stopwords="en", stemmer=stemmer, show_progress=False)
            return index.retrieve(tokens, k=k, n_threads=1, show_progress=False)

        if engine == "bm25s-numba":
            run_batch(queries[:5])  # JIT compilation, not timed

        def one_pass():
            run_batch(queries)

        # pre-tokenized (retrieval alone), for reference
        tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
        pre = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            index.retrieve(tokens, k=k, n_threads=1, show_progress=False)
            pre.append(time.perf_counter() - t0)
        result["pretokenized_qps"] = len(queries) / statistics.median(pre)
    else:
        sample = queries[: task["sample"]]
        result["queries"] = len(sample)

        def one_pass():
            for q in sample:
                scores = index.get_scores(tokenize(q))
                top = np.argpartition(-scores, k)[:k]
                top[np.argsort(-scores[top], kind="stable")]

    cpu_timings = []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        one_pass()
        timings.append(time.perf_counter() - t0)
        cpu_timings.append(time.process_time() - c0)
    result["qps"] = result["queries"] / statistics.median(timings)
    result["cpu_qps"] = result["queries"] / statistics.median(cpu_timings)
    result["query_peak_rss_mb"] = peak_rss_mb()
    return result


def run_worker(task: dict, timeout: float | None = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # the workers import the same ragfind as this process (the repository's python/ by default)
    import ragfind

    package_root = str(Path(ragfind.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(task)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker {task['op']} {task['engine']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------
# Quality (in this process; cheap on SciFact and Cranfield)
# ----------------------------------------------------------------------------------------------


def quality(data_dir: Path) -> list[dict]:
    import bm25s

    from ragfind import Analyzer, BM25Index
    from ragfind.eval import evaluate, load_beir

    rows = []
    stemmer = _stemmer()
    for name in ("scifact", "cranfield"):
        if not (data_dir / name / "corpus.jsonl").exists():
            continue
        data = load_beir(data_dir / name)
        doc_ids, texts = data.documents()
        qids, qtexts = data.query_items()

        def score(results, label, data=data, name=name, doc_ids=doc_ids, qids=qids):
            # results: one (positions, scores) pair per query, positions into doc_ids
            run = {q: ([doc_ids[i] for i in ids.tolist()], s) for q, (ids, s) in zip(qids, results)}
            r = evaluate(data.qrels, run, ["ndcg@10", "recall@100"])
            rows.append({"collection": name, "system": label, **r.mean})

        # ragfind, default analyzer
        index = BM25Index(method="lucene", k1=1.2, b=0.75)
        index.add(texts)
        score(index.search_batch(qtexts, k=100), "ragfind (default analyzer)")
        # ragfind's analyzer configured like bm25s (its 33 stopwords, no identifier splitting)
        import bm25s.stopwords as sw

        analyzer = Analyzer(
            stopwords=list(sw.STOPWORDS_EN), stemmer="english", split_identifiers=False, symbol_letters=False
        )
        index = BM25Index(method="lucene", k1=1.2, b=0.75, analyzer=analyzer)
        index.add(texts)
        score(index.search_batch(qtexts, k=100), "ragfind (analyzer set like bm25s)")
        # ragfind scoring bm25s's own tokens
        doc_tokens = bm25s.tokenize(
            texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )
        q_tokens = bm25s.tokenize(
            qtexts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )
        index = BM25Index(method="lucene", k1=1.2, b=0.75)
        index.add_tokenized(doc_tokens)
        score([index.search_tokenized(t, k=100) for t in q_tokens], "ragfind (bm25s tokens)")
        # bm25s itself
        retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
        retriever.index(
            bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
        )
        tokens = bm25s.tokenize(qtexts, stopwords="en", stemmer=stemmer, show_progress=False)
        idx, scores = retriever.retrieve(tokens, k=100, show_progress=False, n_threads=1)
        score(list(zip(idx, scores)), "bm25s 0.3.16 (reference)")
    return rows


# ----------------------------------------------------------------------------------------------
# Orchestration and report
# ----------------------------------------------------------------------------------------------


def measure(label: str, corpus: dict, engines: list[str], args, workdir: Path) -> dict:
    out: dict = {"corpus": label, "build": {}, "query": {}}
    for engine in ("ragfind", "bm25s"):
        path = workdir / f"{label}-{engine}.idx"
        builds = []
        for _ in range(args.build_repeats if label == "scifact" else 1):
            if path.exists():
                shutil.rmtree(path) if path.is_dir() else path.unlink()
            builds.append(run_worker({"op": "build", "engine": engine, "corpus": corpus, "out": str(path)}))
            print(f"  {label} build {engine}: {builds[-1]['build_s']:.2f} s", file=sys.stderr, flush=True)
        best = dict(builds[-1])
        best["build_s"] = statistics.median(b["build_s"] for b in builds)
        best["build_cpu_s"] = statistics.median(b["build_cpu_s"] for b in builds)
        best["build_runs_s"] = [b["build_s"] for b in builds]
        out["build"][engine] = best
    rounds = args.rounds if label == "scifact" else 1
    runs: dict[str, list[dict]] = {engine: [] for engine in engines}
    for _ in range(rounds):  # engines interleaved, so a shift in machine load hits them all
        for engine in engines:
            index = workdir / f"{label}-{'ragfind' if engine == 'ragfind' else 'bm25s'}.idx"
            task = {
                "op": "query",
                "engine": engine,
                "corpus": corpus,
                "index": str(index),
                "k": 10,
                "repeats": args.repeats,
                "sample": args.rank_bm25_sample,
            }
            if engine == "bm25s-numpy" and label != "scifact" and args.numpy_sample:
                # bm25s's numpy backend scores every document per query (~0.2 s at 1M docs)
                task["corpus"] = dict(corpus, max_queries=min(args.numpy_sample, args.synthetic_queries))
            runs[engine].append(run_worker(task))
            print(f"  {label} query {engine}: {runs[engine][-1]['qps']:.0f} q/s", file=sys.stderr, flush=True)
    for engine, results in runs.items():
        # the round with the median CPU-time rate, plus every round's rates
        results = sorted(results, key=lambda r: r["cpu_qps"])
        out["query"][engine] = dict(results[len(results) // 2])
        out["query"][engine]["rounds_qps"] = [r["qps"] for r in results]
        out["query"][engine]["rounds_cpu_qps"] = [r["cpu_qps"] for r in results]
    return out


def fmt_table(res: dict) -> str:
    """Markdown tables for one corpus. Ratios use CPU-time rates (robust on a shared machine)."""
    q, b = res["query"], res["build"]
    lines = [
        f"**{res['corpus']}** ({b['ragfind']['docs']:,} documents, "
        f"{q['ragfind']['queries']:,} queries, top-10, single thread)",
        "",
        "| engine | q/s wall | q/s CPU | ragfind vs it (CPU) | load s | peak RSS MB | RSS after imports MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    ours = q["ragfind"]["cpu_qps"]
    for engine, r in q.items():
        notes = []
        if engine == "ragfind":
            notes.append(f"search_batch(threads=1): {r['batch_qps']:,.0f} q/s wall")
        if "pretokenized_qps" in r:
            notes.append(f"pre-tokenized: {r['pretokenized_qps']:,.0f} q/s wall")
        if r["queries"] != q["ragfind"]["queries"]:
            notes.append(f"first {r['queries']} queries")
        note = f" ({'; '.join(notes)})" if notes else ""
        ratio = "-" if engine == "ragfind" else f"{ours / r['cpu_qps']:.2f}x"
        lines.append(
            f"| {engine}{note} | {r['qps']:,.0f} | {r['cpu_qps']:,.0f} | {ratio} | {r['load_s']:.2f} | "
            f"{r['query_peak_rss_mb']:,.0f} | {r['rss_after_imports_mb']:,.0f} |"
        )
    lines += [
        "",
        "| engine | build s wall | build s CPU | docs/s (CPU) | ragfind vs it (CPU) "
        "| build peak RSS MB | on disk MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for engine, r in b.items():
        ratio = "-" if engine == "ragfind" else f"{r['build_cpu_s'] / b['ragfind']['build_cpu_s']:.2f}x"
        lines.append(
            f"| {engine} | {r['build_s']:.2f} | {r['build_cpu_s']:.2f} | "
            f"{r['docs'] / r['build_cpu_s']:,.0f} | "
            f"{ratio} | {r['build_peak_rss_mb']:,.0f} | {r['disk_mb']:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared BEIR data folder")
    p.add_argument("--synthetic", type=Path, default=HERE / "data" / "synthetic_1m")
    p.add_argument("--skip-synthetic", action="store_true")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument(
        "--synthetic-queries", type=int, default=1000, help="queries timed on the synthetic corpus"
    )
    p.add_argument("--repeats", type=int, default=3, help="timed passes over the queries (median)")
    p.add_argument(
        "--rounds", type=int, default=3, help="SciFact query processes per engine, interleaved (median)"
    )
    p.add_argument("--build-repeats", type=int, default=3, help="SciFact builds per engine (median)")
    p.add_argument("--rank-bm25-sample", type=int, default=30, help="queries timed for rank_bm25")
    p.add_argument(
        "--numpy-sample",
        type=int,
        default=50,
        help="queries timed for bm25s's numpy backend on the synthetic corpus (0 = all)",
    )
    p.add_argument("--json", type=Path, help="also write the raw results here")
    p.add_argument("--workdir", type=Path, help="keep the built indexes here (default: a temporary folder)")
    args = p.parse_args(argv)

    if args.worker:
        task = json.loads(args.worker)
        result = worker_build(task) if task["op"] == "build" else worker_query(task)
        print(json.dumps(result))
        return 0

    import bm25s
    import numpy

    import ragfind

    results: dict = {
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_avg_start": os.getloadavg(),
            "ragfind": ragfind.__version__,
            "simd": ragfind.capabilities().get("simd_level", ragfind.capabilities()),
            "bm25s": bm25s.__version__,
            "numpy": numpy.__version__,
        },
        "corpora": [],
    }
    with tempfile.TemporaryDirectory(prefix="ragfind-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if (args.data / "scifact" / "corpus.jsonl").exists():
            print("SciFact", file=sys.stderr)
            corpus = {"kind": "beir", "path": str(args.data / "scifact")}
            engines = ["ragfind", "bm25s-numpy", "bm25s-numba", "rank_bm25"]
            results["corpora"].append(measure("scifact", corpus, engines, args, workdir))
        else:
            print(f"SciFact not found under {args.data}; skipped", file=sys.stderr)
        if not args.skip_synthetic:
            if not (args.synthetic / "docs.txt").exists():
                raise SystemExit(
                    f"{args.synthetic}/docs.txt not found: run python bench/make_synthetic.py first"
                )
            print(f"synthetic ({args.synthetic})", file=sys.stderr)
            corpus = {"kind": "lines", "path": str(args.synthetic), "max_queries": args.synthetic_queries}
            engines = ["ragfind", "bm25s-numpy", "bm25s-numba"]
            results["corpora"].append(measure(args.synthetic.name, corpus, engines, args, workdir))
    if not args.skip_quality:
        print("quality", file=sys.stderr)
        results["quality"] = quality(args.data)
    results["machine"]["load_avg_end"] = os.getloadavg()

    for res in results["corpora"]:
        print(fmt_table(res) + "\n")
    if results.get("quality"):
        print("| collection | system | nDCG@10 | Recall@100 |\n|---|---|---:|---:|")
        for r in results["quality"]:
            print(f"| {r['collection']} | {r['system']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} |")
    m = results["machine"]
    print(
        f"\nmachine: {m['cores']} cores, "
        f"load average {m['load_avg_start'][0]:.1f} -> {m['load_avg_end'][0]:.1f}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
