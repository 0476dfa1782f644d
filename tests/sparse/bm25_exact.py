"""Shared by the BM25 pruning tests: an index of any variant, and the check that the pruned
searches return what the exhaustive scan returns."""

from __future__ import annotations

import numpy as np

from ragfind import BM25Index

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]
PRUNED = ("maxscore", "blockmax", "auto")


def index_for(method: str = "lucene") -> BM25Index:
    return BM25Index(method=method, delta=0.5 if method in ("bm25l", "bm25+") else None)


def assert_same_as_exhaustive(
    index: BM25Index, query: list[str], k: int, algorithms=PRUNED, stats=None, flt=None
) -> None:
    """Each of `algorithms` gives the exhaustive scan's scores (1e-6 relative) and its ids
    wherever the scores are distinct. With `stats`, the query is searched as text under those
    collection statistics; `flt` filters every search."""

    def run(algorithm):
        if stats is None:
            return index.search_tokenized(query, k=k, algorithm=algorithm, filter=flt)
        return index.search(" ".join(query), k=k, algorithm=algorithm, stats=stats, filter=flt)

    ref_ids, ref_scores = run("exhaustive")
    for algorithm in algorithms:
        ids, scores = run(algorithm)
        assert len(ids) == len(ref_ids), (algorithm, query, k)
        if len(ids) == 0:
            continue
        np.testing.assert_allclose(scores, ref_scores, rtol=1e-6, err_msg=f"{algorithm} {query} {k}")
        # Ties are broken by insertion order in every algorithm, so the ids agree wherever the
        # scores are exactly equal; elsewhere only among scores tied within float rounding.
        distinct = np.r_[True, np.diff(ref_scores) < -1e-6 * np.abs(ref_scores[1:])]
        distinct &= np.r_[np.diff(ref_scores) < -1e-6 * np.abs(ref_scores[:-1]), True]
        np.testing.assert_array_equal(ids[distinct], ref_ids[distinct], err_msg=f"{algorithm} {query} {k}")
