"""Late interaction (ColBERT-style MaxSim): the functional kernel and a packed token index.

``score(q, d) = sum_i max_j <q_i, d_j>`` over the query's token vectors ``q_i`` and the
document's token vectors ``d_j``. The kernel runs in C++ (register-tiled, AVX2/AVX-512
dispatched at run time, multi-threaded, GIL released); this module validates inputs, packs
documents contiguously and handles persistence and candidate generation.
"""

from __future__ import annotations

import numpy as np

from ragfind import _core
from ragfind.persist.sectioned import SectionedFile, write_sectioned

__all__ = ["maxsim", "LateInteractionIndex", "MaxSimExplanation", "TokenMatch"]

from ragfind.late.maxsim import _DTYPES, MaxSimExplanation, TokenMatch, _as_doc, _as_query, maxsim  # noqa: E402,F401

_MAGIC = b"RFLATE\x00\x01"
_VERSION = 1


class LateInteractionIndex:
    """Token embeddings of many documents packed contiguously, scored by MaxSim.

    Documents get ids 0, 1, 2, ... in the order they are added. Token vectors are stored as
    one (total_tokens, dim) array (float32 or float16) plus ``offsets`` (n_docs + 1), so a
    document is a zero-copy slice; saved indexes load with ``mmap``.

    Candidate generation for large corpora follows PLAID: :meth:`build_centroids` clusters the
    token vectors (spherical k-means), keeps each token's centroid code and an inverted list
    centroid -> documents. :meth:`search` then probes the centroids nearest to each query
    token, ranks the union of their documents by the centroid-approximated MaxSim, and
    re-ranks the best ``n_rerank`` exactly. Without centroids, :meth:`search` is exhaustive.
    """

    def __init__(self, dim: int, dtype: str = "float32"):
        """Create an empty index of ``dim``-dimensional token vectors stored as ``dtype``.

        Raises ValueError on a non-positive dim or a dtype other than "float32"/"float16".
        """
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if str(dtype) not in _DTYPES:
            raise ValueError(f"dtype must be 'float32' or 'float16', got {dtype!r}")
        self._dim = int(dim)
        self._dtype = _DTYPES[str(dtype)]
        self._tokens = np.zeros((0, self._dim), dtype=self._dtype)
        self._offsets = np.zeros(1, dtype=np.int64)
        self._pending: list[np.ndarray] = []
        self._pending_lengths: list[int] = []
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
        return len(self._offsets) - 1 + len(self._pending)

    @property
    def n_tokens(self) -> int:
        """Total number of stored token vectors."""
        return int(self._offsets[-1]) + sum(self._pending_lengths)

    @property
    def has_centroids(self) -> bool:
        """True once :meth:`build_centroids` ran (and no document was added since)."""
        return self._centroids is not None

    def _flush(self) -> None:
        if not self._pending:
            return
        lengths = np.asarray(self._pending_lengths, dtype=np.int64)
        new_offsets = self._offsets[-1] + np.cumsum(lengths)
        self._tokens = np.concatenate([self._tokens, *self._pending], axis=0)
        self._offsets = np.concatenate([self._offsets, new_offsets])
        self._pending, self._pending_lengths = [], []

    @property
    def tokens(self) -> np.ndarray:
        """The packed (total_tokens, dim) token matrix (read-only view)."""
        self._flush()
        view = self._tokens.view()
        view.flags.writeable = False
        return view

    @property
    def offsets(self) -> np.ndarray:
        """int64 (n_docs + 1,): document ``d`` owns rows ``offsets[d]:offsets[d + 1]``."""
        self._flush()
        view = self._offsets.view()
        view.flags.writeable = False
        return view

    # ----------------------------------------------------------------- building
    def add(self, documents) -> np.ndarray:
        """Append documents, each a (tokens, dim) float array; returns their new int64 ids.

        All documents are validated before any is stored (dim, non-empty, finite), so a bad
        batch changes nothing. Adding documents drops the centroids (rebuild them).
        Raises TypeError/ValueError naming the offending document.
        """
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
        if not docs:
            return np.zeros(0, dtype=np.int64)
        start = len(self)
        self._pending.extend(docs)
        self._pending_lengths.extend(int(d.shape[0]) for d in docs)
        self._drop_centroids()
        return np.arange(start, start + len(docs), dtype=np.int64)

    def _drop_centroids(self) -> None:
        self._centroids = self._codes = self._ivf_offsets = self._ivf_docs = None

    def document(self, doc_id: int) -> np.ndarray:
        """The (tokens, dim) token matrix of one document (read-only view)."""
        d = self._check_ids(np.asarray([doc_id]), "doc_id")[0]
        return self.tokens[self._offsets[d] : self._offsets[d + 1]]

    def _check_ids(self, ids, name: str) -> np.ndarray:
        arr = np.asarray(ids)
        if arr.ndim != 1:
            arr = arr.reshape(-1)
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        n = len(self)
        bad = (arr < 0) | (arr >= n)
        if bad.any():
            raise IndexError(
                f"{name} contains unknown document id {int(arr[bad][0])} (index has {n} documents)"
            )
        return arr

    # ----------------------------------------------------------------- scoring
    def score(self, query_vectors, doc_ids=None, *, n_threads: int | None = None) -> np.ndarray:
        """MaxSim of the query against ``doc_ids`` (default: every document), float32, in order."""
        q = self._query(query_vectors)
        self._flush()
        ids = None if doc_ids is None else self._check_ids(doc_ids, "doc_ids")
        if len(self) == 0:
            return np.zeros(0, dtype=np.float32)
        return _core.maxsim_packed(
            q, self._tokens, self._offsets, ids, 0 if n_threads is None else n_threads, False
        )

    def _query(self, query_vectors) -> np.ndarray:
        q = _as_query(query_vectors)
        if q.shape[1] != self._dim:
            raise ValueError(f"query_vectors has dim {q.shape[1]}, expected {self._dim} (the index's dim)")
        bad = _core.first_non_finite(q)
        if bad >= 0:
            raise ValueError(
                f"query_vectors contains a non-finite value (NaN or Inf) at token {bad // self._dim}"
            )
        return q

    def rerank(self, query_vectors, candidate_ids, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Score the candidates exactly and return the best ``k`` (default: all).

        Returns (ids int64, scores float32), best first (ties: lower id first). Duplicate
        candidates are scored once. Raises IndexError on an unknown id.
        """
        ids = self._check_ids(candidate_ids, "candidate_ids")
        ids = np.unique(ids)  # sorted, so ties break by lower id
        if k is not None and k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        scores = self.score(query_vectors, ids)
        return _top_k(ids, scores, len(ids) if k is None else k)

    def search(
        self,
        query_vectors,
        k: int = 10,
        *,
        n_probe: int = 4,
        n_rerank: int | None = None,
        exhaustive: bool | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best documents for a query: (ids int64, scores float32), best first.

        Exhaustive MaxSim over every document unless centroids were built (or
        ``exhaustive=True``). With centroids: the ``n_probe`` nearest centroids of each query
        token select candidate documents, ranked by the centroid-approximated MaxSim; the best
        ``n_rerank`` (default max(4 * k, 256)) are re-scored exactly.
        """
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        q = self._query(query_vectors)
        if len(self) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        use_exhaustive = not self.has_centroids if exhaustive is None else exhaustive
        if use_exhaustive:
            scores = self.score(q)
            return _top_k(np.arange(len(self), dtype=np.int64), scores, k)
        if not self.has_centroids:
            raise ValueError("exhaustive=False needs centroids: call build_centroids() first")
        candidates = self.candidates(q, n_probe=n_probe, n_candidates=n_rerank or max(4 * k, 256))
        return self.rerank(q, candidates, k)

    # ----------------------------------------------------------------- PLAID-style candidates
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
        """
        self._flush()
        n = int(self._offsets[-1])
        if n == 0:
            raise ValueError("cannot build centroids of an empty index")
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
        doc_of_token = np.repeat(np.arange(len(self._offsets) - 1, dtype=np.int64), np.diff(self._offsets))
        pairs = np.unique(codes.astype(np.int64) * len(self) + doc_of_token)
        ivf_docs = (pairs % len(self)).astype(np.int64)
        ivf_counts = np.bincount((pairs // len(self)).astype(np.int64), minlength=n_centroids)
        self._centroids = centroids.astype(np.float32)
        self._codes = codes
        self._ivf_offsets = np.concatenate([[0], np.cumsum(ivf_counts)]).astype(np.int64)
        self._ivf_docs = ivf_docs

    def candidates(self, query_vectors, *, n_probe: int = 4, n_candidates: int = 256) -> np.ndarray:
        """Candidate document ids from the centroids (PLAID stages 1-2), best approximate first."""
        if not self.has_centroids:
            raise ValueError("no centroids: call build_centroids() first")
        if n_probe <= 0 or n_candidates <= 0:
            raise ValueError(f"n_probe and n_candidates must be positive, got {n_probe}, {n_candidates}")
        q = self._query(query_vectors)
        sims = q @ self._centroids.T  # (m, C)
        n_probe = min(n_probe, sims.shape[1])
        probe = np.argpartition(-sims, n_probe - 1, axis=1)[:, :n_probe]
        lists = [self._ivf_docs[self._ivf_offsets[c] : self._ivf_offsets[c + 1]] for c in np.unique(probe)]
        cand = np.unique(np.concatenate(lists)) if lists else np.zeros(0, dtype=np.int64)
        if len(cand) <= n_candidates:
            return cand
        # Centroid interaction: approximate each candidate's MaxSim with its tokens' centroids.
        starts, ends = self._offsets[cand], self._offsets[cand + 1]
        lengths = ends - starts
        token_idx = np.repeat(starts - np.cumsum(np.concatenate([[0], lengths[:-1]])), lengths) + np.arange(
            lengths.sum()
        )
        approx_tok = sims[:, self._codes[token_idx]]  # (m, tokens of candidates)
        seg = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        approx = np.maximum.reduceat(approx_tok, seg, axis=1).sum(axis=0)
        best = np.argpartition(-approx, n_candidates - 1)[:n_candidates]
        return cand[best[np.argsort(-approx[best], kind="stable")]]

    # ----------------------------------------------------------------- explanations
    def explain(self, query_vectors, doc_id: int, *, query_tokens=None, doc_tokens=None) -> MaxSimExplanation:
        """For each query token, the document token it matched and their similarity.

        ``query_tokens`` / ``doc_tokens`` (optional lists of strings, e.g. from the ColBERT
        encoder's ``tokenize``) label the matches. The similarities sum to the MaxSim score.
        """
        q = self._query(query_vectors)
        doc = np.ascontiguousarray(self.document(doc_id))
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
        return MaxSimExplanation(int(doc_id), float(np.sum(sims, dtype=np.float64)), matches)

    # ----------------------------------------------------------------- persistence
    def save(self, path) -> None:
        """Write the index to ``path`` atomically (temp file in the same folder, fsync, rename).

        Layout (ragfind.persist.sectioned): magic, version, a JSON header (sizes, section
        offsets, CRC32 of each section), then 64-byte-aligned sections: offsets, tokens and,
        when built, centroids, codes and the inverted lists.
        """
        self._flush()
        sections = {"offsets": self._offsets, "tokens": self._tokens}
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
        }
        write_sectioned(path, _MAGIC, _VERSION, header, sections)

    @classmethod
    def load(cls, path, *, mmap: bool = True, verify: bool = True) -> LateInteractionIndex:
        """Load an index written by :meth:`save`.

        With ``mmap`` (default) the token matrix is memory-mapped read-only, not read. The
        header, offsets and inverted lists are always checked (magic, version, sizes, CRC32,
        monotone offsets, ids in range); ``verify`` also checks the CRC32 of the token and
        code sections (reads them once). Raises ValueError on a corrupt, truncated or foreign
        file, never trusting an offset before it is checked; OSError if it cannot be read.
        """
        f = SectionedFile(path, _MAGIC, _VERSION, "late-interaction index")
        dim, n_docs, n_tokens = f.field("dim", int), f.field("n_docs", int), f.field("n_tokens", int)
        dtype_name = f.field("dtype", str)
        if dim <= 0 or n_docs < 0 or n_tokens < 0 or dtype_name not in _DTYPES:
            raise ValueError(f"{path}: corrupt header (dim={dim}, n_docs={n_docs}, n_tokens={n_tokens})")
        offsets = f.array("offsets", "<i8", (n_docs + 1,), mmap=False, verify=True)
        if offsets[0] != 0 or offsets[-1] != n_tokens or (n_docs and np.any(np.diff(offsets) <= 0)):
            raise ValueError(f"{path}: corrupt offsets (not strictly increasing from 0 to {n_tokens})")
        tokens = f.array(
            "tokens", _DTYPES[dtype_name].newbyteorder("<"), (n_tokens, dim), mmap=mmap, verify=verify
        )
        index = cls(dim, dtype_name)
        index._tokens, index._offsets = tokens, np.ascontiguousarray(offsets, dtype=np.int64)
        if "centroids" in f.sections:
            n_c = f.shape_of("centroids")[0]
            n_pairs = f.shape_of("ivf_docs")[0]
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
            f"dtype={self.dtype!r}, centroids={0 if self._centroids is None else len(self._centroids)})"
        )


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _assign(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    out = np.empty(len(x), dtype=np.int32)
    for start in range(0, len(x), 8192):
        out[start : start + 8192] = np.argmax(x[start : start + 8192] @ centroids.T, axis=1)
    return out


def _top_k(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    k = min(k, len(ids))
    if k < len(ids):
        part = np.argpartition(-scores, k - 1)[:k]
    else:
        part = np.arange(len(ids))
    order = np.lexsort((ids[part], -scores[part]))
    sel = part[order]
    return ids[sel].astype(np.int64), scores[sel].astype(np.float32)
