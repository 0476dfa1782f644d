"""Dense vectors: exact search, HNSW (through hnswlib) and IVF lists behind one face.

``DenseIndex`` stores embedding vectors under integer or string ids and answers top-k
queries. ``kind="exact"`` scans every stored vector with the C++ kernels (float32, float16 or
int8 storage, fused scan + top-k, threads with the GIL released); ``kind="hnsw"`` wraps an
``hnswlib`` graph with growth, real deletes, filters and thread safety added; ``kind="ivf"``
scans the k-means lists nearest the query.

Scores, best first:

* ``metric="cosine"``: cosine similarity in [-1, 1], highest first (vectors are normalised
  once when added; queries when searched).
* ``metric="ip"``: inner product, highest first.
* ``metric="l2"``: *squared* Euclidean distance, smallest first.

DenseIndex is the face (arguments, ids, errors; the file in ``files.py``) over one backend
object of its kind: ``exact.py`` (ExactBackend), ``hnsw.py`` (HnswBackend), ``ivf.py``
(IvfBackend); ``_common.py`` holds what they share and the backend calls.

The raw kernels are exposed for tests and power users: ``dot``, ``cosine`` and ``l2sq`` on
matrices, dispatched to the active SIMD level (``ragfind.set_simd_level``).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Union

import numpy as np

from ragfind.dense import tune as _tune
from ragfind.dense._common import (
    CODED_DTYPES,
    ENCODINGS,
    DenseConfig,
    check_query,
    check_vectors,
    normalise_rows,
    row_norms,
)
from ragfind.dense.exact import ExactBackend
from ragfind.dense.files import load_index, save_index
from ragfind.dense.hnsw import HnswBackend
from ragfind.dense.ivf import IvfBackend
from ragfind.dense.ivf_codes import make_codes
from ragfind.dense.kernels import cosine, dot, l2sq
from ragfind.errors import (
    check_k,
    ids_needed,
    other_id_kind,
    present_ids,
    repeated_id,
    unknown_ids,
)
from ragfind.ids import IdFilter, as_id_filter, check_filter_kind, id_kind
from ragfind.index import Contribution, Explanation, check_dim, check_threads, old_spellings

__all__ = ["DenseIndex", "dot", "cosine", "l2sq"]

Id = Union[int, str]

_METRICS = ("cosine", "ip", "l2")
_KINDS = ("exact", "hnsw", "ivf")
_F16_MAX = 65504.0
_F32 = np.dtype(np.float32)
# hnswlib caps M at 10000 (silently); the graph check rejects larger values in a file.
_MAX_HNSW_PARAM = {"M": 10000, "ef_construction": 2**31 - 1}
# search_batch_padded pads every row to k; past this many entries a k above the index size is
# an error.
_MAX_PADDED_ENTRIES = 1 << 24


def _normalise_ids(ids: Any, n: int) -> list:
    if isinstance(ids, (str, bytes, int, np.integer)):
        ids = [ids]
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise ValueError(f"ids must be 1-D, got shape {ids.shape}")
        if ids.dtype.kind in "iu":
            out = [int(x) for x in ids.tolist()]
        elif ids.dtype.kind in "UO":
            out = list(ids.tolist())
        else:
            raise TypeError(f"ids must be integers or strings, got dtype {ids.dtype}")
    else:
        out = list(ids)
    if len(out) != n:
        raise ValueError(f"ids has {len(out)} entries but there are {n} vectors")
    return out


def _id_array(items: list, kind: str | None) -> np.ndarray:
    if kind == "str":
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out
    return np.asarray(items, dtype=np.int64).reshape(-1)


def _check_nprobe(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"nprobe must be a positive integer, got {value!r}")
    return int(value)


def _check_coded(
    dim: int, metric: str, dtype: str, rerank: Any, pq_m: Any, pq_bits: Any, rerank_dtype: Any
) -> None:
    """The arguments of a coded IVF index (dtype "pq" or "rabitq"), or the ValueError."""
    if metric == "l2" and dtype == "rabitq":
        raise ValueError("dtype='rabitq' scores by inner product; use metric 'cosine' or 'ip', got 'l2'")
    if rerank < 1:
        raise ValueError(
            f"dtype={dtype!r} re-scores the k * rerank best estimates; rerank must be >= 1, got 0"
        )
    if dtype == "rabitq":
        if dim < 2:
            raise ValueError(f"dtype='rabitq' needs dim >= 2, got {dim}")
        if pq_m is not None or pq_bits != 4:
            raise ValueError("pq_m and pq_bits apply to dtype='pq', not dtype='rabitq'")
        if rerank_dtype != "f32":
            raise ValueError(
                f"dtype='rabitq' re-scores float32 rows; rerank_dtype must be 'f32', got {rerank_dtype!r}"
            )
        return
    if rerank_dtype not in ("f32", "f16"):
        raise ValueError(f"rerank_dtype must be 'f32' or 'f16', got {rerank_dtype!r}")
    if pq_m is not None and (
        isinstance(pq_m, bool)
        or not isinstance(pq_m, (int, np.integer))
        or not 1 <= pq_m <= 256
        or dim % pq_m
    ):
        raise ValueError(f"pq_m must be an integer in [1, 256] that divides dim={dim}, got {pq_m!r}")
    if isinstance(pq_bits, bool) or pq_bits not in (4, 8):
        raise ValueError(f"pq_bits must be 4 or 8, got {pq_bits!r}")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


class DenseIndex:
    """Top-k search over embedding vectors with integer or string ids.

    Args:
        dim: vector dimension, 1 to 65,536 (``ragfind.index.MAX_DIM``).
        metric: "cosine" (vectors normalised at add time, score = cosine similarity),
            "ip" (inner product) or "l2" (squared Euclidean distance, smaller is better).
        dtype: storage of an exact index: "f32", "f16" (half the memory; values must fit
            float16) or "i8" (a quarter; symmetric per-vector scale max|x|/127; the query is
            quantised to int16, so scores are approximate to about 1e-2 relative).
            HNSW always stores float32; IVF lists may be any of the three (f16/i8 lists are
            re-scored in float32, see ``rerank``), or compressed codes (kind="ivf"): "pq"
            (any metric; product quantisation of residuals, ``pq_m`` sub-spaces of ``pq_bits``
            bits: pq_m / 2 or pq_m bytes a vector) or "rabitq" (metric "cosine" or "ip";
            RaBitQ, 1 bit a dimension + 12 bytes). Coded lists scan the codes and re-score the
            ``k * rerank`` best from the vectors (float32, or float16 with
            ``rerank_dtype="f16"``), which are stored beside the codes (and in the file: a
            loaded index maps them, so memory holds the codes, centroids and ids); RaBitQ
            skips the candidates whose error bound cannot reach the top k.
        kind: "exact" (SIMD brute force; exact for f32), "hnsw" (approximate graph) or "ivf"
            (k-means inverted lists: the ``nprobe`` lists nearest the query are scanned).
        M, ef_construction: HNSW graph parameters (hnswlib's meaning).
        ef: HNSW search breadth (default 64; raised to k per query); settable later.
        nlist: IVF lists (default: about 4 * sqrt(n) of the first add, 1 list below 78
            vectors). The index trains (k-means) on its first add, which must hold at least
            nlist vectors, or on ``train(sample)``; later adds go to their nearest list. With
            the automatic nlist the index retrains as it grows: once it holds 4x the vectors it
            was trained on and the automatic nlist is 1.5x larger, k-means reruns on a sample
            of the stored vectors and all of them move to the new lists (one O(n) step per 4x
            growth, so O(1) moves per vector amortised; searches meanwhile see the old lists).
            An explicit nlist never retrains.
        nprobe: IVF lists scanned per query (default max(16, nlist / 32); dtype "pq"/"rabitq"
            calibrate it, see below); settable, and per call through ``search(..., nprobe=)``.
            nprobe >= nlist is an exact search. ``tune(queries, target_recall)`` chooses nprobe
            and rerank for a recall instead.
        rerank: IVF with dtype "f16"/"i8": the k * rerank best quantised candidates are
            re-scored exactly from a float32 copy of the vectors (kept beside the lists; a
            loaded index maps it); 0 keeps no copy and returns quantised scores (default 4).
            With dtype "pq"/"rabitq" (rerank >= 1): the k * rerank best estimates are
            re-scored. Calibrated defaults (dtype "pq"/"rabitq", 2,000 rows or more): when
            the lists are trained, the nprobe and rerank left unset become the cheapest that
            find 0.95 of the 10 nearest rows of 200 stored rows held out of the search, never
            below max(16, nlist / 32) and 4; no fixed setting holds across data (low intrinsic
            dimension spreads neighbours over many lists, tight clusters need deep re-scoring).
            Data where no setting reaches it (no structure at all) get the cheapest setting
            within 0.01 of the best recall, which may scan every list.
        pq_m: dtype "pq": sub-spaces (divides dim, at most 256; default the largest divisor of
            dim up to dim / 4).
        pq_bits: dtype "pq": bits a sub-space, 4 (16 codewords, scanned with byte tables in
            SIMD registers) or 8 (256 codewords, float tables: closer estimates, so fewer rows
            need re-scoring).
        rerank_dtype: dtype "pq": the stored vectors that are re-scored, "f32" or "f16" (half
            the bytes read per re-scored vector and on disk; values must fit float16). With
            "f16" the scores returned are the float32 query times the float16 vector (summed
            in float32), i.e. exact for the stored float16 vectors. dtype "rabitq": "f32".
        fingerprint: optional name of the embedding model that produced the vectors; stored
            and saved so queries from another model can be refused (``check_fingerprint``).
        threads: default worker threads for searches (0 = automatic).

    Raises:
        ValueError: for an unknown metric/dtype/kind, a dim outside [1, 65,536]
            (``ragfind.index.MAX_DIM``), an HNSW index
            with a dtype other than "f32", IVF options out of range, dtype "pq"/"rabitq"
            with another kind than "ivf" or rerank 0, "rabitq" with metric "l2".

    Thread safety: searches may run from many threads at once and concurrently with adds
    and deletes (HNSW serialises writers against readers internally).
    """

    def __init__(
        self,
        dim: int,
        metric: str = "cosine",
        dtype: str = "f32",
        kind: str = "exact",
        M: int = 16,
        ef_construction: int = 200,
        ef: int | None = None,
        fingerprint: str | None = None,
        threads: int = 0,
        nlist: int | None = None,
        nprobe: int | None = None,
        rerank: int | None = None,
        pq_m: int | None = None,
        pq_bits: int = 4,
        rerank_dtype: str = "f32",
    ) -> None:
        dim = check_dim(dim)
        if metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
        if dtype not in ENCODINGS and dtype not in CODED_DTYPES:
            raise ValueError(f"dtype must be one of {tuple(ENCODINGS) + CODED_DTYPES}, got {dtype!r}")
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        if dtype in CODED_DTYPES and kind != "ivf":
            raise ValueError(f"dtype={dtype!r} codes IVF lists; it needs kind='ivf', got kind={kind!r}")
        if kind == "hnsw" and dtype != "f32":
            raise ValueError(
                f"kind='hnsw' stores float32 vectors (hnswlib); dtype={dtype!r} needs kind='exact'"
            )
        if fingerprint is not None and not isinstance(fingerprint, str):
            raise TypeError(f"fingerprint must be a str or None, got {type(fingerprint).__name__}")
        threads = check_threads(threads)
        for name, val in (("M", M), ("ef_construction", ef_construction)):
            if not isinstance(val, (int, np.integer)) or not 2 <= val <= _MAX_HNSW_PARAM[name]:
                raise ValueError(f"{name} must be an integer in [2, {_MAX_HNSW_PARAM[name]}], got {val!r}")
        if nlist is not None and (
            isinstance(nlist, bool) or not isinstance(nlist, (int, np.integer)) or nlist < 1
        ):
            raise ValueError(f"nlist must be a positive integer or None (automatic), got {nlist!r}")
        if nprobe is not None:
            nprobe = _check_nprobe(nprobe)
        auto_rerank = rerank is None and dtype in CODED_DTYPES
        if rerank is None:
            rerank = 4
        if isinstance(rerank, bool) or not isinstance(rerank, (int, np.integer)) or not 0 <= rerank <= 1024:
            raise ValueError(f"rerank must be an integer in [0, 1024], got {rerank!r}")
        if dtype in CODED_DTYPES:
            _check_coded(int(dim), metric, dtype, rerank, pq_m, pq_bits, rerank_dtype)
        elif pq_m is not None or pq_bits != 4:
            raise ValueError(f"pq_m and pq_bits apply to dtype='pq', not dtype={dtype!r}")
        elif rerank_dtype != "f32":
            raise ValueError(f"rerank_dtype applies to dtype='pq', not dtype={dtype!r}")
        self._cfg = DenseConfig(int(dim), metric, dtype, threads, str(rerank_dtype))
        self._kind = kind
        self._fingerprint = fingerprint
        self._M = int(M)
        self._ef_construction = int(ef_construction)
        self._ef = 64
        if ef is not None:
            self._check_ef(ef)
            self._ef = int(ef)
        # Writers take it; searches never do (each reads one published snapshot, or HNSW's lock).
        self._write_lock = threading.RLock()
        self._next_auto_id = 0
        self._backend: Any
        if kind == "exact":
            self._backend = ExactBackend(self._cfg)
        elif kind == "hnsw":
            self._backend = HnswBackend(self._cfg, self._M, self._ef_construction, self._ef)
        else:
            codes = None
            if dtype in CODED_DTYPES:
                codes = make_codes(
                    dtype, int(dim), None if pq_m is None else int(pq_m), int(pq_bits), threads, metric
                )
            self._backend = IvfBackend(
                self._cfg, None if nlist is None else int(nlist), nprobe, int(rerank), codes
            )
            self._backend.auto_rerank = auto_rerank

    # --------------------------------------------------------------- properties

    @property
    def dim(self) -> int:
        """Vector dimension."""
        return self._cfg.dim

    @property
    def metric(self) -> str:
        """ "cosine", "ip" or "l2"."""
        return self._cfg.metric

    @property
    def dtype(self) -> str:
        """Storage: "f32", "f16", "i8", or IVF codes "pq" / "rabitq"."""
        return self._cfg.dtype

    @property
    def rerank_dtype(self) -> str:
        """The vectors a coded IVF index re-scores: "f32" or "f16" ("f32" for other dtypes)."""
        return self._cfg.rerank_dtype

    @property
    def kind(self) -> str:
        """ "exact", "hnsw" or "ivf"."""
        return self._kind

    @property
    def threads(self) -> int:
        """Default search workers (0 = one per core)."""
        return self._cfg.threads

    @property
    def fingerprint(self) -> str | None:
        """Name of the embedding model the vectors came from, or None when not recorded."""
        return self._fingerprint

    @property
    def ef(self) -> int:
        """HNSW search breadth (ignored by exact and IVF indexes)."""
        return self._ef

    @ef.setter
    def ef(self, value: int) -> None:
        self._check_ef(value)
        if self._kind == "hnsw":
            self._backend.set_ef(int(value))
        self._ef = int(value)

    @staticmethod
    def _check_ef(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"ef must be a positive integer, got {value!r}")

    @property
    def nlist(self) -> int | None:
        """IVF lists (None until an index with automatic nlist is trained; None for other kinds)."""
        return self._backend.nlist if self._kind == "ivf" else None

    @property
    def nprobe(self) -> int | None:
        """IVF lists scanned per query (default: max(16, nlist / 32), or the calibrated one of
        coded lists; see the class docstring); settable. None for other kinds."""
        return self._backend.nprobe if self._kind == "ivf" else None

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        value = _check_nprobe(value)
        if self._kind == "ivf":
            self._backend.nprobe_arg = value
            self._backend.tuned = None  # the setting is the caller's now, not tune()'s

    @property
    def rerank(self) -> int | None:
        """IVF re-scoring depth: the k * rerank best estimates are re-scored in float32 (see the
        class docstring); settable (dtype "pq"/"rabitq": >= 1; "f16"/"i8" indexes built with
        0 keep no float32 copy, so stay at 0). None for other kinds."""
        return self._backend.rerank if self._kind == "ivf" else None

    @rerank.setter
    def rerank(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= 1024:
            raise ValueError(f"rerank must be an integer in [0, 1024], got {value!r}")
        if self._kind != "ivf":
            return
        b = self._backend
        if b._codes is not None and value < 1:
            raise ValueError(
                f"dtype={self.dtype!r} re-scores the k * rerank best estimates; rerank must be >= 1"
            )
        if (b.rerank == 0) != (value == 0) and b._codes is None and self.dtype != "f32":
            raise ValueError("rerank cannot switch between 0 and > 0 after construction (the float32 copy)")
        b.rerank = int(value)
        b.tuned = None
        b.auto_rerank = False  # the caller's from now on, never recalibrated

    @property
    def tuned(self) -> dict | None:
        """What the last ``tune`` chose and measured (target_recall, k, queries, nprobe,
        rerank, recall, reached), kept while nprobe and rerank are its; None otherwise."""
        t = self._backend.tuned if self._kind == "ivf" else None
        return None if t is None else dict(t)

    @property
    def is_trained(self) -> bool:
        """True once an IVF index has centroids (exact and HNSW indexes: always True)."""
        return self._kind != "ivf" or self._backend.is_trained

    def __len__(self) -> int:
        return len(self._backend.id_to_slot)

    def __contains__(self, id_: object) -> bool:
        return id_ in self._backend.id_to_slot

    def __repr__(self) -> str:
        return (
            f"DenseIndex(dim={self.dim}, metric={self.metric!r}, dtype={self.dtype!r}, "
            f"kind={self._kind!r}, n={len(self)}, fingerprint={self._fingerprint!r})"
        )

    @property
    def ids(self) -> np.ndarray:
        """The live ids in insertion order: int64 array (object array of str for str ids)."""
        with self._write_lock:
            items = list(self._backend.id_to_slot)
        return _id_array(items, self._backend.id_kind)

    def check_fingerprint(self, fingerprint: str | None) -> None:
        """Raises ValueError when ``fingerprint`` names a different model than the index's.

        Passes when either side is None (unknown).
        """
        if fingerprint is not None and self._fingerprint is not None and fingerprint != self._fingerprint:
            raise ValueError(
                f"query embeddings come from model {fingerprint!r} but this index was built with "
                f"{self._fingerprint!r}; re-encode with the same model or rebuild the index"
            )

    # --------------------------------------------------------------- add / delete

    @old_spellings(renamed={"vectors": "items"})
    def add(self, items: Any, ids: Any = None) -> np.ndarray:
        """Adds vectors under ids; all or nothing.

        Args:
            items: (n, dim) floating vectors (float32; float16/float64 are cast); a 1-D
                vector adds one row.
            ids: n ints or n strs (one kind per index), or None for consecutive integers
                after the largest integer id so far (integer-id indexes only).

        Returns:
            The ids added, in order: an int64 array, or an object array of str.

        Raises:
            TypeError: non-floating vectors, ids of the wrong kind.
            ValueError: wrong shape or dimension, no vectors, NaN/inf, a zero vector with
                metric "cosine", values beyond float16 range with dtype "f16", duplicate ids
                (within the call or already stored), ids count != rows.
        """
        cfg = self._cfg
        X = check_vectors(items, cfg.dim)
        n = X.shape[0]
        if n == 0:
            raise ValueError("vectors is empty: nothing to add")
        norms = None
        if cfg.metric == "cosine":
            if self._kind == "ivf":
                norms = row_norms(X, "vectors")  # the IVF add divides rows block by block
            else:
                X = normalise_rows(X, "vectors")
        if cfg.dtype == "f16" and cfg.metric != "cosine":  # unit rows fit float16 anyway
            over = np.maximum(X.max(axis=1), -X.min(axis=1)) > _F16_MAX
            if over.any():
                raise ValueError(
                    f"vectors row {int(np.flatnonzero(over)[0])} exceeds the float16 range (|x| <= 65504); "
                    "use dtype='f32'"
                )
        with self._write_lock:
            b = self._backend
            if ids is None:
                if b.id_kind == "str":
                    raise ids_needed()
                id_list: list = list(range(self._next_auto_id, self._next_auto_id + n))
                kind = "int"
            else:
                id_list = _normalise_ids(ids, n)
                kind = id_kind(id_list)
                if kind == "int":
                    id_list = [int(x) for x in id_list]
                if b.id_kind is not None and kind != b.id_kind:
                    raise other_id_kind(b.id_kind, kind)
            if len(set(id_list)) != n:
                seen: set = set()
                dup = next(x for x in id_list if x in seen or seen.add(x))
                raise repeated_id(dup)
            present = [x for x in id_list if x in b.id_to_slot]
            if present:
                raise present_ids(present)
            b.add(X, id_list, kind, norms)
            if kind == "int":
                self._next_auto_id = max(self._next_auto_id, max(id_list) + 1)
        return _id_array(id_list, kind)

    def delete(self, ids: Any) -> None:
        """Removes ids (one id or an iterable); all or nothing.

        Raises:
            UnknownIdError: an id is not in the index (a KeyError; nothing is deleted).
            DuplicateIdError: an id is repeated (nothing is deleted).
        """
        if isinstance(ids, (str, bytes, int, np.integer)):
            id_list: list = [ids]
        elif isinstance(ids, np.ndarray):
            id_list = ids.ravel().tolist()
        else:
            id_list = list(ids)
        with self._write_lock:
            id_to_slot = self._backend.id_to_slot
            missing = [x for x in id_list if x not in id_to_slot]
            if missing:
                raise unknown_ids(missing, deleting=True)
            if len(id_list) > 1 and len(set(id_list)) != len(id_list):
                seen: set = set()
                raise repeated_id(next(x for x in id_list if x in seen or seen.add(x)))
            slots = [id_to_slot.pop(x) for x in id_list]
            self._backend.delete(slots)

    def train(self, sample: Any) -> None:
        """Trains an IVF index's lists (k-means) on ``sample``, which is not stored.

        Without it, the first ``add`` trains on its own vectors. Training again is refused once
        vectors are stored (they would all have to move); build a new index instead.

        Raises:
            ValueError: not an IVF index, fewer sample rows than nlist, vectors already
                stored, NaN/inf or a zero vector with cosine (as ``add``).
            TypeError: non-floating sample.
        """
        if self._kind != "ivf":
            raise ValueError(f"train() applies to kind='ivf'; this index is kind={self._kind!r}")
        X = check_vectors(sample, self.dim, "sample")
        if X.shape[0] == 0:
            raise ValueError("sample is empty: nothing to train on")
        if self.metric == "cosine":
            X = normalise_rows(X, "sample")
        with self._write_lock:
            if len(self._backend.id_to_slot):
                raise ValueError("train() needs an empty index: this one already holds vectors")
            self._backend.train(X)

    def tune(
        self, queries: Any, target_recall: float = 0.95, k: int = 10, *, threads: int | None = None
    ) -> dict:
        """Sets an IVF index's ``nprobe`` and ``rerank`` to the fastest setting that reaches
        ``target_recall`` (recall@k against exact search) on ``queries``.

        Settings are tried from few lists up: for each nprobe the smallest rerank reaching the
        target, and of those the fastest, timed one query per call on one thread (faiss's
        AutoTune idea: the cheapest point of the recall/time front). The choice becomes the
        index's ``nprobe`` and ``rerank`` (searches use it unless told otherwise), is saved
        with it, and is reported by ``tuned``; setting either by hand forgets it. A retrain of
        the automatic nlist keeps the share of lists probed. Use queries like the ones the
        index will serve, and tune again after large changes to the data.

        Args:
            queries: (nq, dim) floating queries, at least 40 (a recall of fewer moves by too
                much per query to choose by); more give a choice that holds better on other
                queries.
            target_recall: in (0, 1].
            k: the k of the recall (results are re-scored to k * rerank, so the setting
                carries over to other k roughly).
            threads: threads for the exact search and the recall of the sample (timings use
                one); None: the index's.

        Returns:
            ``tuned``: a dict of the choice and its recall on ``queries`` (``reached`` False when
            no setting reached the target: then the most accurate one tried, with a warning).

        Raises:
            ValueError: not an IVF index, no vectors, a bad shape, NaN/inf or zero query
                (cosine), fewer than 40 queries, target_recall outside (0, 1], k < 1.
            TypeError: non-floating queries, a non-int k.
        """
        if self._kind != "ivf":
            raise ValueError(f"tune() chooses IVF search settings; this index is kind={self._kind!r}")
        if not _is_number(target_recall) or not 0.0 < float(target_recall) <= 1.0:
            raise ValueError(f"target_recall must be a number in (0, 1], got {target_recall!r}")
        check_k(k)
        threads = check_threads(threads, self._cfg.threads)
        Qm = check_vectors(queries, self._cfg.dim, "queries")
        if Qm.shape[0] < _tune.MIN_QUERIES:
            raise ValueError(
                f"tune() needs at least {_tune.MIN_QUERIES} queries for a recall to choose by, "
                f"got {Qm.shape[0]}"
            )
        if self._cfg.metric == "cosine":
            Qm = normalise_rows(Qm, "queries")
        with self._write_lock:  # no write changes the lists while they are measured
            got = self._backend.tune(np.ascontiguousarray(Qm), int(k), float(target_recall), threads)
        if not got["reached"]:
            warnings.warn(
                f"tune(): no setting reached recall {target_recall}; using the most accurate tried "
                f"(nprobe {got['nprobe']}, rerank {got['rerank']}, recall {got['recall']:.3f})",
                RuntimeWarning,
                stacklevel=2,
            )
        return got

    # --------------------------------------------------------------- search

    @old_spellings(renamed={"q": "query"})
    def search(
        self,
        query: Any,
        k: int = 10,
        filter: IdFilter | Iterable[Id] | Callable[[Id], bool] | None = None,  # noqa: A002 - the API name
        *,
        threads: int | None = None,
        min_score: float | None = None,
        max_distance: float | None = None,
        fingerprint: str | None = None,
        nprobe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ids for one query vector, best first.

        Args:
            query: (dim,) floating vector (also (1, dim)).
            k: number of results (>= 1); fewer come back when fewer vectors qualify.
            filter: the ids allowed in the results: an ``IdFilter`` (compiled once per write
                of the index and reused by every search until the next one), any iterable of
                ids (compiled for this call), or, for compatibility, a callable id -> bool
                (called once per stored vector; slow on large indexes). Ids the index does not
                hold are ignored. Exactly min(k, allowed live ids) results come back (fewer
                only through min_score/max_distance), ranked as unfiltered. A number here is
                the old third argument, min_score: it still works, with a DeprecationWarning.
            threads: worker threads for this call (None: the index's ``threads``; 0: one per
                core; exact and IVF).
            min_score: drop results scoring below it (cosine/ip only).
            max_distance: drop results farther than it (metric "l2" only; squared distance).
            fingerprint: the query's model fingerprint, checked with ``check_fingerprint``.
            nprobe: IVF lists to scan for this call (default: the index's ``nprobe``).

        Returns:
            (ids, scores): ids as an int64 array (integer ids) or an object array of str;
            scores float32 (see the module docstring for what they mean).

        Raises:
            ValueError: wrong dimension, NaN/inf, zero query with cosine, k < 1, a
                threshold for the other metric family, a fingerprint mismatch, nprobe < 1,
                threads < 0.
            TypeError: non-floating query, a non-int k or threads; IdKindError (a TypeError): a
                filter of ids of the other kind than the index's.
        """
        if filter is not None and _is_number(filter):
            min_score = self._old_min_score(filter, min_score)
            filter = None  # noqa: A001
        if type(k) is not int or k < 1 or min_score is not None or max_distance is not None or fingerprint:
            self._check_search_args(k, min_score, max_distance, fingerprint)
        if filter is not None and not callable(filter):
            filter = self._id_filter(filter)  # noqa: A001
        # A plain int passes as is (this runs per query); anything else gets the full check.
        if threads is not None and (type(threads) is not int or threads < 0):
            threads = check_threads(threads, self._cfg.threads)
        if nprobe is not None and (type(nprobe) is not int or nprobe < 1):
            nprobe = _check_nprobe(nprobe)
        # Fast path (this runs per query): the backend's one dot product both proves the vector
        # finite (NaN/inf propagate into it) and gives the cosine norm.
        q = query
        if type(q) is np.ndarray and q.dtype is _F32 and q.shape == (self._cfg.dim,) and q.flags.c_contiguous:
            qv = q  # no copy; anything else (other dtype/shape/strides) takes the full check
        else:
            qv = check_query(q, self._cfg.dim)
        threshold = min_score if self._cfg.metric != "l2" else max_distance
        return self._backend.search(qv, int(k), threshold, filter, threads, nprobe)

    @staticmethod
    def _old_min_score(value: Any, min_score: Any) -> float:
        if min_score is not None:
            raise TypeError("DenseIndex.search: got min_score both as the third argument and as min_score=")
        warnings.warn(
            "DenseIndex.search: a number as the third argument (min_score) is deprecated and will "
            "be removed in the next release; the third argument is the filter, pass min_score=",
            DeprecationWarning,
            stacklevel=3,
        )
        return value

    @old_spellings(renamed={"Q": "queries"})
    def search_batch(
        self,
        queries: Any,
        k: int = 10,
        filter: IdFilter | Iterable[Id] | Callable[[Id], bool] | None = None,  # noqa: A002
        *,
        threads: int | None = None,
        min_score: float | None = None,
        max_distance: float | None = None,
        fingerprint: str | None = None,
        nprobe: int | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """``search`` for every row of ``queries``: a list whose item i equals
        ``search(queries[i], ...)``.

        Same arguments as ``search``; the filter is compiled once for all rows. Each row gets
        exactly ``search``'s ids and scores: exact and HNSW run the single-query scan per row,
        IVF f32/f16/i8 lists group the rows by list so each probed list is read once per batch
        (coded lists mostly scan each row's lists best first, as ``search`` does; the batch
        kernels of ``search_batch_padded`` sum in another order: scores may differ in the last
        bits).

        Raises:
            as ``search``; ``queries`` must be (nq, dim) with nq >= 1.
        """
        self._check_search_args(k, min_score, max_distance, fingerprint)
        if _is_number(filter):
            raise TypeError(
                "DenseIndex.search_batch: the third argument is the filter; pass threads= and "
                "min_score= by keyword"
            )
        threads = check_threads(threads, self._cfg.threads)
        nprobe = None if nprobe is None else _check_nprobe(nprobe)
        Qm = check_vectors(queries, self._cfg.dim, "queries")
        if Qm.shape[0] == 0:
            raise ValueError("queries is empty: pass at least one query row")
        if callable(filter) and not isinstance(filter, IdFilter):
            # Asked once per stored id for the whole batch.
            with self._write_lock:
                items = list(self._backend.id_to_slot)
            filter = IdFilter([x for x in items if filter(x)])  # noqa: A001
        elif filter is not None:
            filter = self._id_filter(filter)  # noqa: A001 - compiled once, reused by every row
        threshold = min_score if self._cfg.metric != "l2" else max_distance
        grouped = getattr(self._backend, "search_batch", None)
        if grouped is not None:  # IVF: queries grouped by list, the same answers
            return grouped(Qm, int(k), threshold, filter, threads, nprobe)
        search = self._backend.search
        return [search(Qm[i], int(k), threshold, filter, threads, nprobe) for i in range(Qm.shape[0])]

    @old_spellings(renamed={"Q": "queries"})
    def search_batch_padded(
        self,
        queries: Any,
        k: int = 10,
        filter: IdFilter | Iterable[Id] | Callable[[Id], bool] | None = None,  # noqa: A002
        *,
        threads: int | None = None,
        min_score: float | None = None,
        max_distance: float | None = None,
        fingerprint: str | None = None,
        nprobe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k for every row of ``queries`` as (nq, k) arrays, with the batch kernels (same arguments
        as ``search``).

        Returns:
            (ids, scores), each of shape (nq, k), rows best first. Queries with fewer than
            k results are padded: ids with -1 (integer ids) or None (string ids), scores
            with -inf (for every metric, l2 included). Rows rank as ``search`` does, but the
            batch kernels sum in another order, so scores may differ from ``search``'s in the
            last bits (and near-ties may swap).

        Raises:
            as ``search``; ``queries`` must be (nq, dim) with nq >= 1. ValueError when ``k`` exceeds the
            number of vectors and the padded output would hold more than 2**24 entries (a
            ``k`` of 10**7 would otherwise allocate gigabytes of padding).
        """
        self._check_search_args(k, min_score, max_distance, fingerprint)
        threads = check_threads(threads, self._cfg.threads)
        nprobe = None if nprobe is None else _check_nprobe(nprobe)
        Qm = check_vectors(queries, self._cfg.dim, "queries")
        if Qm.shape[0] == 0:
            raise ValueError("queries is empty: pass at least one query row")
        if k > len(self) and Qm.shape[0] * int(k) > _MAX_PADDED_ENTRIES:
            raise ValueError(
                f"k={k} exceeds the {len(self)} vectors in the index and the padded ({Qm.shape[0]}, {k}) "
                f"output would hold {Qm.shape[0] * int(k):,} entries; pass k <= len(index)"
            )
        if filter is not None and not callable(filter):
            filter = self._id_filter(filter)  # noqa: A001
        if self._cfg.metric == "cosine":
            Qm = normalise_rows(Qm, "queries")
        threshold = min_score if self._cfg.metric != "l2" else max_distance
        return self._backend.search_batch_padded(Qm, int(k), threshold, filter, threads, nprobe)

    def _id_filter(self, filter: Any) -> IdFilter:  # noqa: A002
        """``filter`` (ids, an IdFilter) as an IdFilter; IdKindError for ids of the other kind."""
        flt = as_id_filter(filter)
        check_filter_kind(flt, self._backend.id_kind)
        return flt

    def _check_search_args(self, k: Any, min_score: Any, max_distance: Any, fingerprint: Any) -> None:
        check_k(k)
        metric = self._cfg.metric
        if metric == "l2" and min_score is not None:
            raise ValueError("min_score applies to cosine/ip scores; with metric 'l2' use max_distance=")
        if metric != "l2" and max_distance is not None:
            raise ValueError(f"max_distance applies to metric 'l2'; with {metric!r} use min_score=")
        for name, val in (("min_score", min_score), ("max_distance", max_distance)):
            if val is not None and not np.isfinite(val):
                raise ValueError(f"{name} must be a finite number, got {val!r}")
        if fingerprint is not None:
            self.check_fingerprint(fingerprint)

    def explain(self, query: Any, id: Any) -> Explanation:  # noqa: A002 - the protocol's name
        """Why ``id`` scores what it does for ``query``: one contribution, the whole vector.

        ``score`` is the score ``search`` ranks the id by (the same scan restricted to the
        id, for IVF with every list probed); ``detail`` names the metric, dtype and kind.

        Raises:
            UnknownIdError: the id is not in the index. As ``search`` for a bad query.
        """
        if id not in self._backend.id_to_slot:
            raise unknown_ids([id], what="doc_id")
        probe = {"nprobe": max(1, self.nlist or 1)} if self._kind == "ivf" else {}
        ids, scores = self.search(query, 1, IdFilter([id]), **probe)
        if len(ids) == 0:  # deleted meanwhile
            raise unknown_ids([id], what="doc_id")
        score = float(scores[0])
        cfg = self._cfg
        part = Contribution(cfg.metric, score, {"dim": cfg.dim, "higher_is_better": cfg.metric != "l2"})
        detail = {"metric": cfg.metric, "dtype": cfg.dtype, "kind": self._kind}
        return Explanation(kind="dense", id=id, score=score, contributions=(part,), detail=detail)

    # --------------------------------------------------------------- persistence

    def save(self, path: str | os.PathLike) -> None:
        """Writes the index to ``path`` atomically (temp file in the same folder, fsync, rename).

        Deleted vectors are dropped from the file. The file is ragfind's sectioned container
        (``persist/sectioned.py``): a JSON header with its own CRC-32, then 64-byte aligned
        sections, each with a CRC-32.
        """
        with self._write_lock:
            save_index(self, path)

    @classmethod
    @old_spellings(positional=("mmap", "verify"))
    def load(cls, path: str | os.PathLike, *, mmap: bool = True, verify: bool = True) -> DenseIndex:
        """Opens an index written by ``save`` (by this version or the one before).

        Args:
            path: the file.
            mmap: for exact and IVF indexes, map the vectors read-only instead of reading them
                (the first add copies them into memory). HNSW graphs are always read into memory.
            verify: check the CRC-32 of every section (reads the whole file once); the
                header's own checksum, sizes and offsets, and an HNSW graph's CRC-32, are
                always checked. A file crafted with valid checksums is trusted: load indexes
                only from sources you trust, as with any binary index format.

        Raises:
            FileNotFoundError: no such file.
            IndexFileError: not a ragfind dense index (another index's file included), another
                version, truncated or corrupt (a ValueError).
        """
        return load_index(cls, path, mmap, verify)
