"""One-call IVF batches against the same queries one call each, where lists are rarely shared.

For each dtype and each (nlist, nprobe, batch) shape: the CPU-time q/s of ``search_batch_padded``
(all queries in one call) and of ``search`` (one call per query), one thread, rounds interleaved,
medians. Indexes are cached under --cache (built once from compare_ivf.make_data's
latent-structured rows).

    PYTHONPATH=python python bench/compare_ivf_batch_sharing.py --n 200000 --nlist 1024,2048 \\
        --dtypes pq4-f16,rabitq,f32 --nprobe 32,64 --batch 64,200 --rerank 4,32 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_ivf import make_data  # noqa: E402
from ragfind import DenseIndex  # noqa: E402

K = 10
KW = {
    "pq4-f16": {"dtype": "pq", "pq_bits": 4, "rerank_dtype": "f16"},
    "pq8": {"dtype": "pq", "pq_bits": 8},
    "rabitq": {"dtype": "rabitq"},
    "f32": {"dtype": "f32"},
    "f16": {"dtype": "f16"},
    "i8": {"dtype": "i8"},
}


def index_for(a, name: str, X: np.ndarray, nlist: int) -> DenseIndex:
    path = Path(a.cache) / f"{name}-{a.n}-{a.dim}-{nlist}.rfd"
    if path.exists():
        return DenseIndex.load(path, mmap=False)
    ix = DenseIndex(a.dim, metric="ip", kind="ivf", nlist=nlist, **KW[name])
    ix.add(X)
    ix.save(path)
    return ix


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--nlist", default="1024")
    p.add_argument("--nprobe", default="32,64")
    p.add_argument("--batch", default="64,256")
    p.add_argument("--dtypes", default="pq4-f16,rabitq,f32")
    p.add_argument("--rerank", default="4", help="coded and f16/i8 lists: k * rerank re-scored")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cache", default="/tmp/ragfind-bench-cache")
    a = p.parse_args()
    Path(a.cache).mkdir(parents=True, exist_ok=True)
    batches = [int(b) for b in a.batch.split(",")]
    nprobes = [int(x) for x in a.nprobe.split(",")]
    X, Q = make_data(a.n, max(batches), a.dim, 64, 0.5, 0)
    for nlist in (int(x) for x in a.nlist.split(",")):
        for name in a.dtypes.split(","):
            ix = index_for(a, name, X, nlist)
            reranks = [int(r) for r in a.rerank.split(",")] if name != "f32" else [ix.rerank]
            for rerank, nprobe, nb in [(r, p, b) for r in reranks for p in nprobes for b in batches]:
                ix.rerank = rerank
                Qb = Q[:nb]
                single_ids = np.stack([ix.search(q, K, nprobe=nprobe, threads=1)[0] for q in Qb])
                batch_ids = ix.search_batch_padded(Qb, K, nprobe=nprobe, threads=1)[0]
                same = bool(np.array_equal(single_ids, batch_ids))
                ts, tb = [], []
                for _ in range(a.rounds):  # interleaved: single, batch, single, ...
                    c = time.process_time()
                    for q in Qb:
                        ix.search(q, K, nprobe=nprobe, threads=1)
                    ts.append(time.process_time() - c)
                    c = time.process_time()
                    ix.search_batch_padded(Qb, K, nprobe=nprobe, threads=1)
                    tb.append(time.process_time() - c)
                s, b = nb / statistics.median(ts), nb / statistics.median(tb)
                row = {"dtype": name, "nlist": nlist, "nprobe": nprobe, "batch": nb, "rerank": rerank}
                row |= {
                    "sharing": round(nb * nprobe / nlist, 2),
                    "single_qps": round(s),
                    "batch_qps": round(b),
                }
                row |= {"ratio": round(b / s, 3), "same_ids": same}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
