"""How long a copy of a shard takes to rejoin the in-sync set, each copy keeping its own log
and snapshots: SciFact (5,183 documents, shared MiniLM embeddings: BM25 + dense), 2 shards x
2 copies on a local Ray, one copy of shard 0 SIGKILLed (``ray.kill``; Ray restarts it) after
all documents are in, then 50 documents more while it is down.

    PYTHONPATH=python python bench/compare_distributed_recovery.py --repeats 3

Cases, each timed from the kill to the copy being back in the in-sync set (the router's
healer asks every 0.2 s; the write during the outage is acknowledged by the primary alone):

- ``own disk``: the copy restarts on its own folder and replays its own log, then gets the
  writes it missed from the primary's log;
- ``disk lost, log``: its folder is deleted first (a node replaced): every write comes from
  the primary's log (no snapshot taken yet);
- ``disk lost, snapshot``: the same after a ``save()``: the primary's snapshot (its files,
  through Ray) then the writes after it.

Also prints the documents' add rate and ``save()`` time of the same router, and checks that
the copies end up holding the same documents.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "distributed"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    import ray

    from compare_distributed import scifact_on_ray
    from ragfind.distributed import ShardedRetriever

    c, opts = scifact_on_ray(args.cpus)
    docs = c["docs"]
    cases = ["own disk", "disk lost, log", "disk lost, snapshot"]
    times: dict = {k: [] for k in cases}
    adds, saves = [], []
    for _ in range(args.repeats):
        for case in cases:
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp) / "work"
                sr = ShardedRetriever(2, replicas=2, placement="any", work_dir=work, fanout="calls", **opts)
                try:
                    t = time.perf_counter()
                    for i in range(0, len(docs) - 50, 500):
                        sr.add_documents(docs[i : min(i + 500, len(docs) - 50)])
                    adds.append((len(docs) - 50) / (time.perf_counter() - t))
                    if case.endswith("snapshot"):
                        t = time.perf_counter()
                        sr.save(Path(tmp) / "saved")
                        saves.append(time.perf_counter() - t)
                    other = 1 - sr._copies.primary[0]
                    if case.startswith("disk lost"):
                        shutil.rmtree(work / "shard-0000" / f"copy-{other}")
                    t = time.perf_counter()
                    ray.kill(sr._actors[0][other], no_restart=False)
                    sr.add_documents(docs[-50:])
                    while other not in sr._copies.in_sync[0]:
                        if time.perf_counter() - t > 300:
                            raise RuntimeError(f"{case}: the copy did not rejoin within 300 s")
                        time.sleep(0.01)
                    times[case].append(time.perf_counter() - t)
                    held = [ray.get(a.digest.remote()) for a in sr._actors[0]]
                    if held[0] != held[1]:
                        raise AssertionError(f"{case}: the copies diverge")
                finally:
                    sr.close()
    print(
        f"SciFact {len(docs)} docs, 2 shards x 2 copies, local Ray num_cpus={args.cpus}, "
        f"{args.repeats} repeats"
    )
    print(
        f"add: median {statistics.median(adds):,.0f} docs/s; save(): median {statistics.median(saves):.2f} s"
    )
    print("| case | rejoined after (median s) | all runs (s) |")
    print("|---|---:|---|")
    for case in cases:
        runs = ", ".join(f"{x:.2f}" for x in times[case])
        print(f"| {case} | {statistics.median(times[case]):.2f} | {runs} |")


if __name__ == "__main__":
    main()
