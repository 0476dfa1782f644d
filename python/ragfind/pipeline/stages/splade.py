"""SPLADE first-stage retrieval on :class:`ragfind.SparseVectorIndex`."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.errors import unknown_ids
from ragfind.index import Explanation
from ragfind.pipeline.stages.base import load_stage_index
from ragfind.sparse.splade_index import SparseVectorIndex

__all__ = ["SpladeStage"]

_INDEX_FILE = "splade.idx"
_OLD_LAYOUT = "splade_ids.npz"  # the id map of the layout before the index kept ids


class SpladeStage:
    """SPLADE first-stage retrieval on :class:`ragfind.SparseVectorIndex` (C++, exact MaxScore).

    Args:
        encoder: a :class:`ragfind.SpladeEncoder` (or anything with ``encode_documents`` /
            ``encode_queries`` returning :class:`ragfind.SparseEmbeddings`).
        name: the stage's name (timings, RRF weights).
        scale: impact quantisation of the index (0, the default here: exact float32 weights).

    The index's ids are the Retriever's chunk ids; deletes and the metadata filter go to the
    index, which skips deleted and disallowed chunks inside its scorers.
    """

    kind = "splade"

    def __init__(self, encoder: Any, name: str = "splade", scale: float = 0.0) -> None:
        for attr in ("encode_documents", "encode_queries"):
            if not hasattr(encoder, attr):
                raise TypeError(
                    f"encoder is a {type(encoder).__name__} without .{attr}; expected a ragfind.SpladeEncoder"
                )
        self.encoder = encoder
        self.name = name
        self.scale = float(scale)
        self._index: Any = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return 0 if self._index is None else len(self._index)

    def _new_index(self, dim: int):
        return SparseVectorIndex(int(dim), scale=self.scale)

    def add(self, ids: np.ndarray, texts: list) -> None:
        """Encodes and indexes the chunks (``ids`` int64 chunk ids, ``texts`` the indexed texts)."""
        ids = np.asarray(ids, np.int64)
        emb = self.encoder.encode_documents(list(texts))
        if len(emb) != len(ids):
            raise ValueError(f"the encoder returned {len(emb)} vectors for {len(ids)} texts")
        with self._lock:
            if self._index is None:
                self._index = self._new_index(getattr(self.encoder, "vocab_size", None) or emb.dim)
            self._index.add(emb, ids)

    def delete(self, ids: np.ndarray) -> None:
        """Deletes chunks from the index (unknown ids are ignored: the Retriever checks them)."""
        with self._lock:
            if self._index is None:
                return
            known = [i for i in np.asarray(ids, np.int64).tolist() if i in self._index]
            if known:
                self._index.delete(known)

    def search(self, query: str, k: int, filter: Any = None) -> tuple:  # noqa: A002 - the API's name
        """``(chunk ids, scores)`` best first: the exact sparse dot product, over the chunks
        ``filter`` allows (None, an IdFilter or any collection of chunk ids)."""
        index = self._index
        if index is None or not len(index):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        return index.search(self.encoder.encode_queries([query]), k, filter)

    def explain(self, query: str, chunk_id: int, text: Any = None) -> Explanation:
        """The index's explanation of the chunk for the encoded query (kind ``"splade"``: the
        shared terms, named by the encoder's vocabulary when it has ``term``). UnknownIdError
        when the stage does not hold the chunk."""
        index = self._index
        if index is None:
            raise unknown_ids([chunk_id], "chunk_id")
        ex = index.explain(self.encoder.encode_queries([query]), chunk_id)
        term = getattr(self.encoder, "term", None)
        if term is None:
            return ex
        parts = []
        for c in ex.contributions:
            name = str(term(c.detail["term_id"]))
            parts.append(replace(c, name=name, detail={**c.detail, "term": name}))
        return replace(ex, contributions=tuple(parts))

    def save(self, path: Path) -> None:
        """Writes the index (ids included) into the stage folder as ``splade.idx``."""
        with self._lock:
            index = self._index
            if index is None:  # nothing added yet: an empty index keeps the scale
                index = self._new_index(getattr(self.encoder, "vocab_size", None) or 1)
            index.save(Path(path) / _INDEX_FILE)

    @classmethod
    def load(cls, path: os.PathLike, encoder: Any, name: str = "splade") -> SpladeStage:
        """Reads a stage written by :meth:`save` (``path`` is the stage folder, ``stage-<name>``).

        Raises:
            ValueError: a missing or malformed stage folder, or one of the layout before the
                index kept the chunk ids (``splade_ids.npz``: rebuild the retriever).
        """
        index = load_stage_index(path, SparseVectorIndex, _INDEX_FILE, _OLD_LAYOUT, "SPLADE")
        stage = cls(encoder, name, index.scale)
        stage._index = index if index.id_kind is not None else None
        return stage
