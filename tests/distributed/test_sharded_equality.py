"""A ShardedRetriever gives the results of one Retriever over the same documents: BM25 (global
statistics), hybrid RRF with the shared MiniLM embeddings, filters, collapse, after deletes, and
with chunked documents (collection-wide chunk ids map back to the same passages)."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from conftest import load_collection
from ragfind.distributed import ShardedRetriever

pytestmark = pytest.mark.slow


def _key(p) -> tuple:
    return (p.doc_id, p.start, p.end)


def assert_same(single, sharded, query, **kw) -> None:
    """Same passages with the same scores (1e-6 relative); passages tied at the cut may differ."""
    a = single.search(query, **kw)
    b = sharded.search(query, **kw)
    assert not b.partial
    assert len(a) == len(b), (query, kw)
    sa = np.array([p.score for p in a])
    sb = np.array([p.score for p in b])
    np.testing.assert_allclose(sb, sa, rtol=1e-6, atol=1e-9, err_msg=f"{query!r} {kw}")
    if not len(a):
        return
    cut = sa[-1]
    above_a = {_key(p) for p in a if p.score > cut + 1e-6 * abs(cut)}
    above_b = {_key(p) for p in b if p.score > cut + 1e-6 * abs(cut)}
    assert above_a == above_b, (query, kw)
    by_key = {_key(p): p for p in a}
    for p in b:
        q = by_key.get(_key(p))
        if q is None:
            continue  # tied at the cut
        assert p.text == q.text and p.doc_id == q.doc_id and dict(p.metadata) == dict(q.metadata)
        assert set(p.scores) == set(q.scores)
        for name in q.scores:
            assert p.scores[name] == pytest.approx(q.scores[name], rel=1e-6, abs=1e-9), (query, name)


@pytest.fixture(scope="module")
def scifact(ray_session):
    c = load_collection("scifact")
    opts = dict(encoder=c["encoder"], chunk_size=None, contextualize=False, cache_size=0)
    single = ragfind.Retriever(**opts)
    single.add_documents(c["docs"])
    sharded = ShardedRetriever(3, **opts)
    # In several batches, as a stream of writes would come.
    for i in range(0, len(c["docs"]), 2000):
        sharded.add_documents(c["docs"][i : i + 2000])
    yield single, sharded, c
    sharded.close()


def test_scifact_equal_before_and_after_deletes(scifact) -> None:
    single, sharded, c = scifact
    assert len(sharded) == len(single) == len(c["docs"])
    assert sharded.n_chunks == single.n_chunks
    queries = [q for _, q in c["queries"][:60]]
    for q in queries:
        assert_same(single, sharded, q, k=10, stages=["bm25"])
        assert_same(single, sharded, q, k=10)
        assert_same(single, sharded, q, k=10, stages=["dense"])
    for q in queries[:30]:
        assert_same(single, sharded, q, k=10, filters={"bucket": 1})
        assert_same(single, sharded, q, k=5, filters={"bucket": {"$in": [0, 3]}}, stages=["bm25"])
    # Deletes change N, avgdl and df on some shards only: the global statistics follow.
    gone = [d["id"] for d in c["docs"][::9]]
    assert sharded.delete_documents(gone) == single.delete_documents(gone)
    assert len(sharded) == len(single)
    for q in queries[:30]:
        assert_same(single, sharded, q, k=10, stages=["bm25"])
        assert_same(single, sharded, q, k=10)
        assert_same(single, sharded, q, k=10, filters={"bucket": 2})
    # RAG-Fusion (several phrasings) and a deep k.
    assert_same(single, sharded, queries[:3], k=20)
    assert_same(single, sharded, queries[5], k=200)


def test_scifact_bm25_scores_equal_one_index(scifact) -> None:
    # The stage scores themselves, for every returned passage: BM25 of one index.
    single, sharded, c = scifact
    for _, q in c["queries"][60:80]:
        b = sharded.search(q, k=20, stages=["bm25"])
        ids, scores = single.bm25.search(q, 20)
        got = {p.doc_id: p.scores["bm25"] for p in b}
        ref = {}
        rows = single.store.fetch(ids.tolist())
        for i, s in zip(ids.tolist(), scores.tolist()):
            ref[rows[i][1]] = s
        common = set(got) & set(ref)
        assert len(common) >= len(ref) - 2
        for d in common:
            assert got[d] == pytest.approx(ref[d], rel=1e-6)


@pytest.fixture(scope="module")
def cranfield(ray_session):
    # Chunked documents (several chunks per document), BM25 only, 2 shards x 2 replicas.
    c = load_collection("cranfield")
    opts = dict(encoder=None, chunk_size=48, chunk_overlap=8, cache_size=0)
    single = ragfind.Retriever(**opts)
    single.add_documents(c["docs"])
    sharded = ShardedRetriever(2, replicas=2, **opts)
    sharded.add_documents(c["docs"])
    yield single, sharded, c
    sharded.close()


def test_cranfield_chunked_equal(cranfield) -> None:
    single, sharded, c = cranfield
    assert sharded.n_chunks == single.n_chunks > len(c["docs"])
    for _, q in c["queries"][:50]:
        assert_same(single, sharded, q, k=10)
        assert_same(single, sharded, q, k=10, collapse="document")
    for _, q in c["queries"][50:70]:
        assert_same(single, sharded, q, k=10, filters={"bucket": {"$ne": 0}})
    gone = [d["id"] for d in c["docs"][3::5]]
    single.delete_documents(gone)
    sharded.delete_documents(gone)
    for _, q in c["queries"][:30]:
        assert_same(single, sharded, q, k=10)
        assert_same(single, sharded, q, k=7, collapse="document", filters={"bucket": 1})
    doc = c["docs"][0]
    assert sharded.get_document(doc["id"]) == single.get_document(doc["id"])
