"""``DenseIndex.tune``: the cheapest IVF search setting (nprobe, rerank) that reaches a recall.

The reference idea is faiss's AutoTune: measure recall against exact search on sample queries
over a grid of settings, keep the Pareto front (no setting both faster and more accurate), and
take the fastest setting on it that reaches the target. Here the grid is walked rather than
filled: the fewest lists that reach the target at all are found by bisection (at the deepest
re-scoring), then for each nprobe from there up the smallest rerank that reaches it, again by
bisection (recall rises with rerank at a fixed nprobe), bounded by the previous nprobe's (more
lists rarely need a deeper re-scoring). Each such (nprobe, smallest rerank) is on the front and
is timed, one query per call on one thread as an application searches; the walk stops when the
smallest rerank suffices or the time has risen twice (scanning more lists then costs more than
the re-scoring it saves), and the fastest setting seen is chosen.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

# Fewer sample queries than this give a recall too noisy to choose by (one query moves it 2.5%).
MIN_QUERIES = 40
# Timed queries per candidate, and repeats (the best repeat counts: load only adds time).
_TIME_QUERIES = 64
_TIME_REPEATS = 2


def ladder(top: int, first: int = 1) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, 24, ... (steps of 1.33-1.5x) up to ``top``, starting at
    ``first`` (itself included)."""
    out, v = ([first] if 1 < first < top else []), 1
    while v < top:
        if v > first or (v == first == 1):
            out.append(v)
        v = v + 1 if v < 4 else (v * 3 // 2 if (v & (v - 1)) == 0 else v * 4 // 3)
    out.append(top)
    return out


def recall_of(found: np.ndarray, truth: np.ndarray, counts: np.ndarray) -> float:
    """Mean over queries of |found row ∩ truth row| / truth count (queries with count 0 skipped)."""
    hits = []
    for f, t, c in zip(found, truth, counts.tolist()):
        if c:
            hits.append(np.isin(t[:c], f[f >= 0]).sum() / c)
    return float(np.mean(hits)) if hits else 1.0


def choose(
    probe: Any,
    timer: Any,
    truth: np.ndarray,
    counts: np.ndarray,
    target: float,
    nprobes: list[int],
    reranks: list[int],
) -> dict:
    """The fastest (nprobe, rerank) on the front that reaches ``target``.

    ``probe(nprobe, rerank)`` gives the (nq, k) positions found, ``timer(nprobe, rerank)`` the
    seconds a query takes. Returns {"nprobe", "rerank", "recall", "reached"}; when no setting
    reaches the target, the most accurate one tried, with reached False.
    """
    memo: dict = {}

    def rec(npb: int, rr: int) -> float:
        if (npb, rr) not in memo:
            memo[(npb, rr)] = recall_of(probe(npb, rr), truth, counts)
        return memo[(npb, rr)]

    top = len(reranks) - 1
    # The fewest lists that reach the target at all (bisection at the deepest re-scoring).
    lo_n, hi_n = 0, len(nprobes) - 1
    if rec(nprobes[hi_n], reranks[top]) < target:
        # Unreachable: the cheapest setting tried within 0.01 of the best recall (the last
        # points of recall can cost every list).
        floor = memo[(nprobes[hi_n], reranks[top])] - 0.01
        while lo_n < hi_n:
            mid = (lo_n + hi_n) // 2
            if rec(nprobes[mid], reranks[top]) >= floor:
                hi_n = mid
            else:
                lo_n = mid + 1
        top_r = max(memo.values())
        near = [s for s, r in memo.items() if r >= top_r - 0.01]
        best = min(near, key=lambda s: (timer(*s), s))
        return {"nprobe": best[0], "rerank": best[1], "recall": memo[best], "reached": False}
    while lo_n < hi_n:
        mid = (lo_n + hi_n) // 2
        if rec(nprobes[mid], reranks[top]) >= target:
            hi_n = mid
        else:
            lo_n = mid + 1
    best_s, best_t, worse, hi = None, math.inf, 0, top
    for npb in nprobes[lo_n:]:
        lo_i, hi_i = 0, hi
        if rec(npb, reranks[hi]) < target:
            hi_i = top  # recall is not exactly monotone: search the whole ladder again
        while lo_i < hi_i:
            mid = (lo_i + hi_i) // 2
            if rec(npb, reranks[mid]) >= target:
                hi_i = mid
            else:
                lo_i = mid + 1
        hi = hi_i
        t = timer(npb, reranks[hi])
        if t < best_t:
            best_s, best_t, worse = (npb, reranks[hi]), t, 0
        else:
            worse += 1
        # More lists cost more scanning than they save re-scoring once the time rises twice.
        if hi == 0 or worse >= 2:
            break
    npb, rr = best_s
    return {"nprobe": npb, "rerank": rr, "recall": memo[(npb, rr)], "reached": True}


def time_per_query(search_one: Any, nq: int) -> float:
    """Best of ``_TIME_REPEATS`` mean seconds a query over up to ``_TIME_QUERIES`` queries."""
    m = min(nq, _TIME_QUERIES)
    best = math.inf
    for _ in range(_TIME_REPEATS):
        t = time.perf_counter()
        for i in range(m):
            search_one(i)
        best = min(best, (time.perf_counter() - t) / m)
    return best
