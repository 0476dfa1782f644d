"""``ragfind bench``: latency of a saved retriever: p50/p95 per stage and the cache-hit path."""

from __future__ import annotations

import argparse
import statistics
import time

import ragfind
from ragfind.cli._common import k_value, ms, positive_int


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure search latency (per stage, p50/p95) and cache-hit latency")
    p.add_argument("index", help="a retriever folder")
    p.add_argument(
        "--queries", default=None, help="file of queries, one per line (default: chunk texts' first words)"
    )
    p.add_argument("-n", type=positive_int, default=200, help="queries to time (default 200)")
    p.add_argument("-k", type=k_value, default=10, help="passages per search (default 10)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def percentile(values: list, q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))]


def run(args: argparse.Namespace) -> int:
    """Times cold searches (caches cleared per query) then cache hits; prints a table."""
    from tqdm.auto import tqdm  # import cost: only a progress bar needs it

    retriever = ragfind.Retriever.load(args.index)
    if args.queries:
        with open(args.queries, encoding="utf-8") as f:
            queries = [line.strip() for line in f if line.strip()][: args.n]
    else:
        queries = [" ".join(t.split()[:8]) for t in retriever.store.chunk_texts(args.n) if t.split()]
    if not queries:
        raise SystemExit("ragfind bench: no queries")
    for q in queries[:5]:  # warm-up
        retriever.search(q, k=args.k, use_cache=False)
    stages: dict = {}
    for q in tqdm(queries, desc="search", unit="query", disable=args.quiet):
        retriever.clear_cache()
        res = retriever.search(q, k=args.k)
        for name, sec in res.timings.items():
            stages.setdefault(name, []).append(sec)
    hits = []
    for q in queries:
        retriever.search(q, k=args.k)
        t = time.perf_counter()
        res = retriever.search(q, k=args.k)
        hits.append(time.perf_counter() - t)
        assert res.cached
    print(f"ragfind bench: {len(queries)} queries, k={args.k}, {retriever!r}")
    print(f"{'stage':>8}  {'p50':>10}  {'p95':>10}")
    for name, values in stages.items():
        print(f"{name:>8}  {ms(statistics.median(values)):>10}  {ms(percentile(values, 95)):>10}")
    print(f"{'cache hit':>8}  {ms(statistics.median(hits)):>10}  {ms(percentile(hits, 95)):>10}")
    return 0
