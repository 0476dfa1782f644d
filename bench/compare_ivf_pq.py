"""Compressed IVF side by side: ragfind's 4-bit PQ lists (``ragfind.dense.pq_lists.IvfPqLists``,
fast scan + exact re-scoring) against faiss ``IndexIVFPQFastScan`` + ``IndexRefineFlat`` and
``IndexIVFRaBitQ`` + ``IndexRefineFlat``, at faiss's default training, on compare_ivf.py's
latent-structured data (cosine). Single thread (threads=1 / faiss.omp_set_num_threads(1)), one
query per call; each timing the median of ``--rounds`` passes. For each recall@10 target the
table gives, per engine, the fastest (nprobe, re-scoring depth) that reaches it.

    PYTHONPATH=python python bench/compare_ivf_pq.py --n 200000 --nlist 1024 --pq-m 48

Bytes/vector are those of the structures a search keeps in memory (codes, ids, centroids,
codebooks), not RssAnon: the re-scoring rows are not counted for either side.
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
from compare_ivf import TARGETS, make_data, recall  # noqa: E402
from ragfind.dense.pq_lists import IvfPqLists  # noqa: E402


def timed(fn, Q: np.ndarray, rounds: int) -> tuple[np.ndarray, float]:
    qps = []
    for _ in range(rounds):
        t = time.perf_counter()
        out = np.stack([fn(q) for q in Q])
        qps.append(len(Q) / (time.perf_counter() - t))
    return out, statistics.median(qps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--nq", type=int, default=500)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--latent", type=int, default=12)
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--pq-m", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--probes", default="8,12,16,24,32,48")
    ap.add_argument("--reranks", default="2,4,8")
    a = ap.parse_args()
    k = 10
    X, Q = make_data(a.n, a.nq, a.dim, a.latent, a.noise, seed=0)
    truth = np.argsort(-(Q @ X.T), axis=1)[:, :k]
    probes = [int(p) for p in a.probes.split(",")]
    reranks = [int(r) for r in a.reranks.split(",")]
    rows: dict[str, list] = {}

    w, c = time.perf_counter(), time.process_time()
    ix = IvfPqLists(X, a.nlist, a.pq_m, threads=0)
    build = {
        "ragfind pq4 + rerank": (time.perf_counter() - w, time.process_time() - c, ix.nbytes_resident() / a.n)
    }
    for p in probes:
        for r in reranks:
            found, qps = timed(lambda q, p=p, r=r: ix.search(q, k, p, r, threads=1)[0][0], Q, a.rounds)
            rows.setdefault("ragfind pq4 + rerank", []).append((p, r, recall(found, truth), qps))

    import faiss

    for name, make in (
        (
            "faiss IVFPQFastScan + RefineFlat",
            lambda q: faiss.IndexIVFPQFastScan(q, a.dim, a.nlist, a.pq_m, 4, faiss.METRIC_INNER_PRODUCT),
        ),
        (
            "faiss IVFRaBitQ + RefineFlat",
            lambda q: faiss.IndexIVFRaBitQ(q, a.dim, a.nlist, faiss.METRIC_INNER_PRODUCT),
        ),
    ):
        faiss.omp_set_num_threads(2)
        base = make(faiss.IndexFlatIP(a.dim))
        ref = faiss.IndexRefineFlat(base)
        w, c = time.perf_counter(), time.process_time()
        ref.train(X)
        ref.add(X)
        b = faiss.downcast_index(base)
        build[name] = (
            time.perf_counter() - w,
            time.process_time() - c,
            (b.code_size + 8) + a.nlist * a.dim * 4 / a.n,
        )
        faiss.omp_set_num_threads(1)
        for p in probes:
            for r in reranks:
                params = faiss.IndexRefineSearchParameters(
                    k_factor=r, base_index_params=faiss.SearchParametersIVF(nprobe=p)
                )
                found, qps = timed(
                    lambda q, ref=ref, params=params: ref.search(q[None, :], k, params=params)[1][0],
                    Q,
                    a.rounds,
                )
                rows.setdefault(name, []).append((p, r, recall(found, truth), qps))
    for name, res in rows.items():
        for p, r, rc, qps in res:
            print(json.dumps({"engine": name, "nprobe": p, "rerank": r, "recall": rc, "qps": qps}))
    print(
        "\n| engine | build wall s / CPU s | bytes/vector in memory | "
        + " | ".join(f"@{t:.2f}: nprobe, rerank, recall, q/s 1T" for t in TARGETS)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(TARGETS))
    for name, res in rows.items():
        bw, bc, bpv = build[name]
        cells = []
        for t in TARGETS:
            ok = [x for x in res if x[2] >= t]
            if not ok:
                cells.append("not reached")
                continue
            p, r, rc, qps = max(ok, key=lambda x: x[3])
            cells.append(f"{p}, {r}, {rc:.3f}, {qps:,.0f}")
        print(f"| {name} | {bw:.1f} / {bc:.1f} | {bpv:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
