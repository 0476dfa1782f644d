"""compare_ivf_pq.py's engines timed in interleaved rounds: every (nprobe, rerank) setting
is timed once per engine per round, ``--rounds`` rounds, so a change in the machine's load
falls on all engines alike. Reports medians of wall-clock q/s and of CPU-time q/s (the process
time of the single search thread, less sensitive to other processes on a loaded machine), and
for each recall@10 target the fastest setting that reaches it, per engine, by each clock.

    PYTHONPATH=python python bench/compare_ivf_pq_rounds.py --n 200000 --nlist 1024 --pq-m 48 \\
        --nq 300 --probes 16,24,32,48 --reranks 8,16,32,64 --rounds 5

``--ragfind`` picks the ragfind configurations: ``pq4`` / ``pq8`` (``--pq-m`` / ``--pq8-m``
sub-spaces of 4 / 8 bits, or ``pq8m24``: 24 of them), each optionally ``-f16`` (re-scoring
float16 rows), and ``rabitq``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_ivf import TARGETS, make_data, recall  # noqa: E402
from ragfind import DenseIndex  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--nq", type=int, default=300)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--latent", type=int, default=12)
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--pq-m", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--probes", default="16,24,32,48")
    ap.add_argument("--reranks", default="8,16,32,64")
    ap.add_argument(
        "--ragfind", default="pq4,rabitq", help="comma-separated: pq4, pq4-f16, pq8, pq8m24-f16, rabitq"
    )
    ap.add_argument("--pq8-m", type=int, default=48)
    a = ap.parse_args()
    k = 10
    X, Q = make_data(a.n, a.nq, a.dim, a.latent, a.noise, seed=0)
    truth = np.argsort(-(Q @ X.T), axis=1)[:, :k]
    probes = [int(p) for p in a.probes.split(",")]
    reranks = [int(r) for r in a.reranks.split(",")]

    import faiss

    engines: dict = {}
    build: dict = {}  # engine: (wall s, CPU s) of training + add
    for variant in a.ragfind.split(","):
        if variant == "rabitq":
            name, kw = "ragfind rabitq + bound rerank", {"dtype": "rabitq"}
        else:
            v = re.fullmatch(r"pq(4|8)(?:m(\d+))?(-f16)?", variant)
            if v is None:
                raise SystemExit(f"unknown --ragfind variant {variant!r}")
            bits = int(v[1])
            m = int(v[2]) if v[2] else a.pq8_m if bits == 8 else a.pq_m
            name = f"ragfind {variant} + rerank"
            kw = {"dtype": "pq", "pq_m": m, "pq_bits": bits, "rerank_dtype": "f16" if v[3] else "f32"}
        w, c = time.perf_counter(), time.process_time()
        ix = DenseIndex(a.dim, metric="cosine", kind="ivf", nlist=a.nlist, **kw)
        ix.add(X)
        build[name] = (time.perf_counter() - w, time.process_time() - c)

        def ragfind_search(q, p, r, ix=ix):
            ix.rerank = r
            return ix.search(q[0] if q.ndim == 2 else q, k, nprobe=p, threads=1)[0]

        engines[name] = ragfind_search
    faiss.omp_set_num_threads(2)
    for name, base in (
        (
            "faiss IVFPQFastScan + RefineFlat",
            faiss.IndexIVFPQFastScan(
                faiss.IndexFlatIP(a.dim), a.dim, a.nlist, a.pq_m, 4, faiss.METRIC_INNER_PRODUCT
            ),
        ),
        (
            "faiss IVFRaBitQ + RefineFlat",
            faiss.IndexIVFRaBitQ(faiss.IndexFlatIP(a.dim), a.dim, a.nlist, faiss.METRIC_INNER_PRODUCT),
        ),
    ):
        ref = faiss.IndexRefineFlat(base)
        w, c = time.perf_counter(), time.process_time()
        ref.train(X)
        ref.add(X)
        build[name] = (time.perf_counter() - w, time.process_time() - c)

        def search(q, p, r, ref=ref):
            params = faiss.IndexRefineSearchParameters(
                k_factor=r, base_index_params=faiss.SearchParametersIVF(nprobe=p)
            )
            return ref.search(q[None, :], k, params=params)[1][0]

        engines[name] = search
    faiss.omp_set_num_threads(1)

    print("\nbuild (train + add), wall s / CPU s; ragfind uses every core, faiss 2 threads")
    for name, (bw, bc) in build.items():
        print(f"| {name} | {bw:.1f} / {bc:.1f} |")
    wall: dict = {}
    cpu: dict = {}
    rec: dict = {}
    for _ in range(a.rounds):
        for p in probes:
            for r in reranks:
                for name, fn in engines.items():
                    w, c = time.perf_counter(), time.process_time()
                    found = np.stack([fn(q, p, r) for q in Q])
                    w, c = time.perf_counter() - w, time.process_time() - c
                    wall.setdefault((name, p, r), []).append(len(Q) / w)
                    cpu.setdefault((name, p, r), []).append(len(Q) / c)
                    rec[(name, p, r)] = recall(found, truth)
    for clock, times in (("wall-clock", wall), ("CPU-time", cpu)):
        print(f"\n{clock} q/s, median of {a.rounds} interleaved rounds, 1 thread")
        print("| engine | " + " | ".join(f"@{t:.2f}: nprobe, rerank, recall, q/s" for t in TARGETS) + " |")
        print("|---|" + "---|" * len(TARGETS))
        for name in engines:
            cells = []
            for t in TARGETS:
                ok = [(p, r) for p in probes for r in reranks if rec[(name, p, r)] >= t]
                if not ok:
                    cells.append("not reached")
                    continue
                p, r = max(ok, key=lambda pr: statistics.median(times[(name, *pr)]))
                qps = statistics.median(times[(name, p, r)])
                cells.append(f"{p}, {r}, {rec[(name, p, r)]:.3f}, {qps:,.0f}")
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
