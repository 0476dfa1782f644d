"""ragfind.integrations.llama_index.RagfindRetriever against the real llama-index-core."""

from __future__ import annotations

import asyncio

import pytest
from integrations_fixtures import retriever_fixture  # noqa: F401

pytest.importorskip("llama_index.core")

from llama_index.core.retrievers import BaseRetriever  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore  # noqa: E402

from ragfind.integrations.llama_index import RagfindRetriever  # noqa: E402


def test_nodes_match_the_retriever(retriever):
    li = RagfindRetriever(retriever=retriever, k=3)
    assert isinstance(li, BaseRetriever)
    nodes = li.retrieve("cats hunt mice")
    ref = retriever.search("cats hunt mice", k=3)
    assert [n.node.get_content() for n in nodes] == [p.text for p in ref]
    for n, p in zip(nodes, ref):
        assert isinstance(n, NodeWithScore)
        assert n.score == pytest.approx(p.score)
        md = n.node.metadata
        assert md["doc_id"] == p.doc_id and md["chunk_id"] == p.id and md["ranks"] == dict(p.ranks)
        assert md["score"] == pytest.approx(p.score) and md["lang"] == "en"
        assert n.node.node_id == f"{p.doc_id}:{p.id}"
        assert n.node.relationships[NodeRelationship.SOURCE].node_id == p.doc_id
        shown = n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "ranks" not in shown and p.text in shown and "doc_id" in shown


def test_async_and_filters(retriever):
    li = RagfindRetriever(retriever=retriever, k=5, filters={"lang": "fr"})
    nodes = asyncio.run(li.aretrieve("chats"))
    assert [n.node.metadata["doc_id"] for n in nodes] == ["chats"]
    a = RagfindRetriever(retriever=retriever, k=2).retrieve("mice")
    b = asyncio.run(RagfindRetriever(retriever=retriever, k=2).aretrieve("mice"))
    assert [n.node.node_id for n in a] == [n.node.node_id for n in b]


def test_bad_arguments(retriever):
    with pytest.raises(ValueError, match="k must be a positive int"):
        RagfindRetriever(retriever=retriever, k=0)
    with pytest.raises(TypeError, match="expected a dict"):
        RagfindRetriever(retriever=retriever, filters=["lang"])
