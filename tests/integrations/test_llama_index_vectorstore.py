"""ragfind.integrations.llama_index.RagfindVectorStore, tested the way LlamaIndex's own vector-store
integrations test theirs: a fixture of TextNodes with embeddings, metadata and a SOURCE
relationship; VectorStoreQuery with MetadataFilters (each operator, nested AND/OR/NOT);
delete by ref_doc_id; query modes; async twins; and the store under a VectorStoreIndex."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import Document, MockEmbedding, StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

import ragfind  # noqa: E402
from ragfind.integrations.llama_index import RagfindRetriever, RagfindVectorStore  # noqa: E402

F, Op, Cond = MetadataFilter, FilterOperator, FilterCondition


@pytest.fixture
def node_embeddings() -> list:
    """As in LlamaIndex's vector-store tests: three nodes of two source documents."""
    return [
        TextNode(
            text="lorem ipsum",
            id_="c330d77f-90bd-4c51-9ed2-57d8d693b3b0",
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="test-0")},
            metadata={"author": "Stephen King", "theme": "Friendship", "pages": 300, "tags": ["a", "b"]},
            embedding=[1.0, 0.0, 0.0],
        ),
        TextNode(
            text="dolor sit amet",
            id_="c3d1e1dd-8fb4-4b8f-b7ea-7fa96038d39d",
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="test-1")},
            metadata={"director": "Francis Ford Coppola", "theme": "Mafia", "pages": 120, "tags": ["b"]},
            embedding=[0.0, 1.0, 0.0],
        ),
        TextNode(
            text="consectetur adipiscing elit lorem",
            id_="c3ew11cd-8fb4-4b8f-b7ea-7fa96038d39d",
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="test-1")},
            metadata={"director": "Christopher Nolan", "theme": "Friendship", "pages": 500, "tags": []},
            embedding=[0.0, 0.0, 1.0],
        ),
    ]


@pytest.fixture
def store(node_embeddings) -> RagfindVectorStore:
    s = RagfindVectorStore()
    s.add(node_embeddings)
    return s


def ids(result) -> list:
    return [n.node_id for n in result.nodes]


def test_class():
    names_of_base_classes = [b.__name__ for b in RagfindVectorStore.__mro__]
    assert BasePydanticVectorStore.__name__ in names_of_base_classes
    assert RagfindVectorStore().stores_text is True


def test_query_and_round_trip(store, node_embeddings):
    res = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=1))
    assert ids(res) == [node_embeddings[0].node_id] == res.ids
    assert res.similarities[0] == pytest.approx(1.0, abs=1e-5)
    node, orig = res.nodes[0], node_embeddings[0]
    assert node.get_content() == "lorem ipsum" and node.metadata == orig.metadata
    assert node.ref_doc_id == "test-0" and node.relationships == orig.relationships
    assert type(node) is TextNode
    got = store.get_nodes(node_ids=[node_embeddings[2].node_id, "missing", node_embeddings[0].node_id])
    assert [n.node_id for n in got] == [node_embeddings[2].node_id, node_embeddings[0].node_id]
    assert got[0].metadata == node_embeddings[2].metadata


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ([F(key="theme", value="Mafia")], [1]),
        ([F(key="theme", value="Mafia", operator=Op.NE)], [0, 2]),
        ([F(key="pages", value=300, operator=Op.GT)], [2]),
        ([F(key="pages", value=300, operator=Op.GTE)], [0, 2]),
        ([F(key="pages", value=300, operator=Op.LT)], [1]),
        ([F(key="pages", value=120, operator=Op.LTE)], [1]),
        ([F(key="theme", value=["Mafia", "Horror"], operator=Op.IN)], [1]),
        ([F(key="theme", value=["Mafia"], operator=Op.NIN)], [0, 2]),
        ([F(key="author", value=["Stephen King"], operator=Op.NIN)], [1, 2]),  # missing: not in
        ([F(key="tags", value="b", operator=Op.CONTAINS)], [0, 1]),
        ([F(key="tags", value=["a", "z"], operator=Op.ANY)], [0]),
        ([F(key="tags", value=["a", "b"], operator=Op.ALL)], [0]),
        ([F(key="director", value="Nolan", operator=Op.TEXT_MATCH)], [2]),
        ([F(key="director", value="nolan", operator=Op.TEXT_MATCH_INSENSITIVE)], [2]),
        ([F(key="director", value="nolan", operator=Op.TEXT_MATCH)], []),
        ([F(key="author", value=None, operator=Op.IS_EMPTY)], [1, 2]),
        ([F(key="tags", value=None, operator=Op.IS_EMPTY)], [2]),
        ([F(key="theme", value="Friendship"), F(key="pages", value=400, operator=Op.GT)], [2]),
        ([F(key="theme", value="Friendship"), F(key="theme", value="Mafia")], []),  # contradictive
        ([F(key="unknown_field", value="x")], []),
        ([F(key="doc_id", value="test-1")], [1, 2]),  # LlamaIndex's name for the source document
    ],
)
def test_filters_match_llama_index_semantics(store, node_embeddings, filters, expected):
    q = VectorStoreQuery(
        query_embedding=[1.0, 1.0, 1.0], similarity_top_k=3, filters=MetadataFilters(filters=filters)
    )
    want = sorted(node_embeddings[i].node_id for i in expected)
    assert sorted(ids(store.query(q))) == want
    assert sorted(n.node_id for n in store.get_nodes(filters=MetadataFilters(filters=filters))) == want


def test_nested_and_or_not(store, node_embeddings):
    nested = MetadataFilters(
        filters=[
            MetadataFilters(
                filters=[F(key="theme", value="Mafia"), F(key="pages", value=400, operator=Op.GT)],
                condition=Cond.OR,
            ),
            F(key="tags", value=["b"], operator=Op.ANY),
        ],
        condition=Cond.AND,
    )
    q = VectorStoreQuery(query_embedding=[1.0, 1.0, 1.0], similarity_top_k=3, filters=nested)
    assert ids(store.query(q)) == [node_embeddings[1].node_id]
    negated = MetadataFilters(filters=[F(key="theme", value="Mafia")], condition=Cond.NOT)
    q = VectorStoreQuery(query_embedding=[0.0, 1.0, 0.0], similarity_top_k=3, filters=negated)
    assert sorted(ids(store.query(q))) == sorted([node_embeddings[0].node_id, node_embeddings[2].node_id])


def test_top_k_node_ids_and_doc_ids(store, node_embeddings):
    friendship = MetadataFilters(filters=[F(key="theme", value="Friendship")])
    q = VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=1, filters=friendship)
    assert ids(store.query(q)) == [node_embeddings[0].node_id]
    q = VectorStoreQuery(
        query_embedding=[1.0, 0.0, 0.0],
        similarity_top_k=3,
        node_ids=[node_embeddings[2].node_id],
        filters=friendship,
    )
    assert ids(store.query(q)) == [node_embeddings[2].node_id]
    q = VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=3, doc_ids=["test-1"])
    assert sorted(ids(store.query(q))) == sorted([node_embeddings[1].node_id, node_embeddings[2].node_id])


def test_modes(store, node_embeddings):
    sparse = store.query(
        VectorStoreQuery(query_str="lorem", similarity_top_k=3, mode=VectorStoreQueryMode.SPARSE)
    )
    assert sorted(ids(sparse)) == sorted([node_embeddings[0].node_id, node_embeddings[2].node_id])
    assert sparse.similarities[0] > 0
    hybrid = store.query(
        VectorStoreQuery(
            query_str="lorem elit",
            query_embedding=[0.0, 0.0, 1.0],
            similarity_top_k=2,
            mode=VectorStoreQueryMode.HYBRID,
        )
    )
    # First in BM25 and in dense: first fused.
    assert ids(hybrid)[0] == node_embeddings[2].node_id and len(hybrid.nodes) == 2
    dense_only = VectorStoreQuery(
        query_str="lorem",
        query_embedding=[0.0, 1.0, 0.0],
        similarity_top_k=1,
        mode=VectorStoreQueryMode.HYBRID,
        alpha=1.0,
    )
    assert ids(store.query(dense_only)) == [node_embeddings[1].node_id]
    with pytest.raises(NotImplementedError, match="query mode 'mmr'"):
        store.query(VectorStoreQuery(query_embedding=[1.0, 0, 0], mode=VectorStoreQueryMode.MMR))
    with pytest.raises(ValueError, match="needs query_str"):
        store.query(VectorStoreQuery(query_embedding=[1.0, 0, 0], mode=VectorStoreQueryMode.SPARSE))


def test_delete_replace_clear(store, node_embeddings):
    store.delete("test-0")
    res = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=3))
    assert node_embeddings[0].node_id not in ids(res) and len(res.nodes) == 2
    store.delete("no-such-document")
    changed = node_embeddings[1].model_copy()
    changed.text = "replaced text"
    store.add([changed])
    assert len(store.client) == 2
    assert store.get_nodes(node_ids=[changed.node_id])[0].get_content() == "replaced text"
    store.delete_nodes(node_ids=[changed.node_id, "missing"])
    assert [n.node_id for n in store.get_nodes()] == [node_embeddings[2].node_id]
    store.clear()
    assert store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0])).nodes == []
    with pytest.raises(ValueError, match="has no embedding"):
        store.add([TextNode(text="x")])


def test_async(store, node_embeddings):
    async def main():
        res = await store.aquery(VectorStoreQuery(query_embedding=[0.0, 1.0, 0.0], similarity_top_k=1))
        await store.adelete("test-1")
        left = await store.aget_nodes()
        await store.async_add(node_embeddings[1:2])
        again = await store.aget_nodes(node_ids=[node_embeddings[1].node_id])
        await store.adelete_nodes(filters=MetadataFilters(filters=[F(key="theme", value="Mafia")]))
        after = await store.aget_nodes()
        await store.aclear()
        return res, left, again, after, await store.aget_nodes()

    res, left, again, after, empty = asyncio.run(main())
    assert ids(res) == [node_embeddings[1].node_id]
    assert [n.node_id for n in left] == [node_embeddings[0].node_id]
    assert len(again) == 1 and [n.node_id for n in after] == [node_embeddings[0].node_id] and empty == []


def test_persist_and_load(tmp_path, store, node_embeddings):
    store.persist(str(tmp_path / "store"))
    back = RagfindVectorStore.from_persist_path(str(tmp_path / "store"))
    q = VectorStoreQuery(query_embedding=[0.0, 0.0, 1.0], similarity_top_k=2)
    assert ids(back.query(q)) == ids(store.query(q))
    assert (
        back.get_nodes(node_ids=[node_embeddings[0].node_id])[0].relationships
        == node_embeddings[0].relationships
    )


def test_under_a_vector_store_index():
    """End to end: LlamaIndex chunks, embeds and stores documents, then retrieves with
    query-time similarity_top_k and filters, in every query mode."""
    store = RagfindVectorStore()
    embed = MockEmbedding(embed_dim=8)
    docs = [
        Document(text="Cats purr and hunt mice.", metadata={"lang": "en"}, id_="cats"),
        Document(text="Dogs bark and fetch sticks.", metadata={"lang": "en"}, id_="dogs"),
        Document(text="Les chats ronronnent.", metadata={"lang": "fr"}, id_="chats"),
    ]
    index = VectorStoreIndex.from_documents(
        docs, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed
    )
    assert len(store.client) == 3
    only_fr = MetadataFilters(filters=[F(key="lang", value="fr")])
    nodes = index.as_retriever(similarity_top_k=3, filters=only_fr).retrieve("chats")
    assert [n.node.ref_doc_id for n in nodes] == ["chats"]
    sparse = index.as_retriever(similarity_top_k=1, vector_store_query_mode="sparse").retrieve("bark")
    assert [n.node.ref_doc_id for n in sparse] == ["dogs"]
    hybrid = index.as_retriever(similarity_top_k=2, vector_store_query_mode="hybrid").retrieve("purr")
    assert hybrid[0].node.ref_doc_id == "cats" and len(hybrid) == 2
    index.delete_ref_doc("dogs")
    assert len(store.client) == 2


def test_retriever_takes_similarity_top_k_and_metadata_filters():
    r = ragfind.Retriever(encoder=None, chunk_size=None)
    r.add_documents(
        [
            {"id": "a", "text": "cats purr", "metadata": {"lang": "en", "n": 1}},
            {"id": "b", "text": "cats hunt", "metadata": {"lang": "en", "n": 2}},
            {"id": "c", "text": "cats sleep", "metadata": {"lang": "fr", "n": 3}},
        ]
    )
    assert len(RagfindRetriever(r, similarity_top_k=2).retrieve("cats")) == 2
    either = MetadataFilters(filters=[F(key="lang", value="fr"), F(key="n", value=1)], condition=Cond.OR)
    got = RagfindRetriever(r, similarity_top_k=5, filters=either).retrieve("cats")
    assert sorted(n.node.metadata["doc_id"] for n in got) == ["a", "c"]
    r.close()
