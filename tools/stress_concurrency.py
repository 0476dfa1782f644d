"""Full-size concurrency stress run: readers x queries against a concurrent writer, per index kind.

    PYTHONPATH=python python tools/stress_concurrency.py \
        [--readers 8] [--queries 10000] [--kinds bm25,exact,hnsw]

Each reader thread runs --queries searches (every 50th call a search_batch of 8 queries on 2
C++ threads) while a writer thread adds and deletes documents; every result is checked
against a serial replay of the states the index passed through (tests/reliability/_concurrency_harness.py).
Exits non-zero on any error or inconsistent result. Figures go to RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from _concurrency_harness import BM25Workload, DenseWorkload, run_stress  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--queries", type=int, default=10_000, help="queries per reader thread")
    ap.add_argument("--ops", type=int, default=400, help="writer operations (add or delete batches)")
    ap.add_argument("--kinds", default="bm25,exact,hnsw")
    args = ap.parse_args()
    failed = False
    for kind in args.kinds.split(","):
        if kind == "bm25":
            workload = BM25Workload(seed=11, n_ops=args.ops)
        else:
            workload = DenseWorkload(seed=11, kind=kind, n_ops=args.ops)
        report = run_stress(workload, readers=args.readers, queries_per_reader=args.queries)
        print(report.summary(), flush=True)
        for e in report.errors[:5]:
            print("  ", e)
        failed |= bool(report.errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
