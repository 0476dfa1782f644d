"""rank_bm25-compatible BM25 (``from ragfind.compat.rank_bm25 import BM25Okapi``).

The same constructors, attributes and methods as rank_bm25 0.2.2 (``get_scores``,
``get_batch_scores``, ``get_top_n``) and the same scores, quirks included, computed by the C++
index instead of Python loops over dicts:

- ``BM25Okapi``: idf = log(N - df + 0.5) - log(df + 0.5); a negative idf is replaced by
  ``epsilon * average_idf`` (the average over the whole vocabulary, negative ones included);
  tf part (k1 + 1) tf / (tf + k1 (1 - b + b dl / avgdl)).
- ``BM25L``: idf = log(N + 1) - log(df + 0.5); rank_bm25 multiplies its tf part by tf once
  more (idf * tf * (k1 + 1)(ctd + delta) / (k1 + ctd + delta)), and so do we.
- ``BM25Plus``: idf = log((N + 1) / df); every document, matching or not, gets idf * delta
  per query token.

Query tokens count once per occurrence; unknown tokens score 0. The corpus is a list of token
lists (or of texts with ``tokenizer``); ``query`` is a list of tokens. Differences: errors are
ValueError / TypeError with a message instead of AssertionError / ZeroDivisionError, the
tokenizer runs in-process (rank_bm25 starts a multiprocessing pool), and the per-document
``doc_freqs`` dicts are not kept (use ``get_scores``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ragfind import _core

__all__ = ["BM25", "BM25L", "BM25Okapi", "BM25Plus"]

_OKAPI, _L, _PLUS = 0, 1, 2


class BM25:
    """Shared base: builds the C++ index from token lists. Not used directly (as in rank_bm25)."""

    _kind = -1

    def __init__(self, corpus: Iterable[Any], tokenizer: Callable[[Any], list[str]] | None = None) -> None:
        self.tokenizer = tokenizer
        docs = [tokenizer(d) for d in corpus] if tokenizer else list(corpus)
        if not docs:
            raise ValueError("corpus: empty; expected at least one document (a list of tokens)")
        self.corpus_size = 0
        self.avgdl = 0.0
        self._core = _core.BM25Core("lucene", 1.2, 0.75, 0.0, _core.Analyzer(False, [], None, False, None))
        self._core.add_tokenized(docs)
        self.corpus_size = len(docs)
        lengths = self._core.document_lengths()
        self.doc_len = lengths.tolist()
        self.avgdl = int(lengths.sum()) / self.corpus_size
        df = self._core.document_frequencies().astype(np.float64)
        self._idf = self._compute_idf(df)
        self._vocab = None

    def _compute_idf(self, df: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @property
    def idf(self) -> dict[str, float]:
        """Term -> idf, as rank_bm25's ``idf`` attribute (built on first access)."""
        if self._vocab is None:
            self._vocab = dict(zip(self._core.vocabulary(), self._idf.tolist()))
        return self._vocab

    def _params(self) -> tuple[float, float, float]:
        return float(self.k1), float(self.b), float(getattr(self, "delta", 0.0))

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """Scores of every document for the token list ``query`` (float64, corpus order).

        Raises:
            TypeError: ``query`` is a str or holds non-str tokens.
        """
        if isinstance(query, (str, bytes)):
            raise TypeError("query: expected a list of tokens, got a single str (tokenize it first)")
        query = list(query)
        ids = self._core.term_ids(query)
        weights = np.where(ids >= 0, self._idf[np.maximum(ids, 0)] if len(self._idf) else 0.0, 0.0)
        k1, b, delta = self._params()
        return self._core.rank_bm25_scores(ids, weights, self._kind, k1, b, delta)

    def get_batch_scores(self, query: Sequence[str], doc_ids: Sequence[int]) -> list[float]:
        """Scores of the documents at positions ``doc_ids`` (a list, as rank_bm25 returns).

        Raises:
            ValueError: a position is not below the corpus size.
        """
        positions = np.asarray(list(doc_ids), dtype=np.int64)
        if positions.size and positions.max() >= self.corpus_size:
            raise ValueError(
                f"doc_ids: position {int(positions.max())} is out of range for a corpus of {self.corpus_size}"
            )
        return self.get_scores(query)[positions].tolist()

    def get_top_n(self, query: Sequence[str], documents: Sequence[Any], n: int = 5) -> list[Any]:
        """The ``n`` documents of ``documents`` (the corpus, in index order) that score best.

        Raises:
            ValueError: ``documents`` does not have one entry per indexed document.
        """
        if self.corpus_size != len(documents):
            raise ValueError(
                f"documents: got {len(documents)} documents for an index of {self.corpus_size}; "
                "pass the corpus the index was built from"
            )
        scores = self.get_scores(query)
        top_n = np.argsort(scores)[::-1][:n]
        return [documents[i] for i in top_n]


class BM25Okapi(BM25):
    """rank_bm25's BM25Okapi: ATIRE-style tf part, Robertson idf floored at epsilon * mean idf."""

    _kind = _OKAPI

    def __init__(
        self, corpus, tokenizer=None, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25
    ) -> None:
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        super().__init__(corpus, tokenizer)

    def _compute_idf(self, df: np.ndarray) -> np.ndarray:
        n = self.corpus_size
        idf = np.array([math.log(n - f + 0.5) - math.log(f + 0.5) for f in df.tolist()], dtype=np.float64)
        # Summed left to right in first-occurrence order, as rank_bm25 does.
        total = 0.0
        for v in idf.tolist():
            total += v
        self.average_idf = total / len(idf) if len(idf) else 0.0
        eps = self.epsilon * self.average_idf
        idf[idf < 0] = eps
        return idf


class BM25L(BM25):
    """rank_bm25's BM25L (its extra tf factor included)."""

    _kind = _L

    def __init__(self, corpus, tokenizer=None, k1: float = 1.5, b: float = 0.75, delta: float = 0.5) -> None:
        self.k1 = k1
        self.b = b
        self.delta = delta
        super().__init__(corpus, tokenizer)

    def _compute_idf(self, df: np.ndarray) -> np.ndarray:
        n = self.corpus_size
        return np.array([math.log(n + 1) - math.log(f + 0.5) for f in df.tolist()], dtype=np.float64)


class BM25Plus(BM25):
    """rank_bm25's BM25Plus (idf * delta for every document and query token)."""

    _kind = _PLUS

    def __init__(self, corpus, tokenizer=None, k1: float = 1.5, b: float = 0.75, delta: float = 1) -> None:
        self.k1 = k1
        self.b = b
        self.delta = delta
        super().__init__(corpus, tokenizer)

    def _compute_idf(self, df: np.ndarray) -> np.ndarray:
        n = self.corpus_size
        return np.array([math.log((n + 1) / f) for f in df.tolist()], dtype=np.float64)
