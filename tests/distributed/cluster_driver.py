"""The driver of test_sharded_cluster.py, run in its own process (the test session holds a
local Ray of its own): joins the cluster at ``argv[3]``, writes a stream of documents to a
ShardedRetriever (log and state under ``argv[1]``) whose copies sit on the two worker nodes,
kills worker node A (its process group, ``argv[2]``) mid-stream, and prints what it saw as one
JSON line."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    work_dir, node_a_group, address = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    from ray_cluster import connect
    from sharded_helpers import load_collection

    import ragfind
    from ragfind.distributed import ShardedRetriever, ShardUnavailableError

    ray = connect(address)
    c = load_collection("cranfield")
    docs, queries = c["docs"][:600], [q for _, q in c["queries"][:10]]
    opts = dict(encoder=None, chunk_size=None, cache_size=0)
    deadline = 2.0
    # The head has no CPU: a shard's two copies (STRICT_SPREAD) go to worker nodes A and B.
    # Asked for the search graph: none is built over copies on other nodes than the router's.
    sharded = ShardedRetriever(2, replicas=2, work_dir=work_dir, deadline=deadline, fanout="graph", **opts)
    nodes = {n["NodeID"]: sorted(k for k in n["Resources"] if k.startswith("node_")) for n in ray.nodes()}
    placed, pids = [], []
    for reps in sharded._actors:
        for a in reps:
            info = ray.get(a.info.remote(), timeout=30)
            placed.append(info["node"])
            pids.append(info["pid"])
    on_a = [pid for pid, node in zip(pids, placed) if nodes.get(node) == ["node_a"]]
    acked, failed, search_s, adds_s = [], [], [], []
    for n, i in enumerate(range(0, len(docs), 50)):
        if n == 4:
            # Worker node A dies mid-stream: its raylet and agents (the process group of its
            # `ray start`) and the worker processes it started (their own groups).
            os.killpg(node_a_group, signal.SIGKILL)
            for pid in on_a:
                os.kill(pid, signal.SIGKILL)
        batch = docs[i : i + 50]
        t = time.monotonic()
        try:
            sharded.add_documents(batch)
            acked += [d["id"] for d in batch]
        except ShardUnavailableError:
            failed += [d["id"] for d in batch]
        adds_s.append(time.monotonic() - t)
        for q in queries[:3]:
            t = time.monotonic()
            sharded.search(q, k=10)
            search_s.append(time.monotonic() - t)
    single = ragfind.Retriever(**opts)
    single.add_documents([d for d in docs if d["id"] in set(acked)])
    lost = [d for d in acked if _missing(sharded, d)]
    equal = all(
        [(p.doc_id, round(p.score, 5)) for p in sharded.search(q, k=10)]
        == [(p.doc_id, round(p.score, 5)) for p in single.search(q, k=10)]
        for q in queries
    )
    print(
        json.dumps(
            {
                "nodes": len(nodes),
                "graph_built": sharded._graph.built,
                "acked": len(acked),
                "failed": len(failed),
                "lost": lost,
                "stored": len(sharded),
                "max_search_s": max(search_s),
                "max_add_s": max(adds_s),
                "deadline": deadline,
                "equal": equal,
                "in_sync": [sorted(s) for s in sharded._copies.in_sync],
                "placed": [nodes.get(p) for p in placed],
                "killed": len(on_a),
                "in_sync_nodes": [
                    sorted(k for r in sorted(s) for k in nodes.get(placed[2 * n + r], []))
                    for n, s in enumerate(sharded._copies.in_sync)
                ],
            }
        )
    )
    sharded.close()
    ray.shutdown()


def _missing(sharded, doc_id) -> bool:
    try:
        sharded.get_document(doc_id)
        return False
    except KeyError:
        return True


if __name__ == "__main__":
    main()
