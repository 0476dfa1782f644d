"""compare_ivf_pq.py's engines timed in interleaved rounds: every (nprobe, rerank) setting
is timed once per engine per round, ``--rounds`` rounds, so a change in the machine's load
falls on all engines alike. Reports medians of wall-clock q/s and of CPU-time q/s (the process
time of the single search thread, less sensitive to other processes on a loaded machine), and
for each recall@10 target the fastest setting that reaches it, per engine, by each clock.

    PYTHONPATH=python python bench/compare_ivf_pq_rounds.py --n 200000 --nlist 1024 \\
        --nq 300 --probes 16,24,32,48 --reranks 8,16,32,64 --rounds 5

``--pq-m`` (default: ragfind's own default, dim / 4 sub-spaces) is also faiss IVFPQFastScan's m,
so both code rows have the same bytes.

``--ragfind`` picks the ragfind configurations: ``pq4`` / ``pq8`` (``--pq-m`` / ``--pq8-m``
sub-spaces of 4 / 8 bits, or ``pq8m24``: 24 of them), each optionally ``-f16`` (re-scoring
float16 rows), and ``rabitq``; ``--faiss`` the faiss ones (``pq``: IndexIVFPQFastScan, ``rabitq``:
IndexIVFRaBitQ, each behind IndexRefineFlat, at faiss's default training).

``--metric l2``: the same data with row norms spread over 0.5-1.5 (so l2 and ip rank
differently), recall against the exact squared-distance top 10, every engine built for l2
(ragfind metric "l2", faiss METRIC_L2); ragfind's rabitq refuses l2. ``--metric ip`` (the
default): unit rows, ragfind metric "cosine", faiss inner product.

``--batch``: after the rounds, each engine's setting for each recall target is timed again with
all the queries in one call on one thread (ragfind ``search_batch_padded``, faiss ``search`` on
the whole matrix), interleaved in ``--rounds`` rounds, CPU-time q/s.

``--rss-dir DIR``: every engine is saved to DIR and loaded in a fresh process
(``compare_ivf_pq.py``'s child: ragfind ``load(mmap=True)``, faiss ``read_index``) that runs the
queries at the engine's CPU-time recall-0.95 setting (else its most accurate one) and reports
(RssAnon after - RssAnon before the load) / n, the process total in brackets.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_ivf import TARGETS, make_data, recall  # noqa: E402
from ragfind import DenseIndex  # noqa: E402
from ragfind.dense.ivf_codes import default_pq_m  # noqa: E402

K = 10


def exact_top(X: np.ndarray, Q: np.ndarray, metric: str) -> np.ndarray:
    """The exact top K of every query (inner product, or squared distance for l2), in blocks."""
    out = []
    sq = (X * X).sum(1) if metric == "l2" else None
    for i in range(0, len(Q), 50):
        s = Q[i : i + 50] @ X.T
        if sq is not None:
            s = 2 * s - sq[None, :]  # -|x|^2 + 2 q.x ranks as -|q - x|^2
        top = np.argpartition(-s, K, axis=1)[:, :K]
        order = np.argsort(-np.take_along_axis(s, top, 1), axis=1)
        out.append(np.take_along_axis(top, order, 1))
    return np.concatenate(out)


def ragfind_engines(a, X: np.ndarray, metric: str) -> tuple[dict, dict]:
    engines, build = {}, {}
    for variant in [v for v in a.ragfind.split(",") if v]:
        if variant == "rabitq":
            if metric == "l2":
                raise SystemExit(
                    "ragfind rabitq supports ip/cosine only: drop it from --ragfind for --metric l2"
                )
            name, kw = "ragfind rabitq", {"dtype": "rabitq"}
        else:
            v = re.fullmatch(r"pq(4|8)(?:m(\d+))?(-f16)?", variant)
            if v is None:
                raise SystemExit(f"unknown --ragfind variant {variant!r}")
            bits = int(v[1])
            m = int(v[2]) if v[2] else a.pq8_m if bits == 8 else a.pq_m
            name = f"ragfind {variant}"
            kw = {"dtype": "pq", "pq_m": m, "pq_bits": bits, "rerank_dtype": "f16" if v[3] else "f32"}
        w, c = time.perf_counter(), time.process_time()
        ix = DenseIndex(a.dim, metric=metric, kind="ivf", nlist=a.nlist, **kw)
        ix.add(X)
        build[name] = (time.perf_counter() - w, time.process_time() - c)
        print(
            json.dumps({"engine": name, "build_wall_s": build[name][0], "build_cpu_s": build[name][1]}),
            flush=True,
        )
        engines[name] = ix
    return engines, build


def faiss_engines(a, X: np.ndarray, metric: str) -> tuple[dict, dict]:
    import faiss

    engines, build = {}, {}
    fm = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
    flat = faiss.IndexFlatL2 if metric == "l2" else faiss.IndexFlatIP
    faiss.omp_set_num_threads(2)
    for kind in [f for f in a.faiss.split(",") if f]:
        if kind == "pq":
            name = "faiss IVFPQFastScan + RefineFlat"
            base = faiss.IndexIVFPQFastScan(flat(a.dim), a.dim, a.nlist, a.pq_m, 4, fm)
        elif kind == "rabitq":
            name = "faiss IVFRaBitQ + RefineFlat"
            base = faiss.IndexIVFRaBitQ(flat(a.dim), a.dim, a.nlist, fm)
        else:
            raise SystemExit(f"unknown --faiss index {kind!r}")
        ref = faiss.IndexRefineFlat(base)
        w, c = time.perf_counter(), time.process_time()
        ref.train(X)
        ref.add(X)
        build[name] = (time.perf_counter() - w, time.process_time() - c)
        print(
            json.dumps({"engine": name, "build_wall_s": build[name][0], "build_cpu_s": build[name][1]}),
            flush=True,
        )
        engines[name] = ref
    faiss.omp_set_num_threads(1)
    return engines, build


def searcher(ix):
    """(single(q, p, r) -> ids, batch(Q, p, r) -> ids) for one engine, one thread."""
    if isinstance(ix, DenseIndex):

        def single(q, p, r):
            ix.rerank = r
            return ix.search(q, K, nprobe=p, threads=1)[0]

        def batch(Q, p, r):
            ix.rerank = r
            return ix.search_batch_padded(Q, K, nprobe=p, threads=1)[0]

        return single, batch
    import faiss

    def params(p, r):
        return faiss.IndexRefineSearchParameters(
            k_factor=r, base_index_params=faiss.SearchParametersIVF(nprobe=p)
        )

    return (lambda q, p, r: ix.search(q[None, :], K, params=params(p, r))[1][0]), (
        lambda Q, p, r: ix.search(Q, K, params=params(p, r))[1]
    )


def best_at(rec: dict, times: dict, name: str, t: float, probes, reranks):
    """The (nprobe, rerank) of the highest median q/s reaching recall t, or None."""
    ok = [(p, r) for p in probes for r in reranks if rec[(name, p, r)] >= t]
    return max(ok, key=lambda pr: statistics.median(times[(name, *pr)])) if ok else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--nq", type=int, default=300)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--latent", type=int, default=12)
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--pq-m", type=int, default=None, help="4-bit sub-spaces (default: ragfind's, dim / 4)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--probes", default="16,24,32,48")
    ap.add_argument("--reranks", default="8,16,32,64")
    ap.add_argument("--metric", choices=("ip", "l2"), default="ip")
    ap.add_argument(
        "--ragfind", default="pq4,rabitq", help="comma-separated: pq4, pq4-f16, pq8, pq8m24-f16, rabitq"
    )
    ap.add_argument("--faiss", default="pq,rabitq", help="comma-separated: pq, rabitq (empty: none)")
    ap.add_argument("--pq8-m", type=int, default=48)
    ap.add_argument(
        "--batch", action="store_true", help="also time one-call batches at each target's setting"
    )
    ap.add_argument("--rss-dir", default=None, help="save the engines here and measure RssAnon after load")
    a = ap.parse_args()
    if a.pq_m is None:
        a.pq_m = default_pq_m(a.dim)
    X, Q = make_data(a.n, a.nq, a.dim, a.latent, a.noise, seed=0)
    if a.metric == "l2":
        scale = np.linspace(0.5, 1.5, a.n, dtype=np.float32)[np.random.default_rng(1).permutation(a.n)]
        X *= scale[:, None]  # norms vary, so l2 and ip rank differently
    truth = exact_top(X, Q, a.metric)
    probes = [int(p) for p in a.probes.split(",")]
    reranks = [int(r) for r in a.reranks.split(",")]

    indexes, build = ragfind_engines(a, X, "l2" if a.metric == "l2" else "cosine")
    more, fbuild = faiss_engines(a, X, a.metric)
    indexes.update(more)
    build.update(fbuild)
    engines = {name: searcher(ix) for name, ix in indexes.items()}

    print("\nbuild (train + add), wall s / CPU s; ragfind uses every core, faiss 2 threads")
    for name, (bw, bc) in build.items():
        print(f"| {name} | {bw:.1f} / {bc:.1f} |")
    wall: dict = {}
    cpu: dict = {}
    rec: dict = {}
    for i in range(a.rounds):
        for p in probes:
            for r in reranks:
                for name, (single, _batch) in engines.items():
                    w, c = time.perf_counter(), time.process_time()
                    found = np.stack([single(q, p, r) for q in Q])
                    w, c = time.perf_counter() - w, time.process_time() - c
                    wall.setdefault((name, p, r), []).append(len(Q) / w)
                    cpu.setdefault((name, p, r), []).append(len(Q) / c)
                    rec[(name, p, r)] = recall(found, truth)
        print(f"round {i + 1} of {a.rounds} done", flush=True)
    for clock, times in (("wall-clock", wall), ("CPU-time", cpu)):
        print(f"\n{clock} q/s, median of {a.rounds} interleaved rounds, 1 thread, one query per call")
        print("| engine | " + " | ".join(f"@{t:.2f}: nprobe, rerank, recall, q/s" for t in TARGETS) + " |")
        print("|---|" + "---|" * len(TARGETS))
        for name in engines:
            cells = []
            for t in TARGETS:
                pr = best_at(rec, times, name, t, probes, reranks)
                if pr is None:
                    cells.append("not reached")
                    continue
                cells.append(
                    f"{pr[0]}, {pr[1]}, {rec[(name, *pr)]:.3f}, {statistics.median(times[(name, *pr)]):,.0f}"
                )
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)

    if a.batch:
        settings = {
            (name, pr)
            for name in engines
            for t in TARGETS
            if (pr := best_at(rec, cpu, name, t, probes, reranks))
        }
        bcpu: dict = {}
        brec: dict = {}
        for _ in range(a.rounds):
            for name, (p, r) in sorted(settings):
                c = time.process_time()
                found = engines[name][1](Q, p, r)
                bcpu.setdefault((name, p, r), []).append(len(Q) / (time.process_time() - c))
                brec[(name, p, r)] = recall(found, truth)
        print(
            f"\nbatched CPU-time q/s ({len(Q)} queries in one call, 1 thread), median of {a.rounds} rounds,"
        )
        print("at each engine's single-query setting for the target (nprobe, rerank, batch recall, q/s)")
        print("| engine | " + " | ".join(f"@{t:.2f}" for t in TARGETS) + " |")
        print("|---|" + "---|" * len(TARGETS))
        for name in engines:
            cells = []
            for t in TARGETS:
                pr = best_at(rec, cpu, name, t, probes, reranks)
                key = (name, *pr) if pr else None
                cells.append(
                    f"{pr[0]}, {pr[1]}, {brec[key]:.3f}, {statistics.median(bcpu[key]):,.0f}"
                    if key
                    else "not reached"
                )
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)

    if a.rss_dir:
        import faiss

        folder = Path(a.rss_dir)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "queries.npy", Q)
        print(
            "\nRssAnon B/vector after load + the queries at the 0.95 setting, fresh process (process total)"
        )
        for name, ix in indexes.items():
            slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
            path = folder / (slug + (".rfd" if isinstance(ix, DenseIndex) else ".faiss"))
            if isinstance(ix, DenseIndex):
                ix.save(path)
            else:
                faiss.write_index(ix, str(path))
            pr = best_at(rec, cpu, name, 0.95, probes, reranks) or max(
                ((p, r) for p in probes for r in reranks), key=lambda pr: rec[(name, *pr)]
            )
            child = "ragfind" if isinstance(ix, DenseIndex) else "faiss"
            cmd = [sys.executable, str(Path(__file__).with_name("compare_ivf_pq.py")), "--child", child]
            cmd += [str(path), str(folder / "queries.npy"), str(pr[0]), str(pr[1])]
            res = (
                subprocess.run(cmd, check=True, capture_output=True, text=True)
                .stdout.strip()
                .splitlines()[-1]
            )
            out = json.loads(res)
            delta = (out["after_kb"] - out["before_kb"]) * 1024 / out["n"]
            print(
                f"| {name} | {pr[0]}, {pr[1]} | {delta:.0f} ({out['after_kb'] * 1024 / out['n']:.0f}) |",
                flush=True,
            )
            path.unlink()


if __name__ == "__main__":
    main()
