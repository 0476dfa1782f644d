"""The drivers of test_sharded_cluster_faults.py, each run in its own process against the
cluster at the last argument; each prints what it saw as JSON lines (the last one is the
result):

- ``stop_node WORK_DIR PID``: a stream of writes and searches on 2 shards x 2 copies (one per
  worker node) while worker node A (``ray start`` process ``PID`` and every process under it)
  is SIGSTOPped for 4 deadlines, then SIGCONTed; then waits for its copies to rejoin and
  compares the copies.
- ``writer WORK_DIR NAME MODE``: creates the named collection ``NAME`` and adds batches until
  it is killed, printing each acknowledged batch once ``add_documents`` has returned; with
  MODE ``torn``, the 7th batch reaches shard 0 only and the process exits (a router dying
  between its shards' parts of one add).
- ``attach NAME KILLED_AT``: attaches to ``NAME`` (its router killed at wall time
  ``KILLED_AT``), searches, waits for every copy to be in sync, reports what is stored and
  destroys the collection."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ray_cluster import connect  # noqa: E402 - found through the path above

DEADLINE = 2.0
SHARDS = 2
OPTS = dict(encoder=None, chunk_size=None, cache_size=0)


def _docs():
    from sharded_helpers import load_collection

    c = load_collection("cranfield")
    return c["docs"], [q for _, q in c["queries"][:10]]


def _copies_report(sharded, ray, wait: float) -> dict:
    """Waits up to ``wait`` s for every copy to be in sync, then what each copy holds."""
    end = time.monotonic() + wait
    while time.monotonic() < end and any(len(s) < 2 for s in sharded._copies.in_sync):
        time.sleep(0.2)
    digests = [[ray.get(a.digest.remote(), timeout=30) for a in reps] for reps in sharded._actors]
    return {
        "in_sync": [sorted(s) for s in sharded._copies.in_sync],
        "diverged": [s for s, d in enumerate(digests) if d[0] != d[1]],
        "stored_ids": sorted(i for d in digests for i in d[0]["ids"]),
    }


def _emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def stop_node(work_dir: str, node_pid: int, address: str) -> None:
    from ray_cluster import descendants, signal_all

    import ragfind
    from ragfind.distributed import ShardedRetriever, ShardUnavailableError

    ray = connect(address)
    docs, queries = _docs()
    # Asked for the search graph: none is built over copies on other nodes than the router's.
    sharded = ShardedRetriever(
        SHARDS, replicas=2, work_dir=work_dir, deadline=DEADLINE, fanout="graph", **OPTS
    )
    nodes = {n["NodeID"]: sorted(k for k in n["Resources"] if k.startswith("node_")) for n in ray.nodes()}
    infos = [[ray.get(a.info.remote(), timeout=30) for a in reps] for reps in sharded._actors]
    on_a = [i["pid"] for reps in infos for i in reps if nodes.get(i["node"]) == ["node_a"]]
    node_a = descendants(node_pid)
    acked, failed, searches, writes, slow = [], [], [], [], []
    stopped_at = resumed_at = None
    after_resume = 0
    for n, i in enumerate(range(0, len(docs), 5)):
        if n == 3:
            # Worker node A stops (as in a partition): every process of the node, the shard
            # copies on it included; searches come first, then a write.
            signal_all(node_a + on_a, signal.SIGSTOP)
            stopped_at = time.monotonic()
        if stopped_at is not None and resumed_at is None and time.monotonic() - stopped_at > 4 * DEADLINE:
            signal_all(node_a + on_a, signal.SIGCONT)
            resumed_at = time.monotonic()
        if resumed_at is not None:
            if time.monotonic() - resumed_at > 2 * DEADLINE:
                break
            after_resume += 1
        for q in queries[:3]:
            t = time.monotonic()
            sharded.search(q, k=10)
            searches.append(time.monotonic() - t)
            if searches[-1] > DEADLINE / 2:
                slow.append(("search", n, round(t - (stopped_at or t), 2), round(searches[-1], 2)))
        batch = docs[i : i + 5]
        t = time.monotonic()
        try:
            sharded.add_documents(batch)
            acked += [d["id"] for d in batch]
        except ShardUnavailableError:
            failed += [d["id"] for d in batch]
        writes.append(time.monotonic() - t)
        if writes[-1] > DEADLINE / 2:
            slow.append(("write", n, round(t - (stopped_at or t), 2), round(writes[-1], 2)))
        time.sleep(0.05)
    resumed_in_stream = resumed_at is not None
    if resumed_at is None:
        signal_all(node_a + on_a, signal.SIGCONT)
        resumed_at = time.monotonic()
    report = _copies_report(sharded, ray, 60.0)
    single = ragfind.Retriever(**OPTS)
    single.add_documents([d for d in docs if d["id"] in set(acked)])
    equal = all(
        [(p.doc_id, round(p.score, 5)) for p in sharded.search(q, k=10)]
        == [(p.doc_id, round(p.score, 5)) for p in single.search(q, k=10)]
        for q in queries
    )
    stored = set(report.pop("stored_ids"))
    _emit(
        {
            "acked": len(acked),
            "failed": len(failed),
            "lost": [d for d in acked if d not in stored],
            "committed_failed": [d for d in failed if d in stored],
            "stored": len(sharded),
            "equal": equal,
            "max_search_s": max(searches),
            "max_write_s": max(writes),
            "slow": slow,
            "deadline": DEADLINE,
            "stopped_s": resumed_at - stopped_at,
            "resumed_in_stream": resumed_in_stream,
            "steps_after_resume": after_resume,
            "graph_built": sharded._graph.built,
            "copies_on_a_stopped": sorted(set(on_a) & set(node_a)) == sorted(on_a) and len(on_a) == SHARDS,
            **report,
        }
    )
    sharded.close()
    ray.shutdown()


def writer(work_dir: str, name: str, mode: str, address: str) -> None:
    from ragfind.distributed import ShardedRetriever

    connect(address)
    docs, _ = _docs()
    sharded = ShardedRetriever(SHARDS, replicas=2, work_dir=work_dir, deadline=DEADLINE, name=name, **OPTS)
    _emit({"ready": True})
    for n, i in enumerate(range(0, len(docs), 25)):
        batch = [d["id"] for d in docs[i : i + 25]]
        if mode == "torn" and n == 6:

            def dies_after_shard_0(calls, timeout=None, write=sharded._copies.write):
                write({0: calls[0]}, timeout)  # shard 0 holds its part ...
                os._exit(9)  # ... and the router dies before shard 1 gets its own

            sharded._copies.write = dies_after_shard_0
        sharded.add_documents(docs[i : i + 25])
        _emit({"acked": batch})
    _emit({"done": True})
    time.sleep(600)  # the test kills this process


def attach(name: str, killed_at: float, address: str) -> None:
    import ragfind
    from ragfind.distributed import ShardedRetriever

    ray = connect(address)
    docs, queries = _docs()
    sharded = ShardedRetriever.attach(name, SHARDS, replicas=2, deadline=DEADLINE, **OPTS)
    try:
        sharded.search(queries[0], k=10)
        served_s = time.time() - killed_at
        report = _copies_report(sharded, ray, 60.0)
        stored = set(report["stored_ids"])
        single = ragfind.Retriever(**OPTS)
        single.add_documents([d for d in docs if d["id"] in stored])
        equal = all(
            [(p.doc_id, round(p.score, 5)) for p in sharded.search(q, k=10)]
            == [(p.doc_id, round(p.score, 5)) for p in single.search(q, k=10)]
            for q in queries
        )
        # A batch in flight when the router died: all of it or none (no acknowledgement
        # was given for it).
        batches = [[d["id"] for d in docs[i : i + 25]] for i in range(0, len(docs), 25)]
        torn = [b[0] for b in batches if 0 < len(stored & set(b)) < len(b)]
        sharded.add_documents([{"id": "after-attach", "text": "a write of the new router"}])
        # The creator's placement groups (one per shard), which this router never held.
        groups = _groups(name)
    finally:
        sharded.destroy()
    _emit(
        {
            **report,
            "served_s": served_s,
            "equal": equal,
            "torn": torn,
            "wrote": True,
            "groups_before": groups,
            "groups_after": _groups(name),
        }
    )
    ray.shutdown()


def _groups(name: str) -> int:
    """The live placement groups of collection ``name`` on the cluster (any namespace)."""
    from ray.util.placement_group import placement_group_table

    from ragfind.distributed.router import _group_name

    names = {_group_name(name, s) for s in range(SHARDS)}
    return sum(g["name"] in names and g["state"] != "REMOVED" for g in placement_group_table().values())


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "stop_node":
        stop_node(args[0], int(args[1]), args[2])
    elif mode == "writer":
        writer(args[0], args[1], args[2], args[3])
    elif mode == "attach":
        attach(args[0], float(args[1]), args[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
