"""The floor under a sharded search: Ray's own cost of calling 1, 2 and 4 actors at once, as
ordinary actor calls (what the router makes) and through a Ray Compiled Graph (shared-memory
channels set up once), same run, rounds interleaved, medians. The actors return their argument.

Usage:
    python bench/compare_ray_fanout.py [--calls 300] [--rounds 5] [--payload-bytes 0] [--work-ms 0]

``--work-ms``: each call first keeps its actor's CPU busy that long (a shard's own work: the
floor of a fan-out whose shards share the machine's cores).

Prints a markdown table: p50 ms per fan-out for each way and actor count.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--payload-bytes", type=int, default=0, help="bytes each actor returns")
    ap.add_argument("--work-ms", type=float, default=0.0, help="CPU each call spends first")
    args = ap.parse_args()

    import ray
    from ray.dag import InputNode, MultiOutputNode

    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=4)

    @ray.remote(num_cpus=0)
    class Echo:
        def __init__(self, size: int, work_ms: float) -> None:
            self.payload = b"x" * size
            self.work = work_ms / 1e3

        def call(self, x):
            if self.work:
                end = time.thread_time() + self.work
                while time.thread_time() < end:
                    pass
            return self.payload or x

    actors = [Echo.remote(args.payload_bytes, args.work_ms) for _ in range(4)]
    ray.get([a.call.remote(0) for a in actors])
    # An actor serves one compiled graph at a time (its loop runs the graph): own actors each.
    graphs = {}
    for n in (1, 2, 4):
        own = [Echo.remote(args.payload_bytes, args.work_ms) for _ in range(n)]
        ray.get([a.call.remote(0) for a in own])
        with InputNode() as inp:
            dag = MultiOutputNode([a.call.bind(inp) for a in own])
        graphs[n] = dag.experimental_compile()
    ways = {}
    for n in (1, 2, 4):
        ways[("ordinary calls", n)] = lambda n=n: ray.get([a.call.remote(1) for a in actors[:n]])
        ways[("compiled graph", n)] = lambda n=n: ray.get(graphs[n].execute(1))
    for f in ways.values():
        for _ in range(20):
            f()
    p50: dict = {w: [] for w in ways}
    for rnd in range(args.rounds):
        for w in list(ways)[:: 1 if rnd % 2 == 0 else -1]:
            ts = []
            for _ in range(args.calls):
                t = time.perf_counter()
                ways[w]()
                ts.append(time.perf_counter() - t)
            p50[w].append(statistics.median(ts) * 1e3)
    print("| way | 1 actor | 2 actors | 4 actors |")
    print("|---|---:|---:|---:|")
    for way in ("ordinary calls", "compiled graph"):
        cells = [f"{statistics.median(p50[(way, n)]):.3f} ms" for n in (1, 2, 4)]
        print(f"| {way} | " + " | ".join(cells) + " |")
    for g in graphs.values():
        g.teardown()
    ray.shutdown()


if __name__ == "__main__":
    main()
