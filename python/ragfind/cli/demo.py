"""``ragfind demo``: ragfind's main job on its bundled defaults.

Builds the hybrid pipeline (``ragfind.Retriever``: BM25 + the offline all-MiniLM-L6-v2 encoder,
fused with RRF, over a SQLite store) on the demo knowledge base that ships inside the package
(``ragfind.data``), answers the demo queries (or the ones given with ``--query``) and prints the
ranked results with the time of each stage (embed, bm25, dense, fusion, store). ``--bm25-only``
runs the lexical stage alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

import ragfind
from ragfind import BM25Index
from ragfind.cli._common import k_value, positive_int
from ragfind.data import load_demo_corpus, load_demo_queries


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="index the bundled corpus and answer a few queries, with timings",
        description="Index the bundled demo knowledge base and answer a few queries, printing "
        "ranked results (id, score, title) and timings.",
    )
    p.add_argument("-k", "--top-k", type=k_value, default=3, help="results shown per query (default 3)")
    p.add_argument(
        "-q",
        "--query",
        action="append",
        dest="queries",
        metavar="TEXT",
        help="ask this instead of the bundled demo queries (repeatable)",
    )
    p.add_argument("--bm25-only", action="store_true", help="BM25 alone (no encoder, no fusion)")
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=20,
        help="times each query is run; the median latency is reported (default 20)",
    )
    p.set_defaults(func=run)


@dataclass
class StageTiming:
    """How long one stage took, in seconds, for one query (the median of the repeats)."""

    name: str
    seconds: float


@dataclass
class Answer:
    """The ranked documents for one query, best first, and the time each stage took."""

    query: str
    doc_ids: list[str]
    scores: list[float]
    timings: list[StageTiming] = field(default_factory=list)
    relevant: list[str] = field(default_factory=list)
    note: str = ""
    total: float | None = None  # wall time when stages overlap (hybrid: bm25 || dense)


def _median_time(fn, repeat: int):
    """Runs ``fn`` ``repeat`` times; returns its last result and the median wall time."""
    times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def build_bm25(documents: list[dict]):
    """Builds the BM25 stage over the demo documents (title + text, ids = document ids).

    Returns:
        ``(index, seconds)``: the ``ragfind.BM25Index`` and the wall time of the build.
    """
    start = time.perf_counter()
    index = BM25Index()
    index.add([f"{d['title']} {d['text']}" for d in documents], ids=[d["id"] for d in documents])
    return index, time.perf_counter() - start


def search_bm25(index, query: str, k: int, repeat: int) -> Answer:
    """Answers one query with the BM25 stage; the timing is the median of ``repeat`` runs."""
    (ids, scores), seconds = _median_time(lambda: index.search(query, k=k), repeat)
    return Answer(
        query=query,
        doc_ids=[str(i) for i in ids.tolist()],
        scores=[float(s) for s in scores.tolist()],
        timings=[StageTiming("bm25", seconds)],
    )


def build_hybrid(documents: list[dict], encoder="all-MiniLM-L6-v2"):
    """Builds the hybrid Retriever over the demo documents (category as metadata).

    Returns:
        ``(retriever, seconds)``: the ``ragfind.Retriever`` and the wall time of the build
        (chunking, embedding, indexing; the model load is not counted).
    """
    retriever = ragfind.Retriever(encoder=encoder)
    start = time.perf_counter()
    retriever.add_documents(
        [
            {"id": d["id"], "title": d["title"], "text": d["text"], "metadata": {"category": d["category"]}}
            for d in documents
        ]
    )
    return retriever, time.perf_counter() - start


def search_hybrid(retriever, query: str, k: int, repeat: int) -> Answer:
    """Answers one query with the hybrid pipeline; each stage's time is its median over
    ``repeat`` runs with the caches cleared (so every run embeds and searches)."""
    per_stage: dict[str, list[float]] = {}
    totals: list[float] = []
    result = None
    for _ in range(repeat):
        retriever.clear_cache()
        result = retriever.search(query, k=k)
        for name, seconds in result.timings.items():
            if name != "total":
                per_stage.setdefault(name, []).append(seconds)
        totals.append(result.timings["total"])
    answer = Answer(
        query=query,
        doc_ids=[p.doc_id for p in result],
        scores=[p.score for p in result],
        timings=[StageTiming(name, statistics.median(v)) for name, v in per_stage.items()],
        total=statistics.median(totals),
    )
    if not len(retriever.bm25.search(query, 1)[0]):
        answer.note = "no keyword match: semantic results only"
    return answer


def _format_ms(seconds: float) -> str:
    """Milliseconds, or microseconds below one millisecond (ASCII "us", safe on any console)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def print_answer(answer: Answer, titles: dict[str, str], number: int, total: int, out: TextIO) -> None:
    """Prints one query's ranked results (rank, id, score, title) and its stage timings."""
    stages = ", ".join(f"{t.name} {_format_ms(t.seconds)}" for t in answer.timings)
    print(f"\n[{number}/{total}] {answer.query!r}  ({stages})", file=out)
    if not answer.doc_ids:
        print("    no matching documents", file=out)
    if answer.note:
        print(f"    ({answer.note})", file=out)
    for rank, (doc_id, score) in enumerate(zip(answer.doc_ids, answer.scores), 1):
        mark = "  *" if doc_id in answer.relevant else ""
        shown = f"{score:8.3f}" if abs(score) >= 0.1 else f"{score:8.4f}"
        print(f"    {rank:>2}. {doc_id:<10} {shown}  {titles.get(doc_id, '')}{mark}", file=out)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Runs the demo; returns the process exit code (0 on success)."""
    out = out if out is not None else sys.stdout
    if args.top_k < 1:
        raise SystemExit(f"ragfind demo: --top-k must be >= 1, got {args.top_k}")
    if args.repeat < 1:
        raise SystemExit(f"ragfind demo: --repeat must be >= 1, got {args.repeat}")

    documents = load_demo_corpus()
    titles = {d["id"]: d["title"] for d in documents}
    if args.queries:
        queries = [{"query": q, "relevant": []} for q in args.queries]
    else:
        queries = load_demo_queries()

    if args.bm25_only:
        index, build_seconds = build_bm25(documents)
        what = "BM25"
    else:
        index, build_seconds = build_hybrid(documents)
        what = f"hybrid BM25 + all-MiniLM-L6-v2 with RRF, {index.n_chunks} chunks"
    print(
        f"ragfind demo: {what} over the bundled knowledge base ({len(documents)} documents)\n"
        f"index build: {_format_ms(build_seconds)}",
        file=out,
    )
    if not args.queries:
        print("(* marks a document the demo query is meant to find)", file=out)

    answers = []
    for number, item in enumerate(queries, 1):
        if args.bm25_only:
            answer = search_bm25(index, item["query"], args.top_k, args.repeat)
        else:
            answer = search_hybrid(index, item["query"], args.top_k, args.repeat)
        answer.relevant = list(item.get("relevant", []))
        answers.append(answer)
        print_answer(answer, titles, number, len(queries), out)

    latencies = sorted(a.total if a.total is not None else sum(t.seconds for t in a.timings) for a in answers)
    print(
        f"\nlatency per query (median of {args.repeat} runs each): "
        f"p50 {_format_ms(statistics.median(latencies))}, max {_format_ms(latencies[-1])} "
        f"over {len(answers)} queries",
        file=out,
    )
    return 0
