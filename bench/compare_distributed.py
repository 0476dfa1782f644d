"""ShardedRetriever vs one Retriever on SciFact (shared MiniLM embeddings, no model): indexing
throughput and query latency for 1..N shards on a local Ray, in one process run, for each way
a search calls the shards (``--fanout``: ``graph``, a Ray Compiled Graph; ``calls``, ordinary
actor calls).

    PYTHONPATH=python python bench/compare_distributed.py --shards 1 2 4 --queries 100 --rounds 3 --repeats 2

For each shard count a router of each fan-out is built, measured over ``--rounds`` rounds of
the queries and closed, the fan-outs alternated ``--repeats`` times (one router at a time: an
idle graph's actors poll their channels); latencies are the medians over all rounds of each
round's median (p90 likewise). Prints a table: documents/s indexed, median and
p90 search latency (BM25 only and hybrid), each as a ratio to the single Retriever measured in
the same run, the router's CPU per BM25 query (this process's CPU time over the query loop)
and the rounds of shard calls per query (BM25, hybrid: above 1.0 when passages were fetched
after the lists); the median of a bare actor round trip (a no-op method) and of a fan-out of
N no-op calls to N actors gathered with one ray.get (the floor of one round of ordinary calls
over N shards, with the router CPU it takes) in the same run, and the target line (local p50
+ 2 bare round trips); then the throughput with 8 client threads. The sharded results are
checked equal to the single Retriever's (scores, 1e-6 relative) on every query measured.
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


def scifact_on_ray(cpus: int) -> tuple:
    """Starts a local Ray with ``cpus`` CPUs (its workers see this PYTHONPATH) and returns
    SciFact (``load_collection``'s dict) and the Retriever options every script here uses:
    the shared MiniLM embeddings, one chunk per document, no caches."""
    import ray
    from sharded_helpers import load_collection

    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}},
    )
    c = load_collection("scifact")
    return c, dict(encoder=c["encoder"], chunk_size=None, contextualize=False, cache_size=0)


class _Echo:
    def ping(self) -> int:
        return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the queries per router")
    ap.add_argument("--repeats", type=int, default=2, help="routers built per shard count and fan-out")
    ap.add_argument("--fanout", nargs="+", default=["graph", "calls"], choices=["graph", "calls"])
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    import ray

    import ragfind
    from ragfind.distributed import ShardedRetriever
    from ragfind.distributed.fanout import SearchGraph
    from ragfind.distributed.replication import Copies

    c, opts = scifact_on_ray(args.cpus)
    docs = c["docs"]
    queries = [q for _, q in c["queries"][: args.queries]]
    rows = []
    t = time.perf_counter()
    single = ragfind.Retriever(**opts)
    single.add_documents(docs)
    t_single = time.perf_counter() - t
    local_b = [_lat(lambda q: single.search(q, 10, stages=["bm25"]), queries) for _ in range(args.rounds)]
    local_h = [_lat(lambda q: single.search(q, 10), queries) for _ in range(args.rounds)]
    rows.append(("Retriever", "-", len(docs) / t_single, local_b, local_h, 0.0, None))
    extra = []
    with ThreadPoolExecutor(8) as pool:
        t = time.perf_counter()
        list(pool.map(lambda q: single.search(q, 10, stages=["bm25"]), queries * 3))
        extra.append(f"Retriever: 8 client threads: {3 * len(queries) / (time.perf_counter() - t):.0f} q/s")
    echo = ray.remote(_Echo).remote()
    ray.get(echo.ping.remote())
    rtt = _lat(lambda q: ray.get(echo.ping.remote()), queries * 3)
    fanout_floor, fanout_cpu = {}, {}
    for n in args.shards:
        echoes = [ray.remote(_Echo).remote() for _ in range(n)]
        ray.get([e.ping.remote() for e in echoes])
        cpu = time.process_time()
        fanout_floor[n] = _lat(lambda q, es=echoes: ray.get([e.ping.remote() for e in es]), queries * 3)
        fanout_cpu[n] = (time.process_time() - cpu) / (3 * len(queries))
        for e in echoes:
            ray.kill(e)
    # Rounds of shard calls: ordinary rounds (Copies.read) and graph rounds.
    rounds = [0]
    read, call = Copies.read, SearchGraph.call

    def counted(self, *a, **kw):
        rounds[0] += 1
        return read(self, *a, **kw)

    def counted_call(self, *a, **kw):
        out = call(self, *a, **kw)
        if isinstance(out, tuple):
            rounds[0] += 1
        return out

    Copies.read = counted
    SearchGraph.call = counted_call
    for n in args.shards:
        # One router at a time (an idle graph's actors poll their channels: it would weigh on
        # the other's rounds), fan-outs alternated over --repeats.
        lat = {w: ([], [], [], [0, 0], [], []) for w in args.fanout}  # BM25, hybrid, CPU, rounds, docs/s, q/s
        for rep in range(args.repeats):
            for way in args.fanout[:: 1 if rep % 2 == 0 else -1]:
                lb, lh, cpu_l, calls, dps, qps = lat[way]
                sr = ShardedRetriever(n, fanout=way, **opts)
                t = time.perf_counter()
                for i in range(0, len(docs), 1000):
                    sr.add_documents(docs[i : i + 1000])
                dps.append(len(docs) / (time.perf_counter() - t))
                if way == "graph" and not sr._graph.wait_ready(300):
                    raise RuntimeError("the search graph did not come up in 300 s")
                for _ in range(args.rounds):
                    rounds[0] = 0
                    cpu = time.process_time()
                    lb.append(_lat(lambda q, sr=sr: sr.search(q, 10, stages=["bm25"]), queries))
                    cpu_l.append((time.process_time() - cpu) / len(queries))
                    calls[0] += rounds[0]
                    rounds[0] = 0
                    lh.append(_lat(lambda q, sr=sr: sr.search(q, 10), queries))
                    calls[1] += rounds[0]
                for q in queries:
                    a = [p.score for p in single.search(q, 10)]
                    b = [p.score for p in sr.search(q, 10)]
                    np.testing.assert_allclose(b, a, rtol=1e-6)
                with ThreadPoolExecutor(8) as pool:
                    t = time.perf_counter()
                    list(pool.map(lambda q, sr=sr: sr.search(q, 10, stages=["bm25"]), queries * 3))
                    qps.append(3 * len(queries) / (time.perf_counter() - t))
                sr.close()
        for way, (lb, lh, cpu_l, calls, dps, qps) in lat.items():
            extra.append(
                f"ShardedRetriever({n}, fanout={way!r}): 8 client threads: {statistics.median(qps):.0f} q/s"
            )
            done = args.repeats * args.rounds * len(queries)
            per_query = (calls[0] / done, calls[1] / done)
            rows.append(
                (
                    f"ShardedRetriever({n})",
                    way,
                    statistics.median(dps),
                    lb,
                    lh,
                    statistics.median(cpu_l),
                    per_query,
                )
            )
        extra.append(
            f"fan-out of {n} no-op ordinary calls: median {statistics.median(fanout_floor[n]) * 1e3:.2f} ms, "
            f"router CPU {fanout_cpu[n] * 1e3:.2f} ms"
        )

    def med(rounds_of: list, pct: float = 50) -> float:
        return statistics.median(float(np.percentile(r, pct)) for r in rounds_of) * 1e3

    base = rows[0]
    print(
        f"SciFact {len(docs)} docs, {len(queries)} queries x {args.rounds} rounds x {args.repeats} routers, "
        f"local Ray num_cpus={args.cpus}"
    )
    bare = statistics.median(rtt) * 1e3
    print(f"bare actor round trip: median {bare:.2f} ms")
    print(
        f"target (local p50 + 2 bare round trips): BM25 {med(base[3]) + 2 * bare:.2f} ms, "
        f"hybrid {med(base[4]) + 2 * bare:.2f} ms"
    )
    print(
        "| retriever | fan-out | docs/s indexed | BM25 median ms (ratio) | BM25 p90 ms "
        "| hybrid median ms (ratio) | hybrid p90 ms | router CPU ms/BM25 query "
        "| call rounds/query (BM25, hybrid) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, way, dps, lb, lh, cpu, per_query in rows:
        mb, mh = med(lb), med(lh)
        rb, rh = mb / med(base[3]), mh / med(base[4])
        rounds_txt = "-" if per_query is None else f"{per_query[0]:.2f}, {per_query[1]:.2f}"
        cpu_txt = "-" if per_query is None else f"{cpu * 1e3:.2f}"
        print(
            f"| {name} | {way} | {dps:,.0f} | {mb:.2f} ({rb:.1f}x) | {med(lb, 90):.2f} "
            f"| {mh:.2f} ({rh:.1f}x) | {med(lh, 90):.2f} | {cpu_txt} | {rounds_txt} |"
        )
    for line in extra:
        print(line)
    ray.shutdown()


if __name__ == "__main__":
    main()
