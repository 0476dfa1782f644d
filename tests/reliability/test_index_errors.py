"""The index contract, checked across every index: the same mistake gets the same error class
and message from BM25Index, SparseVectorIndex, DenseIndex (exact and HNSW) and
LateInteractionIndex, and ids, k and filters follow one rule."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from ragfind import BM25Index, DenseIndex, LateInteractionIndex, SparseVectorIndex
from ragfind.errors import DuplicateIdError, IdKindError, IndexFileError, UnknownIdError

KINDS = ["bm25", "sparse", "dense-exact", "dense-hnsw", "dense-ivf", "late"]


def make(kind: str, n: int = 6):
    """(empty index, n items, a query that matches every item)."""
    rng = np.random.default_rng(7)
    if kind == "bm25":
        return BM25Index(), [f"common word{i} filler{i}" for i in range(n)], "common"
    if kind == "sparse":
        items = [{0: 1.0 + i, 10 + i: 0.5} for i in range(n)]
        return SparseVectorIndex(64), items, {0: 1.0}
    if kind.startswith("dense"):
        X = np.abs(rng.standard_normal((n, 8))).astype(np.float32) + 0.1
        return DenseIndex(8, metric="ip", kind=kind.split("-")[1]), X, np.ones(8, np.float32)
    items = [np.abs(rng.standard_normal((3, 8))).astype(np.float32) + 0.1 for _ in range(n)]
    return LateInteractionIndex(8), items, np.ones((2, 8), np.float32)


def first(items, n: int = 1):
    return items[:n]


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def test_errors_have_one_class_and_message_everywhere(kind):
    index, items, q = make(kind)
    index.add(items, ids=[10, 11, 12, 13, 14, 15])
    before = (np.asarray(index.ids).tolist(), index.search(q, 6))
    with pytest.raises(DuplicateIdError, match=r"^ids: \[10\] already in the index \(delete them first"):
        index.add(first(items), ids=[10])
    with pytest.raises(DuplicateIdError, match=r"^ids: id 20 is repeated$"):
        index.add(first(items, 2), ids=[20, 20])
    with pytest.raises(IdKindError, match=r"^ids: this index has int ids, got str ids$"):
        index.add(first(items), ids=["x"])
    with pytest.raises(IdKindError, match=r"^ids: mixes int and str ids; expected all int or all str$"):
        index.add(first(items, 2), ids=[30, "y"])
    with pytest.raises(UnknownIdError, match=r"^ids: \[99\] not in the index; nothing was deleted$"):
        index.delete([99])
    with pytest.raises(DuplicateIdError, match=r"^ids: id 11 is repeated$"):
        index.delete([11, 11])
    for bad, err in ((0, ValueError), (-3, ValueError), (True, TypeError), (2.0, TypeError)):
        with pytest.raises(err, match=r"^k must be a positive int, got "):
            index.search(q, bad)
    after = (np.asarray(index.ids).tolist(), index.search(q, 6))
    assert after[0] == before[0]
    assert after[1][0].tolist() == before[1][0].tolist()


def test_str_index_needs_ids(kind):
    index, items, _ = make(kind)
    index.add(first(items), ids=["a"])
    with pytest.raises(IdKindError, match=r"^ids: this index has str ids; pass ids= for the new items$"):
        index.add(first(items))
    with pytest.raises(IdKindError, match=r"^ids: this index has str ids, got int ids$"):
        index.add(first(items), ids=[1])


def test_result_ids_dtype_and_huge_k(kind):
    index, items, q = make(kind)
    ids, _ = index.search(q, 5)
    assert ids.dtype == np.int64 and len(ids) == 0
    index.add(items, ids=[f"d{i}" for i in range(len(items))])
    ids, scores = index.search(q, 2**31)  # clamped to the index size, never allocated
    assert ids.dtype == object and len(ids) == len(items) == len(scores)
    assert index.search(q, 5, filter=["nope"])[0].dtype == object
    index.delete(list(ids))
    empty, _ = index.search(q, 5)
    assert len(empty) == 0 and empty.dtype == object


def test_filters_give_min_k_allowed_equal_to_the_restricted_ranking(kind):
    index, items, q = make(kind)
    index.add(items, ids=[0, 1, 2, 3, 4, 5])
    full_ids, full_scores = index.search(q, 6)
    full = dict(zip(full_ids.tolist(), np.asarray(full_scores).tolist()))
    for allowed in ([5], [1, 3], [0, 2, 4, 99], [], list(range(6))):
        for flt in (allowed, ragfind.IdFilter(allowed)):
            ids, scores = index.search(q, 2, filter=flt)
            expect = [i for i in full_ids.tolist() if i in set(allowed)][:2]
            if kind != "dense-hnsw":  # HNSW's order among near ties may differ; its set may not
                assert ids.tolist() == expect
            assert sorted(ids.tolist()) == sorted(expect)
            np.testing.assert_allclose(scores, [full[i] for i in ids.tolist()], rtol=1e-5)
    # A reused IdFilter follows the index through writes.
    flt = ragfind.IdFilter([1, 2, 7])
    assert sorted(index.search(q, 6, filter=flt)[0].tolist()) == [1, 2]
    index.delete([1])
    index.add(first(items), ids=[7])
    assert sorted(index.search(q, 6, filter=flt)[0].tolist()) == [2, 7]


def test_every_loader_refuses_another_index_file(kind, tmp_path):
    others = {
        "bm25": BM25Index(),
        "sparse": SparseVectorIndex(64),
        "dense-exact": DenseIndex(8),
        "late": LateInteractionIndex(8),
    }
    others["bm25"].add(["some text"])
    others["sparse"].add([{1: 1.0}])
    others["dense-exact"].add(np.ones((1, 8), np.float32))
    others["late"].add([np.ones((2, 8), np.float32)])
    cls = type(make(kind)[0])
    for name, other in others.items():
        if type(other) is cls:
            continue
        path = tmp_path / f"{name}.idx"
        other.save(path)
        with pytest.raises(IndexFileError):
            cls.load(path)
    junk = tmp_path / "junk.idx"
    junk.write_bytes(b"not an index at all" * 10)
    with pytest.raises(IndexFileError):
        cls.load(junk)


def test_search_batch_equals_search_with_the_filter(kind):
    index, items, q = make(kind)
    index.add(items, ids=[0, 1, 2, 3, 4, 5])
    flt = ragfind.IdFilter([1, 4, 5])
    queries = np.stack([q, q]) if kind.startswith("dense") else [q, q]
    batch = index.search_batch(queries, 2, filter=flt)
    single_ids, single_scores = index.search(q, 2, filter=flt)
    # Dense and sparse batches are padded (nq, k) arrays; BM25 and late give a list per query.
    rows = list(zip(*batch)) if isinstance(batch, tuple) else batch
    for ids, scores in rows:
        assert list(ids) == single_ids.tolist()
        np.testing.assert_allclose(scores, single_scores, rtol=1e-5)
