"""Optional Retriever stages: learned sparse retrieval (SPLADE) and late-interaction re-ranking.

Both plug into :class:`ragfind.Retriever` through ``stages=[...]``:

- :class:`SpladeStage` (on :class:`ragfind.SparseVectorIndex`) is a first-stage retriever
  (a :class:`ragfind.pipeline.retriever.RetrievalStage`):
  its ranked list joins BM25 and dense in the reciprocal rank fusion;
- :class:`LateInteractionStage` is a re-ranker (a :class:`ragfind.pipeline.retriever.RerankStage`): it
  re-scores the fused head with ColBERT MaxSim before any cross-encoder.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SpladeStage", "LateInteractionStage"]


class SpladeStage:
    """SPLADE first-stage retrieval on :class:`ragfind.SparseVectorIndex` (C++, exact MaxScore).

    Args:
        encoder: a :class:`ragfind.SpladeEncoder` (or anything with ``encode_documents`` /
            ``encode_queries`` returning :class:`ragfind.SparseEmbeddings`).
        name: the stage's name (timings, RRF weights).
        scale: impact quantisation of the index (0, the default here: exact float32 weights).

    The index numbers documents 0, 1, 2, ...; the stage maps those to the Retriever's chunk ids,
    remembers deleted chunks (the index itself is append-only) and over-fetches when deleted
    chunks or a metadata filter remove results.
    """

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
        self._chunk_of = np.zeros(0, np.int64)  # index id -> chunk id
        self._live = np.zeros(0, bool)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return int(self._live.sum())

    def _new_index(self, dim: int):
        from ragfind.sparse.splade_index import SparseVectorIndex

        return SparseVectorIndex(int(dim), scale=self.scale)

    def add(self, ids: np.ndarray, texts: list) -> None:
        """Encodes and indexes the chunks (``ids`` int64, ``texts`` the indexed texts)."""
        ids = np.asarray(ids, np.int64)
        emb = self.encoder.encode_documents(list(texts))
        if len(emb) != len(ids):
            raise ValueError(f"the encoder returned {len(emb)} vectors for {len(ids)} texts")
        with self._lock:
            if self._index is None:
                self._index = self._new_index(getattr(self.encoder, "vocab_size", None) or emb.dim)
            self._index.add(emb)
            self._chunk_of = np.concatenate([self._chunk_of, ids])
            self._live = np.concatenate([self._live, np.ones(len(ids), bool)])

    def delete(self, ids: np.ndarray) -> None:
        """Marks chunks deleted (unknown ids are ignored: the Retriever checks them)."""
        with self._lock:
            self._live &= ~np.isin(self._chunk_of, np.asarray(ids, np.int64))

    def search(self, query: str, k: int, allowed: set | None) -> tuple:
        """``(chunk ids, scores)`` best first: the exact sparse dot product."""
        index = self._index
        if index is None or not len(index):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        q = self.encoder.encode_queries([query])
        n = len(index)
        fetch = min(n, k if allowed is None and self._live.all() else max(4 * k, k + 64))
        while True:
            rows, scores = index.search(q, fetch)
            keep = self._live[rows]
            chunk = self._chunk_of[rows]
            if allowed is not None:
                keep &= np.fromiter((int(c) in allowed for c in chunk), dtype=bool, count=len(chunk))
            if keep.sum() >= k or len(rows) < fetch or fetch >= n:
                return chunk[keep][:k], scores[keep][:k]
            fetch = min(n, fetch * 4)

    def save(self, path: Path) -> None:
        """Writes the index and the id map into the stage folder (the Retriever checksums them)."""
        with self._lock:
            if self._index is not None:
                self._index.save(Path(path) / "splade.idx")
            with open(Path(path) / "splade_ids.npz", "wb") as f:
                np.savez(f, chunk_of=self._chunk_of, live=self._live)

    @classmethod
    def load(cls, path: os.PathLike, encoder: Any, name: str = "splade") -> SpladeStage:
        """Reads a stage written by :meth:`save` (``path`` is the stage folder, ``stage-<name>``).

        Raises:
            ValueError: a missing, malformed or inconsistent stage folder.
        """
        from ragfind.sparse.splade_index import SparseVectorIndex

        stage = cls(encoder, name)
        try:
            with np.load(Path(path) / "splade_ids.npz", allow_pickle=False) as z:
                chunk_of, live = z["chunk_of"].astype(np.int64), z["live"].astype(bool)
            index = SparseVectorIndex.load(Path(path) / "splade.idx") if len(chunk_of) else None
        except (OSError, KeyError, ValueError) as exc:
            raise ValueError(f"{str(path)!r}: not a saved SPLADE stage ({exc})") from exc
        if len(chunk_of) != len(live) or (index is not None and len(index) != len(chunk_of)):
            raise ValueError(f"{str(path)!r}: the SPLADE stage's id map does not match its index")
        stage._index, stage._chunk_of, stage._live = index, chunk_of, live
        stage.scale = index.scale if index is not None else 0.0
        return stage


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
