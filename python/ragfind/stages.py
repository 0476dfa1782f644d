"""Optional Retriever stages: learned sparse retrieval (SPLADE) and late-interaction re-ranking.

Both plug into :class:`ragfind.Retriever` through ``stages=[...]``:

- :class:`SpladeStage` is a first-stage retriever (a :class:`ragfind.retriever.RetrievalStage`):
  its ranked list joins BM25 and dense in the reciprocal rank fusion;
- :class:`LateInteractionStage` is a re-ranker (a :class:`ragfind.retriever.RerankStage`): it
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
    """SPLADE first-stage retrieval: exact sparse dot products over an in-memory inverted index.

    Args:
        encoder: a :class:`ragfind.SpladeEncoder` (or anything with ``encode_documents`` /
            ``encode_queries`` returning :class:`ragfind.SparseEmbeddings`).
        name: the stage's name (timings, RRF weights).

    The postings are numpy arrays per vocabulary term; a query touches only its own terms, so a
    search costs the length of those postings (plus a top-k selection over the touched chunks).
    """

    def __init__(self, encoder: Any, name: str = "splade") -> None:
        for attr in ("encode_documents", "encode_queries"):
            if not hasattr(encoder, attr):
                raise TypeError(
                    f"encoder is a {type(encoder).__name__} without .{attr}; expected a ragfind.SpladeEncoder"
                )
        self.encoder = encoder
        self.name = name
        self._lock = threading.Lock()
        self._rows: dict[int, tuple] = {}  # chunk id -> (indices, values)
        self._postings: dict | None = None  # term -> (chunk ids, weights), rebuilt lazily

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, ids: np.ndarray, texts: list) -> None:
        """Encodes and indexes the chunks (``ids`` int64, ``texts`` the indexed texts)."""
        emb = self.encoder.encode_documents(list(texts))
        if len(emb) != len(ids):
            raise ValueError(f"the encoder returned {len(emb)} vectors for {len(ids)} texts")
        with self._lock:
            for cid in np.asarray(ids).tolist():
                if cid in self._rows:
                    raise ValueError(f"chunk id {cid} is already in the {self.name} stage")
            for i, cid in enumerate(np.asarray(ids).tolist()):
                idx, val = emb.row(i)
                self._rows[int(cid)] = (np.asarray(idx, np.int32).copy(), np.asarray(val, np.float32).copy())
            self._postings = None

    def delete(self, ids: np.ndarray) -> None:
        """Removes chunks (unknown ids are ignored: the Retriever checks them)."""
        with self._lock:
            for cid in np.asarray(ids).tolist():
                self._rows.pop(int(cid), None)
            self._postings = None

    def _build(self) -> dict:
        with self._lock:
            if self._postings is not None:
                return self._postings
            if not self._rows:
                self._postings = {}
                return self._postings
            chunk_ids = np.fromiter(self._rows, dtype=np.int64, count=len(self._rows))
            lens = np.fromiter(
                (len(v[0]) for v in self._rows.values()), dtype=np.int64, count=len(self._rows)
            )
            terms = np.concatenate([v[0] for v in self._rows.values()])
            weights = np.concatenate([v[1] for v in self._rows.values()])
            owners = np.repeat(chunk_ids, lens)
            order = np.argsort(terms, kind="stable")
            terms, weights, owners = terms[order], weights[order], owners[order]
            bounds = np.flatnonzero(np.diff(terms)) + 1
            starts = np.concatenate([[0], bounds])
            ends = np.concatenate([bounds, [len(terms)]])
            self._postings = {int(terms[s]): (owners[s:e], weights[s:e]) for s, e in zip(starts, ends)}
            return self._postings

    def search(self, query: str, k: int, allowed: set | None) -> tuple:
        """``(chunk ids, scores)`` best first: the sparse dot product, ties by lower id."""
        postings = self._build()
        q = self.encoder.encode_queries([query])
        q_idx, q_val = q.row(0)
        owners, contrib = [], []
        for t, w in zip(np.asarray(q_idx).tolist(), np.asarray(q_val).tolist()):
            hit = postings.get(int(t))
            if hit is not None:
                owners.append(hit[0])
                contrib.append(hit[1] * np.float32(w))
        if not owners:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        ids, inverse = np.unique(np.concatenate(owners), return_inverse=True)
        scores = np.bincount(inverse, weights=np.concatenate(contrib)).astype(np.float32)
        if allowed is not None:
            keep = np.fromiter((int(i) in allowed for i in ids), dtype=bool, count=len(ids))
            ids, scores = ids[keep], scores[keep]
        order = np.lexsort((ids, -scores))[:k]
        return ids[order], scores[order]

    def save(self, path: Path) -> None:
        """Writes the sparse vectors to ``path/splade.npz`` (the Retriever fsyncs and checksums it)."""
        with self._lock:
            ids = np.fromiter(self._rows, dtype=np.int64, count=len(self._rows))
            lens = np.fromiter(
                (len(v[0]) for v in self._rows.values()), dtype=np.int64, count=len(self._rows)
            )
            indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            indices = (
                np.concatenate([v[0] for v in self._rows.values()]) if self._rows else np.zeros(0, np.int32)
            )
            values = (
                np.concatenate([v[1] for v in self._rows.values()]) if self._rows else np.zeros(0, np.float32)
            )
        with open(Path(path) / "splade.npz", "wb") as f:
            np.savez(f, ids=ids, indptr=indptr, indices=indices, values=values)

    @classmethod
    def load(cls, path: os.PathLike, encoder: Any, name: str = "splade") -> SpladeStage:
        """Reads a stage written by :meth:`save` (``path`` is the stage folder, ``stage-<name>``).

        Raises:
            ValueError: a missing or malformed file.
        """
        stage = cls(encoder, name)
        try:
            with np.load(Path(path) / "splade.npz", allow_pickle=False) as z:
                ids, indptr, indices, values = z["ids"], z["indptr"], z["indices"], z["values"]
        except (OSError, KeyError, ValueError) as exc:
            raise ValueError(f"{str(path)!r}: not a saved SPLADE stage ({exc})") from exc
        if len(indptr) != len(ids) + 1 or indptr[-1] != len(indices) or len(indices) != len(values):
            raise ValueError(f"{str(path)!r}: inconsistent SPLADE stage arrays")
        for n, cid in enumerate(ids.tolist()):
            a, b = int(indptr[n]), int(indptr[n + 1])
            stage._rows[int(cid)] = (indices[a:b].astype(np.int32), values[a:b].astype(np.float32))
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
        from ragfind import LateInteractionIndex

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
        from ragfind import LateInteractionIndex

        try:
            meta = json.loads((Path(path) / "late_ids.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{str(path)!r}: not a saved late-interaction stage ({exc})") from exc
        stage = cls(encoder, name, meta.get("dtype", "float16"))
        if (Path(path) / "late.idx").is_file():
            stage._index = LateInteractionIndex.load(Path(path) / "late.idx")
        stage._by_chunk = {int(c): int(li) for c, li in meta["map"]}
        return stage
