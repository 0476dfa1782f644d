"""Where a BM25-only ``Retriever.search`` spends its time: each part of the search on its own,
every SciFact query per round, p50 per part, median over rounds (perf counters; the parts run
with the results of the earlier ones, so their sum misses only the search body's own glue).

Usage:
    PYTHONPATH=python RAGFIND_DATA=../shared/data python bench/profile_search_parts.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import ragfind
from compare_pipeline_engine import scifact
from ragfind.pipeline.filters import check_filters
from ragfind.pipeline.highlights import LazyHighlighter
from ragfind.pipeline.results import pending_of_text
from ragfind.pipeline.retriever import _check_queries, _positive_int


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    docs, queries = scifact()
    r = ragfind.Retriever(encoder=None, cache_size=0)
    r.add_documents(docs)
    runner = r.stage_runner
    found = {q: runner.first_stage(r.first_stages, (q,), 10, None, {}) for q in queries}
    one = {q: r._one_list(found[q].lists, found[q].names, 10) for q in queries}
    pending = pending_of_text(None)
    parts = {
        "Retriever.search (whole)": lambda q: r.search(q, k=10),
        "BM25Index.search": lambda q: r.bm25.search(q, 10),
        "checks (query, k, filters, stages)": lambda q: (
            _check_queries(q),
            _positive_int(10, "k"),
            check_filters(None),
            r._select_stages(None),
            runner.compile_filters(None),
        ),
        "first stage (runner + BM25 stage)": lambda q: runner.first_stage(r.first_stages, (q,), 10, None, {}),
        "RRF of the one list": lambda q: r._one_list(found[q].lists, found[q].names, 10),
        "10 passages from the columns": lambda q: runner.passages(
            one[q][0], one[q][1], found[q].lists[0][1], "bm25", pending
        ),
        "highlighter (pending)": lambda q: LazyHighlighter((q,), r._analyzer()),
    }
    p50: dict = {k: [] for k in parts}
    for _ in range(args.rounds):
        for name, f in parts.items():
            ts = []
            for q in queries:
                t = time.perf_counter()
                f(q)
                ts.append(time.perf_counter() - t)
            p50[name].append(statistics.median(ts) * 1e6)
    for name, v in p50.items():
        print(f"| {name} | {statistics.median(v):.1f} us |")


if __name__ == "__main__":
    main()
