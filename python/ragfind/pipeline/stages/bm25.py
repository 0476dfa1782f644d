"""BM25 first-stage retrieval on :class:`ragfind.BM25Index`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ragfind.index import Explanation
from ragfind.sparse.bm25 import BM25Index
from ragfind.sparse.feedback import RM3
from ragfind.sparse.fields import BM25FIndex

__all__ = ["BM25Stage"]


class BM25Stage:
    """Lexical retrieval: Lucene BM25 over the indexed chunk texts (C++).

    Args:
        index: an empty :class:`ragfind.BM25Index` (default ``BM25Index()``: k1=1.2, b=0.75,
            English stemming); the stage owns its ids (the Retriever's chunk ids).
        name: the stage's name (timings, RRF weights, ``Passage.ranks``).
        feedback: None (default) or a :class:`ragfind.sparse.feedback.RM3`: every search is
            expanded by pseudo-relevance feedback (two BM25 searches).
        texts: with ``feedback``, a callable returning the indexed texts of the chunk ids it
            is given (in order; ``""`` for an unknown id), from which the feedback chunks'
            terms are read (the Retriever reads its store). None: the stage keeps a copy of
            every text it indexes, so ``index`` must then be empty.

    Raises:
        TypeError: ``index`` is not a BM25 index, ``feedback`` is not an RM3.
        ValueError: ``feedback`` with a BM25F index (fielded documents), or with a non-empty
            index and no ``texts``.
    """

    kind = "bm25"

    def __init__(
        self,
        index: Any = None,
        name: str = "bm25",
        feedback: RM3 | None = None,
        texts: Callable[[np.ndarray], list] | None = None,
    ) -> None:
        if index is None:
            index = BM25Index()
        if not isinstance(index, (BM25Index, BM25FIndex)):
            raise TypeError(
                f"bm25 is a {type(index).__name__}; expected a ragfind.BM25Index, 'default' or None"
            )
        self.index = index
        self.name = name
        self.feedback: RM3 | None = None
        self._reader: Callable[[np.ndarray], list] | None = None
        self._texts: dict | None = None  # chunk id -> indexed text, when the stage keeps them
        self.set_feedback(feedback, texts)

    def set_feedback(self, feedback: RM3 | None, texts: Callable[[np.ndarray], list] | None = None) -> None:
        """Turns feedback on (``feedback``, ``texts`` as in the constructor) or off (None)."""
        if feedback is not None:
            if not isinstance(feedback, RM3):
                raise TypeError(f"feedback: expected None or a ragfind.sparse.feedback.RM3, got {feedback!r}")
            if isinstance(self.index, BM25FIndex):
                raise ValueError("feedback: RM3 needs a plain BM25Index, not a BM25F (fields=) one")
            if texts is None and len(self.index) > 0:
                raise ValueError(
                    "feedback: pass an empty BM25Index, or texts= to read the indexed texts from"
                )
            if texts is not None and not callable(texts):
                raise TypeError(f"texts: expected a callable (chunk ids -> texts), got {texts!r}")
        self.feedback = feedback
        self._reader = texts if feedback is not None else None
        self._texts = {} if feedback is not None and texts is None else None

    def _feedback_texts(self, ids: np.ndarray) -> list:
        if self._reader is not None:
            return list(self._reader(ids))
        texts = self._texts or {}
        return [texts.get(i, "") for i in np.asarray(ids).tolist()]

    def __len__(self) -> int:
        return len(self.index)

    @property
    def ids(self) -> np.ndarray:
        return np.asarray(self.index.ids)

    @property
    def fields(self) -> tuple:
        """The BM25F fields of the index ("title", "text"), or () for plain BM25."""
        return tuple(getattr(self.index, "fields", None) or ())

    def field_docs(self, chunks: list, texts: list) -> list:
        """The documents a fielded index takes: the chunk's title and indexed text."""
        names = self.fields
        return [
            {k: v for k, v in (("title", c.title or ""), ("text", t)) if k in names}
            for c, t in zip(chunks, texts)
        ]

    def add(self, ids: np.ndarray, texts: list) -> None:
        self.index.add(texts, ids)
        if self._texts is not None:
            self._texts.update(zip(np.asarray(ids).tolist(), texts))

    def delete(self, ids: np.ndarray) -> None:
        self.index.delete(ids)
        if self._texts is not None:
            for i in np.asarray(ids).tolist():
                self._texts.pop(i, None)

    def search(self, query: str, k: int, filter: Any = None, stats: Any = None) -> tuple:  # noqa: A002
        """``(chunk ids, BM25 scores)`` best first; ``filter`` goes to the index (native);
        ``stats``: the collection statistics to score with (:meth:`BM25Index.search`).
        With ``feedback``, the RM3-expanded search (``stats`` not supported: the feedback
        terms' document frequencies would be this index's alone)."""
        if self.feedback is not None:
            if stats is not None:
                raise ValueError("stats: not supported with feedback (RM3 reads this index's statistics)")
            return self.feedback.search(self.index, query, k, self._feedback_texts, filter)
        if stats is None and type(self.index) is BM25Index:
            # It takes any k and an empty index itself (the clamp below is for the others).
            return self.index.search(query, k, filter=filter)
        n = len(self.index)
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if stats is None:  # BM25F indexes take no external statistics
            return self.index.search(query, min(k, n), filter=filter)
        return self.index.search(query, min(k, n), filter=filter, stats=stats)

    def explain(self, query: str, chunk_id: int, text: Any = None) -> Explanation:
        """The index's explanation of the chunk (kind ``"bm25"``, or ``"bm25f"`` for a fielded
        index); ``text`` is not needed. UnknownIdError when the index does not hold it.
        With ``feedback``, the expanded query's terms, scaled as :meth:`search` scores them,
        and ``detail["feedback"]`` the expanded query's ``{term: weight}``."""
        if self.feedback is not None:
            weights = self.feedback.expand(self.index, query, self._feedback_texts)
            if weights is not None:
                e = self.index.explain(self.feedback.tokens(weights), chunk_id)
                r = self.feedback.resolution
                return replace(
                    e,
                    score=e.score / r,
                    contributions=tuple(replace(c, value=c.value / r) for c in e.contributions),
                    detail={**e.detail, "feedback": weights},
                )
        return self.index.explain(query, chunk_id)

    def save(self, path: Any) -> None:
        """Writes the index only: a Retriever records ``feedback`` in its manifest and sets it
        again at load (a stage saved alone comes back without it)."""
        self.index.save(path)

    @classmethod
    def load(cls, path: Any, name: str = "bm25") -> BM25Stage:
        return cls(BM25Index.load(path, mmap=False), name)
