"""BM25 first-stage retrieval on :class:`ragfind.BM25Index`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ragfind.index import Explanation
from ragfind.sparse.bm25 import BM25Index
from ragfind.sparse.fields import BM25FIndex

__all__ = ["BM25Stage"]


class BM25Stage:
    """Lexical retrieval: Lucene BM25 over the indexed chunk texts (C++).

    Args:
        index: an empty :class:`ragfind.BM25Index` (default ``BM25Index()``: k1=1.2, b=0.75,
            English stemming); the stage owns its ids (the Retriever's chunk ids).
        name: the stage's name (timings, RRF weights, ``Passage.ranks``).
    """

    kind = "bm25"

    def __init__(self, index: Any = None, name: str = "bm25") -> None:
        if index is None:
            index = BM25Index()
        if not isinstance(index, (BM25Index, BM25FIndex)):
            raise TypeError(
                f"bm25 is a {type(index).__name__}; expected a ragfind.BM25Index, 'default' or None"
            )
        self.index = index
        self.name = name

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

    def delete(self, ids: np.ndarray) -> None:
        self.index.delete(ids)

    def search(self, query: str, k: int, filter: Any = None, stats: Any = None) -> tuple:  # noqa: A002
        """``(chunk ids, BM25 scores)`` best first; ``filter`` goes to the index (native);
        ``stats``: the collection statistics to score with (:meth:`BM25Index.search`)."""
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
        index); ``text`` is not needed. UnknownIdError when the index does not hold it."""
        return self.index.explain(query, chunk_id)

    def save(self, path: Any) -> None:
        self.index.save(path)

    @classmethod
    def load(cls, path: Any, name: str = "bm25") -> BM25Stage:
        return cls(BM25Index.load(path, mmap=False), name)
