"""The Retriever against the index underneath it, same run: BM25-only search on SciFact, and
ingestion (SciFact, a synthetic corpus, and with the MiniLM encoder).

Usage:
    PYTHONPATH=python python bench/compare_pipeline_engine.py \\
        [--rounds 5] [--synthetic bench/data/synthetic_1m --synthetic-docs 200000] [--encoder-docs 300]

Rows (each a ratio of two paths measured in the same round, rounds interleaved and their order
turned each round so load drifts on a shared machine hit both; the table gives the median of the
per-round ratios and their range):

- search: ``Retriever(encoder=None, cache_size=0).search(q, k=10)`` (defaults: 100 candidates,
  chunking, highlights) against ``BM25Index.search(q, 10)`` on its own index, every SciFact query
  per round, p50 of each;
- ingestion: ``Retriever.add_documents`` (BM25 only, ``chunk_size=None`` and the default
  chunking) against ``BM25Index().add`` of the texts the Retriever indexes (title + text), docs/s;
  ``--with-tokenizers`` adds default chunking with token counts from ``tokenizers`` instead of
  the native WordPiece counter (the path before it), in the same rounds;
- with ``--synthetic``: the same on the first ``--synthetic-docs`` lines of a corpus written by
  ``bench/make_synthetic.py``;
- with ``--encoder-docs N``: ``Retriever(encoder=MiniLM f32, chunk_size=None).add_documents``
  against ``Encoder.encode`` alone of the same N SciFact texts, docs/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import ragfind


def data_dir() -> Path:
    return Path(os.environ.get("RAGFIND_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def scifact() -> tuple[list, list]:
    base = data_dir() / "scifact"
    with open(base / "corpus.jsonl", encoding="utf-8") as f:
        docs = [
            {"id": d["_id"], "title": d.get("title") or "", "text": d["text"]}
            for d in (json.loads(line) for line in f)
        ]
    with open(base / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f]
    return docs, queries


def indexed(docs: list) -> list:
    """What the Retriever indexes with the default context: the title, a newline, the text."""
    return [f"{d['title']}\n{d['text']}" if d.get("title") else d["text"] for d in docs]


def elapsed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def row(name: str, a_name: str, b_name: str, a: list, b: list, unit: str) -> str:
    """A markdown row: medians of both, and the median and range of the per-round ratio a / b."""
    ratios = [x / y for x, y in zip(a, b)]
    fmt = "{:,.0f}" if unit == "docs/s" and min(a + b) >= 100 else "{:,.1f}"
    return (
        f"| {name} | {a_name} {fmt.format(statistics.median(a))} {unit} | "
        f"{b_name} {fmt.format(statistics.median(b))} {unit} | "
        f"**{statistics.median(ratios):.2f}x** ({min(ratios):.2f}-{max(ratios):.2f}) |"
    )


def bench_search(docs: list, queries: list, rounds: int) -> str:
    r = ragfind.Retriever(encoder=None, cache_size=0)
    r.add_documents(docs)
    index = r.bm25
    paths = {
        "retriever": lambda q: r.search(q, k=10),
        "index": lambda q: index.search(q, 10),
    }
    for q in queries[:50]:
        for f in paths.values():
            f(q)
    p50: dict = {n: [] for n in paths}
    for rnd in range(rounds):
        for name in list(paths)[:: 1 if rnd % 2 == 0 else -1]:
            f = paths[name]
            ts = []
            for q in queries:
                t = time.perf_counter()
                f(q)
                ts.append(time.perf_counter() - t)
            p50[name].append(statistics.median(ts) * 1e6)
    r.close()
    return row(
        f"search, BM25 only, SciFact ({len(queries)} queries), k=10, p50",
        "Retriever",
        "BM25Index.search",
        p50["retriever"],
        p50["index"],
        "us",
    )


def without_native_wordpiece(f):
    """Runs f with chunking's token counts from `tokenizers` (the path before the native counter)."""
    from ragfind.pipeline import chunking

    native = chunking._native_counter
    chunking._native_counter = lambda tok: None
    try:
        return f()
    finally:
        chunking._native_counter = native


def bench_ingest(
    label: str, docs: list, rounds: int, chunked: bool = True, with_tokenizers: bool = False
) -> list:
    texts = indexed(docs)
    cases = {
        "index": lambda: ragfind.BM25Index().add(texts),
        "none": lambda: ragfind.Retriever(encoder=None, cache_size=0, chunk_size=None).add_documents(docs),
    }
    if chunked:
        cases["auto"] = lambda: ragfind.Retriever(encoder=None, cache_size=0).add_documents(docs)
    if chunked and with_tokenizers:
        cases["auto_tokenizers"] = lambda: without_native_wordpiece(
            lambda: ragfind.Retriever(encoder=None, cache_size=0).add_documents(docs)
        )
    rate: dict = {n: [] for n in cases}
    names = list(cases)
    for rnd in range(rounds):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
            rate[name].append(len(docs) / elapsed(cases[name]))
    rows = [
        row(
            f"ingest, BM25 only, {label}, `chunk_size=None`",
            "Retriever",
            "BM25Index.add",
            rate["none"],
            rate["index"],
            "docs/s",
        )
    ]
    if chunked:
        rows.append(
            row(
                f"ingest, BM25 only, {label}, default chunking",
                "Retriever",
                "BM25Index.add",
                rate["auto"],
                rate["index"],
                "docs/s",
            )
        )
    if "auto_tokenizers" in rate:
        rows.append(
            row(
                f"ingest, BM25 only, {label}, default chunking, token counts from `tokenizers`",
                "Retriever",
                "BM25Index.add",
                rate["auto_tokenizers"],
                rate["index"],
                "docs/s",
            )
        )
    return rows


def bench_encoder_ingest(docs: list, rounds: int, threads: int) -> str:
    enc = ragfind.load_model("all-MiniLM-L6-v2", threads=threads)
    texts = indexed(docs)
    enc.encode(texts[:8])
    cases = {
        "encode": lambda: enc.encode(texts),
        "retriever": lambda: ragfind.Retriever(encoder=enc, cache_size=0, chunk_size=None).add_documents(
            docs
        ),
    }
    rate: dict = {n: [] for n in cases}
    for rnd in range(rounds):
        for name in list(cases)[:: 1 if rnd % 2 == 0 else -1]:
            rate[name].append(len(docs) / elapsed(cases[name]))
    return row(
        f"ingest with MiniLM f32 ({threads} threads), {len(docs)} SciFact docs, `chunk_size=None`",
        "Retriever",
        "Encoder.encode",
        rate["retriever"],
        rate["encode"],
        "docs/s",
    )


def synthetic(path: Path, n: int) -> list:
    docs = []
    with open(path / "docs.txt", encoding="ascii") as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            docs.append({"id": i, "text": line.rstrip("\n")})
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--skip-scifact-ingest", action="store_true")
    ap.add_argument("--synthetic", type=Path, help="a folder written by bench/make_synthetic.py")
    ap.add_argument("--synthetic-docs", type=int, default=200_000)
    ap.add_argument("--synthetic-rounds", type=int, default=3)
    ap.add_argument(
        "--synthetic-unchunked-only", action="store_true", help="synthetic rows: chunk_size=None only"
    )
    ap.add_argument(
        "--with-tokenizers",
        action="store_true",
        help="also default chunking with token counts from `tokenizers` (no native WordPiece counter)",
    )
    ap.add_argument("--encoder-docs", type=int, default=0, help="SciFact docs for the encoder row (0: skip)")
    ap.add_argument("--encoder-rounds", type=int, default=3)
    ap.add_argument("--encoder-threads", type=int, default=2)
    args = ap.parse_args()

    docs, queries = scifact()
    rows = []
    if not args.skip_search:
        rows.append(bench_search(docs, queries, args.rounds))
    if not args.skip_scifact_ingest:
        rows += bench_ingest(f"SciFact ({len(docs):,} docs)", docs, args.rounds, True, args.with_tokenizers)
    if args.synthetic:
        syn = synthetic(args.synthetic, args.synthetic_docs)
        label = f"synthetic ({len(syn):,} docs)"
        rows += bench_ingest(
            label, syn, args.synthetic_rounds, not args.synthetic_unchunked_only, args.with_tokenizers
        )
    if args.encoder_docs:
        rows.append(
            bench_encoder_ingest(docs[: args.encoder_docs], args.encoder_rounds, args.encoder_threads)
        )
    print("| row | Retriever | the index / encoder alone | ratio (median, range) |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
