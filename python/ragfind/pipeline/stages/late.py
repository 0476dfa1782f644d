"""Late-interaction (ColBERT MaxSim) re-ranking of the fused head."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LateInteractionStage"]


class LateInteractionStage:
    """ColBERT-style late-interaction re-ranking of the fused head (exact MaxSim in C++).

    Args:
        encoder: a :class:`ragfind.ColbertEncoder` (or anything with ``encode_documents``
            returning per-text token matrices and ``encode_query`` returning one).
        name: the stage's name (timings).
        dtype: token storage of the :class:`ragfind.LateInteractionIndex` ("float16" halves it).
    """

    def __init__(self, encoder: Any, name: str = "late", dtype: str = "float16") -> None:
        from ragfind.late.index import LateInteractionIndex

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
        self._make_index = lambda dim: LateInteractionIndex(dim, dtype=dtype)
        self._by_chunk: dict[int, int] = {}
        self._lock = threading.Lock()

    def add(self, ids: np.ndarray, texts: list) -> None:
        """Encodes the chunks' token vectors and stores them."""
        mats = self.encoder.encode_documents(list(texts))
        with self._lock:
            if self._index is None:
                self._index = self._make_index(int(np.asarray(mats[0]).shape[1]))
            new = self._index.add(mats)
            for cid, li in zip(np.asarray(ids).tolist(), np.asarray(new).tolist()):
                self._by_chunk[int(cid)] = int(li)

    def delete(self, ids: np.ndarray) -> None:
        """Forgets chunks (their vectors stay in the index but are never candidates again)."""
        with self._lock:
            for cid in np.asarray(ids).tolist():
                self._by_chunk.pop(int(cid), None)

    def rerank(self, query: str, ids: np.ndarray, texts: list) -> tuple:
        """``(chunk ids, MaxSim scores)`` best first over the given chunks (ties: input order)."""
        known = [int(i) for i in np.asarray(ids).tolist() if int(i) in self._by_chunk]
        if not known or self._index is None:
            return np.asarray(ids, np.int64), np.zeros(len(ids), np.float32)
        q = self.encoder.encode_query(query)
        scores = self._index.score(q, np.asarray([self._by_chunk[i] for i in known], np.int64))
        order = np.argsort(-scores, kind="stable")
        return np.asarray(known, np.int64)[order], np.asarray(scores, np.float32)[order]

    def save(self, path: Path) -> None:
        """Writes the token index and the chunk-id map into the stage folder."""
        with self._lock:
            if self._index is not None:
                self._index.save(Path(path) / "late.idx")
            with open(Path(path) / "late_ids.json", "w", encoding="utf-8") as f:
                json.dump({"dtype": self.dtype, "map": [[c, li] for c, li in self._by_chunk.items()]}, f)

    @classmethod
    def load(cls, path: os.PathLike, encoder: Any, name: str = "late") -> LateInteractionStage:
        """Reads a stage written by :meth:`save`. Raises ValueError for a malformed folder."""
        from ragfind.late.index import LateInteractionIndex

        try:
            meta = json.loads((Path(path) / "late_ids.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{str(path)!r}: not a saved late-interaction stage ({exc})") from exc
        stage = cls(encoder, name, meta.get("dtype", "float16"))
        if (Path(path) / "late.idx").is_file():
            stage._index = LateInteractionIndex.load(Path(path) / "late.idx")
        stage._by_chunk = {int(c): int(li) for c, li in meta["map"]}
        return stage
