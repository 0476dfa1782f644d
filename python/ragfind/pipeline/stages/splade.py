"""SPLADE first-stage retrieval on :class:`ragfind.SparseVectorIndex`."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SpladeStage"]


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
