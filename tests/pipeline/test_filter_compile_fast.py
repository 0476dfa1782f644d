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
