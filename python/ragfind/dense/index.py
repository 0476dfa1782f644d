"""Dense vectors: SIMD similarity kernels, exact search and HNSW (through hnswlib).

``DenseIndex`` stores embedding vectors under integer or string ids and answers top-k
queries. ``kind="exact"`` scans every stored vector with the C++ kernels (float32, float16 or
int8 storage, fused scan + top-k, threads with the GIL released); ``kind="hnsw"`` wraps an
``hnswlib`` graph with growth, real deletes, filters and thread safety added.

Scores, best first:

* ``metric="cosine"``: cosine similarity in [-1, 1], highest first (vectors are normalised
  once when added; queries when searched).
* ``metric="ip"``: inner product, highest first.
* ``metric="l2"``: *squared* Euclidean distance, smallest first.

DenseIndex is the face (arguments, ids, errors, files); the backends hold the rest:
``dense/exact.py`` (the snapshot, the scan, filters as masks or gathered rows, compaction) and
``dense/hnsw.py`` (the hnswlib graph, its filters and the exact fallback).

The raw kernels are exposed for tests and power users: ``dot``, ``cosine`` and ``l2sq`` on
matrices, dispatched to the active SIMD level (``ragfind.set_simd_level``).
"""

from __future__ import annotations

import json
import math
import mmap as _mmap
import os
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Union

import numpy as np

from ragfind import _core
from ragfind.dense.exact import (  # noqa: F401
    _CORRUPT_GRAPH,
    _DTYPES,
    ExactBackend,
    _divide_rows,
    _quantise_i8,
    _row_norms,
)
from ragfind.dense.hnsw import HnswBackend, _scratch_file, _write_all  # noqa: F401
from ragfind.dense.ivf import IvfBackend
from ragfind.errors import (
    IndexFileError,
    check_k,
    ids_needed,
    other_id_kind,
    present_ids,
    repeated_id,
    unknown_ids,
)
from ragfind.ids import IdFilter, id_kind
from ragfind.persist.atomic import fault_point, fsync_dir, remove_stale_temp_files, temp_prefix

__all__ = ["DenseIndex", "dot", "cosine", "l2sq"]

Id = Union[int, str]

_METRICS = ("cosine", "ip", "l2")
_KINDS = ("exact", "hnsw", "ivf")
_F16_MAX = 65504.0
_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)

# File format (little endian): 8-byte magic, u32 version, u32 flags (0), u64 header length,
# u32 CRC-32 of the header, u32 zero; the JSON header; then 64-byte aligned sections, each
# listed in the header with offset, byte length, dtype, shape and CRC-32.
_MAGIC = b"RFDENSE\x00"
_VERSION = 1
_PREAMBLE = struct.Struct("<8sIIQII")
_ALIGN = 64
_MAX_HEADER = 1 << 26
# hnswlib caps M at 10000 (silently); the graph check rejects larger values in a file.
_MAX_HNSW_PARAM = {"M": 10000, "ef_construction": 2**31 - 1}
# Section dtypes a saved index can hold (np.dtype() parses arbitrary strings: a corrupt file
# could make it raise SyntaxError or allocate huge sub-array types).
_SECTION_DTYPES = frozenset({"<f4", "<f2", "|i1", "<i8", "|u1"})


from ragfind.dense.kernels import cosine, dot, l2sq  # noqa: E402,F401  (re-exported)

# ----------------------------------------------------------------------------- helpers


# search_batch pads every row to k; past this many entries a k above the index size is an error.
_MAX_PADDED_ENTRIES = 1 << 24
# Rows checked for NaN/inf per step.
_CHECK_BLOCK = 8192


def _check_vectors(vectors: Any, dim: int, name: str = "vectors") -> np.ndarray:
    arr = np.asarray(vectors)
    if arr.dtype.kind != "f":
        raise TypeError(
            f"{name} must be a floating-point array (float32 preferred; float16/float64 are cast), "
            f"got dtype {arr.dtype}"
        )
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n, {dim}), got shape {arr.shape}")
    if arr.shape[1] != dim:
        raise ValueError(f"{name} must have dimension {dim}, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    # In blocks of rows: no n x dim boolean temporary.
    for b in range(0, arr.shape[0], _CHECK_BLOCK):
        finite = np.isfinite(arr[b : b + _CHECK_BLOCK]).all(axis=1)
        if not finite.all():
            bad = b + int(np.flatnonzero(~finite)[0])
            raise ValueError(f"{name} row {bad} contains NaN or infinity")
    return arr


def _check_query(q: Any, dim: int, name: str = "q") -> np.ndarray:
    arr = np.asarray(q)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point vector, got dtype {arr.dtype}")
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or arr.shape[0] != dim:
        raise ValueError(f"{name} must have shape ({dim},), got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity")
    return arr


def _normalise_rows(X: np.ndarray, name: str) -> np.ndarray:
    return _divide_rows(X, _row_norms(X, name))


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


def _byte_view(arr: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array as a flat uint8 array (no copy; empty arrays too)."""
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


# ----------------------------------------------------------------------------- index


class DenseIndex(ExactBackend, HnswBackend, IvfBackend):
    """Top-k search over embedding vectors with integer or string ids.

    Args:
        dim: vector dimension (> 0).
        metric: "cosine" (vectors normalised at add time, score = cosine similarity),
            "ip" (inner product) or "l2" (squared Euclidean distance, smaller is better).
        dtype: storage of an exact index: "f32", "f16" (half the memory; values must fit
            float16) or "i8" (a quarter; symmetric per-vector scale max|x|/127; the query is
            quantised to int16, so scores are approximate to about 1e-2 relative).
            HNSW always stores float32; IVF lists may be any of the three (f16/i8 lists are
            re-scored in float32, see ``rerank``).
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
        nprobe: IVF lists scanned per query (default max(16, nlist / 32)); settable, and per
            call through ``search(..., nprobe=)``. nprobe >= nlist is an exact search.
        rerank: IVF with dtype "f16"/"i8": the k * rerank best quantised candidates are
            re-scored exactly from a float32 copy of the vectors (kept beside the lists; a
            loaded index maps it); 0 keeps no copy and returns quantised scores.
        fingerprint: optional name of the embedding model that produced the vectors; stored
            and saved so queries from another model can be refused (``check_fingerprint``).
        threads: default worker threads for searches (0 = automatic).

    Raises:
        ValueError: for an unknown metric/dtype/kind, a non-positive dim or an HNSW index
            with a dtype other than "f32", IVF options out of range.

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
        rerank: int = 4,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {tuple(_DTYPES)}, got {dtype!r}")
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        if kind == "hnsw" and dtype != "f32":
            raise ValueError(
                f"kind='hnsw' stores float32 vectors (hnswlib); dtype={dtype!r} needs kind='exact'"
            )
        if fingerprint is not None and not isinstance(fingerprint, str):
            raise TypeError(f"fingerprint must be a str or None, got {type(fingerprint).__name__}")
        if not isinstance(threads, (int, np.integer)) or threads < 0:
            raise ValueError(f"threads must be an integer >= 0 (0 = automatic), got {threads!r}")
        for name, val in (("M", M), ("ef_construction", ef_construction)):
            if not isinstance(val, (int, np.integer)) or not 2 <= val <= _MAX_HNSW_PARAM[name]:
                raise ValueError(f"{name} must be an integer in [2, {_MAX_HNSW_PARAM[name]}], got {val!r}")
        if nlist is not None and (
            isinstance(nlist, bool) or not isinstance(nlist, (int, np.integer)) or nlist < 1
        ):
            raise ValueError(f"nlist must be a positive integer or None (automatic), got {nlist!r}")
        if nprobe is not None:
            self._check_nprobe(nprobe)
        if isinstance(rerank, bool) or not isinstance(rerank, (int, np.integer)) or not 0 <= rerank <= 1024:
            raise ValueError(f"rerank must be an integer in [0, 1024], got {rerank!r}")
        self._dim = int(dim)
        self._metric = metric
        self._dtype = dtype
        self._kind = kind
        self._fingerprint = fingerprint
        self._metric_code = {"ip": 0, "cosine": 1, "l2": 2}[metric]  # for _core.hnsw_finish_single
        self._threads = int(threads)
        self._M = int(M)
        self._ef_construction = int(ef_construction)
        self._ef = 64
        if ef is not None:
            self._check_ef(ef)
            self._ef = int(ef)
        self._write_lock = threading.RLock()
        self._id_kind: str | None = None
        self._id_to_slot: dict = {}
        self._next_auto_id = 0
        # Exact storage: a published snapshot (replaced, never mutated below n, on writes).
        self._cap = 0
        self._data = np.empty((0, self._dim), dtype=_DTYPES[dtype])
        self._scales = np.empty(0, np.float32)
        self._sqnorms = np.empty(0, np.float32)
        self._slot_ids = np.empty(0, dtype=np.int64)
        self._generation = 0  # bumped on every write: compiled filters are keyed by it
        self._layout = 0  # bumped when slots are renumbered (compaction)
        self._sorted_keys: tuple | None = None  # (layout, n, _SortedKeys)
        self._state: tuple = self._make_state(0, None)
        self._n_deleted = 0
        self._compaction: Any = None  # a compaction under way (exact.py _Compaction)
        # HNSW
        self._hnsw: Any = None
        # Many readers or one writer (hnswlib searches must not overlap adds or resizes); writers
        # go ahead of readers that arrive after them (overlapping searches starved writers:
        # about 1 s per add/delete with 4 searching threads; tests/reliability/test_concurrency.py).
        self._rw = _core.ReaderWriterLock()
        if kind == "hnsw":
            self._init_hnsw(1024)
        elif kind == "ivf":
            self._init_ivf(
                None if nlist is None else int(nlist), None if nprobe is None else int(nprobe), int(rerank)
            )

    # --------------------------------------------------------------- properties

    @property
    def dim(self) -> int:
        """Vector dimension."""
        return self._dim

    @property
    def metric(self) -> str:
        """ "cosine", "ip" or "l2"."""
        return self._metric

    @property
    def dtype(self) -> str:
        """Storage: "f32", "f16" or "i8"."""
        return self._dtype

    @property
    def kind(self) -> str:
        """ "exact", "hnsw" or "ivf"."""
        return self._kind

    @property
    def fingerprint(self) -> str | None:
        """Name of the embedding model the vectors came from, or None when not recorded."""
        return self._fingerprint

    @property
    def ef(self) -> int:
        """HNSW search breadth (ignored by exact indexes)."""
        return self._ef

    @ef.setter
    def ef(self, value: int) -> None:
        self._check_ef(value)
        if self._kind == "hnsw":
            self._rw.acquire_write()
            try:
                self._hnsw.set_ef(int(value))
            finally:
                self._rw.release_write()
        self._ef = int(value)

    @staticmethod
    def _check_ef(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"ef must be a positive integer, got {value!r}")

    def __len__(self) -> int:
        return len(self._id_to_slot)

    def __contains__(self, id_: object) -> bool:
        return id_ in self._id_to_slot

    def __repr__(self) -> str:
        return (
            f"DenseIndex(dim={self._dim}, metric={self._metric!r}, dtype={self._dtype!r}, "
            f"kind={self._kind!r}, n={len(self)}, fingerprint={self._fingerprint!r})"
        )

    @property
    def ids(self) -> np.ndarray:
        """The live ids in insertion order: int64 array (object array of str for str ids)."""
        with self._write_lock:
            items = list(self._id_to_slot)
        if self._id_kind == "str":
            out = np.empty(len(items), dtype=object)
            out[:] = items
        else:
            out = np.asarray(items, dtype=np.int64).reshape(-1)
        return out

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

    def add(self, vectors: Any, ids: Any = None) -> list:
        """Adds vectors under ids; all or nothing.

        Args:
            vectors: (n, dim) floating array (float32; float16/float64 are cast); a 1-D
                vector adds one row.
            ids: n ints or n strs (one kind per index), or None for consecutive integers
                after the largest integer id so far (integer-id indexes only).

        Returns:
            The list of ids added.

        Raises:
            TypeError: non-floating vectors, ids of the wrong kind.
            ValueError: wrong shape or dimension, no vectors, NaN/inf, a zero vector with
                metric "cosine", values beyond float16 range with dtype "f16", duplicate ids
                (within the call or already stored), ids count != rows.
        """
        X = _check_vectors(vectors, self._dim)
        n = X.shape[0]
        if n == 0:
            raise ValueError("vectors is empty: nothing to add")
        norms = None
        if self._metric == "cosine":
            if self._kind == "ivf":
                norms = _row_norms(X, "vectors")  # the IVF add divides rows block by block
            else:
                X = _normalise_rows(X, "vectors")
        if self._dtype == "f16" and self._metric != "cosine":  # unit rows fit float16 anyway
            over = np.maximum(X.max(axis=1), -X.min(axis=1)) > _F16_MAX
            if over.any():
                raise ValueError(
                    f"vectors row {int(np.flatnonzero(over)[0])} exceeds the float16 range (|x| <= 65504); "
                    "use dtype='f32'"
                )
        with self._write_lock:
            if ids is None:
                if self._id_kind == "str":
                    raise ids_needed()
                id_list: list = list(range(self._next_auto_id, self._next_auto_id + n))
                kind = "int"
            else:
                id_list = _normalise_ids(ids, n)
                kind = id_kind(id_list)
                if kind == "int":
                    id_list = [int(x) for x in id_list]
                if self._id_kind is not None and kind != self._id_kind:
                    raise other_id_kind(self._id_kind, kind)
            if len(set(id_list)) != n:
                seen: set = set()
                dup = next(x for x in id_list if x in seen or seen.add(x))
                raise repeated_id(dup)
            present = [x for x in id_list if x in self._id_to_slot]
            if present:
                raise present_ids(present)
            if self._kind == "exact":
                self._add_exact(X, id_list, kind)
            elif self._kind == "ivf":
                self._add_ivf(X, id_list, kind, norms)
            else:
                self._add_hnsw(X, id_list, kind)
            self._id_kind = kind
            if kind == "int":
                self._next_auto_id = max(self._next_auto_id, max(id_list) + 1)
        return id_list

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
            missing = [x for x in id_list if x not in self._id_to_slot]
            if missing:
                raise unknown_ids(missing, deleting=True)
            if len(id_list) > 1 and len(set(id_list)) != len(id_list):
                seen: set = set()
                raise repeated_id(next(x for x in id_list if x in seen or seen.add(x)))
            slots = [self._id_to_slot.pop(x) for x in id_list]
            if self._kind == "exact":
                self._delete_exact(slots)
            elif self._kind == "ivf":
                self._delete_ivf(slots)
            else:
                self._delete_hnsw(slots)

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
        X = _check_vectors(sample, self._dim, "sample")
        if X.shape[0] == 0:
            raise ValueError("sample is empty: nothing to train on")
        if self._metric == "cosine":
            X = _normalise_rows(X, "sample")
        with self._write_lock:
            if len(self._id_to_slot):
                raise ValueError("train() needs an empty index: this one already holds vectors")
            self._train_ivf(X)
            self._generation += 1
            self._iv_publish(None)

    # --------------------------------------------------------------- search

    def search(
        self,
        q: Any,
        k: int = 10,
        min_score: float | None = None,
        filter: IdFilter | Iterable[Id] | Callable[[Id], bool] | None = None,  # noqa: A002 - the API name
        *,
        max_distance: float | None = None,
        threads: int | None = None,
        fingerprint: str | None = None,
        nprobe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ids for one query vector, best first.

        Args:
            q: (dim,) floating vector (also (1, dim)).
            k: number of results (>= 1); fewer come back when fewer vectors qualify.
            min_score: drop results scoring below it (cosine/ip only).
            filter: the ids allowed in the results: an ``IdFilter`` (compiled once per write
                of the index and reused by every search until the next one), any iterable of
                ids (compiled for this call), or, for compatibility, a callable id -> bool
                (called once per stored vector; slow on large indexes). Ids the index does not
                hold are ignored. Exactly min(k, allowed live ids) results come back (fewer
                only through min_score/max_distance), ranked as unfiltered.
            max_distance: drop results farther than it (metric "l2" only; squared distance).
            threads: worker threads for this call (exact; default: the index's setting).
            fingerprint: the query's model fingerprint, checked with ``check_fingerprint``.
            nprobe: IVF lists to scan for this call (default: the index's ``nprobe``).

        Returns:
            (ids, scores): ids as an int64 array (integer ids) or an object array of str;
            scores float32 (see the module docstring for what they mean).

        Raises:
            ValueError: wrong dimension, NaN/inf, zero query with cosine, k < 1, a
                threshold for the other metric family, a fingerprint mismatch, nprobe < 1,
                an IVF index not trained yet.
            TypeError: non-floating query.
        """
        if type(k) is not int or k < 1 or min_score is not None or max_distance is not None or fingerprint:
            self._check_search_args(k, min_score, max_distance, fingerprint)
        # Fast path (this runs per query): one dot product both proves the vector finite
        # (NaN/inf propagate into it) and gives the cosine norm.
        if type(q) is np.ndarray and q.dtype is _F32 and q.shape == (self._dim,) and q.flags.c_contiguous:
            qv = q  # no copy; anything else (other dtype/shape/strides) takes the full check
        else:
            qv = _check_query(q, self._dim)
        if self._kind == "hnsw":
            # Checked (finite, non-zero for cosine) by the C++ call that finishes the search.
            return self._search_hnsw(qv, int(k), min_score if self._metric != "l2" else max_distance, filter)
        sq = float(qv.dot(qv))  # the method skips np.dot's dispatch; same BLAS sdot
        if not math.isfinite(sq):
            qv = _check_query(qv, self._dim)  # raises for NaN/inf; huge finite values pass
            sq = float(np.dot(qv.astype(np.float64), qv.astype(np.float64)))
        # Cosine: rows are unit vectors, so scoring with the raw query ranks exactly as with
        # the normalised one; scores (and min_score) are rescaled by |q| instead of
        # normalising the whole query vector.
        qnorm = 1.0
        if self._metric == "cosine":
            if sq == 0.0:
                raise ValueError("q is a zero vector; cosine is undefined")
            qnorm = math.sqrt(sq)
        threshold = min_score if self._metric != "l2" else max_distance
        if self._kind == "ivf":
            return self._search_ivf(qv, int(k), threshold, filter, threads, qnorm, nprobe)
        return self._search_exact(qv, int(k), threshold, filter, threads, qnorm)

    def search_batch(
        self,
        Q: Any,
        k: int = 10,
        threads: int = 0,
        min_score: float | None = None,
        filter: IdFilter | Iterable[Id] | Callable[[Id], bool] | None = None,  # noqa: A002
        *,
        max_distance: float | None = None,
        fingerprint: str | None = None,
        nprobe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k for every row of Q (same arguments as ``search``).

        Returns:
            (ids, scores), each of shape (nq, k), rows best first. Queries with fewer than
            k results are padded: ids with -1 (integer ids) or None (string ids), scores
            with NaN.

        Raises:
            as ``search``; Q must be (nq, dim) with nq >= 1. ValueError when ``k`` exceeds the
            number of vectors and the padded output would hold more than 2**24 entries (a
            ``k`` of 10**7 would otherwise allocate gigabytes of padding).
        """
        self._check_search_args(k, min_score, max_distance, fingerprint)
        Qm = _check_vectors(Q, self._dim, "Q")
        if Qm.shape[0] == 0:
            raise ValueError("Q is empty: pass at least one query row")
        if k > len(self) and Qm.shape[0] * int(k) > _MAX_PADDED_ENTRIES:
            raise ValueError(
                f"k={k} exceeds the {len(self)} vectors in the index and the padded ({Qm.shape[0]}, {k}) "
                f"output would hold {Qm.shape[0] * int(k):,} entries; pass k <= len(index)"
            )
        if not isinstance(threads, (int, np.integer)) or threads < 0:
            raise ValueError(f"threads must be an integer >= 0 (0 = automatic), got {threads!r}")
        if self._metric == "cosine":
            Qm = _normalise_rows(Qm, "Q")
        threshold = min_score if self._metric != "l2" else max_distance
        if self._kind == "exact":
            return self._search_batch_exact(Qm, int(k), threshold, filter, int(threads) or self._threads)
        if self._kind == "ivf":
            return self._search_batch_ivf(
                Qm, int(k), threshold, filter, int(threads) or self._threads, nprobe
            )
        return self._search_batch_hnsw(Qm, int(k), threshold, filter, int(threads))

    def _check_search_args(self, k: Any, min_score: Any, max_distance: Any, fingerprint: Any) -> None:
        check_k(k)
        if self._metric == "l2" and min_score is not None:
            raise ValueError("min_score applies to cosine/ip scores; with metric 'l2' use max_distance=")
        if self._metric != "l2" and max_distance is not None:
            raise ValueError(f"max_distance applies to metric 'l2'; with {self._metric!r} use min_score=")
        for name, val in (("min_score", min_score), ("max_distance", max_distance)):
            if val is not None and not np.isfinite(val):
                raise ValueError(f"{name} must be a finite number, got {val!r}")
        if fingerprint is not None:
            self.check_fingerprint(fingerprint)

    # --------------------------------------------------------------- persistence

    def save(self, path: str | os.PathLike) -> None:
        """Writes the index to ``path`` atomically (temp file in the same folder, fsync, rename).

        Deleted vectors are dropped from the file. The file is a small JSON header plus
        64-byte aligned binary sections, each with a CRC-32.
        """
        path = Path(path)
        with self._write_lock:
            sections: list[tuple[str, np.ndarray]] = []
            if self._kind == "exact":
                data, scales, sqnorms, live, slot_ids, n = self._state[:6]
                keep = np.flatnonzero(live) if live is not None else slice(None)
                sections.append(("vectors", np.ascontiguousarray(data[keep])))
                if scales is not None:
                    sections.append(("scales", np.ascontiguousarray(scales[keep])))
                if sqnorms is not None:
                    sections.append(("sqnorms", np.ascontiguousarray(sqnorms[keep])))
                ids_in_order = slot_ids[keep].tolist()
                extra: dict = {}
            elif self._kind == "ivf":
                ivf_sections, ids_in_order, extra = self._ivf_sections()
                sections.extend(ivf_sections)
            else:
                self._rw.acquire_read()
                try:
                    blob = self._hnsw_bytes()
                finally:
                    self._rw.release_read()
                sections.append(("hnsw", np.frombuffer(blob, dtype=np.uint8)))
                ids_in_order = list(self._id_to_slot)
                sections.append(("labels", np.asarray([self._id_to_slot[x] for x in ids_in_order], np.int64)))
                extra = {"next_label": self._next_label, "max_elements": int(self._hnsw.max_elements)}
            if self._id_kind == "str":
                enc = [s.encode("utf-8") for s in ids_in_order]
                offsets = np.zeros(len(enc) + 1, np.int64)
                np.cumsum([len(e) for e in enc], out=offsets[1:])
                sections.append(("ids_utf8", np.frombuffer(b"".join(enc), dtype=np.uint8)))
                sections.append(("ids_offsets", offsets))
            else:
                sections.append(("ids", np.asarray(ids_in_order, dtype=np.int64)))
            header: dict = {
                "format": "ragfind.DenseIndex",
                "dim": self._dim,
                "metric": self._metric,
                "dtype": self._dtype,
                "kind": self._kind,
                "count": len(ids_in_order),
                "id_kind": self._id_kind,
                "next_auto_id": self._next_auto_id,
                "fingerprint": self._fingerprint,
                "M": self._M,
                "ef_construction": self._ef_construction,
                "ef": self._ef,
                **extra,
            }
            self._write_file(path, header, sections)

    @staticmethod
    def _write_file(path: Path, header: dict, sections: list[tuple[str, np.ndarray]]) -> None:
        # Lay out sections after a header whose size we fix by iterating once.
        table = {}
        for name, arr in sections:
            table[name] = {
                "offset": 0,
                "nbytes": int(arr.nbytes),
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "crc32": zlib.crc32(_byte_view(arr)),
            }
        header = dict(header, sections=table)
        for _ in range(3):
            hbytes = json.dumps(header, sort_keys=True).encode("utf-8")
            off = _PREAMBLE.size + len(hbytes)
            off = (off + _ALIGN - 1) // _ALIGN * _ALIGN
            changed = False
            for name, arr in sections:
                if table[name]["offset"] != off:
                    table[name]["offset"] = off
                    changed = True
                off = (off + arr.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
            if not changed:
                break
        hbytes = json.dumps(header, sort_keys=True).encode("utf-8")
        pre = _PREAMBLE.pack(_MAGIC, _VERSION, 0, len(hbytes), zlib.crc32(hbytes), 0)
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(path)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                fault_point("dense.save.created")
                f.write(pre)
                f.write(hbytes)
                for name, arr in sections:
                    f.write(b"\0" * (table[name]["offset"] - f.tell()))
                    f.write(_byte_view(arr))
                    fault_point("dense.save.section_written")
                f.flush()
                os.fsync(f.fileno())
            fault_point("dense.save.before_rename")
            os.replace(tmp, path)
            fault_point("dense.save.after_rename")
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        fsync_dir(path.parent)

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True, verify: bool = True) -> DenseIndex:
        """Opens an index written by ``save``.

        Args:
            path: the file.
            mmap: for exact indexes, map the vectors read-only instead of reading them (the
                first add copies them into memory). HNSW graphs are always read into memory.
            verify: check the CRC-32 of every section (reads the whole file once); the
                header's own checksum, sizes and offsets, and an HNSW graph's CRC-32, are
                always checked. A file crafted with valid checksums is trusted: load indexes
                only from sources you trust, as with any binary index format.

        Raises:
            FileNotFoundError: no such file.
            IndexFileError: not a ragfind dense index (another index's file included), another
                version, truncated or corrupt (a ValueError).
        """
        path = Path(path)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            buf: Any
            if mmap and size > 0:
                buf = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ)
            else:
                buf = f.read()
        try:
            return cls._from_buffer(buf, size, str(path), verify)
        except IndexFileError:
            raise
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            IndexError,
            struct.error,
            OverflowError,
        ) as e:
            raise IndexFileError(
                f"{path} is not a valid ragfind dense index: {type(e).__name__}: {e}"
            ) from None

    @classmethod
    def _from_buffer(cls, buf: Any, size: int, where: str, verify: bool) -> DenseIndex:
        def bad(msg: str) -> IndexFileError:
            return IndexFileError(f"{where} is not a valid ragfind dense index: {msg}")

        if size < _PREAMBLE.size:
            raise bad(f"file is {size} bytes, shorter than the {_PREAMBLE.size}-byte preamble")
        magic, version, _flags, hlen, hcrc, _ = _PREAMBLE.unpack(bytes(buf[: _PREAMBLE.size]))
        if magic != _MAGIC:
            raise bad(f"wrong magic {magic!r}")
        if version != _VERSION:
            raise bad(f"format version {version}, this ragfind reads version {_VERSION}")
        if hlen > _MAX_HEADER or _PREAMBLE.size + hlen > size:
            raise bad(f"header length {hlen} does not fit in the {size}-byte file (truncated?)")
        hbytes = bytes(buf[_PREAMBLE.size : _PREAMBLE.size + hlen])
        if zlib.crc32(hbytes) != hcrc:
            raise bad("header checksum mismatch")
        h = json.loads(hbytes.decode("utf-8"))
        if not isinstance(h, dict) or h.get("format") != "ragfind.DenseIndex":
            raise bad("header does not describe a DenseIndex")
        dim, count = h["dim"], h["count"]
        if not isinstance(dim, int) or dim <= 0 or not isinstance(count, int) or count < 0:
            raise bad(f"invalid dim {dim!r} or count {count!r}")
        if h["metric"] not in _METRICS or h["dtype"] not in _DTYPES or h["kind"] not in _KINDS:
            raise bad("unknown metric, dtype or kind")
        if h["id_kind"] not in (None, "int", "str"):
            raise bad(f"unknown id kind {h['id_kind']!r}")
        secs: dict[str, np.ndarray] = {}
        for name, s in h["sections"].items():
            off, nbytes, shape = s["offset"], s["nbytes"], tuple(s["shape"])
            if s["dtype"] not in _SECTION_DTYPES:  # never hand a file's string to np.dtype()
                raise bad(f"section {name!r} has an unexpected dtype {s['dtype']!r}")
            dt = np.dtype(s["dtype"])
            if dt.hasobject or not all(isinstance(v, int) and v >= 0 for v in (off, nbytes, *shape)):
                raise bad(f"section {name!r} has an invalid description")
            if off % _ALIGN or off < _PREAMBLE.size + hlen or off + nbytes > size:
                raise bad(f"section {name!r} lies outside the file (truncated?)")
            if int(np.prod(shape, dtype=np.int64)) * dt.itemsize != nbytes:
                raise bad(f"section {name!r} size does not match its shape")
            view = memoryview(buf)[off : off + nbytes]
            # The HNSW graph is always checked: hnswlib walks its neighbour ids without bounds
            # checks, so unverified graph bytes could crash the process (verify=False only
            # skips the vector sections, whose bad values cannot).
            if (verify or name == "hnsw") and zlib.crc32(view) != s["crc32"]:
                raise bad(f"section {name!r} checksum mismatch (corrupt file)")
            secs[name] = np.frombuffer(view, dtype=dt).reshape(shape)

        idx = cls(
            dim,
            metric=h["metric"],
            dtype=h["dtype"],
            kind=h["kind"],
            M=h["M"],
            ef_construction=h["ef_construction"],
            ef=h["ef"],
            fingerprint=h["fingerprint"],
            **cls._ivf_args(h),
        )
        if h["id_kind"] == "str":
            blob, offs = secs["ids_utf8"].tobytes(), secs["ids_offsets"]
            if (
                offs.shape != (count + 1,)
                or offs[0] != 0
                or offs[-1] != len(blob)
                or (np.diff(offs) < 0).any()
            ):
                raise bad("string id offsets are inconsistent")
            ids: list = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(count)]
        else:
            ids = secs["ids"].tolist()
            if len(ids) != count:
                raise bad("id count does not match")
        if len(set(ids)) != count:
            raise bad("duplicate ids")
        idx._id_kind = h["id_kind"]
        idx._next_auto_id = int(h["next_auto_id"])
        if h["kind"] == "ivf":
            idx._load_ivf(h, secs, ids, bad)
        elif h["kind"] == "exact":
            vec = secs["vectors"]
            if vec.shape != (count, dim) or vec.dtype != np.dtype(_DTYPES[h["dtype"]]):
                raise bad("vectors section has the wrong shape or dtype")
            idx._data = vec
            idx._cap = count
            if h["dtype"] == "i8":
                idx._scales = secs["scales"]
                if idx._scales.shape != (count,) or idx._scales.dtype != np.float32:
                    raise bad("scales section has the wrong shape or dtype")
                if h["metric"] == "l2":
                    idx._sqnorms = secs["sqnorms"]
                    if idx._sqnorms.shape != (count,) or idx._sqnorms.dtype != np.float32:
                        raise bad("sqnorms section has the wrong shape or dtype")
            idx._slot_ids = np.asarray(ids, dtype=object if h["id_kind"] == "str" else np.int64)
            idx._id_to_slot = {x: i for i, x in enumerate(ids)}
            idx._state = idx._make_state(count, None)
        else:
            labels = secs["labels"]
            if labels.shape != (count,):
                raise bad("labels section has the wrong shape")
            next_label = int(h["next_label"])
            if count and (labels.min() < 0 or labels.max() >= next_label):
                raise bad("labels out of range")
            # hnswlib trusts its graph file (neighbour ids, record sizes, levels): a file whose
            # checksums were recomputed after tampering would make a later search or add read
            # or write out of bounds, so the whole graph is checked before hnswlib sees it.
            try:
                g = _core.hnsw_check_graph(secs["hnsw"], dim)
            except ValueError as e:
                raise bad(str(e)) from None
            if g["M"] != h["M"] or g["ef_construction"] != h["ef_construction"]:
                raise bad("the HNSW graph's M or ef_construction differs from the header's")
            # The graph stores its own labels: the live ones are exactly the labels section.
            graph_labels = g["labels"].view(np.int64)
            if graph_labels.size and (graph_labels.min() < 0 or graph_labels.max() >= next_label):
                raise bad("the HNSW graph holds labels outside the labels section")
            live = graph_labels[~g["deleted"]]
            if live.shape != labels.shape or not np.array_equal(np.sort(live), np.sort(labels)):
                raise bad("the labels section does not match the HNSW graph's live elements")
            try:
                # Capacity is not taken from the file (a huge value would allocate per slot):
                # what is stored, at least the initial 1024; adds grow it by doubling.
                idx._load_hnsw(secs["hnsw"], max(1024, g["count"]))
            except RuntimeError as e:  # hnswlib's own reader rejecting the graph bytes
                raise bad(f"the HNSW graph section is corrupt ({e})") from None
            idx._next_label = next_label
            label_ids: list = [None] * next_label
            for x, lab in zip(ids, labels.tolist()):
                label_ids[lab] = x
            idx._label_ids = label_ids
            idx._label_ids_arr = None
            idx._set_label_live(labels.astype(np.int64), 1)
            idx._id_to_slot = dict(zip(ids, labels.tolist()))
            idx._n_hnsw_deleted = int(idx._hnsw.element_count) - count
        return idx
