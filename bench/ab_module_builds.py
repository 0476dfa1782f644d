"""Two builds of ``ragfind._core`` side by side on calls whose cost is mostly the bindings
(argument conversion, result objects, JSON rows): BM25, exact dense, RRF, ``Retriever.search``
and the service's ``search_rows_json``, each build in its own child process, rounds alternated.

A build's only difference from another (e.g. the binding files compiled as unity batches or
one by one, other optimisation flags) shows here as a per-call p50 ratio; the core objects
themselves are compared byte for byte elsewhere (bench/build.md).

    python tools/build_times.py --build-dir build/times_on                                # A
    python tools/build_times.py --build-dir build/times_off -- -DRAGFIND_UNITY_BINDINGS=OFF  # B
    python bench/ab_module_builds.py build/times_on/pkg build/times_off/pkg [--rounds 5]

Each argument is a folder holding a ``_core*.so``; the Python package is python/ragfind,
copied next to each module into a temporary folder. Synthetic data (fixed seeds), one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The child: builds the workloads once, then times each call (p50 over its repetitions, in us).
CHILD = r"""
import json, sys, time
import numpy as np
import ragfind

rng = np.random.default_rng(7)
vocab = np.array(["w%04d" % i for i in range(5000)])
p = 1.0 / (np.arange(5000) + 3.0); p /= p.sum()
docs = [" ".join(rng.choice(vocab, size=int(n), p=p)) for n in rng.integers(10, 60, 20000)]
queries = [" ".join(rng.choice(vocab[100:], size=3)) for _ in range(200)]
bm25 = ragfind.BM25Index()
bm25.add(docs)
vectors = rng.standard_normal((20000, 384)).astype(np.float32)
dense = ragfind.DenseIndex(dim=384, metric="cosine", threads=1)
dense.add(vectors)
qv = rng.standard_normal((200, 384)).astype(np.float32)
ids_a = ["d%d" % i for i in rng.permutation(1000)[:100]]
ids_b = ["d%d" % i for i in rng.permutation(1000)[:100]]
r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
r.add_documents([{"id": "d%d" % i, "text": t, "metadata": {"n": i % 7}} for i, t in enumerate(docs[:5000])])

def timed(fn, items, reps=3):
    out = []
    for _ in range(reps):
        for x in items:
            t = time.perf_counter_ns(); fn(x); out.append(time.perf_counter_ns() - t)
    out.sort()
    return out[len(out) // 2] / 1000.0

for q in queries[:20]:
    bm25.search(q, k=10); r.search(q, k=10); r.search_rows_json(q, k=10)
res = {
    "BM25Index.search": timed(lambda q: bm25.search(q, k=10), queries),
    "BM25Index.search_batch (200)": timed(lambda _: bm25.search_batch(queries, k=10, threads=1), [0] * 20),
    "DenseIndex.search (20k x 384)": timed(lambda v: dense.search(v, k=10), qv),
    "rrf (2 x 100 str ids)": timed(lambda _: ragfind.rrf([ids_a, ids_b]), [0] * 200),
    "Retriever.search (BM25 only)": timed(lambda q: r.search(q, k=10), queries),
    "Retriever.search_rows_json": timed(lambda q: r.search_rows_json(q, k=10), queries),
}
print(json.dumps(res))
"""


def package_with(module_dir: Path, into: Path) -> Path:
    """python/ragfind copied into `into`, with the module of `module_dir` in place of any other."""
    dst = into / "ragfind"
    shutil.copytree(
        ROOT / "python" / "ragfind", dst, ignore=shutil.ignore_patterns("_core*.so", "__pycache__")
    )
    (so,) = module_dir.glob("_core*.so")
    shutil.copy2(so, dst / so.name)
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="folder with build A's _core*.so")
    ap.add_argument("b", type=Path, help="folder with build B's _core*.so")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: package_with(d, Path(tmp) / name) for name, d in (("A", args.a), ("B", args.b))}
        env = dict(os.environ, OMP_NUM_THREADS="1")
        runs: dict = {"A": [], "B": []}
        for i in range(args.rounds):
            for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD],
                    env=dict(env, PYTHONPATH=str(paths[name])),
                    check=True,
                    capture_output=True,
                    text=True,
                )
                runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"A = {args.a}, B = {args.b}; {args.rounds} rounds; load {os.getloadavg()[0]:.2f}")
    print("| call | A p50 us | B p50 us | A / B |")
    print("|---|---:|---:|---:|")
    for call in runs["A"][0]:
        a = statistics.median(r[call] for r in runs["A"])
        b = statistics.median(r[call] for r in runs["B"])
        print(f"| {call} | {a:.1f} | {b:.1f} | {a / b:.3f} |")


if __name__ == "__main__":
    main()
