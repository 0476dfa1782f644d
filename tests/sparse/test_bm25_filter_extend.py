"""A metadata filter's BM25 allowed-set after an add is the same filter compiled before plus the
new documents (its mask shared and written past its end), not compiled again from the bitmap.
Checked against a whole compile of the same bitmap, byte for byte, after adds, deletes (which
compile whole), ids that start off a word boundary, two extensions of one earlier set, and
bitmaps that changed under earlier documents."""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import BM25Index


def _bits(ids, n_words: int) -> np.ndarray:
    words = np.zeros(n_words, np.uint64)
    ids = np.asarray(list(ids), np.int64)
    np.bitwise_or.at(words, ids // 64, np.uint64(1) << (ids % 64).astype(np.uint64))
    return words


def _same(a, b) -> None:
    np.testing.assert_array_equal(a.mask, b.mask)
    assert a.count == b.count


def _check_search(index: BM25Index, allowed, allowed_ids: set) -> None:
    """A search with the compiled set returns what one with the ids as a plain filter does."""
    got_ids, got_scores = index._core.search("common", 50, 0, allowed)
    want_ids, want_scores = index.search("common", k=50, filter=sorted(allowed_ids))
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_array_equal(got_scores, want_scores)


@pytest.mark.parametrize("first_id", [0, 64, 37])
def test_extended_sets_equal_whole_compiles_through_adds(first_id):
    rng = np.random.default_rng(first_id)
    index = BM25Index()
    n = 3000
    index.add([f"common w{i % 13}" for i in range(n)], ids=np.arange(first_id, first_id + n))
    core = index._core
    selected = {i for i in range(first_id, first_id + n + 400) if i % 7 == 3 or rng.random() < 0.01}
    width = (first_id + n + 400) // 64 + 1
    prev = core.compile_filter_bits(_bits(selected, width))
    nxt = first_id + n
    for step in range(60):
        k = int(rng.integers(1, 6))
        index.add([f"common w{step}"] * k, ids=np.arange(nxt, nxt + k))
        nxt += k
        bits = _bits(selected, width)
        extended = core.compile_filter_bits(bits, prev)
        _same(extended, core.compile_filter_bits(bits))
        assert extended.count == len([i for i in selected if i < nxt])
        _check_search(index, extended, selected)
        prev = extended


def test_two_extensions_of_one_set_and_a_changed_bitmap():
    index = BM25Index()
    index.add([f"common {i}" for i in range(1000)])
    core = index._core
    base = _bits(range(0, 1200, 3), 20)
    prev = core.compile_filter_bits(base)
    index.add(["common new"] * 5)
    a = core.compile_filter_bits(base, prev)  # takes the room past prev's bytes
    b = core.compile_filter_bits(base, prev)  # finds it taken: a copy
    whole = core.compile_filter_bits(base)
    _same(a, whole)
    _same(b, whole)
    # Bits that differ on documents the earlier set covered: compiled whole, not extended.
    index.add(["common more"])
    changed = _bits([i for i in range(0, 1200, 3) if i != 30] + [31], 20)
    c = core.compile_filter_bits(changed, a)
    _same(c, core.compile_filter_bits(changed))
    assert c.mask[31] == 1 and c.mask[30] == 0


def test_a_delete_compiles_whole():
    index = BM25Index()
    index.add([f"common {i}" for i in range(500)])
    core = index._core
    bits = _bits(range(0, 600, 2), 10)
    prev = core.compile_filter_bits(bits)
    index.delete([0, 2, 4])
    index.add(["common late"] * 3)
    after = core.compile_filter_bits(bits, prev)
    _same(after, core.compile_filter_bits(bits))
    assert after.mask[0] == 0 and after.mask[6] == 1
    _check_search(index, after, set(range(6, 600, 2)))


@pytest.mark.parametrize("read_only", [False, True])
def test_a_compiled_bitmap_outlives_its_array_and_ignores_later_changes(read_only):
    """A read-only bitmap (a metadata selection's words) is kept by the allowed-set, not copied;
    a writeable one is copied. Either way a set made stale by an add, then searched (rebuilt
    from its bitmap), allows what the bitmap allowed when it was compiled."""
    index = BM25Index()
    index.add([f"common w{i}" for i in range(200)], ids=np.arange(200))
    allowed_ids = set(range(0, 200, 3))
    words = _bits(allowed_ids, 4)
    if read_only:
        words.flags.writeable = False
    allowed = index._core.compile_filter_bits(words)
    if not read_only:
        words[:] = 0  # the caller's array changes: the set does not
    del words
    index.add(["common late"], ids=[201])  # stale now: the search rebuilds it from its bitmap
    _check_search(index, allowed, allowed_ids)


def test_an_empty_or_mixed_index_names_its_id_kind():
    index = BM25Index()
    assert index._core.id_kind is None
    index.add(["a b"], ids=[4])
    assert index._core.id_kind == "int"
    index.delete([4])
    assert index._core.id_kind is None
    strs = BM25Index()
    strs.add(["a b"], ids=["x"])
    assert strs._core.id_kind == "str"
