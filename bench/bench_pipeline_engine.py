"""pytest-benchmark rows of the Retriever against the index underneath it (run:
PYTHONPATH=python pytest bench/bench_pipeline_engine.py --benchmark-group-by=group).

Each group pairs the Retriever with the bare engine on the same texts: BM25-only search on SciFact
(k=10, defaults, ``cache_size=0``) against ``BM25Index.search``; BM25-only ingestion of SciFact
(``chunk_size=None`` and default chunking) against ``BM25Index.add``; one 10-word query embedded by
``Encoder.encode_query`` against the bare ONNX Runtime forward pass. SciFact rows skip without
../shared/data; the encoder rows build the default MiniLM into $RAGFIND_HOME on first use.
bench/compare_pipeline_engine.py and bench/compare_query_embedding.py give the same rows as
same-run ratios.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import ragfind

QUERY = "does vitamin d improve bone density in adults with osteoporosis"


def _data() -> Path:
    return Path(os.environ.get("RAGFIND_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="module")
def scifact():
    base = _data() / "scifact"
    if not (base / "corpus.jsonl").exists():
        pytest.skip(f"SciFact not found under {base.parent} (set RAGFIND_DATA)")
    with open(base / "corpus.jsonl", encoding="utf-8") as f:
        docs = [
            {"id": d["_id"], "title": d.get("title") or "", "text": d["text"]}
            for d in (json.loads(line) for line in f)
        ]
    with open(base / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f]
    return docs, queries


@pytest.fixture(scope="module")
def bm25_retriever(scifact):
    r = ragfind.Retriever(encoder=None, cache_size=0)
    r.add_documents(scifact[0])
    yield r
    r.close()


def _each(queries, f):
    it = iter(range(1 << 62))
    return lambda: f(queries[next(it) % len(queries)])


@pytest.mark.benchmark(group="search: BM25 only, SciFact, k=10")
def test_search_retriever(benchmark, bm25_retriever, scifact):
    benchmark(_each(scifact[1], lambda q: bm25_retriever.search(q, k=10)))


@pytest.mark.benchmark(group="search: BM25 only, SciFact, k=10")
def test_search_bm25index(benchmark, bm25_retriever, scifact):
    index = bm25_retriever.bm25
    benchmark(_each(scifact[1], lambda q: index.search(q, 10)))


def _indexed(docs):
    return [f"{d['title']}\n{d['text']}" if d["title"] else d["text"] for d in docs]


@pytest.mark.benchmark(group="ingest: BM25 only, SciFact")
def test_ingest_bm25index(benchmark, scifact):
    texts = _indexed(scifact[0])
    benchmark.pedantic(lambda: ragfind.BM25Index().add(texts), rounds=3)


@pytest.mark.benchmark(group="ingest: BM25 only, SciFact")
def test_ingest_retriever_whole_documents(benchmark, scifact):
    docs = scifact[0]
    benchmark.pedantic(
        lambda: ragfind.Retriever(encoder=None, cache_size=0, chunk_size=None).add_documents(docs), rounds=3
    )


@pytest.mark.benchmark(group="ingest: BM25 only, SciFact")
def test_ingest_retriever_default_chunking(benchmark, scifact):
    docs = scifact[0]
    benchmark.pedantic(lambda: ragfind.Retriever(encoder=None, cache_size=0).add_documents(docs), rounds=3)


@pytest.fixture(scope="module")
def minilm():
    return ragfind.load_model("all-MiniLM-L6-v2", threads=2)


@pytest.mark.benchmark(group="query embedding: 10 words, MiniLM f32, 2 threads")
def test_encode_query(benchmark, minilm):
    benchmark(minilm.encode_query, QUERY)


@pytest.mark.benchmark(group="query embedding: 10 words, MiniLM f32, 2 threads")
def test_forward_pass_alone(benchmark, minilm):
    ids = np.asarray([minilm.tokenizer.encode(QUERY).ids], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    feeds = {n: feeds[n] for n in minilm._input_names}
    benchmark(minilm.session.run, [minilm.config.output], feeds)
