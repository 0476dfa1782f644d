"""Late-interaction (ColBERT MaxSim) re-ranking of the fused head."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.errors import unknown_ids
from ragfind.index import Explanation
from ragfind.late.index import LateInteractionIndex
from ragfind.pipeline.stages.base import load_stage_index

__all__ = ["LateInteractionStage"]

_INDEX_FILE = "late.idx"
_OLD_LAYOUT = "late_ids.json"  # the id map of the layout before the index kept ids


class LateInteractionStage:
    """ColBERT-style late-interaction re-ranking of the fused head (exact MaxSim in C++).

    Args:
        encoder: a :class:`ragfind.ColbertEncoder` (or anything with ``encode_documents``
            returning per-text token matrices and ``encode_query`` returning one).
        name: the stage's name (timings).
        dtype: token storage of the :class:`ragfind.LateInteractionIndex` ("float16" halves it).

    The index's ids are the Retriever's chunk ids; deleting a chunk deletes its vectors (the
    index compacts its storage as deleted vectors accumulate).
    """

    kind = "late"

    def __init__(self, encoder: Any, name: str = "late", dtype: str = "float16") -> None:
        for attr in ("encode_documents", "encode_query"):
            if not hasattr(encoder, attr):
                raise TypeError(
                    f"encoder is a {type(encoder).__name__} without .{attr}; "
                    "expected a ragfind.ColbertEncoder"
                )
        self.encoder = encoder
        self.name = name
        self.dtype = dtype
        self._index: Any = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return 0 if self._index is None else len(self._index)

    def _new_index(self, dim: int):
        return LateInteractionIndex(int(dim), dtype=self.dtype)

    def add(self, ids: np.ndarray, texts: list) -> None:
        """Encodes the chunks' token vectors and stores them under their chunk ids."""
        ids = np.asarray(ids, np.int64)
        mats = self.encoder.encode_documents(list(texts))
        if len(mats) != len(ids):
            raise ValueError(f"the encoder returned {len(mats)} token matrices for {len(ids)} texts")
        if not len(mats):
            return
        with self._lock:
            if self._index is None:
                self._index = self._new_index(np.asarray(mats[0]).shape[1])
            self._index.add(mats, ids)

    def delete(self, ids: np.ndarray) -> None:
        """Deletes chunks' vectors (unknown ids are ignored: the Retriever checks them)."""
        with self._lock:
            if self._index is None:
                return
            known = [i for i in np.asarray(ids, np.int64).tolist() if i in self._index]
            if known:
                self._index.delete(known)

    def rerank(self, query: str, ids: np.ndarray, texts: list) -> tuple:
        """``(chunk ids, MaxSim scores)`` best first over the given chunks (ties: input order);
        chunks the index does not hold are left out."""
        index = self._index
        known = [] if index is None else [i for i in np.asarray(ids, np.int64).tolist() if i in index]
        if not known:
            return np.asarray(ids, np.int64), np.zeros(len(ids), np.float32)
        q = self.encoder.encode_query(query)
        scores = index.score(q, known)
        order = np.argsort(-scores, kind="stable")
        return np.asarray(known, np.int64)[order], np.asarray(scores, np.float32)[order]

    def explain(self, query: str, chunk_id: int, text: Any = None) -> Explanation:
        """The index's explanation (kind ``"late"``): per query token, the chunk token it
        matched and their similarity, labelled by the encoder's ``tokenize_query`` and, given
        the chunk's indexed ``text``, ``tokenize_document``. UnknownIdError when the stage
        does not hold the chunk."""
        index = self._index
        if index is None or chunk_id not in index:
            raise unknown_ids([chunk_id], "chunk_id")
        enc = self.encoder
        q = enc.encode_query(query)
        qt = enc.tokenize_query(query) if hasattr(enc, "tokenize_query") else None
        dt = enc.tokenize_document(text) if text is not None and hasattr(enc, "tokenize_document") else None
        try:
            return index.explain(q, chunk_id, query_tokens=qt, doc_tokens=dt)
        except ValueError:  # labels that do not line up with the stored rows: explain without them
            return index.explain(q, chunk_id)

    def save(self, path: Path) -> None:
        """Writes the token index (chunk ids included) into the stage folder as ``late.idx``."""
        with self._lock:
            index = self._index
            if index is None:  # nothing added yet: an empty index keeps the dtype
                index = self._new_index(getattr(self.encoder, "dim", None) or 1)
            index.save(Path(path) / _INDEX_FILE)

    @classmethod
    def load(cls, path: os.PathLike, encoder: Any, name: str = "late") -> LateInteractionStage:
        """Reads a stage written by :meth:`save`.

        Raises:
            ValueError: a missing or malformed stage folder, or one of the layout before the
                index kept the chunk ids (``late_ids.json``: rebuild the retriever).
        """
        index = load_stage_index(path, LateInteractionIndex, _INDEX_FILE, _OLD_LAYOUT, "late-interaction")
        stage = cls(encoder, name, index.dtype)
        stage._index = index if index.id_kind is not None else None
        return stage
