"""Late interaction (ColBERT-style MaxSim): the functional kernel and a packed token index.

``score(q, d) = sum_i max_j <q_i, d_j>`` over the query's token vectors ``q_i`` and the
document's token vectors ``d_j``. The kernel runs in C++ (register-tiled, AVX2/AVX-512
dispatched at run time, multi-threaded, GIL released); this module validates inputs, packs
documents contiguously and handles ids, deletes, filters, persistence and candidate generation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from ragfind import _core
from ragfind.errors import IndexFileError, check_k
from ragfind.ids import IdFilter, IdMap, as_id_filter
from ragfind.index import Contribution, Explanation, check_dim, check_threads, old_spellings
from ragfind.persist.sectioned import SectionedFile, refuse_old_version, write_sectioned

__all__ = ["maxsim", "LateInteractionIndex", "MaxSimExplanation", "TokenMatch"]

from ragfind.late.maxsim import _DTYPES, MaxSimExplanation, TokenMatch, _as_doc, _as_query, maxsim  # noqa: E402,F401

_MAGIC = b"RFLATE\x00\x01"
_VERSION = 2  # 2: ids, deleted documents left out


class LateInteractionIndex:
    """Token embeddings of many documents packed contiguously, scored by MaxSim.

    Documents have ids, all int or all str (``add(documents, ids=None)``: by default
    consecutive ints after the largest int id so far). Token vectors are stored as one
    (total_tokens, dim) array (float32 or float16) plus ``offsets``, one row of storage per
    document in insertion order, so a document is a zero-copy slice; saved indexes load with
    ``mmap``. :meth:`delete` marks documents deleted; once the deleted documents hold more
    than ``compact_fraction`` of the stored tokens the storage is compacted (rewritten without
    them, the old arrays released).

    Candidate generation for large corpora follows PLAID: :meth:`build_centroids` clusters the
    token vectors (spherical k-means), keeps each token's centroid code and an inverted list
    centroid -> documents. :meth:`search` then probes the centroids nearest to each query
    token, ranks the union of their documents by the centroid-approximated MaxSim, and
    re-ranks the best ``n_rerank`` exactly. Without centroids, :meth:`search` is exhaustive.
    """

    #: Compact the storage once deleted documents hold more than this share of the tokens.
    compact_fraction = 0.25

    def __init__(self, dim: int, dtype: str = "float32"):
        """Create an empty index of ``dim``-dimensional token vectors stored as ``dtype``.

        Raises ValueError on a dim outside [1, 65,536] (``ragfind.index.MAX_DIM``) or a dtype
        other than "float32"/"float16".
        """
        dim = check_dim(dim)
        if str(dtype) not in _DTYPES:
            raise ValueError(f"dtype must be 'float32' or 'float16', got {dtype!r}")
        self._dim = int(dim)
        self._dtype = _DTYPES[str(dtype)]
        self._tokens = np.zeros((0, self._dim), dtype=self._dtype)
        self._offsets = np.zeros(1, dtype=np.int64)
        self._pending: list[np.ndarray] = []
        self._pending_lengths: list[int] = []
        self._ids = IdMap()
        self._dead_tokens = 0
        self._generation = 0
        self._live_cache: tuple | None = None
        self._lock = threading.RLock()
        self._centroids: np.ndarray | None = None
        self._codes: np.ndarray | None = None
        self._ivf_offsets: np.ndarray | None = None
        self._ivf_docs: np.ndarray | None = None

    # ----------------------------------------------------------------- properties
    @property
    def dim(self) -> int:
        """Dimension of the token vectors."""
        return self._dim

    @property
    def dtype(self) -> str:
        """Storage dtype of the token vectors ("float32" or "float16")."""
        return self._dtype.name

    def __len__(self) -> int:
        """Live (not deleted) documents."""
        return self._ids.n_live

    def __contains__(self, id_: object) -> bool:
        return id_ in self._ids

    @property
    def ids(self) -> np.ndarray:
        """The live ids in insertion order (int64, or an object array of str)."""
        with self._lock:
            return self._ids.live_ids()

    @property
    def id_kind(self) -> str | None:
        """ "int", "str", or None while the index has never held a document."""
        return self._ids.kind

    @property
    def generation(self) -> int:
        """Write counter (every add, delete and compaction bumps it); compiled filters use it."""
        return self._generation

    @property
    def n_tokens(self) -> int:
        """Number of token vectors of the live documents."""
        return int(self._offsets[-1]) + sum(self._pending_lengths) - self._dead_tokens

    @property
    def has_centroids(self) -> bool:
        """True once :meth:`build_centroids` ran (and no document was added since)."""
        return self._centroids is not None

    def _flush(self) -> None:
        if not self._pending:
            return
        with self._lock:
            lengths = np.asarray(self._pending_lengths, dtype=np.int64)
            new_offsets = self._offsets[-1] + np.cumsum(lengths)
            self._tokens = np.concatenate([self._tokens, *self._pending], axis=0)
            self._offsets = np.concatenate([self._offsets, new_offsets])
            self._pending, self._pending_lengths = [], []

    @property
    def tokens(self) -> np.ndarray:
        """The packed (stored_tokens, dim) token matrix (read-only view). Storage order: one
        block per document in insertion order, deleted documents included until compaction."""
        with self._lock:
            self._flush()
            view = self._tokens.view()
        view.flags.writeable = False
        return view

    @property
    def offsets(self) -> np.ndarray:
        """int64 (stored documents + 1,): storage row ``r`` owns ``tokens[offsets[r]:offsets[r + 1]]``
        (rows as in :attr:`tokens`)."""
        with self._lock:
            self._flush()
            view = self._offsets.view()
        view.flags.writeable = False
        return view

    # ----------------------------------------------------------------- building
    @old_spellings(renamed={"documents": "items"})
    def add(self, items, ids=None) -> np.ndarray:
        """Append documents (``items``), each a (tokens, dim) float array, under ``ids``; returns the ids.

        ``ids``: one int or str per document (all one kind, the index's), or None for
        consecutive ints after the largest int id so far. All documents and ids are validated
        before any is stored (dim, non-empty, finite), so a bad batch changes nothing. Adding
        documents drops the centroids (rebuild them). Raises TypeError/ValueError naming the
        offending document, IdKindError, DuplicateIdError.
        """
        documents = items
        if isinstance(documents, np.ndarray) and documents.ndim == 2:
            raise TypeError(
                "documents must be a list of (tokens, dim) arrays; wrap a single document in a list"
            )
        docs = []
        for i, d in enumerate(documents):
            a = _as_doc(d, f"documents[{i}]", self._dtype)
            if a.shape[1] != self._dim:
                raise ValueError(f"documents[{i}] has dim {a.shape[1]}, expected {self._dim}")
            bad = _core.first_non_finite(a)
            if bad >= 0:
                raise ValueError(
                    f"documents[{i}] contains a non-finite value (NaN or Inf) at token {bad // self._dim}"
                    f", dimension {bad % self._dim}"
                )
            docs.append(a)
        with self._lock:
            new, kind = self._ids.check_new(ids, len(docs))
            if docs:
                self._pending.extend(docs)
                self._pending_lengths.extend(int(d.shape[0]) for d in docs)
                self._ids.commit_add(new, kind)
                self._drop_centroids()
                self._generation += 1
        return new

    def delete(self, ids) -> None:
        """Delete documents by id (one id or a collection); all or nothing.

        Raises UnknownIdError (a KeyError) for an id not in the index, DuplicateIdError for
        an id given twice. Compacts the storage when the deleted documents hold more than
        ``compact_fraction`` of the tokens.
        """
        with self._lock:
            rows, items = self._ids.rows_of(ids, "ids", unique=True)
            if not len(rows):
                return
            self._flush()
            self._dead_tokens += int((self._offsets[rows + 1] - self._offsets[rows]).sum())
            self._ids.commit_delete(rows, items)
            self._generation += 1
            if self._dead_tokens > self.compact_fraction * int(self._offsets[-1]):
                self._compact()

    def compact(self) -> None:
        """Rewrite the storage without the deleted documents now (memory is given back)."""
        with self._lock:
            self._flush()
            if self._ids.n_live < self._ids.n_rows:
                self._compact()

    def _compact(self) -> None:
        live = self._ids.live.copy()
        lengths = np.diff(self._offsets)
        tok_mask = np.repeat(live, lengths)
        self._tokens = np.ascontiguousarray(self._tokens[tok_mask])
        self._offsets = np.concatenate([[0], np.cumsum(lengths[live])]).astype(np.int64)
        if self._centroids is not None:  # the centroids stay valid: renumber their lists
            self._codes = np.ascontiguousarray(self._codes[tok_mask])
            new_row = np.cumsum(live) - 1
            n_c = len(self._centroids)
            cent = np.repeat(np.arange(n_c), np.diff(self._ivf_offsets))
            keep = live[self._ivf_docs]
            self._ivf_docs = new_row[self._ivf_docs[keep]].astype(np.int64)
            counts = np.bincount(cent[keep], minlength=n_c)
            self._ivf_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._ids.compact()
        self._dead_tokens = 0
        self._generation += 1

    def _drop_centroids(self) -> None:
        self._centroids = self._codes = self._ivf_offsets = self._ivf_docs = None

    def document(self, doc_id) -> np.ndarray:
        """The (tokens, dim) token matrix of one document (read-only view)."""
        with self._lock:
            self._flush()
            r = int(self._ids.rows_of(doc_id, "doc_id")[0][0])
            view = self._tokens[self._offsets[r] : self._offsets[r + 1]].view()
        view.flags.writeable = False
        return view

    # ----------------------------------------------------------------- scoring
    def _live_rows(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(rows, bool mask) of the live documents, or None when none is deleted (under the lock)."""
        if self._ids.n_live == self._ids.n_rows:
            return None
        if self._live_cache is None or self._live_cache[0] != self._generation:
            mask = self._ids.live.copy()
            self._live_cache = (self._generation, (np.flatnonzero(mask), mask))
        return self._live_cache[1]

    def _compile(self, flt: IdFilter) -> tuple[np.ndarray, np.ndarray]:
        mask = self._ids.compile_mask(flt).view(bool)
        return np.flatnonzero(mask), mask

    def _score_rows(self, q: np.ndarray, tokens, offsets, rows, threads: int) -> np.ndarray:
        if len(offsets) == 1 or (rows is not None and not len(rows)):
            return np.zeros(0, dtype=np.float32)
        return _core.maxsim_packed(q, tokens, offsets, rows, threads, False)

    @old_spellings(renamed={"query_vectors": "query", "n_threads": "threads"})
    def score(self, query, ids=None, *, threads: int | None = None) -> np.ndarray:
        """MaxSim of the query against the documents ``ids`` (default: every live document,
        in :attr:`ids` order), float32, in order. ``threads``: worker threads (None or 0: one
        per core; ``n_threads`` is its deprecated older name). UnknownIdError for an id not
        in the index."""
        threads = check_threads(threads)
        q = self._query(query)
        with self._lock:
            self._flush()
            if ids is None:
                live = self._live_rows()
                rows = None if live is None else live[0]
            else:
                rows = self._ids.rows_of(ids, "ids")[0]
            tokens, offsets = self._tokens, self._offsets
        return self._score_rows(q, tokens, offsets, rows, threads)

    def _query(self, query) -> np.ndarray:
        q = _as_query(query, "query")
        if q.shape[1] != self._dim:
            raise ValueError(f"query has dim {q.shape[1]}, expected {self._dim} (the index's dim)")
        bad = _core.first_non_finite(q)
        if bad >= 0:
            raise ValueError(f"query contains a non-finite value (NaN or Inf) at token {bad // self._dim}")
        return q

    @old_spellings(renamed={"query_vectors": "query"})
    def rerank(self, query, candidate_ids, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Score the candidates exactly and return the best ``k`` (default: all).

        Returns (ids, scores float32), best first (ties: the earlier added document first).
        Duplicate candidates are scored once. Raises UnknownIdError on an id not in the index.
        """
        if k is not None:
            k = check_k(k)
        q = self._query(query)
        with self._lock:
            self._flush()
            rows = np.unique(self._ids.rows_of(candidate_ids, "candidate_ids")[0])
            tokens, offsets, row_ids = self._tokens, self._offsets, self._ids.row_ids
        scores = self._score_rows(q, tokens, offsets, rows, 0)
        top_rows, top_scores = _top_k(rows, scores, len(rows) if k is None else k)
        return self._ids_of(row_ids, top_rows), top_scores

    def _ids_of(self, row_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if not len(rows):
            return np.empty(0, dtype=object if self._ids.kind == "str" else np.int64)
        return row_ids[rows]

    @old_spellings(renamed={"query_vectors": "query", "n_probe": "nprobe"})
    def search(
        self,
        query,
        k: int = 10,
        filter=None,  # noqa: A002 - the API's name
        *,
        threads: int | None = None,
        nprobe: int | None = None,
        n_rerank: int | None = None,
        exhaustive: bool | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best documents for a query: (ids, scores float32), best first.

        ``filter``: None, an :class:`ragfind.ids.IdFilter` or any collection of ids; only
        those documents are ranked (ids the index does not hold are ignored; an IdFilter is
        compiled once per index state). Exhaustive MaxSim over every live allowed document
        unless centroids were built (or ``exhaustive=True``): then exactly min(k, allowed)
        results, the unfiltered ranking restricted to the allowed ids (ties: the earlier added
        document first). With centroids: the ``nprobe`` (default 4) nearest centroids of each
        query token select candidate documents among the allowed ones, ranked by the
        centroid-approximated MaxSim; the best ``n_rerank`` (default max(4 * k, 256)) are
        re-scored exactly. ``threads``: MaxSim worker threads (None or 0: one per core).
        ``n_probe`` is the deprecated older name of ``nprobe``.
        """
        nprobe = 4 if nprobe is None else nprobe
        k = check_k(k, len(self))
        threads = check_threads(threads)
        q = self._query(query)
        flt = as_id_filter(filter)
        with self._lock:
            self._flush()
            use_exhaustive = not self.has_centroids if exhaustive is None else exhaustive
            if not use_exhaustive and not self.has_centroids:
                raise ValueError("exhaustive=False needs centroids: call build_centroids() first")
            allowed = (
                self._live_rows() if flt is None else flt.compiled(self, self._generation, self._compile)
            )
            tokens, offsets, row_ids = self._tokens, self._offsets, self._ids.row_ids
            ivf = (self._centroids, self._codes, self._ivf_offsets, self._ivf_docs)
        n_allowed = len(offsets) - 1 if allowed is None else len(allowed[0])
        if n_allowed == 0:
            return self._ids_of(row_ids, np.zeros(0, np.int64)), np.zeros(0, dtype=np.float32)
        if use_exhaustive:
            rows = np.arange(len(offsets) - 1, dtype=np.int64) if allowed is None else allowed[0]
            scores = self._score_rows(q, tokens, offsets, None if allowed is None else rows, threads)
        else:
            mask = None if allowed is None else allowed[1]
            cand = _candidate_rows(q, offsets, ivf, mask, nprobe, n_rerank or max(4 * k, 256))
            rows = np.sort(cand)
            scores = self._score_rows(q, tokens, offsets, rows, threads)
        top_rows, top_scores = _top_k(rows, scores, k)
        return self._ids_of(row_ids, top_rows), top_scores

    # ----------------------------------------------------------------- PLAID-style candidates

    @old_spellings(renamed={"n_probe": "nprobe"})
    def search_batch(
        self,
        queries: Sequence,
        k: int = 10,
        filter=None,  # noqa: A002 - the API's name
        *,
        threads: int | None = None,
        nprobe: int | None = None,
        n_rerank: int | None = None,
        exhaustive: bool | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search` for each query matrix (their token counts differ), in order: one
        ``(ids, scores)`` per query. ``filter`` is compiled once for the batch; each query's
        MaxSim scoring runs on ``threads`` workers (None or 0: one per core). ``nprobe``,
        ``n_rerank`` and ``exhaustive`` as for :meth:`search`.
        """
        if isinstance(queries, np.ndarray) and queries.ndim == 2:
            raise ValueError("queries must be a list of (tokens, dim) matrices; a 2-D array is one query")
        check_k(k)
        threads = check_threads(threads)
        flt = as_id_filter(filter)
        opts = {"nprobe": nprobe, "n_rerank": n_rerank, "exhaustive": exhaustive}
        return [self.search(q, k, flt, threads=threads, **opts) for q in queries]

    def build_centroids(
        self,
        n_centroids: int | None = None,
        *,
        sample_tokens: int = 65536,
        n_iter: int = 8,
        seed: int = 0,
    ) -> None:
        """Cluster the token vectors (spherical k-means) for candidate generation.

        n_centroids defaults to about 4 * sqrt(total_tokens) rounded to a power of two (as
        PLAID). Training uses a sample of ``sample_tokens`` tokens; every token is then assigned.
        Deleted documents are compacted away first.
        """
        with self._lock:
            self.compact()
            n = int(self._offsets[-1])
            if n == 0:
                raise ValueError("cannot build centroids of an empty index")
            n_docs = len(self._offsets) - 1
            if n_centroids is None:
                n_centroids = int(2 ** np.floor(np.log2(max(4.0 * np.sqrt(n), 1.0))))
            n_centroids = int(max(1, min(n_centroids, n)))
            rng = np.random.default_rng(seed)
            sample_idx = rng.choice(n, size=min(n, max(sample_tokens, n_centroids)), replace=False)
            sample = np.asarray(self._tokens[np.sort(sample_idx)], dtype=np.float32)
            sample = _normalize(sample)
            centroids = sample[rng.choice(len(sample), size=n_centroids, replace=False)].copy()
            for _ in range(n_iter):
                assign = _assign(sample, centroids)
                sums = np.zeros_like(centroids)
                np.add.at(sums, assign, sample)
                counts = np.bincount(assign, minlength=n_centroids)
                empty = counts == 0
                if empty.any():  # re-seed empty clusters with random sample points
                    sums[empty] = sample[rng.choice(len(sample), size=int(empty.sum()))]
                centroids = _normalize(sums)
            codes = np.empty(n, dtype=np.int32)
            for start in range(0, n, 65536):
                block = np.asarray(self._tokens[start : start + 65536], dtype=np.float32)
                codes[start : start + len(block)] = _assign(block, centroids)
            doc_of_token = np.repeat(np.arange(n_docs, dtype=np.int64), np.diff(self._offsets))
            pairs = np.unique(codes.astype(np.int64) * n_docs + doc_of_token)
            ivf_docs = (pairs % n_docs).astype(np.int64)
            ivf_counts = np.bincount((pairs // n_docs).astype(np.int64), minlength=n_centroids)
            self._centroids = centroids.astype(np.float32)
            self._codes = codes
            self._ivf_offsets = np.concatenate([[0], np.cumsum(ivf_counts)]).astype(np.int64)
            self._ivf_docs = ivf_docs

    @old_spellings(renamed={"n_probe": "nprobe", "query_vectors": "query"})
    def candidates(
        self,
        query,
        *,
        nprobe: int | None = None,
        n_candidates: int = 256,
        filter=None,  # noqa: A002 - the API's name
    ) -> np.ndarray:
        """Candidate document ids from the centroids (PLAID stages 1-2), best approximate
        first, among the live documents ``filter`` allows (None: all). ``nprobe`` (default 4;
        ``n_probe`` is its deprecated older name) centroids are probed per query token."""
        n_probe = 4 if nprobe is None else nprobe
        if not self.has_centroids:
            raise ValueError("no centroids: call build_centroids() first")
        if n_probe <= 0 or n_candidates <= 0:
            raise ValueError(f"nprobe and n_candidates must be positive, got {n_probe}, {n_candidates}")
        q = self._query(query)
        flt = as_id_filter(filter)
        with self._lock:
            if not self.has_centroids:
                raise ValueError("no centroids: call build_centroids() first")
            allowed = (
                self._live_rows() if flt is None else flt.compiled(self, self._generation, self._compile)
            )
            offsets, row_ids = self._offsets, self._ids.row_ids
            ivf = (self._centroids, self._codes, self._ivf_offsets, self._ivf_docs)
        cand = _candidate_rows(
            q, offsets, ivf, None if allowed is None else allowed[1], n_probe, n_candidates
        )
        return self._ids_of(row_ids, cand)

    # ----------------------------------------------------------------- explanations
    @old_spellings(renamed={"query_vectors": "query", "doc_id": "id"})
    def explain(self, query, id, *, query_tokens=None, doc_tokens=None) -> Explanation:  # noqa: A002
        """For each query token, the document token it matched and their similarity: an
        :class:`~ragfind.index.Explanation` of kind ``"late"`` with one contribution per query
        token (name its label, else ``q[i]``; value the similarity; ``detail`` with
        ``query_token``, ``doc_token`` (row indexes), ``query_text`` and ``doc_text``) and
        ``detail`` with ``n_doc_tokens``.

        ``query_tokens`` / ``doc_tokens`` (optional lists of strings, e.g. from the ColBERT
        encoder's ``tokenize``) label the matches. The similarities sum to the MaxSim score.
        UnknownIdError for an id not in the index.
        """
        q = self._query(query)
        doc = np.ascontiguousarray(self.document(id))
        best, sims = _core.maxsim_explain(q, doc)
        for name, labels, n in (("query_tokens", query_tokens, len(q)), ("doc_tokens", doc_tokens, len(doc))):
            if labels is not None and len(labels) != n:
                raise ValueError(f"{name} has {len(labels)} labels, expected {n}")
        matches = [
            TokenMatch(
                int(i),
                int(best[i]),
                float(sims[i]),
                None if query_tokens is None else str(query_tokens[i]),
                None if doc_tokens is None else str(doc_tokens[int(best[i])]),
            )
            for i in range(len(q))
        ]
        old = MaxSimExplanation(id, float(np.sum(sims, dtype=np.float64)), matches)
        parts = tuple(
            Contribution(
                m.query_text if m.query_text is not None else f"q[{m.query_token}]",
                m.similarity,
                {
                    "query_token": m.query_token,
                    "doc_token": m.doc_token,
                    "query_text": m.query_text,
                    "doc_text": m.doc_text,
                },
            )
            for m in matches
        )
        return Explanation("late", id, old.score, parts, {"n_doc_tokens": len(doc)}, _legacy=old)

    # ----------------------------------------------------------------- persistence
    def save(self, path) -> None:
        """Write the live documents and their ids to ``path`` atomically (temp file in the
        same folder, fsync, rename); deleted documents are compacted away first.

        Layout (ragfind.persist.sectioned): magic, version, a JSON header (sizes, id kind,
        section offsets, CRC32 of each section), then 64-byte-aligned sections: offsets,
        tokens, the ids and, when built, centroids, codes and the inverted lists.
        """
        with self._lock:
            self.compact()
            sections = {"offsets": self._offsets, **self._ids.sections(), "tokens": self._tokens}
            if self.has_centroids:
                sections.update(
                    centroids=self._centroids,
                    codes=self._codes,
                    ivf_offsets=self._ivf_offsets,
                    ivf_docs=self._ivf_docs,
                )
            header = {
                "dim": self._dim,
                "dtype": self._dtype.name,
                "n_docs": len(self),
                "n_tokens": int(self._offsets[-1]),
                **self._ids.header(),
            }
            write_sectioned(path, _MAGIC, _VERSION, header, sections)

    @classmethod
    def load(cls, path, *, mmap: bool = True, verify: bool = True) -> LateInteractionIndex:
        """Load an index written by :meth:`save`.

        With ``mmap`` (default) the token matrix is memory-mapped read-only, not read. The
        header, ids, offsets and inverted lists are always checked (magic, version, sizes,
        CRC32, monotone offsets, ids unique, documents in range); ``verify`` also checks the
        CRC32 of the token and code sections (reads them once). Raises IndexFileError (a
        ValueError) on a corrupt, truncated, foreign or older-version file, never trusting an
        offset before it is checked; OSError if it cannot be read.
        """
        refuse_old_version(
            path,
            _MAGIC,
            1,
            _VERSION,
            "a late-interaction index file",
            "rebuild the index from its token vectors",
        )
        try:
            return cls._load(path, mmap, verify)
        except IndexFileError:
            raise
        except ValueError as exc:
            raise IndexFileError(str(exc)) from None

    @classmethod
    def _load(cls, path, mmap: bool, verify: bool) -> LateInteractionIndex:
        f = SectionedFile(path, _MAGIC, _VERSION, "late-interaction index")
        dim, n_docs, n_tokens = f.field("dim", int), f.field("n_docs", int), f.field("n_tokens", int)
        dtype_name = f.field("dtype", str)
        if dim <= 0 or n_docs < 0 or n_tokens < 0 or dtype_name not in _DTYPES:
            raise ValueError(f"{path}: corrupt header (dim={dim}, n_docs={n_docs}, n_tokens={n_tokens})")
        ids = IdMap.from_file(f, n_docs)
        offsets = f.array("offsets", "<i8", (n_docs + 1,), mmap=False, verify=True)
        if offsets[0] != 0 or offsets[-1] != n_tokens or (n_docs and np.any(np.diff(offsets) <= 0)):
            raise ValueError(f"{path}: corrupt offsets (not strictly increasing from 0 to {n_tokens})")
        tokens = f.array(
            "tokens", _DTYPES[dtype_name].newbyteorder("<"), (n_tokens, dim), mmap=mmap, verify=verify
        )
        index = cls(dim, dtype_name)
        index._tokens, index._offsets = tokens, np.ascontiguousarray(offsets, dtype=np.int64)
        index._ids = ids
        if "centroids" in f.sections:
            n_c = f.shape_of("centroids", 2)[0]
            n_pairs = f.shape_of("ivf_docs", 1)[0]
            cents = f.array("centroids", "<f4", (n_c, dim), mmap=False, verify=True)
            codes = f.array("codes", "<i4", (n_tokens,), mmap=mmap, verify=verify)
            ivf_off = f.array("ivf_offsets", "<i8", (n_c + 1,), mmap=False, verify=True)
            ivf_docs = f.array("ivf_docs", "<i8", (n_pairs,), mmap=False, verify=True)
            if n_c <= 0 or ivf_off[0] != 0 or ivf_off[-1] != n_pairs or np.any(np.diff(ivf_off) < 0):
                raise ValueError(f"{path}: corrupt inverted-list offsets")
            if n_pairs and (ivf_docs.min() < 0 or ivf_docs.max() >= n_docs):
                raise ValueError(f"{path}: inverted lists reference unknown documents")
            if verify and n_tokens and (codes.min() < 0 or codes.max() >= n_c):
                raise ValueError(f"{path}: token codes out of range")
            index._centroids = np.ascontiguousarray(cents, dtype=np.float32)
            index._codes = codes
            index._ivf_offsets = np.ascontiguousarray(ivf_off, dtype=np.int64)
            index._ivf_docs = np.ascontiguousarray(ivf_docs, dtype=np.int64)
        return index

    def __repr__(self) -> str:
        return (
            f"LateInteractionIndex(n_docs={len(self)}, n_tokens={self.n_tokens}, dim={self._dim}, "
            f"dtype={self.dtype!r}, centroids={0 if self._centroids is None else len(self._centroids)}, "
            f"ids={self.id_kind})"
        )


def _candidate_rows(q, offsets, ivf, allowed_mask, n_probe: int, n_candidates: int) -> np.ndarray:
    """Candidate storage rows (PLAID stages 1-2) among ``allowed_mask`` (None: all rows),
    best approximate first."""
    centroids, codes, ivf_offsets, ivf_docs = ivf
    sims = q @ centroids.T  # (m, C)
    n_probe = min(n_probe, sims.shape[1])
    probe = np.argpartition(-sims, n_probe - 1, axis=1)[:, :n_probe]
    lists = [ivf_docs[ivf_offsets[c] : ivf_offsets[c + 1]] for c in np.unique(probe)]
    cand = np.unique(np.concatenate(lists)) if lists else np.zeros(0, dtype=np.int64)
    if allowed_mask is not None:
        cand = cand[allowed_mask[cand]]
    if len(cand) <= n_candidates:
        return cand
    # Centroid interaction: approximate each candidate's MaxSim with its tokens' centroids.
    starts, ends = offsets[cand], offsets[cand + 1]
    lengths = ends - starts
    token_idx = np.repeat(starts - np.cumsum(np.concatenate([[0], lengths[:-1]])), lengths) + np.arange(
        lengths.sum()
    )
    approx_tok = sims[:, codes[token_idx]]  # (m, tokens of candidates)
    seg = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    approx = np.maximum.reduceat(approx_tok, seg, axis=1).sum(axis=0)
    best = np.argpartition(-approx, n_candidates - 1)[:n_candidates]
    return cand[best[np.argsort(-approx[best], kind="stable")]]


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _assign(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    out = np.empty(len(x), dtype=np.int32)
    for start in range(0, len(x), 8192):
        out[start : start + 8192] = np.argmax(x[start : start + 8192] @ centroids.T, axis=1)
    return out


def _top_k(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best (rows, scores), best first; ties go to the lower row. ``rows`` ascend, so of
    the documents tied at the k-th score the first ones by position are kept."""
    n = len(rows)
    k = min(k, n)
    if k < n:
        th = np.partition(scores, n - k)[n - k]  # the k-th best score
        above = np.flatnonzero(scores > th)
        ties = np.flatnonzero(scores == th)[: k - len(above)]
        part = np.concatenate([above, ties])
    else:
        part = np.arange(n)
    order = np.lexsort((rows[part], -scores[part]))
    sel = part[order]
    return rows[sel].astype(np.int64), scores[sel].astype(np.float32)
