"""First stages overlapped on the pool against run one after another on the calling thread:
hybrid ``Retriever.search`` p50 both ways, alternated in one process.

SciFact or Cranfield (``$RAGFIND_DATA`` or ``../shared/data``) from the shared MiniLM corpus
vectors; queries embedded by ragfind's MiniLM encoder, or by a static query encoder folder
fitted into MiniLM's space (``--query-encoder``, e.g. one ``ragfind.fit_query_encoder`` wrote).
``overlapped`` forces the pool (``runner.SEQUENTIAL_BELOW = -1``); ``auto`` is the default rule.

    PYTHONPATH=python python bench/ab_stage_overlap.py [--collection scifact] [--rounds 3]
        [--query-encoder FOLDER] [--dtype i8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

import ragfind
from ragfind.pipeline import runner

ROOT = Path(__file__).resolve().parents[1]


def lines(path: Path) -> list:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collection", default="scifact")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--query-encoder", default=None)
    ap.add_argument("--dtype", default=None, help="dense vectors' dtype (default float32)")
    args = ap.parse_args()
    data = Path(os.environ.get("RAGFIND_DATA", ROOT.parent / "shared" / "data")) / args.collection
    emb = data / "embeddings" / "all-MiniLM-L6-v2"
    corpus = lines(data / "corpus.jsonl")
    docs = [
        {"id": d["_id"], "title": d.get("title", ""), "text": d["text"]} for d in corpus if d["text"].strip()
    ]
    row = {d: n for n, d in enumerate(x for x in (emb / "corpus_ids.txt").read_text().split("\n") if x)}
    matrix = np.load(emb / "corpus.npy")
    queries = [q["text"] for q in lines(data / "queries.jsonl")][: args.queries]
    options = {"dtype": args.dtype} if args.dtype else None
    r = ragfind.Retriever(
        chunk_size=None, cache_size=0, query_encoder=args.query_encoder, dense_options=options
    )
    r.add_documents(docs, embeddings=matrix[[row[d["id"]] for d in docs]])
    for q in queries[:20]:
        r.search(q, k=10)
    default = runner.SEQUENTIAL_BELOW
    rows: dict = {"overlapped": [], "auto": []}
    for _ in range(args.rounds):
        for mode, threshold in (("overlapped", -1.0), ("auto", default)):
            runner.SEQUENTIAL_BELOW = threshold
            for q in queries[:10]:
                r.search(q, k=10)
            took = []
            for q in queries:
                t = time.perf_counter()
                r.search(q, k=10)
                took.append(time.perf_counter() - t)
            rows[mode].append(statistics.median(took) * 1e3)
    runner.SEQUENTIAL_BELOW = default
    r.close()
    load = os.getloadavg()[0]
    print(f"# {args.collection}, {len(queries)} queries x {args.rounds} rounds, load {load:.2f}")
    print("| first stages | p50 ms (median of rounds) | rounds |\n|---|---:|---|")
    for mode, xs in rows.items():
        print(f"| {mode} | {statistics.median(xs):.3f} | {', '.join(f'{x:.3f}' for x in xs)} |")


if __name__ == "__main__":
    main()
