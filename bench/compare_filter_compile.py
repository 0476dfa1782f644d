"""Compiling a metadata filter's sorted chunk ids into each index's allowed-set, 1M rows.

Usage:
    PYTHONPATH=python python bench/compare_filter_compile.py [--rows 1000000]

Before and after in one run: BM25 (the ids reversed take the lookup per id and the sort that
every compile took before; sorted ids take the merge), ``IdMap.compile_mask`` (SPLADE, late
interaction) and the dense indexes' ``SortedKeys`` (the previous code is replicated below as the
reference). Prints a markdown table of p50 ms.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ragfind
from ragfind.dense._common import SortedKeys
from ragfind.ids import IdFilter, IdMap


def p50(fn, rounds: int = 11) -> float:
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[rounds // 2] * 1e3


def idmap_before(m: IdMap, f: IdFilter) -> np.ndarray:
    mask = np.zeros(m.n_rows, np.uint8)
    if len(f) > m.n_rows // 8:
        mask[np.isin(m.row_ids, f.ids) & m.live] = 1
    else:
        rows = [r for r in map(m.row_of.get, f.ids.tolist()) if r is not None]
        mask[np.asarray(rows, dtype=np.int64)] = 1
    return mask


def sorted_keys_before(row_ids: np.ndarray, f: IdFilter) -> np.ndarray:
    order = np.argsort(row_ids, kind="stable")
    keys = row_ids[order]
    lo = np.searchsorted(keys, f.ids, side="left")
    hi = np.searchsorted(keys, f.ids, side="right")
    return order[lo[(hi - lo) == 1]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    n = ap.parse_args().rows
    bm25 = ragfind.BM25Index()
    bm25.add(["a b"] * n, ids=np.arange(n, dtype=np.int64))
    core = bm25._core
    m = IdMap()
    m.commit_add(np.arange(n, dtype=np.int64), "int")
    rng = np.random.default_rng(0)
    keep: list = [None]  # holds the last allowed-set, as a cache would
    print(
        "| allowed | BM25: lookup + sort | BM25: merge | IdMap: before | IdMap: after "
        "| SortedKeys: argsort + 2 searches | after |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for frac in (0.01, 0.2, 0.6):
        ids = np.flatnonzero(rng.random(n) < frac).astype(np.int64)
        cols = row(core, m, ids, keep)
        print(f"| {frac:.0%} | " + " | ".join(f"{c:.3f}" for c in cols) + " |")


def row(core, m: IdMap, ids: np.ndarray, keep: list) -> list:
    f, rev = IdFilter.from_sorted(ids), ids[::-1].copy()
    return [
        p50(lambda: keep.__setitem__(0, core.compile_filter(rev))),
        p50(lambda: keep.__setitem__(0, core.compile_filter(ids))),
        p50(lambda: idmap_before(m, f), 5),
        p50(lambda: m.compile_mask(f)),
        p50(lambda: sorted_keys_before(m.row_ids, f), 5),
        p50(lambda: SortedKeys(m.row_ids, "int").rows_of(f, "int")),
    ]


if __name__ == "__main__":
    main()
