"""Rank fusion (RRF) and score fusion of several ranked lists, computed in C++.

Hybrid search runs a lexical and a dense retriever (and maybe more stages, or several phrasings of
one question: RAG-Fusion) and merges their ranked lists here. The fusion functions return the
fused ``(ids, scores)`` best first; ties are broken deterministically by first appearance (list
0's ranking first, then list 1's new ids, and so on). :func:`convex` is the two-list score fusion
with one weight, and :func:`fit_convex_weight` picks that weight on judged queries.

RRF stays the default of the Retriever: on SciFact and Cranfield (BM25 + all-MiniLM-L6-v2) the
convex fusions with a weight fitted on other queries do not beat RRF on both (bench/quality.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ragfind import _core

__all__ = ["rrf", "fuse_scores", "convex", "fit_convex_weight", "CONVEX_NORMS"]

#: The per-query score normalisations :func:`convex` accepts.
CONVEX_NORMS: tuple[str, ...] = ("min-max", "z-score")


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


def convex(
    first: Any,
    second: Any,
    weight: float = 0.5,
    norm: str = "min-max",
    top_k: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Convex score fusion of two ranked lists of one query:
    ``score(d) = weight * n1(d) + (1 - weight) * n2(d)``.

    Each list's scores are normalised over that list alone (per query): ``"min-max"`` maps them
    to [0, 1] (equal scores map to 1), ``"z-score"`` to mean 0 and standard deviation 1 (a
    constant list to 0). An id missing from a list adds 0 for it: the list's minimum under
    min-max, its mean under z-score (as ranx's ``wsum``). This is :func:`fuse_scores` with
    weights ``(weight, 1 - weight)`` and ``method="sum"``.

    Args:
        first, second: ``(ids, scores)`` pairs as the indexes' ``search`` returns (e.g. BM25 and
            dense), ids of one type (int or str).
        weight: the share of ``first``, in [0, 1]; fit it with :func:`fit_convex_weight`.
        norm: ``"min-max"`` or ``"z-score"``.
        top_k: keep only the best ``top_k`` fused ids (default: all).

    Returns:
        ``(ids, scores)`` best first, ties broken by first appearance.

    Raises:
        ValueError: ``weight`` outside [0, 1] or not finite, an unknown ``norm``, or what
            :func:`fuse_scores` raises for the lists.
    """
    w = float(weight)
    if not 0.0 <= w <= 1.0:  # also False for NaN
        raise ValueError(f"weight: expected a number in [0, 1], got {weight!r}")
    if norm not in CONVEX_NORMS:
        raise ValueError(f"norm: expected one of {CONVEX_NORMS}, got {norm!r}")
    return fuse_scores([first, second], norm=norm, method="sum", weights=[w, 1.0 - w], top_k=top_k)


def fit_convex_weight(
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    qrels: Mapping[str, Mapping[str, int]],
    norm: str = "min-max",
    metric: str = "ndcg@10",
    grid: Sequence[float] | None = None,
    doc_ids: Sequence[str] | None = None,
) -> tuple[float, dict[float, float]]:
    """The weight of :func:`convex` that maximises ``metric`` on judged queries.

    Tries every weight of ``grid`` (default 0, 0.05, ..., 1) on every query judged in
    ``qrels`` that both runs hold, and returns the best (the one nearest 0.5 among equal
    means, so that a flat metric gives an even mix). Fit on queries other than those you report
    on (another split, or folds): the weight is selected on what it is scored with.

    Args:
        first, second: ``{query id: (ids, scores)}``, the two retrievers' results per query.
        qrels: ``{query id: {doc id: judgement}}`` (as :func:`ragfind.eval.load_qrels`).
        norm: ``"min-max"`` or ``"z-score"``.
        metric: a metric name :func:`ragfind.eval.evaluate` knows (``"ndcg@10"``, ``"mrr@10"``, ...).
        grid: the weights to try, each in [0, 1].
        doc_ids: maps integer ids (row numbers) to the document ids of ``qrels``; without it
            ids are compared as ``str(id)``.

    Returns:
        ``(best weight, {weight: mean metric})``.

    Raises:
        ValueError: no query is both judged and in both runs, a weight outside [0, 1], or what
            :func:`convex` and :func:`ragfind.eval.evaluate` raise.
    """
    from ragfind.eval import evaluate  # ragfind.eval is heavier; import on use

    weights = [i / 20 for i in range(21)] if grid is None else [float(w) for w in grid]
    if not weights:
        raise ValueError("grid: expected at least one weight")
    judged = {str(q): j for q, j in qrels.items() if any(int(r) > 0 for r in j.values())}
    queries = [q for q in first if str(q) in judged and q in second]
    if not queries:
        raise ValueError("no query is judged in qrels and present in both runs")

    def name(d: Any) -> str:
        return doc_ids[int(d)] if doc_ids is not None else str(d)

    means: dict[float, float] = {}
    for w in weights:
        run = {}
        for q in queries:
            ids, scores = convex(first[q], second[q], weight=w, norm=norm)
            run[str(q)] = {name(d): float(s) for d, s in zip(ids, scores)}
        scored = {str(q): judged[str(q)] for q in queries}
        means[w] = float(evaluate(scored, run, metric).mean[metric])
    best = max(weights, key=lambda w: (round(means[w], 12), -abs(w - 0.5)))
    return best, means
