"""pytest-benchmark suite for the pipeline (run: PYTHONPATH=python pytest bench/bench_pipeline.py).

Fusion of three 1,000-candidate lists (ragfind vs ranx in the same session), chunking, context
assembly, and Retriever search on a synthetic corpus with a hashing encoder (no model needed);
bench/compare_pipeline.py measures the real thing on SciFact with MiniLM.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ragfind

N_LISTS, N_CAND = 3, 1000


@pytest.fixture(scope="module")
def lists():
    rng = np.random.default_rng(0)
    return [rng.permutation(N_LISTS * N_CAND)[:N_CAND].astype(np.int64) for _ in range(N_LISTS)]


def test_rrf_int(benchmark, lists):
    benchmark(ragfind.rrf, lists)


def test_rrf_str(benchmark, lists):
    str_lists = [[f"doc{i}" for i in x.tolist()] for x in lists]
    benchmark(ragfind.rrf, str_lists)


def test_fuse_scores_minmax(benchmark, lists):
    rng = np.random.default_rng(1)
    pairs = [(x, np.sort(rng.random(len(x)))[::-1].copy()) for x in lists]
    benchmark(ragfind.fuse_scores, pairs)


def test_ranx_rrf(benchmark, lists):
    ranx = pytest.importorskip("ranx")
    runs = [ranx.Run({"q": {f"doc{d}": float(len(x) - r) for r, d in enumerate(x.tolist())}}) for x in lists]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranx.fuse(runs, norm=None, method="rrf")
        benchmark(ranx.fuse, runs, norm=None, method="rrf")


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(5000)]
    docs = []
    for d in range(2000):
        words = rng.choice(vocab, size=120, p=None)
        sentences = [" ".join(words[i : i + 12]) + "." for i in range(0, 120, 12)]
        docs.append(
            {"id": f"d{d}", "title": f"Doc {d}", "text": " ".join(sentences), "metadata": {"g": d % 7}}
        )
    return docs


def test_chunk_documents(benchmark, corpus):
    benchmark.pedantic(ragfind.chunk_documents, args=(corpus[:500],), kwargs={"size": 64}, rounds=3)


def test_assemble_context(benchmark, corpus):
    passages = [
        {"id": i, "doc_id": d["id"], "text": d["text"], "title": d["title"]}
        for i, d in enumerate(corpus[:20])
    ]
    benchmark(ragfind.assemble_context, passages, 2000, question="what?")


class _HashEncoder:
    dim = 128
    fingerprint = "bench-hash-128"
    max_length = 256

    def __init__(self):
        from ragfind.pipeline.chunking import load_tokenizer

        self.tokenizer = load_tokenizer()

    def _vec(self, text):
        v = np.zeros(self.dim, np.float32)
        for w in text.split():
            v[hash(w) % self.dim] += 1.0
        v[0] += 1e-3
        return v / np.linalg.norm(v)

    def encode(self, texts, batch_size=32, show_progress=False):
        return np.stack([self._vec(t) for t in texts])

    def encode_query(self, text):
        return self._vec(text)


@pytest.fixture(scope="module")
def retriever(corpus):
    r = ragfind.Retriever(encoder=_HashEncoder(), chunk_size=64)
    r.add_documents(corpus)
    yield r
    r.close()


def test_retriever_search_cold(benchmark, retriever):
    def search():
        retriever.clear_cache()
        return retriever.search("w1 w2 w3 w42", k=10)

    benchmark(search)


def test_retriever_search_filtered(benchmark, retriever):
    benchmark(retriever.search, "w1 w2 w3 w42", 10, {"g": 3}, use_cache=False)


def test_retriever_cache_hit(benchmark, retriever):
    retriever.search("w5 w6", k=10)
    benchmark(retriever.search, "w5 w6", 10)
