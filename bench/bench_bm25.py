"""pytest-benchmark suite for BM25: ragfind against bm25s on the same data in the same run.

    PYTHONPATH=python python -m pytest bench/bench_bm25.py --benchmark-columns=median,ops,rounds
    RAGFIND_BENCH_SYNTHETIC=bench/data/synthetic_1m PYTHONPATH=python python -m pytest bench/bench_bm25.py

Groups (compare rows within a group): ``scifact-build``, ``scifact-query`` (one round = all
judged SciFact test queries, strings end to end, top-10, single thread) and the same two on a
synthetic Zipfian corpus (100,000 documents generated into a temporary folder by
bench/make_synthetic.py, or the folder named by $RAGFIND_BENCH_SYNTHETIC). Memory and the
1M-document figures are measured by bench/compare_bm25.py, which isolates each engine in its
own process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_synthetic  # noqa: E402

ragfind = pytest.importorskip("ragfind")
bm25s = pytest.importorskip("bm25s")
Stemmer = pytest.importorskip("Stemmer")

DATA = Path(os.environ.get("RAGFIND_DATA", HERE.parent.parent / "shared" / "data"))


def _beir(name: str) -> tuple[list[str], list[str]]:
    from ragfind.eval import load_beir

    path = DATA / name
    if not (path / "corpus.jsonl").exists():
        pytest.skip(f"{path} not found (set RAGFIND_DATA)")
    data = load_beir(path)
    return data.documents()[1], data.query_items()[1]


@pytest.fixture(scope="module")
def scifact():
    return _beir("scifact")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    path = os.environ.get("RAGFIND_BENCH_SYNTHETIC")
    if path:
        folder = Path(path)
    else:
        folder = tmp_path_factory.mktemp("synthetic")
        make_synthetic.main(["--docs", "100000", "--queries", "300", "--out", str(folder)])
    texts = (folder / "docs.txt").read_text(encoding="ascii").splitlines()
    queries = (folder / "queries.txt").read_text(encoding="ascii").splitlines()[:300]
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert meta["docs"] == len(texts)
    return texts, queries


@pytest.fixture(scope="module")
def stemmer():
    return Stemmer.Stemmer("english")


def build_ragfind(texts):
    index = ragfind.BM25Index(method="lucene", k1=1.2, b=0.75)
    index.add(texts)
    return index


def build_bm25s(texts, stemmer):
    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    return retriever


def bm25s_query(retriever, queries, stemmer):
    tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    return retriever.retrieve(tokens, k=10, n_threads=1, show_progress=False)


CORPORA = ["scifact", "synthetic"]


@pytest.mark.parametrize("corpus", CORPORA)
def test_build_ragfind(benchmark, request, corpus):
    texts, _ = request.getfixturevalue(corpus)
    benchmark.group = f"{corpus}-build"
    index = benchmark.pedantic(build_ragfind, args=(texts,), rounds=3, iterations=1)
    assert len(index) == len(texts)


@pytest.mark.parametrize("corpus", CORPORA)
def test_build_bm25s(benchmark, request, corpus, stemmer):
    texts, _ = request.getfixturevalue(corpus)
    benchmark.group = f"{corpus}-build"
    retriever = benchmark.pedantic(build_bm25s, args=(texts, stemmer), rounds=3, iterations=1)
    assert retriever.scores["num_docs"] == len(texts)


@pytest.mark.parametrize("corpus", CORPORA)
def test_query_ragfind_search(benchmark, request, corpus):
    texts, queries = request.getfixturevalue(corpus)
    index = build_ragfind(texts)
    benchmark.group = f"{corpus}-query"
    benchmark.extra_info["queries"] = len(queries)

    def run():
        for q in queries:
            index.search(q, k=10)

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("corpus", CORPORA)
def test_query_ragfind_search_batch_1_thread(benchmark, request, corpus):
    texts, queries = request.getfixturevalue(corpus)
    index = build_ragfind(texts)
    benchmark.group = f"{corpus}-query"
    benchmark.extra_info["queries"] = len(queries)
    results = benchmark.pedantic(
        index.search_batch, args=(queries,), kwargs={"k": 10, "threads": 1}, rounds=5, warmup_rounds=1
    )
    assert len(results) == len(queries)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("corpus", CORPORA)
def test_query_bm25s(benchmark, request, corpus, backend, stemmer, tmp_path):
    if backend == "numba":
        pytest.importorskip("numba")
    texts, queries = request.getfixturevalue(corpus)
    build_bm25s(texts, stemmer).save(str(tmp_path / "idx"))
    retriever = bm25s.BM25.load(str(tmp_path / "idx"), backend=backend, show_progress=False)
    bm25s_query(retriever, queries[:5], stemmer)  # numba JIT outside the timing
    benchmark.group = f"{corpus}-query"
    benchmark.extra_info["queries"] = len(queries)
    benchmark.pedantic(bm25s_query, args=(retriever, queries, stemmer), rounds=5, warmup_rounds=1)
