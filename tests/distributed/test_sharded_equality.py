"""A ShardedRetriever gives the results of one Retriever over the same documents: BM25 (global
statistics), hybrid RRF with the shared MiniLM embeddings, filters, collapse, after deletes, and
with chunked documents (collection-wide chunk ids map back to the same passages)."""

from __future__ import annotations

import numpy as np
import pytest
import sharded_helpers
from sharded_helpers import assert_same, load_collection

import ragfind
from ragfind.distributed import ShardedRetriever

ray_session = sharded_helpers.ray_session  # the session's local Ray (a fixture)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scifact(ray_session):
    c = load_collection("scifact")
    opts = dict(encoder=c["encoder"], chunk_size=None, contextualize=False, cache_size=0)
    single = ragfind.Retriever(**opts)
    single.add_documents(c["docs"])
    sharded = ShardedRetriever(3, **opts)
    # In several batches, as a stream of writes would come; the first with precomputed
    # embeddings (split over the shards by the router).
    first = c["docs"][:2000]
    sharded.add_documents(first, embeddings=c["encoder"].encode([d["text"] for d in first]))
    for i in range(2000, len(c["docs"]), 2000):
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
    sharded = ShardedRetriever(2, replicas=2, placement="any", **opts)
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
    # The router's results cache, sized at run time (as `ragfind serve --cache-size` does).
    q = c["queries"][0][1]
    sharded.set_cache_size(4)
    assert not sharded.search(q, k=5).cached and sharded.search(q, k=5).cached
    assert_same(single, sharded, q, k=5)
    sharded.set_cache_size(0)
    assert not sharded.search(q, k=5).cached and sharded.cache_stats()["results"]["max_entries"] == 0


def _count_rounds(sharded) -> list:
    """The rounds of calls the router's reads make from now on, each as the sorted names of
    its calls (the list fills as the router reads; clear it between searches)."""
    rounds: list = []
    read = sharded._copies.read

    def counted(calls, *a, **kw):
        rounds.append(sorted({call[0] for call in calls.values()}))
        return read(calls, *a, **kw)

    sharded._copies.read = counted
    return rounds


def test_one_round_trip_in_the_steady_state_and_equal_after_writes(ray_session) -> None:
    c = load_collection("cranfield")
    docs, queries = c["docs"][:500], [q for _, q in c["queries"][:12]]
    opts = dict(encoder=None, chunk_size=None, cache_size=0)
    single = ragfind.Retriever(**opts)
    single.add_documents(docs[:300])
    # The rounds of ordinary calls (the search graph's one call: test_sharded_fanout.py).
    sharded = ShardedRetriever(3, fanout="calls", **opts)
    try:
        sharded.add_documents(docs[:300])
        rounds = _count_rounds(sharded)
        for step in range(3):
            for q in queries:
                assert_same(single, sharded, q, k=10, stages=["bm25"])
                rounds.clear()
                sharded.search(q, k=10, stages=["bm25"])
                # The statistics are cached, the passages came with the lists: one round.
                assert rounds == [["first_stage"]], (step, q, rounds)
            # Writes change N, avgdl and df: the next searches see them at once.
            new = docs[300 + 100 * step : 400 + 100 * step] if step < 2 else []
            if new:
                single.add_documents(new)
                sharded.add_documents(new)
            gone = [d["id"] for d in docs[step * 7 : 300 : 23]]
            single.delete_documents(gone)
            sharded.delete_documents(gone)
    finally:
        sharded.close()


def test_a_shard_ahead_of_the_routers_statistics_is_scored_again(ray_session) -> None:
    # A write whose acknowledgement the router does not take in (as when another router
    # wrote): the shard holds another version than the router's statistics, answers with its
    # own numbers, the search is scored again (equal results), and the next search reads the
    # shard's whole table once before the steady state (one round) comes back.
    c = load_collection("cranfield")
    docs, queries = c["docs"][:400], [q for _, q in c["queries"][:8]]
    opts = dict(encoder=None, chunk_size=None, cache_size=0)
    single = ragfind.Retriever(**opts)
    single.add_documents(docs[:300])
    sharded = ShardedRetriever(2, **opts)
    try:
        sharded.add_documents(docs[:300])
        rounds = _count_rounds(sharded)
        sharded._note_acks = lambda out: None  # the acknowledgements are lost
        single.add_documents(docs[300:])
        sharded.add_documents(docs[300:])
        single.delete_documents([d["id"] for d in docs[:300:7]])
        sharded.delete_documents([d["id"] for d in docs[:300:7]])
        del sharded._note_acks
        rounds.clear()
        assert_same(single, sharded, queries[0], k=10, stages=["bm25"])
        assert rounds == [["first_stage"], ["first_stage"]], rounds
        rounds.clear()
        assert_same(single, sharded, queries[1], k=10, stages=["bm25"])
        assert rounds == [["bm25_table"], ["first_stage"]], rounds
        for q in queries[2:]:
            rounds.clear()
            assert_same(single, sharded, q, k=10, stages=["bm25"])
            assert rounds == [["first_stage"]], rounds
    finally:
        sharded.close()


def test_rows_beyond_one_inline_reply_are_fetched_after(ray_session) -> None:
    # Documents of about 12 KB: a shard's reply carries only the rows that fit in one inline
    # Ray reply (a few), the router fetches the rest of the passages in a second round, and
    # the results stay one Retriever's (one list, fused lists, re-ranked heads).
    from ragfind.distributed.shard import REPLY_BYTES

    c = load_collection("cranfield")
    docs = [{**d, "text": " ".join([d["text"]] * 12)} for d in c["docs"][:300]]
    assert sum(len(d["text"]) for d in docs[:40]) > 2 * REPLY_BYTES
    queries = [q for _, q in c["queries"][:6]]
    opts = dict(encoder=None, chunk_size=None, cache_size=0)
    single = ragfind.Retriever(**opts)
    single.add_documents(docs)
    sharded = ShardedRetriever(2, **opts)
    try:
        sharded.add_documents(docs)
        rounds = _count_rounds(sharded)
        for q in queries:
            rounds.clear()
            assert_same(single, sharded, q, k=20, stages=["bm25"])
            assert_same(single, sharded, [q, q + " flow"], k=20)
        assert ["fetch"] in rounds, rounds
    finally:
        sharded.close()


def test_head_rows_go_by_reciprocal_rank_within_the_budget() -> None:
    from ragfind.distributed.shard import _row_bytes, head_rows

    class Store:
        def fetch_list(self, ids):
            return [(i, f"d{i}", "x" * 100, None, 0, 100, "{}", None) for i in ids]

    a, b = np.array([5, 1, 7]), np.array([1, 9, 3, 4])
    # 1 is in both lists; 5 and 9 tie on their rank (sorted is stable: first seen first).
    assert list(head_rows(Store(), [a, b], 10, 10**6)) == [1, 5, 9, 7, 3, 4]
    assert list(head_rows(Store(), [a, b], 2, 10**6)) == [1, 5]
    assert list(head_rows(Store(), [b], 3, 10**6)) == [1, 9, 3]
    # Ranked 3rd in both beats 1st in one (RRF with k = 60).
    assert list(head_rows(Store(), [np.array([8, 2, 3]), np.array([9, 6, 3])], 1, 10**6)) == [3]
    one = _row_bytes(Store().fetch_list([0])[0])
    assert list(head_rows(Store(), [a, b], 10, 3 * one + 1)) == [1, 5, 9]
    assert head_rows(Store(), [a, b], 10, one - 1) == {}
    assert head_rows(Store(), [], 3, 10**6) == {}
    # Against the obvious reference: a dict of reciprocal-rank sums, sorted stably.
    rng = np.random.default_rng(7)
    for _ in range(200):
        lists = [rng.permutation(60)[: rng.integers(0, 40)] for _ in range(rng.integers(1, 4))]
        prio: dict = {}
        for ids in lists:
            for rank, i in enumerate(ids.tolist()):
                prio[i] = prio.get(i, 0.0) + 1.0 / (60.0 + rank + 1)
        for top in (1, 5, 20, 100):
            want = sorted(prio, key=prio.__getitem__, reverse=True)[:top]
            assert list(head_rows(Store(), lists, top, 10**6)) == want
