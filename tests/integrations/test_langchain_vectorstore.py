"""ragfind.integrations.langchain.RagfindVectorStore against langchain-core's VectorStore contract:
LangChain's own standard suites (langchain-tests) where installed, and the behaviours its
docstrings promise (ids, replace on add, delete of missing ids, get_by_ids, filters, MMR,
search types, async without blocking the event loop, save/load)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import pytest
from integrations_fixtures import DOCS, retriever_fixture  # noqa: F401

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings  # noqa: E402
from langchain_core.vectorstores import VectorStore  # noqa: E402

import ragfind  # noqa: E402
from ragfind.integrations.langchain import RagfindRetriever, RagfindVectorStore  # noqa: E402


def _sync_async_tests(cls):
    """langchain-tests' async tests run under pytest-asyncio, which this project does not load:
    each becomes a sync test running it with asyncio.run."""
    for name in dir(cls):
        fn = getattr(cls, name)
        if name.startswith("test_") and inspect.iscoroutinefunction(fn):

            def run(self, *args, _fn=fn, **kwargs):
                asyncio.run(_fn(self, *args, **kwargs))

            run.__name__ = name
            run.__signature__ = inspect.signature(fn)
            run._runs = fn
            setattr(cls, name, run)
    return cls


try:
    from langchain_tests.integration_tests import RetrieversIntegrationTests, VectorStoreIntegrationTests
except ImportError:  # langchain-tests not installed: the tests below still run
    VectorStoreIntegrationTests = RetrieversIntegrationTests = None

if VectorStoreIntegrationTests is not None:

    class _Standard:
        def test_no_overrides_DO_NOT_OVERRIDE(self):  # noqa: N802
            """Replaces the suite's own check, which counts the sync runners of its async tests
            as overrides: here no standard test is missing and the only ones replaced are
            those runners, each running the standard test itself."""
            standard = next(b for b in type(self).__mro__ if b.__module__.startswith("langchain_tests."))
            names = {n for n in dir(standard) if n.startswith("test_")}
            assert names <= {n for n in dir(self) if n.startswith("test_")}
            for n in names - {"test_no_overrides_DO_NOT_OVERRIDE"}:
                mine, theirs = getattr(type(self), n), getattr(standard, n)
                assert mine is theirs or getattr(mine, "_runs", None) is theirs, n

    @_sync_async_tests
    class TestStandardVectorStore(_Standard, VectorStoreIntegrationTests):
        @pytest.fixture
        def vectorstore(self):
            store = RagfindVectorStore(self.get_embeddings())
            yield store
            store.delete()

    _SHARED: list = []

    def _shared_retriever():
        if not _SHARED:
            r = ragfind.Retriever(encoder=None, chunk_size=None)
            r.add_documents(DOCS)
            _SHARED.append(r)
        return _SHARED[0]

    @_sync_async_tests
    class TestStandardRetriever(_Standard, RetrieversIntegrationTests):
        @property
        def retriever_constructor(self):
            return RagfindRetriever

        @property
        def retriever_constructor_params(self):
            return {"retriever": _shared_retriever()}

        @property
        def retriever_query_example(self):
            return "cats dogs mice chats"


class WordEmbeddings(Embeddings):
    """Bag of words over a fixed vocabulary (similar texts -> similar vectors), counting calls."""

    VOCAB = ["cat", "dog", "mouse", "bird", "fish", "purr", "bark", "sing"]

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0

    def _vec(self, text):
        words = text.lower().replace(".", " ").split()
        v = [float(sum(w.startswith(t) for w in words)) for t in self.VOCAB]
        return v if any(v) else [0.01] * len(self.VOCAB)

    def embed_documents(self, texts):
        self.calls += 1
        time.sleep(self.delay)
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        self.calls += 1
        time.sleep(self.delay)
        return self._vec(text)


TEXTS = ["cat purr", "dog bark", "bird sing", "fish", "cat mouse", "dog cat"]
METAS = [{"kind": "pet", "n": i} for i in range(6)]


@pytest.fixture
def store():
    s = RagfindVectorStore(WordEmbeddings())
    s.add_texts(TEXTS, METAS, ids=[f"t{i}" for i in range(6)])
    return s


def test_is_a_vectorstore_with_ids_and_metadata(store):
    assert isinstance(store, VectorStore)
    docs = store.similarity_search("cat purr", k=1)
    assert docs == [Document(id="t0", page_content="cat purr", metadata={"kind": "pet", "n": 0})]
    scored = store.similarity_search_with_score("cat purr", k=2)
    assert scored[0][1] == pytest.approx(1.0, abs=1e-5) and scored[0][1] >= scored[1][1]
    rel = store.similarity_search_with_relevance_scores("cat purr", k=2)
    assert 0 <= rel[1][1] <= rel[0][1] == pytest.approx(1.0, abs=1e-5)
    vec = store.embeddings.embed_query("bird sing")
    assert store.similarity_search_by_vector(vec, k=1)[0].id == "t2"


def test_add_replaces_is_idempotent_and_get_by_ids_keeps_order(store):
    assert len(store.retriever) == 6
    store.add_texts(["cat purr"], [{"kind": "pet", "n": 0}], ids=["t0"])
    assert len(store.retriever) == 6
    store.add_documents([Document(page_content="fish fish", metadata={"kind": "food"}, id="t0")])
    assert len(store.retriever) == 6
    got = store.get_by_ids(["t3", "missing", "t0", "t3"])
    assert [d.id for d in got] == ["t3", "t0"]
    assert got[1] == Document(id="t0", page_content="fish fish", metadata={"kind": "food"})
    new = store.add_texts(["bird"], ids=[None])
    assert len(new) == 1 and store.get_by_ids(new)[0].page_content == "bird"
    assert store.add_texts(["a", "b"], ids=["x", "x"]) == ["x", "x"]
    assert store.get_by_ids(["x"])[0].page_content == "b"  # the last of repeated ids wins


def test_delete_missing_ids_is_not_an_error(store):
    assert store.delete(["t1", "nope"]) is True
    assert store.get_by_ids(["t1"]) == []
    assert store.delete(["nope"]) is True
    store.delete()
    assert len(store.retriever) == 0 and store.similarity_search("cat") == []
    assert RagfindVectorStore(WordEmbeddings()).delete(["a"]) is True


def test_filters(store):
    docs = store.similarity_search("cat", k=6, filter={"n": {"$gte": 4}})
    assert {d.id for d in docs} == {"t4", "t5"}
    assert store.similarity_search("cat", k=6, filter={"n": [1, 3]})[0].id in ("t1", "t3")
    vec = store.embeddings.embed_query("cat")
    assert {d.id for d in store.similarity_search_by_vector(vec, k=6, filter={"n": 0})} == {"t0"}
    assert store.similarity_search_by_vector(vec, k=6, filter={"n": 99}) == []
    with pytest.raises(ValueError, match="unknown field 'colour'"):
        store.similarity_search("cat", filter={"colour": "red"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'fetch'"):
        store.similarity_search("cat", fetch=3)


def test_mmr_prefers_diverse_documents():
    s = RagfindVectorStore(WordEmbeddings())
    s.add_texts(["cat", "cat.", "cat cat", "dog cat"], ids=["a", "b", "c", "d"])
    relevant = [d.id for d in s.similarity_search("cat", k=2)]
    diverse = [d.id for d in s.max_marginal_relevance_search("cat", k=2, fetch_k=4, lambda_mult=0.1)]
    assert relevant[0] == diverse[0] and diverse[1] == "d" and relevant[1] != "d"
    assert len(s.max_marginal_relevance_search("cat", k=9, fetch_k=3)) == 3  # at most fetch_k


def test_search_types_bm25_and_hybrid(store):
    hybrid = store.as_retriever(search_type="hybrid", search_kwargs={"k": 3})
    docs = hybrid.invoke("cat mouse")
    assert docs[0].id == "t4" and len(docs) == 3
    ref = store.retriever.search("cat mouse", k=3)
    assert [d.id for d in docs] == [p.doc_id for p in ref]
    assert [d.id for d in store.as_retriever(search_type="bm25").invoke("bark", k=1)] == ["t1"]
    assert asyncio.run(hybrid.ainvoke("cat mouse"))[0].id == "t4"
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 6})
    assert len(mmr.invoke("cat")) == 2
    thr = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.99}
    )
    assert [d.id for d in thr.invoke("bird sing")] == ["t2"]
    filtered = store.as_retriever(search_type="hybrid", search_kwargs={"filter": {"n": 5}})
    assert [d.id for d in filtered.invoke("cat")] == ["t5"]
    assert [d.id for d in store.search("bark", "bm25", k=1)] == ["t1"]
    assert asyncio.run(store.asearch("cat mouse", "hybrid", k=1))[0].id == "t4"
    assert store.search("cat purr", "similarity", k=1)[0].id == "t0"
    with pytest.raises(ValueError, match="search_type of nope not allowed"):
        store.as_retriever(search_type="nope")


def test_async_twins_do_not_block_the_event_loop():
    emb = WordEmbeddings(delay=0.2)
    s = RagfindVectorStore(emb)

    async def main():
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.ensure_future(ticker())
        ids = await s.aadd_texts(TEXTS, METAS, ids=[f"t{i}" for i in range(6)])
        found = await s.asimilarity_search("cat purr", k=1)
        scored = await s.asimilarity_search_with_score("dog", k=1, filter={"kind": "pet"})
        by_vec = await s.asimilarity_search_by_vector(emb._vec("bird"), k=1)
        mmr = await s.amax_marginal_relevance_search("cat", k=2, fetch_k=4)
        got = await s.aget_by_ids(["t5", "t1"])
        await s.adelete(["t5", "zzz"])
        after = await s.aget_by_ids(["t5"])
        added = await s.aadd_documents([Document(page_content="fish", id="f")])
        stop = True
        await t
        return ticks, ids, found, scored, by_vec, mmr, got, after, added

    ticks, ids, found, scored, by_vec, mmr, got, after, added = asyncio.run(main())
    assert ids[0] == "t0" and found[0].id == "t0" and scored[0][0].metadata["kind"] == "pet"
    assert by_vec[0].id == "t2" and len(mmr) == 2 and [d.id for d in got] == ["t5", "t1"]
    assert after == [] and added == ["f"]
    # The embedding calls slept 0.2 s each on worker threads while the loop kept ticking.
    assert ticks > 3 * emb.calls  # blocked, the loop would tick about once per await


def test_from_texts_save_load(tmp_path, store):
    s2 = RagfindVectorStore.from_texts(TEXTS, WordEmbeddings(), METAS, ids=list("abcdef"), dense_kind="hnsw")
    assert s2.retriever.dense.kind == "hnsw"
    assert s2.similarity_search("dog bark", k=1)[0].id == "b"
    store.save(tmp_path / "vs")
    back = RagfindVectorStore.load(tmp_path / "vs", WordEmbeddings())
    assert back.get_by_ids(["t2"]) == store.get_by_ids(["t2"])
    assert [d.id for d in back.hybrid_search("cat mouse")] == [d.id for d in store.hybrid_search("cat mouse")]
    back.add_texts(["bird bird"], ids=["b2"])
    assert back.similarity_search("bird", k=1)[0].id in ("t2", "b2")
    with pytest.raises(ragfind.ModelMismatchError):
        RagfindVectorStore.load(tmp_path / "vs", DeterministicFakeEmbedding(size=8))
    with pytest.raises(ValueError, match="add documents before save"):
        RagfindVectorStore(WordEmbeddings()).save(tmp_path / "empty")


def test_wraps_an_existing_retriever(retriever):
    s = RagfindVectorStore(retriever=retriever)
    assert s.embeddings is None
    assert [d.id for d in s.bm25_search("cats hunt mice", k=2)] == [
        p.doc_id for p in retriever.search("cats hunt mice", k=2)
    ]
    assert s.get_by_ids(["dogs"])[0].metadata == {"lang": "en"}
    with pytest.raises(ValueError, match="no dense stage"):
        s.similarity_search("cats")
    with pytest.raises(ValueError, match="needs an embedding"):
        RagfindVectorStore()
    with pytest.raises(ValueError, match="apply to a Retriever built here"):
        RagfindVectorStore(retriever=retriever, dense_kind="hnsw")


def test_concurrent_adds_of_one_id_keep_one_document():
    s = RagfindVectorStore(WordEmbeddings())
    threads = [
        threading.Thread(target=s.add_texts, args=([f"cat {i}"],), kwargs={"ids": ["same"]}) for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(s.retriever) == 1
