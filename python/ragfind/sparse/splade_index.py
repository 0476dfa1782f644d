"""``SparseVectorIndex``: learned sparse vectors (SPLADE) on the C++ inverted-index engine.

Posting lists use the BM25 index's segment layout and the shared MaxScore / exhaustive query
algorithms (``cpp/include/ragfind/inverted/maxscore.hpp``); each posting stores a quantised
impact ``round(weight * scale)`` (Anserini's convention for SPLADE, scale 100), or the exact
float32 weight with ``scale=0``. Scores are dot products of the (float) query weights with the
dequantised document weights. In quantised mode a list covering >= 1/4 of a segment is also
kept as a dense uint16 column (2 bytes per document of that segment), which the term-at-a-time
scorer adds with a SIMD loop; results are bit-identical to the plain posting scorer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ragfind import _core
from ragfind.models.splade import SparseEmbeddings
from ragfind.persist.sectioned import SectionedFile, write_sectioned

__all__ = ["SparseVectorIndex", "SparseTermMatch"]

_MAGIC = b"RFSPARSE"
_VERSION = 1
_ALGORITHMS = ("auto", "maxscore", "taat", "exhaustive")
# search_batch pads every row to k; past this many entries a k above the index size is an error.
_MAX_PADDED_ENTRIES = 1 << 24


@dataclass
class SparseTermMatch:
    """One shared term's part in a score: query weight x document weight = contribution."""

    term_id: int
    term: str | None
    query_weight: float
    doc_weight: float
    contribution: float
    expansion: bool | None = None  # True when the term is not in the query text (needs the text)


def _csr(vectors, dim: int, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalises the accepted sparse inputs to CSR (indptr int64, indices, values float32)."""
    if isinstance(vectors, SparseEmbeddings):
        if vectors.dim != dim:
            raise ValueError(f"{what} have dim {vectors.dim}, expected {dim} (the index's vocabulary size)")
        return vectors.indptr, vectors.indices, vectors.values
    if hasattr(vectors, "tocsr") and hasattr(vectors, "shape"):  # scipy.sparse
        m = vectors.tocsr()
        if m.shape[1] != dim:
            raise ValueError(f"{what} have {m.shape[1]} columns, expected {dim}")
        m = m.copy()
        m.sum_duplicates()
        m.sort_indices()
        return m.indptr.astype(np.int64), m.indices, np.asarray(m.data, dtype=np.float32)
    if isinstance(vectors, (list, tuple)):
        indptr, idx, val = [0], [], []
        for i, v in enumerate(vectors):
            if isinstance(v, dict):
                keys = np.fromiter(v.keys(), dtype=np.int64, count=len(v))
                vals = np.fromiter(v.values(), dtype=np.float64, count=len(v))
            elif isinstance(v, tuple) and len(v) == 2:
                keys, vals = np.asarray(v[0]), np.asarray(v[1], dtype=np.float64)
                if keys.ndim != 1 or vals.shape != keys.shape:
                    raise ValueError(
                        f"{what}[{i}]: (indices, values) must be two 1-D arrays of the same length"
                    )
                if keys.size and keys.dtype.kind not in "iu":
                    raise TypeError(f"{what}[{i}]: indices must be integers, got dtype {keys.dtype}")
            else:
                raise TypeError(f"{what}[{i}] must be a dict term_id -> weight or an (indices, values) tuple")
            order = np.argsort(keys, kind="stable")
            keys, vals = keys[order].astype(np.int64), vals[order]
            if keys.size > 1 and np.any(np.diff(keys) == 0):
                raise ValueError(f"{what}[{i}] has duplicate term ids")
            idx.append(keys)
            val.append(vals)
            indptr.append(indptr[-1] + len(keys))
        indices = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        values = np.concatenate(val).astype(np.float32) if val else np.zeros(0, np.float32)
        return np.asarray(indptr, dtype=np.int64), indices, values
    raise TypeError(
        f"{what} must be SparseEmbeddings, a scipy.sparse matrix, or a list of dicts / "
        "(indices, values) tuples; "
        f"got {type(vectors).__name__}"
    )


class SparseVectorIndex:
    """An inverted index of SPLADE-style sparse vectors with exact top-k (MaxScore pruning).

    Args:
        dim: vocabulary size (term ids must be < dim); taken from ``encoder`` when given.
        scale: impact quantisation: a document weight w is stored as round(w * scale) (weights
            below 0.5 / scale are dropped); 0 stores exact float32 weights.
        encoder: optional ``SpladeEncoder`` so that texts can be added and searched directly.
    Raises ValueError on a bad dim/scale.

    Documents get ids 0, 1, 2, ... in the order they are added. Searches may run from many
    threads at once (the GIL is released); adding takes an exclusive lock.
    """

    def __init__(self, dim: int | None = None, *, scale: float = 100.0, encoder=None):
        if dim is None:
            if encoder is None:
                raise ValueError("dim is required without an encoder (the vocabulary size, e.g. 30522)")
            dim = encoder.vocab_size
        if encoder is not None and encoder.vocab_size != dim:
            raise ValueError(f"dim={dim} does not match the encoder's vocabulary size {encoder.vocab_size}")
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if not isinstance(scale, (int, float)) or not np.isfinite(scale) or scale < 0:
            raise ValueError(f"scale must be a finite number >= 0 (0: exact float32), got {scale!r}")
        self._index = _core.SparseImpactIndex(int(dim), float(scale))
        self.encoder = encoder
        self._write_lock = threading.Lock()

    @property
    def dim(self) -> int:
        """Vocabulary size."""
        return int(self._index.dim)

    @property
    def scale(self) -> float:
        """Impact quantisation scale (0: exact float32)."""
        return float(self._index.scale)

    def __len__(self) -> int:
        return int(self._index.num_docs)

    @property
    def num_postings(self) -> int:
        """Number of stored (term, document) impacts."""
        return int(self._index.num_postings)

    # ----------------------------------------------------------------- building
    def add(self, vectors) -> np.ndarray:
        """Appends sparse document vectors; returns their int64 ids.

        ``vectors``: SparseEmbeddings (from SpladeEncoder), a scipy.sparse matrix with ``dim``
        columns, or a list of ``{term_id: weight}`` dicts / ``(indices, values)`` tuples.
        Weights must be finite and >= 0. The batch is validated as a whole first: on error
        nothing is added. Raises TypeError/ValueError naming the row and term.
        """
        indptr, indices, values = _csr(vectors, self.dim, "vectors")
        with self._write_lock:
            start = len(self)
            self._index.add(indptr, indices, values)
            return np.arange(start, start + len(indptr) - 1, dtype=np.int64)

    def add_texts(self, texts, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        """Encodes texts with the index's encoder and adds them; returns their ids."""
        return self.add(
            self._need_encoder().encode(texts, batch_size=batch_size, show_progress=show_progress)
        )

    def _need_encoder(self):
        if self.encoder is None:
            raise ValueError(
                "this index has no encoder: pass encoder=SpladeEncoder(...) or give sparse vectors"
            )
        return self.encoder

    # ----------------------------------------------------------------- querying
    def _queries(self, queries, what="queries"):
        if isinstance(queries, str):
            raise TypeError(f"{what} must be a list; wrap a single query in a list or use search()")
        if isinstance(queries, (list, tuple)) and queries and all(isinstance(q, str) for q in queries):
            return _csr(self._need_encoder().encode(list(queries)), self.dim, what)
        return _csr(queries, self.dim, what)

    def search(self, query, k: int = 10, *, algorithm: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents for one query: (ids int64, scores float32), best first.

        ``query``: a text (needs the encoder), a ``{term_id: weight}`` dict, an ``(indices,
        values)`` tuple, or a one-row SparseEmbeddings. Documents sharing no term with the
        query are not returned (so fewer than k may come back). ``algorithm``: "auto"
        (term at a time over the dense columns and postings; MaxScore only for short lists on
        segments over 65,536 documents), "maxscore" (document at a time), "taat" (term-at-a-time
        MaxScore) or "exhaustive" (every posting, the reference); all exact, same results.
        """
        if isinstance(query, SparseEmbeddings):
            if len(query) != 1:
                raise ValueError(f"search takes one query; got {len(query)} rows (use search_batch)")
            batch = query
        else:
            batch = [query] if not isinstance(query, str) else [query]
        ids, scores = self.search_batch(batch, k, algorithm=algorithm)
        keep = ids[0] >= 0
        return ids[0][keep], scores[0][keep]

    def search_batch(
        self, queries, k: int = 10, *, n_threads: int | None = None, algorithm: str = "auto"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k for many queries in parallel: (ids int64 (nq, k), scores float32 (nq, k)).

        Rows with fewer than k matching documents are padded with id -1 and score -inf.
        ValueError when k exceeds the number of documents and the padded output would hold more
        than 2**24 entries (a k of 10**7 would otherwise allocate gigabytes of padding).
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm={algorithm!r}: expected one of {_ALGORITHMS}")
        indptr, indices, values = self._queries(queries)
        nq = len(indptr) - 1
        if k > len(self) and nq * int(k) > _MAX_PADDED_ENTRIES:
            raise ValueError(
                f"k={k} exceeds the {len(self)} documents in the index and the padded ({nq}, {k}) "
                f"output would hold {nq * int(k):,} entries; pass k <= len(index)"
            )
        return self._index.search_batch(indptr, indices, values, int(k), n_threads or 0, algorithm)

    def score(self, query) -> np.ndarray:
        """Dot product of one query with every document (float32 (len(self),))."""
        indptr, indices, values = self._queries(
            [query] if not isinstance(query, SparseEmbeddings) else query, "query"
        )
        if len(indptr) != 2:
            raise ValueError("score takes one query")
        return self._index.score_all(indices, values)

    def explain(self, query, doc_id: int) -> list[SparseTermMatch]:
        """The terms query and document share, by contribution (query weight x doc weight).

        With a text query and an encoder, terms carry their vocabulary string and whether they
        are expansion terms (not among the query's own word pieces).
        """
        text = query if isinstance(query, str) else None
        indptr, indices, values = self._queries(
            [query] if not isinstance(query, SparseEmbeddings) else query, "query"
        )
        if (
            isinstance(doc_id, bool)
            or not isinstance(doc_id, (int, np.integer))
            or not 0 <= doc_id < len(self)
        ):
            raise IndexError(f"doc_id {doc_id!r} is not a document id (index has {len(self)} documents)")
        terms = np.asarray(indices, dtype=np.uint32)
        doc_w = self._index.weights(terms, int(doc_id))
        own = set(self.encoder.tokenizer.encode(text).ids) if (text is not None and self.encoder) else None
        out = []
        for t, qw, dw in zip(terms, values, doc_w):
            if dw > 0 and qw > 0:
                name = self.encoder.term(int(t)) if self.encoder is not None else None
                out.append(
                    SparseTermMatch(
                        int(t),
                        name,
                        float(qw),
                        float(dw),
                        float(qw) * float(dw),
                        None if own is None else int(t) not in own,
                    )
                )
        out.sort(key=lambda m: -m.contribution)
        return out

    # ----------------------------------------------------------------- persistence
    def save(self, path) -> None:
        """Writes the index atomically (one merged segment; CRC32 per section)."""
        offsets, docs, stored = self._index.export_arrays()
        header = {"dim": self.dim, "scale": self.scale, "n_docs": len(self), "n_postings": int(len(docs))}
        write_sectioned(path, _MAGIC, _VERSION, header, {"offsets": offsets, "docs": docs, "impacts": stored})

    @classmethod
    def load(cls, path, *, mmap: bool = True, verify: bool = True, encoder=None) -> SparseVectorIndex:
        """Loads a saved index (posting arrays memory-mapped with ``mmap``).

        Magic, version, header, section bounds and the postings themselves (monotone offsets,
        doc ids in range and sorted, valid impacts) are always checked; ``verify`` also checks
        the CRC32s. Raises ValueError on a corrupt, truncated or foreign file.
        """
        f = SectionedFile(path, _MAGIC, _VERSION, "sparse index")
        dim, n_docs, n_post = f.field("dim", int), f.field("n_docs", int), f.field("n_postings", int)
        scale = f.field("scale", float)
        if dim <= 0 or n_docs < 0 or n_post < 0 or not np.isfinite(scale) or scale < 0:
            raise ValueError(f"{path}: corrupt header (dim={dim}, n_docs={n_docs}, scale={scale})")
        offsets = f.array("offsets", "<u8", (dim + 1,), mmap=mmap, verify=verify)
        docs = f.array("docs", "<u4", (n_post,), mmap=mmap, verify=verify)
        stored = f.array("impacts", "<u4", (n_post,), mmap=mmap, verify=verify)
        index = cls(dim, scale=scale, encoder=encoder)
        index._index.install(n_docs, offsets, docs, stored)
        return index

    def __repr__(self) -> str:
        return (
            f"SparseVectorIndex(n_docs={len(self)}, dim={self.dim}, scale={self.scale}, "
            f"postings={self.num_postings})"
        )
