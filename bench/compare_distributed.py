"""ShardedRetriever vs one Retriever on SciFact (shared MiniLM embeddings, no model): indexing
throughput and query latency for 1..N shards on a local Ray, in one process run.

    PYTHONPATH=python python bench/compare_distributed.py --shards 1 2 4 --queries 100

Prints a table: documents/s indexed, median and p90 search latency (BM25 only and hybrid),
each as a ratio to the single Retriever measured in the same run, the router's CPU per BM25
query (this process's CPU time over the query loop) and the rounds of shard calls per query
(BM25, hybrid: above 1.0 when passages were fetched after the lists); the median of a bare
actor round trip (a no-op method) and of a fan-out of N no-op calls to N actors gathered with
one ray.get (the floor of one round over N shards, with the router CPU it takes) in the same
run; then the latency of a query's first search and the throughput with 8 client threads. The
router keeps the collection statistics, so a query's first search is one round too. The
sharded results are checked equal to the single Retriever's (scores, 1e-6 relative) on every
query measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "distributed"))


def _lat(fn, queries) -> list:
    out = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        out.append(time.perf_counter() - t)
    return out


class _Echo:
    def ping(self) -> int:
        return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    import ray
    from sharded_helpers import load_collection

    import ragfind
    from ragfind.distributed import ShardedRetriever
    from ragfind.distributed.replication import Copies

    ray.init(
        num_cpus=args.cpus,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}},
    )
    c = load_collection("scifact")
    docs = c["docs"]
    queries = [q for _, q in c["queries"][: args.queries]]
    opts = dict(encoder=c["encoder"], chunk_size=None, contextualize=False, cache_size=0)
    rows = []
    t = time.perf_counter()
    single = ragfind.Retriever(**opts)
    single.add_documents(docs)
    t_single = time.perf_counter() - t
    lat_b = _lat(lambda q: single.search(q, 10, stages=["bm25"]), queries)
    lat_h = _lat(lambda q: single.search(q, 10), queries)
    rows.append(("Retriever", len(docs) / t_single, lat_b, lat_h, 0.0, None))
    extra = []
    with ThreadPoolExecutor(8) as pool:
        t = time.perf_counter()
        list(pool.map(lambda q: single.search(q, 10, stages=["bm25"]), queries * 3))
        extra.append(f"Retriever: 8 client threads: {3 * len(queries) / (time.perf_counter() - t):.0f} q/s")
    echo = ray.remote(_Echo).remote()
    ray.get(echo.ping.remote())
    rtt = _lat(lambda q: ray.get(echo.ping.remote()), queries * 3)
    fanout, fanout_cpu = {}, {}
    for n in args.shards:
        echoes = [ray.remote(_Echo).remote() for _ in range(n)]
        ray.get([e.ping.remote() for e in echoes])
        cpu = time.process_time()
        fanout[n] = _lat(lambda q, es=echoes: ray.get([e.ping.remote() for e in es]), queries * 3)
        fanout_cpu[n] = (time.process_time() - cpu) / (3 * len(queries))
        for e in echoes:
            ray.kill(e)
    rounds = [0]
    read = Copies.read

    def counted(self, *a, **kw):
        rounds[0] += 1
        return read(self, *a, **kw)

    Copies.read = counted
    for n in args.shards:
        sr = ShardedRetriever(n, **opts)
        t = time.perf_counter()
        for i in range(0, len(docs), 1000):
            sr.add_documents(docs[i : i + 1000])
        t_add = time.perf_counter() - t
        rounds[0] = 0
        cold = _lat(lambda q, sr=sr: sr.search(q, 10, stages=["bm25"]), queries)  # first time
        cold_rounds = rounds[0] / len(queries)
        rounds[0] = 0
        cpu = time.process_time()
        lb = _lat(lambda q, sr=sr: sr.search(q, 10, stages=["bm25"]), queries)
        cpu = (time.process_time() - cpu) / len(queries)
        per_query = rounds[0] / len(queries)
        rounds[0] = 0
        lh = _lat(lambda q, sr=sr: sr.search(q, 10), queries)
        per_query_h = rounds[0] / len(queries)
        for q in queries:
            a = [p.score for p in single.search(q, 10)]
            b = [p.score for p in sr.search(q, 10)]
            np.testing.assert_allclose(b, a, rtol=1e-6)
        with ThreadPoolExecutor(8) as pool:
            t = time.perf_counter()
            list(pool.map(lambda q, sr=sr: sr.search(q, 10, stages=["bm25"]), queries * 3))
            qps = 3 * len(queries) / (time.perf_counter() - t)
        extra.append(
            f"ShardedRetriever({n}): first search of a query median {statistics.median(cold) * 1e3:.2f} ms "
            f"({cold_rounds:.1f} rounds); 8 client threads: {qps:.0f} q/s; fan-out of {n} no-op calls "
            f"median {statistics.median(fanout[n]) * 1e3:.2f} ms, router CPU {fanout_cpu[n] * 1e3:.2f} ms"
        )
        rows.append((f"ShardedRetriever({n})", len(docs) / t_add, lb, lh, cpu, (per_query, per_query_h)))
        sr.close()
    base = rows[0]
    print(f"SciFact {len(docs)} docs, {len(queries)} queries, local Ray num_cpus={args.cpus}")
    print(f"bare actor round trip: median {statistics.median(rtt) * 1e3:.2f} ms")
    print(
        "| retriever | docs/s indexed | BM25 median ms (ratio) | BM25 p90 ms | hybrid median ms (ratio) "
        "| hybrid p90 ms | router CPU ms/BM25 query | call rounds/query (BM25, hybrid) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, dps, lb, lh, cpu, per_query in rows:
        mb, mh = statistics.median(lb) * 1e3, statistics.median(lh) * 1e3
        rb, rh = mb / (statistics.median(base[2]) * 1e3), mh / (statistics.median(base[3]) * 1e3)
        p90, p90h = float(np.percentile(lb, 90)) * 1e3, float(np.percentile(lh, 90)) * 1e3
        rounds_txt = "-" if per_query is None else f"{per_query[0]:.2f}, {per_query[1]:.2f}"
        cpu_txt = "-" if per_query is None else f"{cpu * 1e3:.2f}"
        print(
            f"| {name} | {dps:,.0f} | {mb:.2f} ({rb:.1f}x) | {p90:.2f} | {mh:.2f} ({rh:.1f}x) "
            f"| {p90h:.2f} | {cpu_txt} | {rounds_txt} |"
        )
    for line in extra:
        print(line)
    ray.shutdown()


if __name__ == "__main__":
    main()
