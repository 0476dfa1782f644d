"""Metadata-filtered vs unfiltered search latency through the Retriever (BM25 only, dense only).

Usage:
    PYTHONPATH=python python bench/compare_filters.py [--docs 50000] [--tenants 100] [--queries 50]

50,000 synthetic documents (Zipf-distributed words) with a ``tenant`` metadata field (100
tenants: ``{"tenant": 7}`` keeps 1% of them), indexed whole (``chunk_size=None``). The dense
retriever gets precomputed random unit embeddings through ``add_documents(embeddings=)`` and a
stub encoder (random unit query vectors), so no model is needed. Every search runs with the
results cache off (``use_cache=False``); the filter is evaluated by the metadata index and
compiled to each index's allowed-set once (cached per store generation), as in production where
a tenant's filter repeats. ``cold`` is a filtered search right after ``clear_cache()`` (filter
evaluation and compilation included). Prints the median latency of each, and filtered / unfiltered.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import statistics
import time

import numpy as np

import ragfind
from ragfind.pipeline.chunking import load_tokenizer


class StubEncoder:
    """Random unit query vectors, seeded by the query text: a bi-encoder without a model."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.fingerprint = f"stub-random-{dim}"
        self.max_length = 512
        self.tokenizer = load_tokenizer()

    def encode(self, texts, batch_size=32, show_progress=False, normalize=True):
        raise RuntimeError("the benchmark passes precomputed embeddings")

    def encode_query(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return v / np.linalg.norm(v)


def make_corpus(n: int, tenants: int, seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    lengths = rng.integers(8, 40, n)
    words = np.minimum(rng.zipf(1.2, int(lengths.sum())), len(vocab)) - 1
    docs, pos = [], 0
    for i, ln in enumerate(lengths):
        docs.append(
            {
                "id": f"d{i}",
                "text": " ".join(vocab[w] for w in words[pos : pos + ln]),
                "metadata": {"tenant": int(i % tenants)},
            }
        )
        pos += ln
    queries = [" ".join(vocab[w] for w in rng.integers(0, 300, 3)) for _ in range(200)]
    return docs, queries


def median_ms(fn, queries, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        for q in queries:
            t = time.perf_counter()
            fn(q)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--tenants", type=int, default=100)
    ap.add_argument("--tenant", type=int, default=7)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("-k", type=int, default=10)
    args = ap.parse_args()

    docs, queries = make_corpus(args.docs, args.tenants)
    queries = queries[: args.queries]
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((args.docs, args.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    flt = {"tenant": args.tenant}

    print(f"# Filtered search ({args.docs:,} documents, {args.tenants} tenants, filter {flt}, k={args.k})")
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    print("| retriever | build s | unfiltered ms | filtered ms | filtered / unfiltered | cold filtered ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, kw in (
        ("BM25 only", {"encoder": None}),
        ("dense only (exact)", {"encoder": StubEncoder(args.dim), "bm25": None}),
    ):
        t0 = time.perf_counter()
        r = ragfind.Retriever(**kw, chunk_size=None, contextualize=False, candidates=100)
        r.add_documents(docs, embeddings=vectors if kw.get("encoder") is not None else None)
        build = time.perf_counter() - t0
        allowed = sum(1 for d in docs if d["metadata"]["tenant"] == args.tenant)
        res = r.search(queries[0], k=args.k, filters=flt, use_cache=False)
        assert all(p.metadata["tenant"] == args.tenant for p in res) and len(res) <= allowed
        for q in queries[:5]:  # warm-up
            r.search(q, k=args.k, use_cache=False)
            r.search(q, k=args.k, filters=flt, use_cache=False)
        unfiltered = median_ms(lambda q, r=r: r.search(q, k=args.k, use_cache=False), queries, args.repeat)
        filtered = median_ms(
            lambda q, r=r: r.search(q, k=args.k, filters=flt, use_cache=False), queries, args.repeat
        )

        def cold(q, r=r):
            r.clear_cache()
            r.search(q, k=args.k, filters=flt, use_cache=False)

        cold_ms = median_ms(cold, queries[:10], 1)
        print(
            f"| {label} | {build:.1f} | {unfiltered:.3f} | {filtered:.3f} | "
            f"{filtered / unfiltered:.2f}x | {cold_ms:.3f} |"
        )
        r.close()


if __name__ == "__main__":
    main()
