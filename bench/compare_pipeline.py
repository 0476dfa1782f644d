"""The hybrid pipeline on SciFact: quality (nDCG@10 of BM25, dense, RRF hybrid) and latency.

Usage:
    PYTHONPATH=python python bench/compare_pipeline.py [--queries 300] [--latency-queries 300]

The corpus vectors are the precomputed reference MiniLM embeddings in
../shared/data/scifact/embeddings (or $RAGFIND_DATA); the queries are encoded live with
ragfind's ONNX encoder (all-MiniLM-L6-v2, built offline on first use). Documents are indexed whole
(title as contextual prefix), as in BEIR. Latency: ``Retriever.search`` end to end (query
embedding, BM25 and dense concurrently, RRF, store lookup), caches cleared before each query,
and the cache-hit path. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import ragfind
from ragfind.cli.eval import doc_run
from ragfind.eval import evaluate, load_beir


def data_dir() -> Path:
    return Path(os.environ.get("RAGFIND_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=0, help="limit the evaluated queries (0: all 300)")
    ap.add_argument("--latency-queries", type=int, default=300)
    ap.add_argument("--encoder", default="all-MiniLM-L6-v2")
    ap.add_argument(
        "--encoder-threads",
        type=int,
        default=1,
        help="ONNX Runtime threads for query encoding (default 1: BM25 runs beside it)",
    )
    ap.add_argument("--skip-quality", action="store_true", help="latency only")
    args = ap.parse_args()

    base = data_dir() / "scifact"
    emb = base / "embeddings" / "all-MiniLM-L6-v2"
    data = load_beir(base)
    t0 = time.perf_counter()
    encoder = ragfind.load_model(args.encoder, threads=args.encoder_threads)
    t_model = time.perf_counter() - t0
    ids = [x for x in (emb / "corpus_ids.txt").read_text().split("\n") if x]
    row = {d: n for n, d in enumerate(ids)}
    matrix = np.load(emb / "corpus.npy")
    docs = [{"id": i, "title": d["title"], "text": d["text"]} for i, d in data.corpus.items()]
    t0 = time.perf_counter()
    r = ragfind.Retriever(encoder=encoder, chunk_size=None, candidates=100)
    r.add_documents(docs, embeddings=matrix[[row[d["id"]] for d in docs]])
    t_build = time.perf_counter() - t0

    qids, texts = data.query_items()
    if args.queries:
        qids, texts = qids[: args.queries], texts[: args.queries]
    # Query embeddings once (the dense and hybrid runs share them through the cache).
    t0 = time.perf_counter()
    for q in texts:
        r.embed_query(q)
    t_qenc = (time.perf_counter() - t0) / len(texts)
    quality = {}
    for mode in () if args.skip_quality else ("bm25", "dense", "hybrid"):
        only = None if mode == "hybrid" else [mode]
        run = {
            qid: doc_run(r.search(q, k=100, use_cache=False, stages=only).passages, 100)
            for qid, q in zip(qids, texts)
        }
        quality[mode] = evaluate(data.qrels, run, ["ndcg@10", "recall@100", "mrr@10"]).mean

    # Latency, cold (both caches cleared) and cache hits.
    lat_queries = (texts * 3)[: args.latency_queries]
    for q in lat_queries[:10]:
        r.search(q, k=10, use_cache=False)
    stages: dict = {}
    totals = []
    for q in lat_queries:
        r.clear_cache()
        t = time.perf_counter()
        res = r.search(q, k=10)
        totals.append(time.perf_counter() - t)
        for name, sec in res.timings.items():
            stages.setdefault(name, []).append(sec)
    hits = []
    for q in lat_queries:
        r.search(q, k=10)
        t = time.perf_counter()
        res = r.search(q, k=10)
        hits.append(time.perf_counter() - t)
        assert res.cached
    r.close()

    print(f"## SciFact ({len(docs)} docs, {len(qids)} test queries), hybrid = BM25 + MiniLM, RRF k=60\n")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"model load {t_model:.1f} s, index build (precomputed doc vectors) {t_build:.1f} s, "
        f"query encoding {t_qenc * 1e3:.2f} ms/query\n"
    )
    print("| retrieval | nDCG@10 | Recall@100 | MRR@10 |")
    print("|---|---:|---:|---:|")
    for mode, m in quality.items():
        print(f"| {mode} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} | {m['mrr@10']:.4f} |")
    print(f"\n## Latency, {len(lat_queries)} searches, k=10, caches cleared per search\n")
    print("| stage | p50 (ms) | p95 (ms) |")
    print("|---|---:|---:|")
    for name, values in stages.items():
        print(f"| {name} | {statistics.median(values) * 1e3:.3f} | {pct(values, 95) * 1e3:.3f} |")
    print(
        f"| end to end (measured outside) | {statistics.median(totals) * 1e3:.3f} "
        f"| {pct(totals, 95) * 1e3:.3f} |"
    )
    print(f"| cache hit | {statistics.median(hits) * 1e6:.1f} us | {pct(hits, 95) * 1e6:.1f} us |")


if __name__ == "__main__":
    main()
