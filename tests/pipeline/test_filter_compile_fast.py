"""The fast id -> row compiles (sorted ids over increasing row ids) equal the obvious lookups,
under deletes, re-adds, str ids and ids added out of order."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from ragfind.dense._common import SortedKeys
from ragfind.ids import IdFilter, IdMap


def reference_mask(row_ids: np.ndarray, live: np.ndarray, allowed: set) -> np.ndarray:
    return np.asarray([bool(v) and x in allowed for x, v in zip(row_ids.tolist(), live.tolist())], np.uint8)


def scenarios() -> list:
    """(name, batches of ids to add, ids to delete after each batch)."""
    return [
        ("sequential", [list(range(0, 50)), list(range(50, 80))], [[3, 7, 49], [50, 79]]),
        ("offset", [list(range(1000, 1040))], [[1000, 1039]]),
        ("gaps", [[2, 5, 9, 14, 20], [31, 40]], [[5], [40]]),
        ("re-added", [list(range(0, 30)), [29, 3, 30]], [[29, 3], []]),
        ("unsorted", [[9, 1, 4, 7, 2], [0, 3]], [[4], [9]]),
        ("str", [["b", "a", "d"], ["c", "e"]], [["a"], ["e"]]),
    ]


def filters_for(universe: list, rng: np.random.Generator) -> list:
    out = [IdFilter([]), IdFilter(universe)]
    for frac in (0.05, 0.3, 0.7):
        pick = [x for x in universe if rng.random() < frac]
        out.append(IdFilter(pick + ([-5, 10**6] if universe and isinstance(universe[0], int) else ["zz"])))
    return out


@pytest.mark.parametrize("name,batches,deletes", scenarios())
def test_idmap_compile_mask_equals_lookup(name, batches, deletes):
    m = IdMap()
    rng = np.random.default_rng(len(name))
    for batch, dels in zip(batches, deletes):
        arr, kind = m.check_new(batch, len(batch))
        m.commit_add(arr, kind)
        if dels:
            rows, items = m.rows_of(dels, unique=True)
            m.commit_delete(rows, items)
        universe = sorted(set(m.row_ids.tolist()))
        for flt in filters_for(universe, rng):
            want = reference_mask(m.row_ids, m.live, set(flt.ids.tolist()))
            assert m.compile_mask(flt).tolist() == want.tolist(), (name, flt)
    assert m.increasing == (name in ("sequential", "offset", "gaps"))
    m.compact()
    flt = IdFilter(sorted(set(m.row_ids.tolist())))
    assert m.compile_mask(flt).tolist() == [1] * m.n_rows


@pytest.mark.parametrize("name,batches,deletes", scenarios())
def test_sorted_keys_equal_lookup(name, batches, deletes):
    row_ids = [x for b in batches for x in b]
    kind = "str" if isinstance(row_ids[0], str) else "int"
    arr = np.asarray(row_ids, dtype=object if kind == "str" else np.int64)
    keys = SortedKeys(arr, kind)
    for flt in filters_for(sorted(set(row_ids)), np.random.default_rng(1)):
        allowed = set(flt.ids.tolist())
        want = sorted(i for i, x in enumerate(row_ids) if x in allowed)
        assert sorted(keys.rows_of(flt, kind).tolist()) == want, (name, flt)


@pytest.mark.parametrize("name,batches,deletes", scenarios())
def test_bm25_allowed_set_equals_lookup(name, batches, deletes):
    idx = ragfind.BM25Index()
    rng = np.random.default_rng(2)
    held: list = []  # the id of every slot, dead ones included
    live: list = []
    for batch, dels in zip(batches, deletes):
        idx.add([f"w{i % 3} common" for i in range(len(batch))], ids=batch)
        held += batch
        live += [True] * len(batch)
        if dels:
            idx.delete(dels)
            for d in dels:
                live[max(i for i, x in enumerate(held) if x == d)] = False
        for flt in filters_for(sorted(set(held)), rng):
            allowed = set(flt.ids.tolist())
            want = [int(v and x in allowed) for x, v in zip(held, live)]
            compiled = idx._core.compile_filter(flt.ids)  # a delete may compact: slots differ
            assert compiled.count == int(compiled.mask.sum()) == sum(want), (name, flt)
            backwards = idx._core.compile_filter(flt.ids[::-1].copy())  # the lookup per id
            assert backwards.mask.tolist() == compiled.mask.tolist()
            got, _ = idx.search("common", k=len(held), filter=flt)
            assert sorted(got.tolist()) == sorted(x for x, w in zip(held, want) if w)


def id_words(allowed: list) -> np.ndarray:
    """A bitmap over int ids (bit i of word i // 64: id i), as MetadataIndex.id_words gives it."""
    ids = np.asarray([x for x in allowed if x >= 0], np.int64)
    words = np.zeros(int(ids.max()) // 64 + 2 if ids.size else 1, np.uint64)
    np.bitwise_or.at(words, ids // 64, np.left_shift(np.uint64(1), (ids % 64).astype(np.uint64)))
    return words


@pytest.mark.parametrize("name,batches,deletes", scenarios())
def test_bm25_allowed_set_from_an_id_bitmap_equals_from_ids(name, batches, deletes):
    idx = ragfind.BM25Index()
    rng = np.random.default_rng(3)
    held: list = []
    for batch, dels in zip(batches, deletes):
        idx.add([f"w{i % 3} common" for i in range(len(batch))], ids=batch)
        held += batch
        if dels:
            idx.delete(dels)
        for flt in filters_for(sorted(set(held)), rng):
            from_ids = idx._core.compile_filter(flt.ids)
            ints = [] if flt.kind == "str" else flt.ids.tolist()  # a bitmap holds int ids only
            from_bits = idx._core.compile_filter_bits(id_words(ints))
            assert from_bits.count == int(from_bits.mask.sum()), (name, flt)
            if flt.kind == "str":
                assert from_bits.count == 0
                continue
            assert from_bits.mask.tolist() == from_ids.mask.tolist(), (name, flt)
            for algorithm in (0, 1, 2, 3):  # Direct lists a large set's slots from the mask
                want = idx._core.search("common w1", len(held), algorithm, from_ids)
                got = idx._core.search("common w1", len(held), algorithm, from_bits)
                assert got[0].tolist() == want[0].tolist() and np.allclose(got[1], want[1])


def test_bm25_allowed_set_from_bits_is_rebuilt_after_a_write():
    idx = ragfind.BM25Index()
    idx.add([f"common w{i % 5}" for i in range(300)])
    bits = id_words(list(range(0, 400, 2)))
    stale = idx._core.compile_filter_bits(bits)
    idx.add(["common w1"] * 50)  # ids 300..349: the even ones are allowed by the same bitmap
    idx.delete([0, 2])
    got, _ = idx._core.search("common", 400, 0, stale)  # rebuilt from its bits for this search
    assert sorted(got.tolist()) == list(range(4, 350, 2))
