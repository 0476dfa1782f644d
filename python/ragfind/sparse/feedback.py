"""Pseudo-relevance feedback for BM25: :class:`RM3` query expansion.

RM3 (Abdul-Jaleel et al., "UMass at TREC 2004"; Lavrenko and Croft's relevance model with the
original query mixed back in) as Anserini and Pyserini run it (``Rm3Reranker``): a first BM25
search takes the top ``fb_docs`` documents as relevant, builds a term distribution from them
(each document's term frequencies over its length, weighted by its BM25 score, cut to the
``fb_terms`` heaviest terms), mixes it with the query's own terms and searches again with the
weighted terms.

Terms are the index's own (its analyzer's stems), read by analysing the feedback documents'
texts again: the index keeps no per-document term list, so the caller supplies the texts
(``Retriever(feedback=...)`` reads them from its store; a
:class:`ragfind.pipeline.stages.BM25Stage` of its own keeps a copy).

The second search goes through BM25's own top-k: it counts a repeated query term once per
repeat, so each weight ``w`` becomes ``round(w * resolution)`` repeats (``resolution`` 1,000
by default: a weight of 0.05 is held to within 1%) and the scores are divided by
``resolution`` again. Terms whose weight rounds to zero are dropped.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["RM3"]


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    return int(value)


def _unit_interval(value: Any, name: str, low_open: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number in [0, 1], got {value!r}") from None
    ok = (0.0 < v <= 1.0) if low_open else (0.0 <= v <= 1.0)  # also False for NaN
    if isinstance(value, bool) or not ok:
        raise ValueError(f"{name}: expected a number in {'(0, 1]' if low_open else '[0, 1]'}, got {value!r}")
    return v


def _top(weights: Mapping[str, float], n: int) -> dict[str, float]:
    """The ``n`` heaviest entries; equal weights in term order, so the cut is deterministic."""
    return dict(heapq.nsmallest(n, weights.items(), key=lambda kv: (-kv[1], kv[0])))


def _unit_l1(weights: Mapping[str, float]) -> dict[str, float]:
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items()} if total > 0 else {}


class RM3:
    """RM3 pseudo-relevance feedback for a :class:`ragfind.BM25Index`, Anserini's defaults.

    Args:
        fb_docs: feedback documents, the first search's best (Anserini ``fbDocs``, 10).
        fb_terms: terms kept per feedback document and in the model (``fbTerms``, 10).
        original_query_weight: share of the original query in the final weights, in [0, 1]
            (``originalQueryWeight``, 0.5; 1 searches the query alone again).
        max_df_ratio: terms in more than this share of the documents are not feedback terms
            (Anserini's 10%: a collection's own stopwords would otherwise dominate).
        resolution: query-term repeats per unit of weight in the second search (see the
            module); larger is finer and costs nothing at search time.

    Feedback terms are 2 to 20 characters long, as Anserini's; its ``[a-z0-9]+`` filter is not
    applied (it would drop every non-ASCII term).

    Raises:
        ValueError: a parameter out of range (the message names it).
    """

    def __init__(
        self,
        fb_docs: int = 10,
        fb_terms: int = 10,
        original_query_weight: float = 0.5,
        max_df_ratio: float = 0.1,
        resolution: int = 1000,
    ) -> None:
        self.fb_docs = _positive_int(fb_docs, "fb_docs")
        self.fb_terms = _positive_int(fb_terms, "fb_terms")
        self.original_query_weight = _unit_interval(original_query_weight, "original_query_weight")
        self.max_df_ratio = _unit_interval(max_df_ratio, "max_df_ratio", low_open=True)
        self.resolution = _positive_int(resolution, "resolution")

    def __repr__(self) -> str:
        return (
            f"RM3(fb_docs={self.fb_docs}, fb_terms={self.fb_terms}, "
            f"original_query_weight={self.original_query_weight}, max_df_ratio={self.max_df_ratio}, "
            f"resolution={self.resolution})"
        )

    def config(self) -> dict:
        """The parameters, as ``RM3(**config)`` takes them (what a saved Retriever records)."""
        return {
            "fb_docs": self.fb_docs,
            "fb_terms": self.fb_terms,
            "original_query_weight": self.original_query_weight,
            "max_df_ratio": self.max_df_ratio,
            "resolution": self.resolution,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RM3) and self.config() == other.config()

    __hash__ = None  # type: ignore[assignment]

    def weights(
        self, index: Any, query: str, texts: Sequence[str], scores: Sequence[float]
    ) -> dict[str, float]:
        """The expanded query: ``{term: weight}``, weights summing to 1 (none for a query
        without index terms and no feedback term).

        Args:
            index: the :class:`ragfind.BM25Index` searched (its analyzer and statistics).
            query: the query text.
            texts: the feedback documents' indexed texts, best first.
            scores: their first-search BM25 scores (the documents' weights in the model).
        """
        if len(texts) != len(scores):
            raise ValueError(f"texts and scores: expected as many, got {len(texts)} and {len(scores)}")
        query_terms = _unit_l1(Counter(index.analyze_query(query)))
        model = self.relevance_model(index, texts, scores)
        a = self.original_query_weight
        out: dict[str, float] = {}
        for t, w in query_terms.items():
            out[t] = a * w
        for t, w in model.items():
            out[t] = out.get(t, 0.0) + (1.0 - a) * w
        return {t: w for t, w in out.items() if w > 0}

    def relevance_model(self, index: Any, texts: Sequence[str], scores: Sequence[float]) -> dict[str, float]:
        """RM1 over the feedback documents: ``{term: P(term | R)}`` over at most ``fb_terms``
        terms, summing to 1 (empty without documents or feedback terms)."""
        texts = list(texts)[: self.fb_docs]
        scores = [float(s) for s in list(scores)[: self.fb_docs]]
        vectors = [Counter(index.analyzer.analyze(t)) for t in texts]
        vocab = sorted({t for v in vectors for t in v if 2 <= len(t) <= 20})
        if not vocab:
            return {}
        n, _, df = index.term_stats(vocab)
        allowed = {t for t, d in zip(vocab, df.tolist()) if n > 0 and d / n <= self.max_df_ratio}
        model: dict[str, float] = {}
        for v, s in zip(vectors, scores):
            kept = _top({t: float(c) for t, c in v.items() if t in allowed}, self.fb_terms)
            norm = sum(kept.values())
            for t, c in kept.items():
                model[t] = model.get(t, 0.0) + c / norm * s
        return _unit_l1(_top(model, self.fb_terms))

    def tokens(self, weights: Mapping[str, float]) -> list[str]:
        """``weights`` as the repeated query terms of the second search (see the module)."""
        out: list[str] = []
        for t, w in weights.items():
            out += [t] * int(round(w * self.resolution))
        return out

    def search(
        self,
        index: Any,
        query: str,
        k: int,
        texts: Callable[[np.ndarray], Sequence[str]],
        filter: Any = None,  # noqa: A002
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` of the expanded query: ``(ids, scores)`` best first, scores the
        weighted BM25 sums ``sum_t w_t * bm25(t, d)`` (as quantised, see the module).

        The first search ignores ``filter``: the feedback documents are the query's own, so
        the filtered result is the unfiltered ranking restricted to the allowed ids, as for
        every BM25 search.

        Args:
            index: the :class:`ragfind.BM25Index` to search.
            query: the query text.
            k: results wanted.
            texts: returns the indexed texts of the ids it is given, in order.
            filter: as :meth:`ragfind.BM25Index.search`.
        """
        weights = self.expand(index, query, texts)
        if weights is None:
            return index.search(query, k, filter=filter)
        found, s = index.search_tokenized(self.tokens(weights), k, filter=filter)
        return found, (s / np.float32(self.resolution)).astype(np.float32)

    def expand(
        self, index: Any, query: str, texts: Callable[[np.ndarray], Sequence[str]]
    ) -> dict[str, float] | None:
        """The expanded query of :meth:`search` (its first search and :meth:`weights`), or
        None when the first search finds nothing or the query holds phrases (an index with
        positions): the query is then searched as it is, since the expanded query is a bag
        of terms and would drop the phrases."""
        if not isinstance(query, str):
            raise TypeError(f"query: expected str, got {type(query).__name__}")
        if len(index) == 0 or index._phrases(query) is not None:
            return None
        ids, scores = index.search(query, min(self.fb_docs, len(index)))
        if len(ids) == 0:
            return None
        return self.weights(index, query, list(texts(ids)), scores)
