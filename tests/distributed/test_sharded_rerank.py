"""Re-ranking over shards: re-rank stages run on the shards holding the passages, the
cross-encoder at the router; the results equal one Retriever's."""

from __future__ import annotations

import pytest
import sharded_helpers
from sharded_helpers import OverlapCrossEncoder, TermRerank, assert_same, load_collection, splade_stages

import ragfind
from ragfind.distributed import ShardedRetriever

ray_session = sharded_helpers.ray_session  # the session's local Ray (a fixture)

pytestmark = pytest.mark.slow


def test_rerank_stage_and_cross_encoder_equal(ray_session) -> None:
    c = load_collection("cranfield")
    docs = c["docs"][:500]
    opts = dict(encoder=None, chunk_size=None, cache_size=0, rerank_candidates=25)
    single = ragfind.Retriever(reranker=OverlapCrossEncoder(), stages=[TermRerank()], **opts)
    single.add_documents(docs)
    with ShardedRetriever(3, reranker=OverlapCrossEncoder(), stages=[TermRerank()], **opts) as sharded:
        sharded.add_documents(docs)
        for _, q in c["queries"][:25]:
            assert_same(single, sharded, q, k=10)
            assert_same(single, sharded, q, k=5, rerank=False)
        res = sharded.search(c["queries"][0][1], k=5)
        assert {"cross_encoder", "terms", "fused"} <= set(res[0].scores)


def test_splade_stage_equal(ray_session) -> None:
    # A SPLADE first stage on every shard (built there by a factory), fused with BM25.
    c = load_collection("cranfield")
    docs = c["docs"][:400]
    opts = dict(encoder=None, chunk_size=None, cache_size=0)
    single = ragfind.Retriever(stages=splade_stages(), **opts)
    single.add_documents(docs)
    with ShardedRetriever(2, stages=splade_stages, **opts) as sharded:
        sharded.add_documents(docs)
        for _, q in c["queries"][:20]:
            assert_same(single, sharded, q, k=10)
            assert_same(single, sharded, q, k=10, stages=["splade"])
            assert_same(single, sharded, q, k=5, stages=["splade"], filters={"bucket": 2})
