"""ragfind.integrations.haystack against haystack-ai: Haystack's own DocumentStore test suites
(haystack.testing.document_store), and the retriever components in a Pipeline."""

from __future__ import annotations

import pytest

pytest.importorskip("haystack")

from haystack import Document, Pipeline  # noqa: E402
from haystack.document_stores.errors import DuplicateDocumentError  # noqa: E402
from haystack.document_stores.types import DuplicatePolicy  # noqa: E402
from haystack.testing.document_store import DeleteAllTest, DocumentStoreBaseTests  # noqa: E402

from ragfind.integrations.haystack import (  # noqa: E402
    RagfindBM25Retriever,
    RagfindDocumentStore,
    RagfindEmbeddingRetriever,
    RagfindHybridRetriever,
)


class TestDocumentStore(DocumentStoreBaseTests, DeleteAllTest):
    @pytest.fixture
    def document_store(self):
        return RagfindDocumentStore()

    def test_write_documents(self, document_store):
        """The default policy (NONE) fails on an id already stored, as FAIL does."""
        docs = [Document(id="1", content="a"), Document(id="2", content="b", meta={"n": 1})]
        assert document_store.write_documents(docs) == 2
        with pytest.raises(DuplicateDocumentError):
            document_store.write_documents([Document(id="1", content="c")])
        self.assert_documents_are_equal(document_store.filter_documents(), docs)


DOCS = [
    Document(
        id="cats",
        content="Cats purr and hunt mice.",
        meta={"lang": "en", "year": 2020},
        embedding=[1.0, 0, 0],
    ),
    Document(
        id="dogs",
        content="Dogs bark and fetch sticks.",
        meta={"lang": "en", "year": 2015},
        embedding=[0, 1.0, 0],
    ),
    Document(
        id="chats",
        content="Les chats ronronnent.",
        meta={"lang": "fr", "year": 2021},
        embedding=[0.9, 0, 0.1],
    ),
    Document(id="bare", content="Mice fear cats.", meta={"lang": "en"}),
]


@pytest.fixture
def store():
    s = RagfindDocumentStore()
    assert s.write_documents(DOCS) == 4
    return s


def test_policies_and_counts(store):
    assert store.count_documents() == 4
    assert store.write_documents([Document(id="cats", content="other")], policy=DuplicatePolicy.SKIP) == 0
    assert store.filter_documents({"field": "id", "operator": "==", "value": "cats"})[0].content.startswith(
        "Cats"
    )
    new = Document(id="cats", content="Cats sleep.", meta={"lang": "en"}, embedding=[0, 0, 1.0])
    assert store.write_documents([new], policy=DuplicatePolicy.OVERWRITE) == 1
    assert store.count_documents() == 4
    hits = store.embedding_retrieval([0, 0, 1.0], top_k=1, return_embedding=True)
    assert hits[0].id == "cats" and hits[0].embedding == [0, 0, 1.0]
    store.delete_documents(["cats", "missing"])
    assert store.count_documents() == 3 and store.embedding_retrieval([0, 0, 1.0], top_k=1)[0].id == "chats"
    with pytest.raises(ValueError, match="dimension"):
        store.write_documents([Document(content="x", embedding=[1.0, 2.0])])


def test_bm25_retriever(store):
    r = RagfindBM25Retriever(store, top_k=2)
    docs = r.run(query="cats mice")["documents"]
    assert [d.id for d in docs] == [
        p.doc_id for p in store.retriever.search("cats mice", k=2, stages=["bm25"])
    ]
    assert docs[0].score > docs[1].score > 0
    only_fr = {"field": "meta.lang", "operator": "==", "value": "fr"}
    assert [d.id for d in r.run(query="chats", filters=only_fr)["documents"]] == ["chats"]
    scaled = r.run(query="cats mice", scale_score=True)["documents"]
    assert all(0 < d.score < 1 for d in scaled)
    merged = RagfindBM25Retriever(
        store, filters={"field": "meta.lang", "operator": "==", "value": "en"}, filter_policy="merge"
    )
    recent = {"field": "meta.year", "operator": ">=", "value": 2018}
    assert [d.id for d in merged.run(query="cats", filters=recent)["documents"]] == ["cats"]
    assert r.run(query="cats", top_k=0)["documents"] == []
    with pytest.raises(ValueError, match="top_k must be greater than 0"):
        RagfindBM25Retriever(store, top_k=0)
    with pytest.raises(TypeError, match="RagfindDocumentStore"):
        RagfindBM25Retriever(object())


def test_embedding_and_hybrid_retrievers_in_a_pipeline(store):
    emb = RagfindEmbeddingRetriever(store, top_k=2)
    docs = emb.run(query_embedding=[1.0, 0, 0])["documents"]
    assert [d.id for d in docs] == ["cats", "chats"] and docs[0].score == pytest.approx(1.0, abs=1e-5)
    assert docs[0].embedding is None  # return_embedding=False, as Haystack's in-memory retriever
    old = {"field": "meta.year", "operator": "<", "value": 2021}
    assert [d.id for d in emb.run(query_embedding=[1.0, 0, 0], filters=old)["documents"]] == ["cats", "dogs"]
    p = Pipeline()
    p.add_component("hybrid", RagfindHybridRetriever(store, top_k=3))
    out = p.run({"hybrid": {"query": "mice", "query_embedding": [1.0, 0, 0]}})["hybrid"]["documents"]
    assert out[0].id == "cats" and len(out) == 3  # first by BM25 and by embedding
    assert {d.id for d in out} >= {"cats", "bare"}


def test_serialisation_round_trip(store):
    r = RagfindHybridRetriever(store, top_k=4, weights=[1.0, 2.0])
    again = RagfindHybridRetriever.from_dict(r.to_dict())
    assert again.top_k == 4 and again.weights == [1.0, 2.0]
    assert again.document_store.to_dict() == store.to_dict()
    assert RagfindBM25Retriever.from_dict(RagfindBM25Retriever(store, scale_score=True).to_dict()).scale_score
