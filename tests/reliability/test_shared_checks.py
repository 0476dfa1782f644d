"""One check of k, of filter id kinds and of dimensions for every index kind, the Retriever,
the CLI and the service: the same mistake gets the same error everywhere, and a k past the
documents there are (up to 2**63, past what the native code takes) is clamped, not an error."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from ragfind import BM25Index, DenseIndex, LateInteractionIndex, SparseVectorIndex
from ragfind.errors import IdKindError, check_k
from ragfind.index import MAX_DIM

KINDS = ["bm25", "sparse", "dense-exact", "dense-hnsw", "dense-ivf", "late"]
HUGE = [2**31, 2**63 - 1, 2**63, 2**64 + 5, np.int64(2**62)]


def make(kind: str, ids: list):
    """(index holding len(ids) items under ``ids``, a query matching every item)."""
    rng = np.random.default_rng(3)
    n = len(ids)
    if kind == "bm25":
        index, q, items = BM25Index(), "common", [f"common word{i}" for i in range(n)]
    elif kind == "sparse":
        index, q, items = SparseVectorIndex(64), {0: 1.0}, [{0: 1.0 + i, 10 + i: 0.5} for i in range(n)]
    elif kind.startswith("dense"):
        index, q = DenseIndex(8, metric="ip", kind=kind.split("-")[1]), np.ones(8, np.float32)
        items = np.abs(rng.standard_normal((n, 8))).astype(np.float32) + 0.1
    else:
        index, q = LateInteractionIndex(8), np.ones((2, 8), np.float32)
        items = [np.abs(rng.standard_normal((3, 8))).astype(np.float32) + 0.1 for _ in range(n)]
    if n:
        index.add(items, ids=ids)
    return index, q


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def test_a_huge_k_is_clamped_by_every_kind(kind):
    index, q = make(kind, ["a", "b", "c"])
    expect = index.search(q, 3)[0].tolist()
    for k in HUGE:
        assert index.search(q, k)[0].tolist() == expect
        assert [ids.tolist() for ids, _ in index.search_batch([q, q], k)] == [expect, expect]
    # An empty index too (a k of 1 is what the clamp leaves it).
    empty, q = make(kind, [])
    assert len(empty.search(q, 2**63)[0]) == 0


def test_bad_k_is_the_same_error_in_every_kind(kind):
    index, q = make(kind, [1, 2])
    for bad, err in (
        (0, ValueError),
        (-(2**63), ValueError),
        (True, TypeError),
        (1.0, TypeError),
        ("3", TypeError),
    ):
        with pytest.raises(err) as got:
            index.search(q, bad)
        with pytest.raises(err) as again:
            check_k(bad)
        assert str(got.value) == str(again.value)


def test_check_k_rule():
    assert check_k(5) == 5 and check_k(np.int32(5)) == 5 and type(check_k(np.int64(5))) is int
    assert check_k(2**63, 10) == 10 and check_k(7, 10) == 7 and check_k(2**70, 0) == 1
    with pytest.raises(ValueError, match=r"^k must be a positive int, got -1$"):
        check_k(-1, 10)


@pytest.mark.parametrize(
    "index_ids, other", [(["a", "b"], [1]), ([1, 2], ["a"])], ids=["str-index", "int-index"]
)
def test_a_filter_of_the_other_id_kind_is_an_id_kind_error(kind, index_ids, other):
    index, q = make(kind, index_ids)
    own, theirs = ("str", "int") if isinstance(index_ids[0], str) else ("int", "str")
    message = rf"^filter: this index has {own} ids, got {theirs} ids$"
    for flt in (other, ragfind.IdFilter(other), np.asarray(other)):
        with pytest.raises(IdKindError, match=message):
            index.search(q, 2, filter=flt)
        with pytest.raises(IdKindError, match=message):
            index.search_batch([q], 2, filter=flt)
    # Ids of the index's kind that it does not hold, and an empty filter, are no mistake.
    assert len(index.search(q, 2, filter=[index_ids[0], "zz" if own == "str" else 99])[0]) == 1
    assert len(index.search(q, 2, filter=[])[0]) == 0
    # An index without ids yet takes either kind.
    empty, q = make(kind, [])
    assert len(empty.search(q, 2, filter=other)[0]) == 0


def test_dense_padded_search_checks_the_filter_kind():
    index, q = make("dense-exact", ["a", "b"])
    with pytest.raises(IdKindError, match="^filter: "):
        index.search_batch_padded(q[None, :], 2, filter=[1])


@pytest.mark.parametrize("cls", [DenseIndex, LateInteractionIndex])
def test_an_absurd_dimension_is_refused_at_construction(cls):
    assert cls(MAX_DIM).dim == MAX_DIM == 65_536
    for bad in (MAX_DIM + 1, 2**40, 0, -3, True, 8.0):
        with pytest.raises(ValueError, match=r"^dim must be a positive integer up to 65,536, got "):
            cls(bad)


def test_the_retriever_clamps_a_huge_k_and_checks_it_as_the_indexes():
    r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False, show_progress=False)
    r.add_documents([{"id": str(i), "text": f"cat doc {i}"} for i in range(5)])
    expect = [p.doc_id for p in r.search("cat", k=5)]
    for k in HUGE:
        assert [p.doc_id for p in r.search("cat", k=k)] == expect
        assert len(r.search("cat", k=k, collapse="document", use_cache=False)) == 5
        assert r.search_rows_json("cat", k) is None  # left to search, which clamps
    for bad in (0, -1, True, 2.0):
        with pytest.raises((TypeError, ValueError)) as got:
            r.search("cat", k=bad)
        with pytest.raises(type(got.value)) as again:
            check_k(bad)
        assert str(got.value) == str(again.value)
