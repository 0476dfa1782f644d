"""Rank fusion (RRF) and score fusion of several ranked lists, computed in C++.

Hybrid search runs a lexical and a dense retriever (and maybe more stages, or several phrasings of
one question: RAG-Fusion) and merges their ranked lists here. Both functions return the fused
``(ids, scores)`` best first; ties are broken deterministically by first appearance (list 0's
ranking first, then list 1's new ids, and so on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ragfind import _core

__all__ = ["rrf", "fuse_scores"]


def rrf(
    lists: Sequence[Any],
    k: float = 60,
    weights: Sequence[float] | None = None,
    top_k: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009).

    ``score(d) = sum_i weights[i] / (k + rank_i(d))`` with ranks counted from 1; lists that do
    not hold ``d`` add nothing.

    Args:
        lists: one or more ranked lists, best first. Each is a 1-D integer array, a list of int,
            a list / array of str, or an ``(ids, scores)`` pair as returned by the indexes'
            ``search`` (the scores are ignored here). All lists use the same id type.
        k: the RRF constant (>= 0); 60 as in the paper.
        weights: one finite weight per list (default all 1).
        top_k: keep only the best ``top_k`` fused ids (default: all of them).

    Returns:
        ``(ids, scores)``: int64 ids (or an object array of str ids) and float64 fused scores,
        best first, ties broken by first appearance.

    Raises:
        ValueError: no lists, an id twice in one list, a bad ``k``/``weights``/``top_k``.
        TypeError: ids that are neither int nor str, or int and str mixed.
    """
    return _core.rrf(lists, float(k), weights, top_k)


def fuse_scores(
    lists: Sequence[Any],
    norm: str = "min-max",
    method: str = "sum",
    weights: Sequence[float] | None = None,
    top_k: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Score fusion: normalise each list's scores, then combine them per id.

    Pyserini's hybrid BEIR runs show normalised score fusion sometimes beating RRF, at the cost
    of depending on score distributions.

    Args:
        lists: ``(ids, scores)`` pairs (ids as in :func:`rrf`; scores finite numbers).
        norm: ``"min-max"`` ((s - min) / (max - min); a list of equal scores maps to 1),
            ``"z-score"`` ((s - mean) / std; a constant list maps to 0), ``"max"`` (s / max),
            ``"sum"`` ((s - min) / sum(s - min); constant -> 1/n) or ``"none"``.
        method: ``"sum"`` (weighted CombSUM: missing lists add 0), ``"mnz"`` (CombMNZ: the sum
            times the number of lists holding the id) or ``"max"`` (CombMAX).
        weights: one finite weight per list (default all 1), applied after normalisation.
        top_k: keep only the best ``top_k`` fused ids (default: all).

    Returns:
        ``(ids, scores)`` best first, ties broken by first appearance.

    Raises:
        ValueError: unknown ``norm``/``method``, non-finite scores, ids and scores of different
            lengths, an id twice in one list, bad ``weights``/``top_k``.
        TypeError: a list that is not an ``(ids, scores)`` pair.
    """
    return _core.fuse_scores(lists, norm, method, weights, top_k)
