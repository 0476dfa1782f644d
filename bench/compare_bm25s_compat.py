"""ragfind.compat.bm25s (the drop-in) vs bm25s itself, the same calls end to end, same run.

    python bench/make_synthetic.py                      # once: bench/data/synthetic_1m/
    python bench/compare_bm25s_compat.py --data bench/data/synthetic_1m

Both sides run the identical bm25s script, only the import differs: ``tokenize`` (English
stopwords, PyStemmer English) of the corpus, ``BM25(method="lucene", k1=1.2, b=0.75)`` (bm25s
with ``backend="numba"``, its other defaults), ``index``, then the queries tokenized and
``retrieve(k=10)`` with the default ``n_threads=0`` (one thread on both sides). bm25s's numba
JIT is compiled and warmed up on a small index before its clock starts. Each engine runs in its
own child process (its own peak memory); the query phase is repeated ``--rounds`` times,
alternating engines, and its ratio is the median of the per-round ratios. The results of the
two engines are compared (score equality within 1e-6 relative).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
import numpy as np
import Stemmer

engine, data, n_docs, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if engine == "bm25s":
    import bm25s
    kw = {"backend": "numba"}
    warm = bm25s.BM25(**kw)
    warm_tokens = bm25s.tokenize(["warm up the jit", "numba compiles once"], show_progress=False)
    warm.index(warm_tokens, show_progress=False)
    warm.retrieve(bm25s.tokenize(["warm"], show_progress=False), k=1, show_progress=False)
else:
    import ragfind.compat.bm25s as bm25s
    kw = {}
stemmer = Stemmer.Stemmer("english")
with open(f"{data}/docs.txt", encoding="utf-8") as f:
    texts = [line.rstrip("\n") for _, line in zip(range(n_docs), f)]
with open(f"{data}/queries.txt", encoding="utf-8") as f:
    queries = [line.rstrip("\n") for line in f]
t = time.perf_counter()
corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
t_tok = time.perf_counter() - t
t = time.perf_counter()
retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75, **kw)
retriever.index(corpus_tokens, show_progress=False)
t_index = time.perf_counter() - t
del texts
times = []
for _ in range(rounds):
    t = time.perf_counter()
    q = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    res = retriever.retrieve(q, k=10, show_progress=False)
    times.append(time.perf_counter() - t)
    # The other engine's round runs in between (wait for the parent's go).
    print("round", flush=True)
    sys.stdin.readline()
np.save(f"{out}/{engine}_docs.npy", res.documents)
np.save(f"{out}/{engine}_scores.npy", res.scores)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
stats = {"tokenize_s": t_tok, "index_s": t_index, "query_s": times, "peak_rss_mb": peak}
json.dump(stats, open(f"{out}/{engine}.json", "w"))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path(__file__).parent / "data" / "synthetic_1m")
    p.add_argument("--docs", type=int, default=1_000_000, help="first N documents of the corpus")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path("/tmp/compare_bm25s_compat"))
    args = p.parse_args(argv)
    import numpy as np

    args.out.mkdir(parents=True, exist_ok=True)
    engines = ["ragfind.compat.bm25s", "bm25s"]
    procs = {}
    for e in engines:
        name = "bm25s" if e == "bm25s" else "ragfind"
        procs[e] = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                name,
                str(args.data),
                str(args.docs),
                str(args.rounds),
                str(args.out),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        # Build one engine at a time: each child blocks after its first round until told to go on.
        assert procs[e].stdout.readline().strip() == "round"
    for r in range(1, args.rounds + 1):
        order = engines if r % 2 else engines[::-1]
        for e in order:
            procs[e].stdin.write("\n")
            procs[e].stdin.flush()
            if r < args.rounds:
                assert procs[e].stdout.readline().strip() == "round"
    for e in engines:
        procs[e].communicate()
        if procs[e].returncode:
            raise SystemExit(f"{e} failed ({procs[e].returncode})")
    res = {
        e: json.loads((args.out / f"{'bm25s' if e == 'bm25s' else 'ragfind'}.json").read_text())
        for e in engines
    }
    ours, ref = res["ragfind.compat.bm25s"], res["bm25s"]
    ratios = sorted(b / a for a, b in zip(ours["query_s"], ref["query_s"]))
    s1, s2 = np.load(args.out / "ragfind_scores.npy"), np.load(args.out / "bm25s_scores.npy")
    d1, d2 = np.load(args.out / "ragfind_docs.npy"), np.load(args.out / "bm25s_docs.npy")
    print(f"{args.docs:,} documents from {args.data}, {len(s1)} queries, k=10, {args.rounds} rounds")
    print(f"{'':24}{'tokenize s':>12}{'index s':>10}{'query s (median)':>18}{'peak RSS MB':>13}")
    for e in engines:
        q = sorted(res[e]["query_s"])[len(res[e]["query_s"]) // 2]
        print(
            f"{e:24}{res[e]['tokenize_s']:12.2f}{res[e]['index_s']:10.2f}{q:18.3f}{res[e]['peak_rss_mb']:13.0f}"
        )
    total = {e: res[e]["tokenize_s"] + res[e]["index_s"] + min(res[e]["query_s"]) for e in engines}
    print(
        f"query phase (tokenize queries + retrieve): ragfind.compat.bm25s is {ratios[len(ratios) // 2]:.1f}x "
        f"bm25s numba (per-round ratios {ratios[0]:.1f}-{ratios[-1]:.1f}); index: "
        f"{ref['index_s'] / ours['index_s']:.1f}x; tokenize + index + query: "
        f"{total['bm25s'] / total['ragfind.compat.bm25s']:.1f}x"
    )
    same_scores = np.allclose(s1, s2, rtol=1e-6, atol=1e-6)
    # Among equal scores (zero-score fill-up included) the two engines order documents
    # differently; every other slot must hold the same document.
    near = np.isclose(s1[:, 1:], s1[:, :-1], rtol=1e-6, atol=1e-6)
    tied = np.zeros(s1.shape, bool)
    tied[:, 1:] |= near
    tied[:, :-1] |= near
    tied |= s1 == s1[:, -1:]  # the last group may be cut by k
    print(
        f"scores equal within 1e-6: {same_scores}; identical documents: {(d1 == d2).mean():.2%} of slots, "
        f"{(d1 == d2)[~tied].mean():.2%} of the {(~tied).mean():.2%} of slots outside groups of tied scores"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
