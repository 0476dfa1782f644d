"""``SparseVectorIndex``: learned sparse vectors (SPLADE) on the C++ inverted-index engine.

Posting lists use the BM25 index's segment layout and the shared MaxScore / exhaustive query
algorithms (``cpp/include/ragfind/inverted/maxscore.hpp``); each posting stores a quantised
impact ``round(weight * scale)`` (Anserini's convention for SPLADE, scale 100), or the exact
float32 weight with ``scale=0``. Scores are dot products of the (float) query weights with the
dequantised document weights. In quantised mode a list covering >= 1/4 of a segment is also
kept as a dense uint16 column (2 bytes per document of that segment), which the term-at-a-time
scorer adds with a SIMD loop; results are bit-identical to the plain posting scorer.

With ``exact=True`` (the default) the index also keeps every document's float vector and
re-scores the quantised top candidates with it, growing the candidate pool until a bound on the
quantisation error proves that no other document can enter: results and scores are the exact
float dot-product top-k. ``query_cut`` (opt-in) is an approximate mode in the style of Seismic:
candidates come from the query's largest weights only, re-scored with the whole query.

Ids (int or str) live here; the C++ index numbers documents by row. Deletes are tombstones in
the C++ index that every scorer skips, and a filter is compiled once per write generation into
a byte mask over the rows that the scorers also skip, so a filtered search is the unfiltered
ranking restricted to the allowed ids, without over-fetching.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ragfind import _core
from ragfind.errors import IndexFileError, check_k
from ragfind.ids import IdFilter, IdMap, as_id_filter
from ragfind.index import Contribution, Explanation, check_threads, old_spellings, pairs_from_padded
from ragfind.persist.sectioned import SectionedFile, refuse_old_version, write_sectioned
from ragfind.sparse.vectors import SparseEmbeddings

__all__ = ["SparseVectorIndex", "SparseTermMatch"]

_MAGIC = b"RFSPARSE"
_VERSION = 3  # 2: ids, deleted documents left out; 3: float vectors for exact re-scoring
_READS = (2, 3)
_ALGORITHMS = ("auto", "maxscore", "taat", "exhaustive")


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
            elif isinstance(v, SparseEmbeddings):  # what search() takes, one row
                if len(v) != 1 or v.dim != dim:
                    raise ValueError(
                        f"{what}[{i}]: a SparseEmbeddings item must be one row of dim {dim}, "
                        f"got {len(v)} rows of dim {v.dim}"
                    )
                keys, vals = np.asarray(v.indices), np.asarray(v.values, dtype=np.float64)
            elif isinstance(v, tuple) and len(v) == 2:
                keys, vals = np.asarray(v[0]), np.asarray(v[1], dtype=np.float64)
                if keys.ndim != 1 or vals.shape != keys.shape:
                    raise ValueError(
                        f"{what}[{i}]: (indices, values) must be two 1-D arrays of the same length"
                    )
                if keys.size and keys.dtype.kind not in "iu":
                    raise TypeError(f"{what}[{i}]: indices must be integers, got dtype {keys.dtype}")
            else:
                raise TypeError(
                    f"{what}[{i}] must be a dict term_id -> weight, an (indices, values) tuple "
                    "or a one-row SparseEmbeddings"
                )
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


def _file_version(path) -> int:
    """The file's version when it is one this ragfind reads (else the current one, so that
    SectionedFile reports the mismatch)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError:
        return _VERSION  # SectionedFile raises the OSError
    if len(head) == 12 and head[:8] == _MAGIC:
        v = int.from_bytes(head[8:12], "little")
        if v in _READS:
            return v
    return _VERSION


class SparseVectorIndex:
    """An inverted index of SPLADE-style sparse vectors with exact top-k (MaxScore pruning).

    Args:
        dim: vocabulary size (term ids must be < dim); taken from ``encoder`` when given.
        scale: impact quantisation: a document weight w is stored as round(w * scale) (weights
            below 0.5 / scale are dropped); 0 stores exact float32 weights.
        encoder: optional ``SpladeEncoder`` so that texts can be added and searched directly.
        exact: with ``scale > 0``, also keep the float vectors (8 bytes per posting) and return
            the exact float top-k and scores (quantised candidates re-scored, with a proven
            error bound); False: the quantised ranking and scores (less memory).
    Raises ValueError on a bad dim/scale.

    Documents have ids, all int or all str (``add(vectors, ids=None)``: by default consecutive
    ints after the largest int id so far). ``delete`` removes documents; ``search`` takes a
    ``filter`` of allowed ids. Searches may run from many threads at once (the GIL is
    released); adding and deleting take an exclusive lock.
    """

    def __init__(self, dim: int | None = None, *, scale: float = 100.0, encoder=None, exact: bool = True):
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
        if not isinstance(exact, (bool, np.bool_)):
            raise TypeError(f"exact must be a bool, got {type(exact).__name__}")
        self._index = _core.SparseImpactIndex(int(dim), float(scale), bool(exact))
        self.encoder = encoder
        self._ids = IdMap()
        self._write_lock = threading.Lock()

    @property
    def dim(self) -> int:
        """Vocabulary size."""
        return int(self._index.dim)

    @property
    def scale(self) -> float:
        """Impact quantisation scale (0: exact float32)."""
        return float(self._index.scale)

    @property
    def exact(self) -> bool:
        """True when results are exact float dot products (float32 postings, or quantised
        candidates re-scored with the stored float vectors)."""
        return self.scale == 0 or bool(self._index.exact)

    def __len__(self) -> int:
        """Live (not deleted) documents."""
        return self._ids.n_live

    def __contains__(self, id_: object) -> bool:
        return id_ in self._ids

    @property
    def ids(self) -> np.ndarray:
        """The live ids in insertion order (int64, or an object array of str)."""
        return self._ids.live_ids()

    @property
    def id_kind(self) -> str | None:
        """ "int", "str", or None while the index has never held a document."""
        return self._ids.kind

    @property
    def num_postings(self) -> int:
        """Number of stored (term, document) impacts (deleted documents' included until saved)."""
        return int(self._index.num_postings)

    @property
    def generation(self) -> int:
        """Write counter (every add and delete bumps it); compiled filters are keyed by it."""
        return int(self._index.generation)

    # ----------------------------------------------------------------- building
    @old_spellings(renamed={"vectors": "items"})
    def add(self, items, ids=None) -> np.ndarray:
        """Adds sparse document vectors under ``ids``; returns the ids added.

        ``items``: SparseEmbeddings (from SpladeEncoder), a scipy.sparse matrix with ``dim``
        columns, or a list of ``{term_id: weight}`` dicts / ``(indices, values)`` tuples.
        Weights must be finite and >= 0. ``ids``: one int or str per vector (all one kind,
        the index's), or None for consecutive ints after the largest int id so far.
        The batch is validated as a whole first: on error nothing is added. Raises
        TypeError/ValueError naming the row and term, IdKindError, DuplicateIdError.
        """
        indptr, indices, values = _csr(items, self.dim, "vectors")
        n = len(indptr) - 1
        with self._write_lock:
            new, kind = self._ids.check_new(ids, n)
            if n:
                self._index.add(indptr, indices, values)
                self._ids.commit_add(new, kind)
            return new

    def add_texts(self, texts, ids=None, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        """Encodes texts with the index's encoder and adds them under ``ids``; returns the ids."""
        return self.add(
            self._need_encoder().encode(texts, batch_size=batch_size, show_progress=show_progress), ids
        )

    def delete(self, ids) -> None:
        """Deletes documents by id (one id or a collection); all or nothing.

        Raises UnknownIdError (a KeyError) for an id not in the index, DuplicateIdError for an
        id given twice. Deleted documents are skipped by every search (tombstones) and left
        out of saved files.
        """
        with self._write_lock:
            rows, items = self._ids.rows_of(ids, "ids", unique=True)
            if len(rows):
                self._index.remove(rows)
                self._ids.commit_delete(rows, items)

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

    def _compile(self, flt: IdFilter) -> tuple[int, np.ndarray]:
        with self._write_lock:  # the generation and the id map of one state
            return self.generation, self._ids.compile_mask(flt)

    def search(
        self,
        query,
        k: int = 10,
        filter=None,  # noqa: A002 - the API's name
        *,
        threads: int | None = None,
        algorithm: str = "auto",
        query_cut: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k documents for one query: (ids, scores float32), best first.

        ``query``: a text (needs the encoder), a ``{term_id: weight}`` dict, an ``(indices,
        values)`` tuple, or a one-row SparseEmbeddings. Documents sharing no term with the
        query are not returned (so fewer than k may come back). ``filter``: None, an
        :class:`ragfind.ids.IdFilter` or any collection of ids: only those documents are
        ranked (ids the index does not hold are ignored). ``algorithm``: "auto" (term at a
        time over the dense columns and postings; MaxScore only for short lists on segments
        over 65,536 documents), "maxscore" (document at a time), "taat" (term-at-a-time
        MaxScore) or "exhaustive" (every posting, the reference); all exact, same results.
        ``query_cut``: None (exact) or a number of query terms: approximate search, candidates
        from the query's ``query_cut`` largest weights only (fewer lists read), re-scored with
        the whole query when the index is exact; smaller is faster and loses more.
        ``threads``: worker threads for the query's lists (None or 0: one per core).
        Ids are int64 (an object array for str ids).
        """
        if isinstance(query, SparseEmbeddings):
            if len(query) != 1:
                raise ValueError(f"search takes one query; got {len(query)} rows (use search_batch)")
            batch = query
        else:
            batch = [query]
        padded = self.search_batch_padded(
            batch, k, filter, threads=threads, algorithm=algorithm, query_cut=query_cut
        )
        return pairs_from_padded(*padded)[0]

    @old_spellings(renamed={"n_threads": "threads"}, positional=("threads",))
    def search_batch(
        self,
        queries,
        k: int = 10,
        filter=None,  # noqa: A002 - the API's name
        *,
        threads: int | None = None,
        algorithm: str = "auto",
        query_cut: int | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` for many queries in parallel: one ``(ids, scores)`` per query, in
        order, each equal to what :meth:`search` returns for that query.

        ``filter`` as in :meth:`search`, compiled once per index state. ``threads``: worker
        threads (None or 0: one per core; ``n_threads`` is its deprecated older name).
        ``query_cut`` as in :meth:`search`. :meth:`search_batch_padded` gives the same as
        padded (nq, k) arrays.
        """
        return pairs_from_padded(
            *self.search_batch_padded(
                queries, k, filter, threads=threads, algorithm=algorithm, query_cut=query_cut
            )
        )

    @old_spellings(renamed={"n_threads": "threads"})
    def search_batch_padded(
        self,
        queries,
        k: int = 10,
        filter=None,  # noqa: A002 - the API's name
        *,
        threads: int | None = None,
        algorithm: str = "auto",
        query_cut: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k for many queries in parallel: (ids (nq, k'), scores float32 (nq, k')), with
        k' = min(k, len(self)).

        Rows with fewer than k' matching documents are padded with score -inf and id -1 (None
        for str ids). ``filter`` as in :meth:`search`, compiled once per index state.
        ``threads``: worker threads (None or 0: one per core; ``n_threads`` is its deprecated
        older name). ``query_cut`` as in :meth:`search`.
        """
        k = check_k(k, len(self))  # k' = min(k, len(self)) anyway; the binding takes an int64
        if query_cut is None:
            cut = 0
        elif isinstance(query_cut, bool) or not isinstance(query_cut, (int, np.integer)) or query_cut < 1:
            raise ValueError(f"query_cut must be None (exact) or an integer >= 1, got {query_cut!r}")
        else:
            cut = int(query_cut)
        if algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm={algorithm!r}: expected one of {_ALGORITHMS}")
        threads = check_threads(threads)
        flt = as_id_filter(filter)
        indptr, indices, values = self._queries(queries)
        while True:
            if flt is None:
                allowed, generation = None, -1
            else:
                generation, allowed = flt.compiled(self, self.generation, self._compile)
            res = self._index.search_batch(
                indptr, indices, values, k, int(threads), algorithm, allowed, generation, cut
            )
            if res is not None:  # None: the index changed since the filter was compiled
                break
        rows, scores = res
        return self._ids.result_ids(rows), scores

    def score(self, query, ids=None, *, threads: int | None = None) -> np.ndarray:
        """Dot product of one query with the documents ``ids`` (default: every live document,
        in :attr:`ids` order), float32. UnknownIdError for an id not in the index.
        ``threads`` is checked (None or an int >= 0): one query is scored on one thread."""
        check_threads(threads)
        indptr, indices, values = self._queries(
            [query] if not isinstance(query, SparseEmbeddings) else query, "query"
        )
        if len(indptr) != 2:
            raise ValueError("score takes one query")
        if ids is None:
            rows = np.flatnonzero(self._ids.live)
        else:
            rows, _ = self._ids.rows_of(ids, "ids")
        return self._index.score_all(indices, values)[rows]

    @old_spellings(renamed={"doc_id": "id"})
    def explain(self, query, id) -> Explanation:  # noqa: A002 - the protocol's name
        """Why ``id`` scores what it does for ``query``: an :class:`~ragfind.index.Explanation`
        of kind ``"splade"`` with one contribution per term the query and the document share,
        largest first (name the vocabulary string, else the term id; value query weight x
        document weight; ``detail`` with ``term_id``, ``term``, ``query_weight``,
        ``doc_weight`` and ``expansion``), and ``detail`` with ``scale`` and ``exact``.

        With a text query and an encoder, terms carry their vocabulary string and whether they
        are expansion terms (not among the query's own word pieces). UnknownIdError for an id
        not in the index.
        """
        text = query if isinstance(query, str) else None
        indptr, indices, values = self._queries(
            [query] if not isinstance(query, SparseEmbeddings) else query, "query"
        )
        if isinstance(id, (list, tuple, np.ndarray)):
            raise TypeError(f"doc_id must be one id, got {type(id).__name__}")
        rows, _ = self._ids.rows_of(id, "doc_id")
        terms = np.asarray(indices, dtype=np.uint32)
        doc_w = self._index.weights(terms, int(rows[0]))
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
        parts = tuple(
            Contribution(
                m.term if m.term is not None else str(m.term_id),
                m.contribution,
                {
                    "term_id": m.term_id,
                    "term": m.term,
                    "query_weight": m.query_weight,
                    "doc_weight": m.doc_weight,
                    "expansion": m.expansion,
                },
            )
            for m in out
        )
        total = float(np.sum([m.contribution for m in out], dtype=np.float64))
        detail = {"scale": self.scale, "exact": self.exact}
        return Explanation("splade", id, total, parts, detail, _legacy=out)

    # ----------------------------------------------------------------- persistence
    def save(self, path) -> None:
        """Writes the live documents and their ids atomically (one merged segment, deleted
        documents left out; CRC32 per section)."""
        with self._write_lock:
            offsets, docs, stored = self._index.export_arrays()
            exact = bool(self._index.exact)
            header = {
                "dim": self.dim,
                "scale": self.scale,
                "n_docs": len(self),
                "n_postings": int(len(docs)),
                "exact": exact,
                **self._ids.header(),
            }
            sections = {"offsets": offsets, "docs": docs, "impacts": stored, **self._ids.sections()}
            if exact:
                f_indptr, f_terms, f_values = self._index.export_forward()
                header["n_weights"] = int(len(f_terms))
                sections.update({"fwd_indptr": f_indptr, "fwd_terms": f_terms, "fwd_values": f_values})
        write_sectioned(path, _MAGIC, _VERSION, header, sections)

    @classmethod
    def load(cls, path, *, mmap: bool = True, verify: bool = True, encoder=None) -> SparseVectorIndex:
        """Loads a saved index (posting arrays memory-mapped with ``mmap``).

        Magic, version, header, section bounds, the ids and the postings themselves (monotone
        offsets, doc ids in range and sorted, valid impacts) are always checked; ``verify``
        also checks the CRC32s. Raises IndexFileError (a ValueError) on a corrupt, truncated,
        foreign (another index's) or older-version file; OSError if it cannot be read.
        Version 2 files (no float vectors) load with ``exact`` off: quantised results.
        """
        refuse_old_version(
            path, _MAGIC, 1, _VERSION, "a sparse index file", "rebuild the index from its vectors"
        )
        try:
            f = SectionedFile(path, _MAGIC, _file_version(path), "sparse index")
            dim, n_docs, n_post = f.field("dim", int), f.field("n_docs", int), f.field("n_postings", int)
            scale = f.field("scale", float)
            if (
                dim <= 0
                or dim >= 2**32
                or not 0 <= n_docs < 2**32
                or n_post < 0
                or not np.isfinite(scale)
                or scale < 0
            ):
                raise IndexFileError(f"{path}: corrupt header (dim={dim}, n_docs={n_docs}, scale={scale})")
            ids = IdMap.from_file(f, n_docs)
            offsets = f.array("offsets", "<u8", (dim + 1,), mmap=mmap, verify=verify)
            docs = f.array("docs", "<u4", (n_post,), mmap=mmap, verify=verify)
            stored = f.array("impacts", "<u4", (n_post,), mmap=mmap, verify=verify)
            exact = f.header.get("exact", False) is True and scale > 0
            index = cls(dim, scale=scale, encoder=encoder, exact=False)
            index._index.install(n_docs, offsets, docs, stored)
            if exact:
                n_w = f.field("n_weights", int)
                if n_w < 0:
                    raise IndexFileError(f"{path}: corrupt header (n_weights={n_w})")
                index._index.install_forward(
                    f.array("fwd_indptr", "<u8", (n_docs + 1,), mmap=mmap, verify=verify),
                    f.array("fwd_terms", "<u4", (n_w,), mmap=mmap, verify=verify),
                    f.array("fwd_values", "<f4", (n_w,), mmap=mmap, verify=verify),
                )
        except IndexFileError:
            raise
        except ValueError as exc:  # the container's and the posting checks' errors
            raise IndexFileError(str(exc)) from None
        index._ids = ids
        return index

    def __repr__(self) -> str:
        return (
            f"SparseVectorIndex(n_docs={len(self)}, dim={self.dim}, scale={self.scale}, "
            f"exact={self.exact}, postings={self.num_postings}, ids={self.id_kind})"
        )
