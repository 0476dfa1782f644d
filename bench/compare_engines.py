"""BM25 side by side with the engines users would otherwise pick: PISA (pyterrier-pisa), tantivy
(tantivy-py) and bm25s, measured in the same run.

    python bench/make_synthetic.py                        # once: bench/data/synthetic_1m
    python bench/compare_engines.py                       # SciFact, Cranfield, synthetic 1M
    python bench/compare_engines.py --corpora scifact --engines ragfind,pisa
    python bench/compare_engines.py --json bench/data/engines.json

Every build and every query measurement runs in its own fresh Python process, one engine at a
time. With ``--rounds R`` every engine's index is built first, then the query processes run in R
rounds, one process per engine a round, the order turning from round to round, so that a
quieter or busier minute of a shared machine falls on every engine alike. The ratios are the
median of the per-round ratios (ragfind's rate over the peer's in the same round; their range
in parentheses), the rates the median of the rounds.

BM25 with k1=1.2, b=0.75 everywhere; each engine uses its own tokenizer with English stemming
(ragfind: its default analyzer; PISA: porter2 + its default stopwords; tantivy: ``en_stem``;
bm25s: PyStemmer english + its stopwords), so the result lists differ slightly.

- build: time from strings to a saved index (tokenization included), the build's peak RSS and
  the index size on disk.
- query: a new process loads the saved index (ragfind with ``mmap=True``); "loaded RSS" is the
  process RSS after loading and one warm-up pass minus the RSS after imports (what the index
  costs) and is shown beside the total peak. Then string queries end to end (tokenization
  included) at top-10 and top-1000, single thread and all threads:
  ragfind ``search`` per query (1 thread) and ``search_batch(threads=0)``; PISA a batch through
  ``PisaIndex.bm25(threads=...)`` (its fastest Python path; query_algorithm is PISA's default);
  tantivy ``searcher.search`` per query (all threads: a Python thread pool, tantivy-py releases
  the GIL while searching); bm25s one batched ``tokenize`` + ``retrieve`` (numba backend,
  ``n_threads``).

Rates are medians over ``--repeats`` timed passes after one warm-up pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
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
ENGINES = ("ragfind", "pisa", "tantivy", "bm25s")
K1, B = 1.2, 0.75
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(REPO / "python"))


# Corpus reading and process measurements are compare_bm25.py's (both run each engine in its own
# process the same way).
from compare_bm25 import current_rss_mb, dir_size_mb, peak_rss_mb, read_corpus  # noqa: E402


def _tantivy_schema():
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("id", stored=True, fast=True)
    # positions kept (tantivy's default; its query parser needs them for multi-token words)
    sb.add_text_field("body", stored=False, tokenizer_name="en_stem")
    return sb.build()


_WORD = re.compile(r"\w+")


def build_engine(engine: str, texts: list[str], out: Path) -> None:
    if engine == "ragfind":
        from ragfind import BM25Index

        index = BM25Index(method="lucene", k1=K1, b=B)
        index.add(texts)
        index.save(str(out))
    elif engine == "pisa":
        import pyterrier as pt  # noqa: F401
        from pyterrier_pisa import PisaIndex

        index = PisaIndex(str(out), threads=1, overwrite=True)
        index.index({"docno": str(i), "text": t} for i, t in enumerate(texts))
    elif engine == "tantivy":
        import tantivy

        out.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(_tantivy_schema(), path=str(out))
        writer = index.writer(heap_size=256 * 2**20, num_threads=1)
        for i, t in enumerate(texts):
            writer.add_document(tantivy.Document(id=i, body=t))
        writer.commit()
        writer.wait_merging_threads()
    elif engine == "bm25s":
        import bm25s
        import Stemmer

        tokens = bm25s.tokenize(
            texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
        )
        retriever = bm25s.BM25(method="lucene", k1=K1, b=B)
        retriever.index(tokens, show_progress=False)
        retriever.save(str(out))
    else:
        raise ValueError(f"unknown engine {engine!r}")


class Searcher:
    def __init__(self, engine: str, path: str):
        self.engine = engine
        if engine == "ragfind":
            from ragfind import BM25Index

            self.index = BM25Index.load(path, mmap=True)
        elif engine == "pisa":
            import pandas as pd
            import pyterrier as pt  # noqa: F401
            from pyterrier_pisa import PisaIndex

            self.pd = pd
            self.index = PisaIndex(path)
            self.pipes: dict = {}
        elif engine == "tantivy":
            import tantivy

            self.index = tantivy.Index.open(path)
            self.index.reload()
            self.searcher = self.index.searcher()
        elif engine == "bm25s":
            import bm25s
            import Stemmer

            self.bm25s = bm25s
            self.stemmer = Stemmer.Stemmer("english")
            self.index = bm25s.BM25.load(path, backend="numba", show_progress=False)

    def run(self, queries: list[str], k: int, threads: int) -> None:
        e = self.engine
        if e == "ragfind":
            if threads == 1:
                for q in queries:
                    self.index.search(q, k=k)
            else:
                self.index.search_batch(queries, k=k, threads=0)
        elif e == "pisa":
            key = (k, threads)
            if key not in self.pipes:
                self.pipes[key] = self.index.bm25(k1=K1, b=B, num_results=k, threads=threads)
            frame = self.pd.DataFrame({"qid": [str(i) for i in range(len(queries))], "query": queries})
            self.pipes[key].transform(frame)
        elif e == "tantivy":
            s, index = self.searcher, self.index

            def one(q: str):
                # query syntax characters dropped: plain words, OR-ed (tantivy's default)
                text = " ".join(_WORD.findall(q))
                if not text:
                    return None
                return s.search(index.parse_query(text, ["body"]), limit=k).hits

            if threads == 1:
                for q in queries:
                    one(q)
            else:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(os.cpu_count()) as pool:
                    list(pool.map(one, queries, chunksize=16))
        elif e == "bm25s":
            tokens = self.bm25s.tokenize(queries, stopwords="en", stemmer=self.stemmer, show_progress=False)
            kk = min(k, self.index.scores["num_docs"])
            self.index.retrieve(tokens, k=kk, n_threads=threads if threads == 1 else -1, show_progress=False)


def worker_build(task: dict) -> dict:
    texts, _ = read_corpus(task["corpus"])
    out = Path(task["out"])
    start = time.perf_counter()
    build_engine(task["engine"], texts, out)
    build_s = time.perf_counter() - start
    return {
        "build_s": build_s,
        "docs": len(texts),
        "build_peak_rss_mb": peak_rss_mb(),
        "disk_mb": dir_size_mb(out),
    }


def worker_query(task: dict) -> dict:
    _, queries = read_corpus(task["corpus"], texts_too=False)
    engine = task["engine"]
    if engine == "pisa":
        import pandas  # noqa: F401
        import pyterrier  # noqa: F401
        import pyterrier_pisa  # noqa: F401
    elif engine == "bm25s":
        import bm25s  # noqa: F401
    elif engine == "tantivy":
        import tantivy  # noqa: F401
    else:
        import ragfind  # noqa: F401
    import gc

    gc.collect()
    rss0 = current_rss_mb()
    t0 = time.perf_counter()
    s = Searcher(engine, task["index"])
    result: dict = {"queries": len(queries), "load_s": time.perf_counter() - t0, "rss_after_imports_mb": rss0}
    s.run(queries, 10, 1)  # warm-up: page in what a query touches
    result["loaded_rss_mb"] = current_rss_mb() - rss0
    for k in task["ks"]:
        for threads in task["threads"]:
            times, cpu = [], []
            s.run(queries, k, threads)
            for _ in range(task["repeats"]):
                t, c = time.perf_counter(), time.process_time()
                s.run(queries, k, threads)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
            result[f"qps_k{k}_t{threads}"] = len(queries) / statistics.median(times)
            if threads == 1:  # CPU time of the whole process: robust on a shared machine
                result[f"cpu_qps_k{k}_t1"] = len(queries) / statistics.median(cpu)
    result["query_peak_rss_mb"] = peak_rss_mb()
    return result


def run_worker(task: dict, timeout: float | None = None) -> dict:
    env = dict(os.environ)
    if task.get("single_thread_env"):
        env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1")
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
        return {
            "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}"
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def corpus_spec(name: str, data: Path) -> dict:
    if name in ("scifact", "cranfield"):
        return {"kind": "beir", "path": str(data / name)}
    m = re.fullmatch(r"synthetic_(\w+)", name)
    if not m:
        raise SystemExit(f"unknown corpus {name!r}")
    path = HERE / "data" / name
    if not (path / "docs.txt").exists():
        raise SystemExit(f"{path}/docs.txt missing: run bench/make_synthetic.py --out {path} first")
    return {"kind": "lines", "path": str(path)}


def fmt_table(label: str, res: dict) -> str:
    rows = res["engines"]
    ref = rows.get("ragfind", {})
    lines = [
        f"**{label}** ({res['docs']:,} documents, {res['queries']:,} queries)",
        "",
        "| engine | build s | on disk MB | loaded RSS MB | q/s 1 thr k=10 (CPU) | q/s all k=10 "
        "| q/s 1 thr k=1000 (CPU) | q/s all k=1000 | ragfind vs it, 1 thr k=10 (CPU) | k=1000 (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for engine, r in rows.items():
        if "error" in r:
            lines.append(f"| {engine} | failed: {r['error'][:120]} ||||||||||")
            continue

        def q(key, r=r):
            v = r.get(key)
            return f"{v:,.0f}" if v else "-"

        def ratio(key, r=r, engine=engine):
            paired = r.get(f"round_ratios_{key}")
            if engine != "ragfind" and paired and len(paired) > 1:
                return f"{statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f})"
            if engine == "ragfind" or not ref.get(key) or not r.get(key):
                return "-"
            return f"{ref[key] / r[key]:.2f}x"

        lines.append(
            f"| {engine} | {r['build_s']:.2f} | {r['disk_mb']:,.1f} | {r['loaded_rss_mb']:,.1f} | "
            f"{q('qps_k10_t1')} ({q('cpu_qps_k10_t1')}) | {q('qps_k10_t0')} | "
            f"{q('qps_k1000_t1')} ({q('cpu_qps_k1000_t1')}) | {q('qps_k1000_t0')} | "
            f"{ratio('cpu_qps_k10_t1')} | {ratio('cpu_qps_k1000_t1')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--corpora", default="scifact,cranfield,synthetic_1m")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1, help="query processes per engine (median taken)")
    p.add_argument("--max-queries", type=int, default=1000)
    p.add_argument("--no-all-threads", action="store_true")
    p.add_argument("--json", type=Path)
    p.add_argument("--workdir", type=Path, help="keep the indexes here (default: a temporary folder)")
    p.add_argument(
        "--reuse",
        default="",
        help="engines whose index in --workdir is queried as built by an earlier run (its build "
        "figures come from the .build.json saved beside it); the others are rebuilt",
    )
    args = p.parse_args(argv)
    if args.worker:
        task = json.loads(args.worker)
        fn = worker_build if task["op"] == "build" else worker_query
        print(json.dumps(fn(task)))
        return 0
    engines = [e for e in args.engines.split(",") if e]
    reuse = {e for e in args.reuse.split(",") if e}
    if reuse and not args.workdir:
        p.error("--reuse needs --workdir")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ragfind-engines-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}"
    }
    threads = [1] if args.no_all_threads else [1, 0]
    try:
        for name in args.corpora.split(","):
            spec = dict(corpus_spec(name, args.data), max_queries=args.max_queries)
            res: dict = {"engines": {}}
            tasks: dict = {}
            for engine in engines:
                path = workdir / f"{name}-{engine}"
                saved = workdir / f"{name}-{engine}.build.json"
                if engine in reuse and path.exists() and saved.exists():
                    b = json.loads(saved.read_text())
                    print(f"  {name} build {engine}: reused from {saved}", file=sys.stderr, flush=True)
                else:
                    if path.exists():
                        shutil.rmtree(path) if path.is_dir() else path.unlink()
                    b = run_worker({"op": "build", "engine": engine, "corpus": spec, "out": str(path)})
                    if "error" not in b:
                        saved.write_text(json.dumps(b))
                if "error" in b:
                    res["engines"][engine] = b
                    print(f"  {name} build {engine}: {b['error']}", file=sys.stderr, flush=True)
                    continue
                print(f"  {name} build {engine}: {b['build_s']:.2f} s", file=sys.stderr, flush=True)
                res["docs"] = b["docs"]
                res["engines"][engine] = b
                tasks[engine] = {
                    "op": "query",
                    "engine": engine,
                    "corpus": spec,
                    "index": str(path),
                    "ks": [10, 1000],
                    "threads": threads,
                    "repeats": args.repeats,
                }
            # Rounds interleaved across the engines, the order turning each round.
            order = list(tasks)
            rounds: dict = {engine: [] for engine in order}
            for r in range(args.rounds):
                for engine in order[r % len(order) :] + order[: r % len(order)]:
                    rounds[engine].append(run_worker(tasks[engine]))
            for engine in order:
                good = [x for x in rounds[engine] if "error" not in x]
                if not good:
                    res["engines"][engine] = rounds[engine][0]
                    err = rounds[engine][0]["error"]
                    print(f"  {name} query {engine}: {err}", file=sys.stderr, flush=True)
                    continue
                q = dict(good[0])
                for key in q:
                    if key.startswith(("qps_", "cpu_qps_")):
                        q[key] = statistics.median(x[key] for x in good)
                res["queries"] = q["queries"]
                res["engines"][engine] = {**res["engines"][engine], **q}
                print(
                    f"  {name} query {engine}: {q.get('qps_k10_t1', 0):,.0f} q/s (1 thr, k=10)",
                    file=sys.stderr,
                )
            ref_rounds = rounds.get("ragfind", [])
            for engine in order:
                if engine == "ragfind" or "error" in res["engines"][engine]:
                    continue
                for key in ("cpu_qps_k10_t1", "cpu_qps_k1000_t1"):
                    paired = [
                        a[key] / x[key]
                        for a, x in zip(ref_rounds, rounds[engine])
                        if a.get(key) and x.get(key)
                    ]
                    if paired:
                        res["engines"][engine][f"round_ratios_{key}"] = paired
            report[name] = res
            print(fmt_table(name, res) + "\n", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
