"""BM25Index tombstone deletes, compaction, native filters and the shared id contract."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from ragfind import BM25Index
from ragfind.errors import DuplicateIdError, IdKindError, UnknownIdError
from ragfind.ids import IdFilter

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


def corpus(rng: np.random.Generator, n: int, vocab: int = 200) -> list[list[str]]:
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    return [[f"t{t}" for t in rng.choice(vocab, size=int(rng.integers(1, 30)), p=p)] for _ in range(n)]


def rebuild(index: BM25Index, docs: dict, method: str = "lucene") -> BM25Index:
    fresh = BM25Index(method=method)
    order = index.ids.tolist()
    fresh.add_tokenized([docs[i] for i in order], ids=order)
    return fresh


@pytest.mark.parametrize("method", METHODS)
def test_tombstones_and_compaction_equal_rebuild(method):
    rng = np.random.default_rng(11)
    docs_list = corpus(rng, 900)
    docs = dict(enumerate(docs_list))
    index = BM25Index(method=method)
    for start in range(0, 900, 300):  # several segments
        index.add_tokenized(docs_list[start : start + 300], ids=list(range(start, start + 300)))
    queries = [list(rng.choice([f"t{t}" for t in range(60)], size=3)) for _ in range(10)]
    live = set(docs)
    for step in range(6):
        victims = sorted(rng.choice(sorted(live), size=60, replace=False).tolist())
        index.delete(victims)
        live -= set(victims)
        for v in victims:
            del docs[v]
        fresh = rebuild(index, docs, method)
        assert index.stats()["num_docs"] == len(live) == len(index)
        assert index.stats()["num_postings"] == fresh.stats()["num_postings"]
        assert index.stats()["total_len"] == fresh.stats()["total_len"]
        for q in queries:
            for algorithm in ("auto", "maxscore", "blockmax", "exhaustive", "direct"):
                a = index.search_tokenized(q, k=8, algorithm=algorithm)
                b = fresh.search_tokenized(q, k=8, algorithm=algorithm)
                np.testing.assert_array_equal(a[0], b[0])
                np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
            np.testing.assert_allclose(index.score(q), fresh.score(q), rtol=1e-12)
        if step == 2:
            # Re-adding deleted ids puts them last in insertion order, as in a fresh build.
            back = victims[:5]
            index.add_tokenized([docs_list[v] for v in back], ids=back)
            live |= set(back)
            docs.update((v, docs_list[v]) for v in back)
    assert index.ids.tolist() == [i for i in index.ids.tolist() if i in live]


def test_compaction_gives_memory_back_and_keeps_identity_ids_fast():
    rng = np.random.default_rng(3)
    docs = corpus(rng, 2000)
    index = BM25Index()
    index.add_tokenized(docs)
    index.delete([0])  # the first delete builds the segment's forward index
    before = index.stats()["memory_bytes"]
    index.delete(list(range(2, 2000, 2)))  # 50% dead: the segment is rewritten
    after = index.stats()
    assert after["num_docs"] == 1000 and after["memory_bytes"] < 0.75 * before
    assert index.ids.tolist() == list(range(1, 2000, 2))
    index.add_tokenized([["t1", "t2"]])  # default id after the largest live id
    assert index.ids[-1] == 2000
    index.add_tokenized([["t3"]], ids=[0])  # a freed id
    assert index.ids[-1] == 0
    with pytest.raises(DuplicateIdError):
        index.add_tokenized([["t3"]], ids=[1])


def test_delete_everything_then_reuse():
    index = BM25Index()
    index.add_tokenized([["a1", "b1"], ["b1"]], ids=["x", "y"])
    index.delete(["x", "y"])
    assert len(index) == 0 and index.stats()["num_postings"] == 0
    ids, scores = index.search_tokenized(["b1"], k=3)
    assert len(ids) == 0 and ids.dtype == object
    index.add_tokenized([["b1"]], ids=[5])  # empty again: either id kind may follow
    assert index.ids.tolist() == [5]


def test_contract_errors():
    index = BM25Index()
    index.add_tokenized([["a1"], ["b1"], ["c1"]])
    with pytest.raises(UnknownIdError, match="nothing was deleted"):
        index.delete([0, 99])
    assert len(index) == 3
    index.delete([1])
    with pytest.raises(UnknownIdError):
        index.delete([1])
    with pytest.raises(UnknownIdError, match="doc_id"):
        index.explain(["b1"], 1)
    with pytest.raises(DuplicateIdError, match="already in the index"):
        index.add_tokenized([["x"]], ids=[2])
    with pytest.raises(DuplicateIdError, match="repeated"):
        index.add_tokenized([["x"], ["y"]], ids=[7, 7])
    with pytest.raises(IdKindError, match="int ids"):
        index.add_tokenized([["x"]], ids=["s"])
    with pytest.raises(IdKindError, match="mixes int and str"):
        BM25Index().add_tokenized([["x"], ["y"]], ids=[1, "s"])
    with pytest.raises(IdKindError):
        BM25Index().add_tokenized([["x"]], ids=[1.5])
    with pytest.raises(IdKindError):
        index.search_tokenized(["a1"], k=2, filter=[1, "s"])
    # The contract classes are the builtins callers already catch.
    assert issubclass(UnknownIdError, KeyError) and issubclass(DuplicateIdError, ValueError)
    assert issubclass(IdKindError, TypeError)
    assert len(index) == 2


def test_empty_results_keep_the_id_dtype(tmp_path):
    s = BM25Index()
    s.add_tokenized([["alpha"], ["beta"]], ids=["a", "b"])
    for ids, _ in [
        s.search_tokenized(["zzz"], k=3),
        s.search_tokenized(["alpha"], k=3, filter=[]),
        s.search_tokenized(["alpha"], k=3, filter=["b"]),
        *s.search_batch_tokenized([["zzz"], ["alpha"]], k=3, filter=["missing"]),
    ]:
        assert ids.dtype == object and len(ids) == 0
    with pytest.raises(IdKindError, match=r"^filter: this index has str ids, got int ids$"):
        s.search_tokenized(["alpha"], k=3, filter=[1, 2])  # ids of the other kind: a mistake
    s.delete(["a", "b"])
    assert s.ids.dtype == object and s.search_tokenized(["alpha"], k=3)[0].dtype == object
    s.add_tokenized([["gamma"]], ids=["c"])
    s.delete(["c"])
    s.save(tmp_path / "s.bm25")
    assert BM25Index.load(tmp_path / "s.bm25").search_tokenized(["x"], k=1)[0].dtype == object
    n = BM25Index()
    assert n.search("x", k=2)[0].dtype == np.int64
    n.add_tokenized([["alpha"]])
    assert n.search_tokenized(["alpha"], k=2, filter=[5])[0].dtype == np.int64


@pytest.mark.parametrize("method", METHODS)
def test_filter_matches_restricted_ranking_on_a_large_segment(method):
    # Past 65,536 documents Auto uses MaxScore; a small allowed set is scored directly.
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(3000)]
    docs = np.array(vocab)[rng.integers(0, 300, (70_000, 6))].tolist()
    index = BM25Index(method=method)
    index.add_tokenized(docs)
    index.delete(rng.choice(70_000, size=500, replace=False).tolist())
    live = index.ids
    for size in (3, 300, 20_000):
        allowed = set(rng.choice(live, size=size, replace=False).tolist()) | {-1, 10**9}
        flt = IdFilter(allowed)
        query = vocab[:4]
        full_ids, full_scores = index.search_tokenized(query, k=len(index), algorithm="exhaustive")
        keep = np.isin(full_ids, list(allowed))
        for algorithm in ("auto", "maxscore", "blockmax", "exhaustive", "direct"):
            ids, scores = index.search_tokenized(query, k=10, filter=flt, algorithm=algorithm)
            np.testing.assert_array_equal(ids, full_ids[keep][:10])
            np.testing.assert_allclose(scores, full_scores[keep][:10], rtol=1e-6)


def test_natives_of_an_index_gone_are_dropped():
    flt = IdFilter([0, 1])
    a, b = BM25Index(), BM25Index()
    for index in (a, b):
        index.add_tokenized([["x"], ["x"], ["y"]])
        index.search_tokenized(["x"], k=2, filter=flt)
    assert len(flt._cache) == 2
    del a
    gc.collect()
    c = BM25Index()
    c.add_tokenized([["x"]])
    assert c.search_tokenized(["x"], k=2, filter=flt)[0].tolist() == [0]
    assert len(flt._cache) == 2 and {k() for k in flt._cache} == {b, c}


def test_compiled_filter_is_reused_until_the_index_changes():
    index = BM25Index()
    index.add_tokenized([["a1", "b1"], ["a1"], ["b1"], ["a1", "a1"]])
    flt = IdFilter([1, 3])
    first = index.search_tokenized(["a1"], k=5, filter=flt)
    native = flt._cache[weakref.ref(index)][1]
    assert native.count == 2 and native.mask.tolist() == [0, 1, 0, 1]
    index.search_tokenized(["b1"], k=5, filter=flt)
    index.search_batch_tokenized([["a1"], ["b1"]], k=5, filter=flt, threads=2)
    assert flt._cache[weakref.ref(index)][1] is native
    assert set(first[0].tolist()) == {1, 3}
    index.delete([3])
    ids, _ = index.search_tokenized(["a1"], k=5, filter=flt)
    assert ids.tolist() == [1] and flt._cache[weakref.ref(index)][1] is not native
    # A stale compiled set handed to the core is rebuilt there, never trusted.
    stale = native
    ids, _ = index._core.search_tokenized(["a1"], 5, 0, stale)
    assert ids.tolist() == [1]


def test_filter_accepts_plain_iterables_and_huge_k():
    index = BM25Index()
    index.add_tokenized([["a1"], ["a1", "b1"], ["b1"]], ids=[10, 20, 30])
    for flt in ([20, 30], {20, 30}, np.array([30, 20]), (x for x in [20, 30])):
        ids, _ = index.search_tokenized(["b1"], k=10**12, filter=flt)
        assert sorted(ids.tolist()) == [20, 30]
    with pytest.raises(TypeError):
        index.search_tokenized(["b1"], k=2, filter="20")


@pytest.mark.parametrize("seed", range(4))
def test_ids_follow_a_model_through_adds_deletes_compactions_and_reloads(tmp_path, seed):
    # Default ids are not stored while every slot's id is its number; any other add, a
    # compaction or a reload must still give each document its own id.
    rng = np.random.default_rng(seed)
    index = BM25Index()
    live: list[int] = []  # the model: live ids in insertion order
    for step in range(40):
        op = rng.integers(0, 10)
        if op < 5 or not live:
            n = int(rng.integers(1, 40))
            if op == 0 and live:  # explicit ids, out of order, never used before
                ids = [int(x) for x in rng.choice(np.arange(10_000, 20_000), size=n, replace=False)]
                ids = [i for i in ids if i not in live]
            else:
                ids = None
                start = max(live) + 1 if live else 0
            docs = [f"common w{int(x)}" for x in rng.integers(0, 30, size=len(ids) if ids else n)]
            index.add(docs, ids=ids)
            live += ids if ids else list(range(start, start + n))
        elif op < 8:
            count = min(len(live), int(rng.integers(1, 30)))
            gone = [int(x) for x in rng.choice(live, size=count, replace=False)]
            index.delete(gone)
            live = [i for i in live if i not in set(gone)]
        else:
            index.save(tmp_path / "i")
            index = BM25Index.load(tmp_path / "i", mmap=bool(step % 2))
        assert index.ids.tolist() == live, step
        ids, _ = index.search("common", k=len(live) + 5)
        assert sorted(ids.tolist()) == sorted(live), step
        if live:
            probe = int(rng.choice(live))
            with pytest.raises(KeyError):
                index.delete([probe, -1])
            assert index.ids.tolist() == live
