"""Search and write latency while a node dies: a ShardedRetriever on a real 3-node Ray cluster
on this machine (a head without CPUs and worker nodes A and B started with ``ray start`` on
loopback, tests/distributed/ray_cluster.py), 2 shards x 2 copies placed one per worker node.

One thread searches without pause and another adds a batch of documents every
``--write-every-ms``; after ``--before-s`` seconds worker node A is SIGKILLed (its raylet and
agents, and the workers holding its copies; ``--fault stop``: SIGSTOPped, a partition, resumed
at the end), and both go on for ``--after-s`` seconds. Every
search and write is timed against the moment of the kill. At the end the sharded answers are
compared with one Retriever over the acknowledged documents, and every acknowledged document
is looked up.

Run: ``RAGFIND_DATA=../shared/data PYTHONPATH=python python bench/compare_distributed_node_death.py``
(about two minutes; bench/distributed.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "distributed"))


def windows(events: list, kill_at: float) -> list:
    """Rows of (window, count, p50, p90, p99, max in ms, errors) by start time against the kill."""
    spans = [
        ("before the fault", -1e9, 0.0),
        ("0-1 s after", 0.0, 1.0),
        ("1-3 s after", 1.0, 3.0),
        ("3 s after and later", 3.0, 1e9),
    ]
    out = []
    for name, lo, hi in spans:
        sel = [e for e in events if lo <= e[0] - kill_at < hi]
        ok = sorted(e[1] * 1e3 for e in sel if e[2] is None)
        errors = [e[2] for e in sel if e[2] is not None]
        if not ok:
            out.append((name, len(sel), None, None, None, None, len(errors)))
            continue

        p90, p99 = (ok[min(len(ok) - 1, int(p * len(ok)))] for p in (0.9, 0.99))
        out.append((name, len(sel), statistics.median(ok), p90, p99, ok[-1], len(errors)))
    return out


def driver(args: argparse.Namespace) -> None:
    from ray_cluster import connect
    from sharded_helpers import load_collection

    import ragfind
    from ragfind.distributed import ShardedRetriever

    ray = connect(args.address)
    c = load_collection("cranfield")
    docs, queries = c["docs"], [q for _, q in c["queries"]]
    opts = dict(encoder=None, chunk_size=None, cache_size=0)
    sharded = ShardedRetriever(2, replicas=2, work_dir=args.work_dir, deadline=args.deadline, **opts)
    first, rest = docs[:800], docs[800:]
    sharded.add_documents(first)
    acked = [d["id"] for d in first]
    nodes = {n["NodeID"]: sorted(k for k in n["Resources"] if k.startswith("node_")) for n in ray.nodes()}
    on_a = []
    for reps in sharded._actors:
        for a in reps:
            info = ray.get(a.info.remote(), timeout=30)
            if nodes.get(info["node"]) == ["node_a"]:
                on_a.append(info["pid"])
    for q in queries[:50]:  # warm: the router's statistics and every copy's first search
        sharded.search(q, k=10)

    stop = threading.Event()
    searches: list = []
    writes: list = []

    def search_loop() -> None:
        i = 0
        while not stop.is_set():
            q = queries[i % len(queries)]
            i += 1
            t = time.monotonic()
            err = None
            try:
                sharded.search(q, k=10)
            except Exception as exc:  # counted, as a user would see it
                err = type(exc).__name__
            searches.append((t, time.monotonic() - t, err))

    def write_loop() -> None:
        i = 0
        while not stop.is_set() and i < len(rest):
            batch = rest[i : i + args.batch]
            i += args.batch
            t = time.monotonic()
            err = None
            try:
                sharded.add_documents(batch)
                acked.extend(d["id"] for d in batch)
            except Exception as exc:
                err = type(exc).__name__
            writes.append((t, time.monotonic() - t, err))
            stop.wait(args.write_every_ms / 1e3)

    threads = [threading.Thread(target=search_loop), threading.Thread(target=write_loop)]
    for t in threads:
        t.start()
    time.sleep(args.before_s)
    kill_at = time.monotonic()
    sig = signal.SIGKILL if args.fault == "kill" else signal.SIGSTOP
    os.killpg(args.node_a_group, sig)
    for pid in on_a:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    time.sleep(args.after_s)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    if args.fault == "stop":  # the partition heals: node A's copies rejoin
        os.killpg(args.node_a_group, signal.SIGCONT)
        for pid in on_a:
            os.kill(pid, signal.SIGCONT)

    single = ragfind.Retriever(**opts)
    have = set(acked)
    single.add_documents([d for d in docs if d["id"] in have])
    lost = 0
    for d in acked:
        try:
            sharded.get_document(d)
        except KeyError:
            lost += 1
    equal = all(
        [(p.doc_id, round(p.score, 5)) for p in sharded.search(q, k=10)]
        == [(p.doc_id, round(p.score, 5)) for p in single.search(q, k=10)]
        for q in queries[:100]
    )
    print(
        json.dumps(
            {
                "searches": windows(searches, kill_at),
                "writes": windows(writes, kill_at),
                "max_search_s": max(e[1] for e in searches),
                "max_write_s": max(e[1] for e in writes),
                "acked": len(acked),
                "lost": lost,
                "stored": len(sharded),
                "equal": equal,
                "killed_copies": len(on_a),
                "slow": sorted(
                    (round(e[0] - kill_at, 3), kind, round(e[1], 3), e[2])
                    for kind, events in (("search", searches), ("write", writes))
                    for e in events
                    if e[1] > 0.1
                ),
                "deadline": args.deadline,
            }
        )
    )
    sharded.close()
    ray.shutdown()


def table(rows: list) -> str:
    out = [
        "| window | n | p50 ms | p90 ms | p99 ms | max ms | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, n, p50, p90, p99, mx, errors in rows:
        cells = ["-" if v is None else f"{v:.2f}" for v in (p50, p90, p99, mx)]
        out.append(f"| {name} | {n} | {' | '.join(cells)} | {errors} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--fault",
        choices=("kill", "stop"),
        default="kill",
        help="SIGKILL node A, or SIGSTOP it (a partition)",
    )
    ap.add_argument("--before-s", type=float, default=5.0)
    ap.add_argument("--after-s", type=float, default=10.0)
    ap.add_argument("--deadline", type=float, default=2.0, help="ShardedRetriever deadline (default 2 s)")
    ap.add_argument("--batch", type=int, default=10, help="documents per add")
    ap.add_argument("--write-every-ms", type=float, default=100.0)
    ap.add_argument(
        "--driver", nargs=3, metavar=("WORK_DIR", "NODE_A_GROUP", "ADDRESS"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.driver:
        args.work_dir, group, args.address = args.driver
        args.node_a_group = int(group)
        driver(args)
        return
    from ray_cluster import LocalCluster

    passed = ["--fault", args.fault, "--before-s", str(args.before_s), "--after-s", str(args.after_s)]
    passed += ["--deadline", str(args.deadline), "--batch", str(args.batch)]
    passed += ["--write-every-ms", str(args.write_every_ms)]
    with LocalCluster() as cluster:
        work = cluster.root / "work"
        node_a = str(cluster.nodes["node_a"].pid)
        # run_driver appends the cluster's address: the last of --driver's three values.
        got = cluster.run_driver([__file__, *passed, "--driver", str(work), node_a], timeout=600)
    deadline = got["deadline"]
    what = "kill" if args.fault == "kill" else "SIGSTOP"
    print(
        f"searches (one thread, no pause), by start time against the {what} of node A; deadline {deadline} s"
    )
    print(table(got["searches"]))
    print(f"\nwrites ({args.batch} documents every {args.write_every_ms:g} ms)")
    print(table(got["writes"]))
    print(
        f"\nmax search {got['max_search_s'] * 1e3:.0f} ms, max write {got['max_write_s'] * 1e3:.0f} ms; "
        f"{got['acked']} documents acknowledged, {got['lost']} lost, {got['stored']} stored; "
        f"equal to one Retriever: {got['equal']}; copies on node A: {got['killed_copies']}"
    )
    print("over 100 ms (start against the fault, s; what; took, s; error):")
    for row in got["slow"]:
        print("  ", *row)


if __name__ == "__main__":
    main()
