"""CPU-time top-k q/s of one ragfind build on a saved BM25 index (for A/B runs of two builds).

usage: PYTHONPATH=<build's python dir> python bench/ab_bm25_decode.py INDEX QUERIES K PASSES [txt|json] [WARM]
Builds INDEX first if missing (txt: bench/data/synthetic_1m/docs.txt; json: SciFact title + text).
QUERIES is one query a line (txt) or BEIR queries.jsonl (json). The first WARM queries (default
200) are searched once untimed: all of them, so that no timed pass computes a term's bound or
score floor for the first time. Prints the median of PASSES.
"""

import json
import os
import statistics
import sys
import time

import ragfind

idx_path, qpath, k, passes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mode = sys.argv[5] if len(sys.argv) > 5 else "txt"
warm = int(sys.argv[6]) if len(sys.argv) > 6 else 200
if not os.path.exists(idx_path):
    if mode == "txt":
        with open("bench/data/synthetic_1m/docs.txt") as f:
            docs = f.read().splitlines()
    else:
        docs = []
        with open("/work/shared/data/scifact/corpus.jsonl") as f:
            for line in f:
                d = json.loads(line)
                docs.append((d.get("title", "") + " " + d.get("text", "")).strip())
    ix = ragfind.BM25Index()
    ix.add(docs)
    ix.save(idx_path)
    del ix, docs
ix = ragfind.BM25Index.load(idx_path, mmap=True)
with open(qpath) as f:
    qs = f.read().splitlines() if mode == "txt" else [json.loads(line)["text"] for line in f]
for q in qs[:warm]:
    ix.search(q, k=k)
rates = []
for _ in range(passes):
    t = time.process_time()
    for q in qs:
        ix.search(q, k=k)
    rates.append(len(qs) / (time.process_time() - t))
print(ragfind.__file__, f"median q/s {statistics.median(rates):.0f}", " ".join(f"{r:.0f}" for r in rates))
