"""ragfind.integrations.langchain.RagfindRetriever against the real langchain-core."""

from __future__ import annotations

import asyncio

import pytest
from integrations_fixtures import retriever_fixture  # noqa: F401

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402

from ragfind.integrations.langchain import RagfindRetriever  # noqa: E402


def test_documents_match_the_retriever(retriever):
    lc = RagfindRetriever(retriever=retriever, k=3)
    assert isinstance(lc, BaseRetriever)
    docs = lc.invoke("cats hunt mice")
    ref = retriever.search("cats hunt mice", k=3)
    assert [d.page_content for d in docs] == [p.text for p in ref]
    for d, p in zip(docs, ref):
        assert isinstance(d, Document)
        assert d.metadata["doc_id"] == p.doc_id and d.metadata["chunk_id"] == p.id
        assert d.metadata["score"] == pytest.approx(p.score)
        assert d.metadata["ranks"] == dict(p.ranks) and d.metadata["ranks"]["bm25"] >= 1
        assert d.metadata["scores"]["bm25"] == pytest.approx(p.scores["bm25"])
        assert d.metadata["lang"] == "en"  # the document's own metadata
        assert d.id == f"{p.doc_id}:{p.id}"


def test_async_filters_and_chains(retriever):
    lc = RagfindRetriever(retriever=retriever, k=5, filters={"lang": "fr"})
    docs = asyncio.run(lc.ainvoke("chats"))
    assert [d.metadata["doc_id"] for d in docs] == ["chats"]
    sync = RagfindRetriever(retriever=retriever, k=2).invoke("mice")
    asynced = asyncio.run(RagfindRetriever(retriever=retriever, k=2).ainvoke("mice"))
    assert [d.metadata["chunk_id"] for d in sync] == [d.metadata["chunk_id"] for d in asynced]
    chain = RagfindRetriever(retriever=retriever, k=2) | RunnableLambda(
        lambda ds: [d.metadata["doc_id"] for d in ds]
    )
    assert chain.invoke("mice") == ["mice", "cats"]
    assert (
        RagfindRetriever(retriever=retriever, k=2).batch(["dogs", "cats"])[0][0].metadata["doc_id"] == "dogs"
    )


def test_bad_arguments(retriever):
    with pytest.raises(Exception, match="k must be a positive int"):
        RagfindRetriever(retriever=retriever, k=0)
    with pytest.raises(Exception, match="expected a ragfind.Retriever"):
        RagfindRetriever(retriever="nope")
    with pytest.raises(ValueError, match="unknown field 'colour'"):
        RagfindRetriever(retriever=retriever, filters={"colour": "red"}).invoke("cats")


def test_invoke_time_arguments(retriever):
    lc = RagfindRetriever(retriever=retriever, k=4)
    assert len(lc.invoke("cats dogs mice chats", k=1)) == 1
    assert len(lc.invoke("cats dogs mice chats")) == 4
    assert [d.metadata["doc_id"] for d in lc.invoke("chats", filters={"lang": "fr"})] == ["chats"]
    bm25_only = lc.invoke("mice", stages=["bm25"], k=2)
    assert all(set(d.metadata["ranks"]) == {"bm25"} for d in bm25_only)
    one_each = lc.invoke("mice", collapse="document")
    assert len({d.metadata["doc_id"] for d in one_each}) == len(one_each)
    assert len(asyncio.run(lc.ainvoke("cats hunt mice", k=2))) == 2
    assert [len(x) for x in lc.batch(["dogs", "cats"], k=1)] == [1, 1]
    assert [len(x) for x in asyncio.run(lc.abatch(["mice", "cats"], k=2))] == [2, 2]
    with pytest.raises(TypeError, match="unexpected keyword argument 'top_k'"):
        lc.invoke("cats", top_k=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'filter'"):
        asyncio.run(lc.ainvoke("cats", filter={"lang": "en"}))
    with pytest.raises(ValueError, match="k must be a positive int"):
        lc.invoke("cats", k=0)
