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

The raw kernels are exposed for tests and power users: ``dot``, ``cosine`` and ``l2sq`` on
matrices, dispatched to the active SIMD level (``ragfind.set_simd_level``).
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap as _mmap
import os
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Union

import numpy as np

from ragfind import _core
from ragfind.errors import DuplicateIdError, IdKindError, IndexFileError, UnknownIdError
from ragfind.ids import IdFilter, as_id_filter, empty_ids
from ragfind.persist.atomic import fault_point, fsync_dir, remove_stale_temp_files, temp_prefix

__all__ = ["DenseIndex", "dot", "cosine", "l2sq"]

Id = Union[int, str]

_METRICS = ("cosine", "ip", "l2")
_DTYPES = {"f32": np.float32, "f16": np.float16, "i8": np.int8}
_KINDS = ("exact", "hnsw")
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
# HNSW searches restricted to at most this many ids scan those vectors exactly instead
# (and to at most this fraction of the index; bench/dense.md has the crossover).
_HNSW_EXACT_FILTER_MIN = 4096
_HNSW_EXACT_FILTER_FRACTION = 0.05
# Exact searches whose allowed set is at most 1/_GATHER_RATIO of the rows score only those
# rows (gathered); larger sets scan every row through the mask. Measured crossovers (200,000 x
# 384, 1 thread; bench/dense.md): about 0.7 of the rows for f32, 0.3-0.4 for f16 and i8.
_GATHER_RATIO = {"f32": 2, "f16": 4, "i8": 4}
# hnswlib caps M at 10000 (silently); the graph check rejects larger values in a file.
_MAX_HNSW_PARAM = {"M": 10000, "ef_construction": 2**31 - 1}
# Section dtypes a saved index can hold (np.dtype() parses arbitrary strings: a corrupt file
# could make it raise SyntaxError or allocate huge sub-array types).
_SECTION_DTYPES = frozenset({"<f4", "<f2", "|i1", "<i8", "|u1"})


from ragfind.dense.kernels import cosine, dot, l2sq  # noqa: E402,F401  (re-exported)

# ----------------------------------------------------------------------------- helpers


# A search met a label the index never assigned: only a corrupt (crafted) graph does that.
_CORRUPT_GRAPH = "the HNSW graph returned a label this index never assigned (corrupt index file?)"

# search_batch pads every row to k; past this many entries a k above the index size is an error.
_MAX_PADDED_ENTRIES = 1 << 24


@contextlib.contextmanager
def _scratch_file() -> Iterator[tuple[int, str]]:
    """(fd, path) of a scratch file for hnswlib, which only reads and writes graphs by path.

    On Linux it is an anonymous memory file (``memfd_create``) reached through /proc/self/fd,
    so a killed process leaves nothing behind; elsewhere a temporary file removed on exit.
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("ragfind-hnsw", os.MFD_CLOEXEC)
        try:
            yield fd, f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, tmp = tempfile.mkstemp(prefix="ragfind-hnsw-", suffix=".bin")
    try:
        yield fd, tmp
    finally:
        os.close(fd)
        os.unlink(tmp)


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
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
    norms = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))
    zero = norms == 0
    if zero.any():
        raise ValueError(f"{name} row {int(np.flatnonzero(zero)[0])} is a zero vector; cosine is undefined")
    return (X / norms[:, None]).astype(np.float32)


def _quantise_i8(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: scale = max|x| / 127, q = round(x / scale)."""
    amax = np.abs(X).max(axis=1)
    scales = (amax / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    Q = np.clip(np.rint(X / safe[:, None]), -127, 127).astype(np.int8)
    return Q, scales


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


def _id_kind_of(ids: list) -> str:
    kinds = set()
    for x in ids:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer, str)):
            raise IdKindError(f"ids must be int or str, got {type(x).__name__} ({x!r})")
        kinds.add("str" if isinstance(x, str) else "int")
    if len(kinds) > 1:
        raise IdKindError("ids must be all int or all str, not a mix")
    return kinds.pop()


class _IdArray(np.ndarray):
    """The ``ids`` property's array; calling it (the old ``ids()`` method) gives a list.

    Kept so callers written for the method keep working while they move to the property.
    """

    def __call__(self) -> list:
        return np.asarray(self).tolist()


class _HnswAllowed:
    """A compiled HNSW filter: the allowed live labels, ascending, and a membership test."""

    __slots__ = ("labels", "_set", "vectors")

    def __init__(self, labels: np.ndarray) -> None:
        self.labels = labels
        self._set: frozenset | None = None
        # The allowed vectors, read from the graph at the first exact scan (hnswlib's get_items
        # costs about 12 us per vector) and reused until the index changes.
        self.vectors: np.ndarray | None = None

    def contains(self, label: int) -> bool:
        s = self._set
        if s is None:
            s = self._set = frozenset(self.labels.tolist())
        return label in s


class _Compaction:
    """New arrays an exact index's live rows are copied into, one chunk per write."""

    # Old rows looked at per write (about half of them live and copied): writing fresh pages
    # costs about 4 ms per MB here (first-touch page faults), so chunks stay small.
    _CHUNK_BYTES = 1 << 19

    def __init__(self, index: DenseIndex, live_count: int) -> None:
        cap = max(live_count, 1024)
        dt = _DTYPES[index._dtype]
        self.data = np.empty((cap, index._dim), dtype=dt)
        self.scales = np.empty(cap, np.float32) if index._dtype == "i8" else None
        self.sqnorms = np.empty(cap, np.float32) if (index._dtype == "i8" and index._metric == "l2") else None
        self.slot_ids = np.empty(cap, dtype=index._slot_ids.dtype)
        self.chunk_rows = max(128, self._CHUNK_BYTES // (index._dim * np.dtype(dt).itemsize))
        self.src = 0  # old rows below this have been looked at
        self.dst = 0  # rows copied
        self.old_rows: list[np.ndarray] = []
        self.new_map: dict = {}

    def copy(self, rows: np.ndarray, data, scales, sqnorms, slot_ids) -> None:
        m = rows.shape[0]
        if m == 0:
            return
        if self.dst + m > self.data.shape[0]:  # rows added during the compaction
            cap = max(self.dst + m, 2 * self.data.shape[0])
            self.data = _grown(self.data, cap)
            self.scales = None if self.scales is None else _grown(self.scales, cap)
            self.sqnorms = None if self.sqnorms is None else _grown(self.sqnorms, cap)
            self.slot_ids = _grown(self.slot_ids, cap)
        d0, d1 = self.dst, self.dst + m
        np.take(data, rows, axis=0, out=self.data[d0:d1], mode="clip")  # rows are in range
        if self.scales is not None:
            self.scales[d0:d1] = scales[rows]
        if self.sqnorms is not None:
            self.sqnorms[d0:d1] = sqnorms[rows]
        ids = slot_ids[rows]
        self.slot_ids[d0:d1] = ids
        ids_list = ids.tolist()
        before = len(self.new_map)
        self.new_map.update(zip(ids_list, range(d0, d1)))
        if len(self.new_map) != before + m:
            # An id deleted and added again: it moves to the end (insertion order).
            for x, slot in zip(ids_list, range(d0, d1)):
                self.new_map.pop(x, None)
                self.new_map[x] = slot
        self.old_rows.append(rows.astype(np.int64, copy=False))
        self.dst = d1


def _grown(arr: np.ndarray, cap: int) -> np.ndarray:
    out = np.empty((cap, *arr.shape[1:]), dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


class _SortedKeys:
    """Ids of rows (slots or labels) sorted once, to map a filter's ids to rows vectorised."""

    __slots__ = ("keys", "order")

    def __init__(self, row_ids: np.ndarray, kind: str | None) -> None:
        keys = row_ids.astype(str) if kind == "str" else row_ids
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]

    def rows_of(self, flt: IdFilter, kind: str | None) -> np.ndarray:
        """Rows whose id is in ``flt`` (every row of an id, dead ones included)."""
        if flt.kind is None or flt.kind != kind or self.keys.shape[0] == 0:
            return np.empty(0, np.int64)
        q = flt.ids.astype(str) if kind == "str" else flt.ids
        lo = np.searchsorted(self.keys, q, side="left")
        hi = np.searchsorted(self.keys, q, side="right")
        cnt = hi - lo
        if cnt.max(initial=0) <= 1:
            pos = lo[cnt == 1]
        else:  # an id deleted and added again before compaction: several rows
            total = int(cnt.sum())
            starts = np.repeat(lo, cnt)
            pos = starts + (np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        return self.order[pos].astype(np.int64, copy=False)


def _byte_view(arr: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array as a flat uint8 array (no copy; empty arrays too)."""
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


# ----------------------------------------------------------------------------- index


class DenseIndex:
    """Top-k search over embedding vectors with integer or string ids.

    Args:
        dim: vector dimension (> 0).
        metric: "cosine" (vectors normalised at add time, score = cosine similarity),
            "ip" (inner product) or "l2" (squared Euclidean distance, smaller is better).
        dtype: storage of an exact index: "f32", "f16" (half the memory; values must fit
            float16) or "i8" (a quarter; symmetric per-vector scale max|x|/127; the query is
            quantised to int16, so scores are approximate to about 1e-2 relative).
            HNSW always stores float32.
        kind: "exact" (SIMD brute force; exact for f32) or "hnsw" (approximate graph).
        M, ef_construction: HNSW graph parameters (hnswlib's meaning).
        ef: HNSW search breadth (default 64; raised to k per query); settable later.
        fingerprint: optional name of the embedding model that produced the vectors; stored
            and saved so queries from another model can be refused (``check_fingerprint``).
        threads: default worker threads for searches (0 = automatic).

    Raises:
        ValueError: for an unknown metric/dtype/kind, a non-positive dim or an HNSW index
            with a dtype other than "f32".

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
        self._compaction: _Compaction | None = None  # a compaction under way (exact)
        # HNSW
        self._hnsw: Any = None
        # Many readers or one writer (hnswlib searches must not overlap adds or resizes); writers
        # go ahead of readers that arrive after them (overlapping searches starved writers:
        # about 1 s per add/delete with 4 searching threads; tests/reliability/test_concurrency.py).
        self._rw = _core.ReaderWriterLock()
        if kind == "hnsw":
            self._init_hnsw(1024)

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
        """ "exact" or "hnsw"."""
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
        return out.view(_IdArray)

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
        if self._metric == "cosine":
            X = _normalise_rows(X, "vectors")
        if self._dtype == "f16":
            over = np.abs(X).max(axis=1) > _F16_MAX
            if over.any():
                raise ValueError(
                    f"vectors row {int(np.flatnonzero(over)[0])} exceeds the float16 range (|x| <= 65504); "
                    "use dtype='f32'"
                )
        with self._write_lock:
            if ids is None:
                if self._id_kind == "str":
                    raise IdKindError("this index uses string ids: pass ids=")
                id_list: list = list(range(self._next_auto_id, self._next_auto_id + n))
                kind = "int"
            else:
                id_list = _normalise_ids(ids, n)
                kind = _id_kind_of(id_list)
                if kind == "int":
                    id_list = [int(x) for x in id_list]
                if self._id_kind is not None and kind != self._id_kind:
                    raise IdKindError(f"this index uses {self._id_kind} ids, got {kind} ids")
            if len(set(id_list)) != n:
                seen: set = set()
                dup = next(x for x in id_list if x in seen or seen.add(x))
                raise DuplicateIdError(f"duplicate id {dup!r} in ids")
            for x in id_list:
                if x in self._id_to_slot:
                    raise DuplicateIdError(
                        f"id {x!r} is already in the index (delete it first to replace it)"
                    )
            if self._kind == "exact":
                self._add_exact(X, id_list, kind)
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
                raise UnknownIdError(
                    f"ids not in the index: {missing[:5]!r}{' ...' if len(missing) > 5 else ''}"
                )
            if len(id_list) > 1 and len(set(id_list)) != len(id_list):
                raise DuplicateIdError("ids to delete contain duplicates")
            slots = [self._id_to_slot.pop(x) for x in id_list]
            if self._kind == "exact":
                self._delete_exact(slots)
            else:
                self._delete_hnsw(slots)

    # --------------------------------------------------------------- search

    def search(
        self,
        q: Any,
        k: int = 10,
        min_score: float | None = None,
        filter: Iterable[Id] | Callable[[Id], bool] | None = None,  # noqa: A002 - the API name
        *,
        max_distance: float | None = None,
        threads: int | None = None,
        fingerprint: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ids for one query vector, best first.

        Args:
            q: (dim,) floating vector (also (1, dim)).
            k: number of results (>= 1); fewer come back when fewer vectors qualify.
            min_score: drop results scoring below it (cosine/ip only).
            filter: ids allowed in the results (any iterable; unknown ids are ignored) or a
                callable id -> bool (called once per stored vector; slow on large indexes).
            max_distance: drop results farther than it (metric "l2" only; squared distance).
            threads: worker threads for this call (exact; default: the index's setting).
            fingerprint: the query's model fingerprint, checked with ``check_fingerprint``.

        Returns:
            (ids, scores): ids as an int64 array (integer ids) or an object array of str;
            scores float32 (see the module docstring for what they mean).

        Raises:
            ValueError: wrong dimension, NaN/inf, zero query with cosine, k < 1, a
                threshold for the other metric family, a fingerprint mismatch.
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
        return self._search_exact(qv, int(k), threshold, filter, threads, qnorm)

    def search_batch(
        self,
        Q: Any,
        k: int = 10,
        threads: int = 0,
        min_score: float | None = None,
        filter: Iterable[Id] | Callable[[Id], bool] | None = None,  # noqa: A002
        *,
        max_distance: float | None = None,
        fingerprint: str | None = None,
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
        return self._search_batch_hnsw(Qm, int(k), threshold, filter, int(threads))

    def _check_search_args(self, k: Any, min_score: Any, max_distance: Any, fingerprint: Any) -> None:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if self._metric == "l2" and min_score is not None:
            raise ValueError("min_score applies to cosine/ip scores; with metric 'l2' use max_distance=")
        if self._metric != "l2" and max_distance is not None:
            raise ValueError(f"max_distance applies to metric 'l2'; with {self._metric!r} use min_score=")
        for name, val in (("min_score", min_score), ("max_distance", max_distance)):
            if val is not None and not np.isfinite(val):
                raise ValueError(f"{name} must be a finite number, got {val!r}")
        if fingerprint is not None:
            self.check_fingerprint(fingerprint)

    # --------------------------------------------------------------- exact backend

    def _make_state(self, n: int, live: np.ndarray | None) -> tuple:
        scales = self._scales[:n] if self._dtype == "i8" else None
        sqnorms = self._sqnorms[:n] if (self._dtype == "i8" and self._metric == "l2") else None
        return (self._data[:n], scales, sqnorms, live, self._slot_ids[:n], n, self._generation, self._layout)

    def _ensure_capacity(self, need: int) -> None:
        if need <= self._cap and self._data.flags.writeable:
            return
        cap = max(need, 2 * self._cap, 1024) if need > self._cap else self._cap
        n = self._state[5]
        data = np.empty((cap, self._dim), dtype=_DTYPES[self._dtype])
        data[:n] = self._data[:n]
        scales = np.empty(cap, np.float32)
        scales[:n] = self._scales[:n] if self._scales.shape[0] >= n else 0
        sqnorms = np.empty(cap, np.float32)
        sqnorms[:n] = self._sqnorms[:n] if self._sqnorms.shape[0] >= n else 0
        slot_ids = np.empty(cap, dtype=self._slot_ids.dtype)
        slot_ids[:n] = self._slot_ids[:n]
        self._data, self._scales, self._sqnorms, self._slot_ids = data, scales, sqnorms, slot_ids
        self._cap = cap

    def _add_exact(self, X: np.ndarray, id_list: list, kind: str) -> None:
        n0 = self._state[5]
        n = X.shape[0]
        if self._dtype == "f32":
            rows: np.ndarray = X
        elif self._dtype == "f16":
            rows = X.astype(np.float16)
        else:
            rows, scales = _quantise_i8(X)
        if kind == "str" and self._slot_ids.dtype != object:
            self._slot_ids = self._slot_ids.astype(object)
        self._ensure_capacity(n0 + n)
        self._data[n0 : n0 + n] = rows
        if self._dtype == "i8":
            self._scales[n0 : n0 + n] = scales
            if self._metric == "l2":
                deq = rows.astype(np.float32) * scales[:, None]
                self._sqnorms[n0 : n0 + n] = np.einsum("ij,ij->i", deq, deq)
        self._slot_ids[n0 : n0 + n] = np.asarray(id_list, dtype=self._slot_ids.dtype)
        live = self._state[3]
        if live is not None:
            live = np.concatenate([live, np.ones(n, np.uint8)])
        for i, x in enumerate(id_list):
            self._id_to_slot[x] = n0 + i
        self._generation += 1
        self._state = self._make_state(n0 + n, live)
        self._compaction_step()

    def _delete_exact(self, slots: list) -> None:
        n = self._state[5]
        live = self._state[3]
        live = np.ones(n, np.uint8) if live is None else live.copy()
        live[slots] = 0
        self._n_deleted += len(slots)
        self._generation += 1
        self._state = self._make_state(n, live)
        if self._compaction is None and self._n_deleted > max(1024, n // 2):
            self._compaction = _Compaction(self, n - self._n_deleted)
        self._compaction_step()

    def _compaction_step(self) -> None:
        """Copies the next chunk of live rows of a compaction under way (under the write lock).

        Dropping deleted rows in one go copies every live row (about 600 ms at 100,000 x 384
        float32), so each write copies one small chunk into the new arrays instead, and the
        compacted snapshot is published when the last row is copied; searches use the current
        snapshot meanwhile.
        """
        c = self._compaction
        if c is None:
            return
        data, scales, sqnorms, live, slot_ids, n = self._state[:6]
        end = min(n, c.src + c.chunk_rows)
        rows = c.src + (np.flatnonzero(live[c.src : end]) if live is not None else np.arange(end - c.src))
        c.copy(rows, data, scales, sqnorms, slot_ids)
        c.src = end
        if c.src >= n:
            self._finish_compaction()

    def _finish_compaction(self) -> None:
        c = self._compaction
        live = self._state[3]
        old = np.concatenate(c.old_rows) if c.old_rows else np.empty(0, np.int64)
        # Rows deleted after they were copied stay tombstones in the new layout.
        new_live = live[old].copy() if live is not None else np.ones(old.shape[0], np.uint8)
        dead = np.flatnonzero(new_live == 0)
        new_map = c.new_map
        for j in dead.tolist():
            x = c.slot_ids[j]
            if new_map.get(x) == j:
                del new_map[x]
        m = old.shape[0]
        self._data, self._slot_ids = c.data, c.slot_ids
        self._scales = c.scales if c.scales is not None else np.empty(0, np.float32)
        self._sqnorms = c.sqnorms if c.sqnorms is not None else np.empty(0, np.float32)
        self._cap = c.data.shape[0]
        self._n_deleted = int(dead.shape[0])
        self._id_to_slot = new_map
        self._compaction = None
        self._generation += 1
        self._layout += 1
        self._state = self._make_state(m, new_live if dead.size else None)

    def _compact(self) -> None:
        """Drops deleted rows now, finishing a compaction under way (under the write lock)."""
        if self._compaction is None:
            if self._state[3] is None:
                return
            self._compaction = _Compaction(self, self._state[5] - self._n_deleted)
        self._compaction.chunk_rows = 1 << 62
        self._compaction_step()

    def _sorted_keys_of(self, state: tuple) -> _SortedKeys:
        """The slots' ids sorted, shared by every filter compiled against this layout."""
        n, layout = state[5], state[7]
        cached = self._sorted_keys
        if cached is not None and cached[0] == layout and cached[1] == n:
            return cached[2]
        keys = _SortedKeys(state[4], self._id_kind)
        self._sorted_keys = (layout, n, keys)
        return keys

    def _compile_exact(self, flt: IdFilter, state: tuple) -> tuple:
        """(mask or None, subset or None, allowed count) of ``flt`` over ``state``'s live slots.

        A small allowed set becomes the ascending slots to gather; a larger one a uint8 mask.
        """
        live, n = state[3], state[5]
        slots = self._sorted_keys_of(state).rows_of(flt, self._id_kind)
        mask = np.zeros(n, np.uint8)
        mask[slots] = 1
        if live is not None:
            mask &= live
        count = int(np.count_nonzero(mask))
        if count * _GATHER_RATIO[self._dtype] <= n:
            return None, np.flatnonzero(mask).astype(np.int64), count
        return mask, None, count

    def _exact_allowed(self, filter: Any, state: tuple) -> tuple:  # noqa: A002
        """(mask, subset, allowed count) for a search over ``state``."""
        live, slot_ids, n = state[3], state[4], state[5]
        if callable(filter) and not isinstance(filter, IdFilter):
            # Compatibility: one call per stored vector (slow on large indexes).
            mask = np.fromiter((bool(filter(x)) for x in slot_ids.tolist()), dtype=np.uint8, count=n)
            if live is not None:
                mask &= live
            return mask, None, int(np.count_nonzero(mask))
        flt = as_id_filter(filter)
        return flt.compiled(self, state[6], lambda f: self._compile_exact(f, state))

    def _search_exact(  # noqa: A002
        self, qv: np.ndarray, k: int, threshold: Any, filter: Any, threads: Any, qnorm: float
    ) -> tuple:
        state = self._state
        data, scales, sqnorms, live, slot_ids, n = state[:6]
        if filter is None:
            allowed, subset = live, None
            k = min(k, n)
        else:
            allowed, subset, count = self._exact_allowed(filter, state)
            k = min(k, count)
        if k == 0:
            return empty_ids(self._id_kind), np.empty(0, np.float32)
        t = self._threads if threads is None else int(threads)
        metric = "l2" if self._metric == "l2" else "ip"
        if threshold is not None and qnorm != 1.0:
            threshold = threshold * qnorm
        rows, scores = _core.dense_search(
            data, self._dtype, scales, sqnorms, qv, k, metric, allowed, threshold, t, subset
        )
        if qnorm != 1.0:
            scores *= np.float32(1.0 / qnorm)
        return slot_ids[rows], scores

    def _search_batch_exact(self, Qm: np.ndarray, k: int, threshold: Any, filter: Any, threads: int) -> tuple:  # noqa: A002
        state = self._state
        data, scales, sqnorms, live, slot_ids, n = state[:6]
        if filter is None:
            allowed, subset = live, None
        else:
            allowed, subset, _count = self._exact_allowed(filter, state)
        metric = "l2" if self._metric == "l2" else "ip"
        rows, scores, _counts = _core.dense_search_batch(
            data, self._dtype, scales, sqnorms, Qm, k, metric, allowed, threshold, threads, subset
        )
        return self._pad_ids(slot_ids, rows), scores

    def _pad_ids(self, slot_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if rows.size and rows.max() >= slot_ids.shape[0]:
            raise ValueError(_CORRUPT_GRAPH)
        missing = rows < 0
        if slot_ids.dtype == object:
            out = np.empty(rows.shape, dtype=object)
            if slot_ids.shape[0]:
                out[...] = slot_ids[np.where(missing, 0, rows)]
            out[missing] = None
            return out
        if slot_ids.shape[0] == 0:
            return np.full(rows.shape, -1, dtype=np.int64)
        out = slot_ids[np.where(missing, 0, rows)]
        out[missing] = -1
        return out

    # --------------------------------------------------------------- hnsw backend

    def _init_hnsw(self, capacity: int) -> None:
        import hnswlib

        space = "l2" if self._metric == "l2" else "ip"
        self._hnsw = hnswlib.Index(space=space, dim=self._dim)
        self._hnsw.init_index(
            max_elements=capacity,
            ef_construction=self._ef_construction,
            M=self._M,
            random_seed=100,
            allow_replace_deleted=True,
        )
        self._hnsw.set_ef(self._ef)
        self._hnsw.set_num_threads(max(1, os.cpu_count() or 1))
        self._label_ids: list = []  # label -> id (None once deleted and replaced)
        self._next_label = 0
        self._n_hnsw_deleted = 0
        self._label_ids_arr: np.ndarray | None = None
        self._labels_are_ids_n = -1  # length of _label_ids at which label == id for all
        self._label_live = np.zeros(0, np.uint8)  # label -> 1 while its id is in the index
        self._label_keys: tuple | None = None  # (len(_label_ids), _SortedKeys)

    def _set_label_live(self, labels: np.ndarray, value: int) -> None:
        """Marks labels live (1) or deleted (0), growing the mask (under the write lock)."""
        if labels.size == 0:
            return
        need = int(labels.max()) + 1
        if need > self._label_live.shape[0]:
            grown = np.zeros(max(need, 2 * self._label_live.shape[0], 1024), np.uint8)
            grown[: self._label_live.shape[0]] = self._label_live
            self._label_live = grown
        self._label_live[labels] = value

    def _add_hnsw(self, X: np.ndarray, id_list: list, kind: str) -> None:
        n = X.shape[0]
        labels = np.arange(self._next_label, self._next_label + n, dtype=np.int64)
        self._rw.acquire_write()
        try:
            h = self._hnsw
            # Replacement fills deleted slots first; grow (doubling) for what does not fit.
            need = h.element_count + max(0, n - self._n_hnsw_deleted)
            if need > h.max_elements:
                h.resize_index(max(need, 2 * h.max_elements))
            reuse = min(n, self._n_hnsw_deleted)
            h.add_items(X, labels, replace_deleted=reuse > 0)
            self._n_hnsw_deleted -= reuse
            # Still under the write lock: a search must never see a label whose id is unknown.
            self._label_ids.extend(id_list)
            self._next_label += n
            for x, lab in zip(id_list, labels.tolist()):
                self._id_to_slot[x] = lab
            self._set_label_live(labels, 1)
            self._label_ids_arr = None  # rebuilt lazily for id mapping
            self._generation += 1
        finally:
            self._rw.release_write()

    def _label_array(self) -> np.ndarray:
        arr = self._label_ids_arr
        if arr is None or arr.shape[0] != len(self._label_ids):
            dtype = object if self._id_kind == "str" else np.int64
            arr = np.asarray(
                [(-1 if x is None and dtype is np.int64 else x) for x in self._label_ids], dtype=dtype
            )
            # Labels are ids (integer ids 0..n-1 added in order, none re-added) in the common
            # case; searches then skip the mapping. _label_ids is append-only, so this holds
            # for every label array of this length (no torn reads with concurrent rebuilds).
            if dtype is np.int64 and np.array_equal(arr, np.arange(arr.shape[0], dtype=np.int64)):
                self._labels_are_ids_n = arr.shape[0]
            self._label_ids_arr = arr
        return arr

    def _delete_hnsw(self, labels: list) -> None:
        self._rw.acquire_write()
        try:
            for lab in labels:
                self._hnsw.mark_deleted(int(lab))
            self._n_hnsw_deleted += len(labels)
            self._set_label_live(np.asarray(labels, np.int64), 0)
            self._generation += 1
        finally:
            self._rw.release_write()

    def _live_labels(self) -> np.ndarray:
        """Every live label, ascending (under the read lock)."""
        return np.flatnonzero(self._label_live[: self._next_label]).astype(np.int64)

    def _compile_hnsw(self, flt: IdFilter) -> _HnswAllowed:
        """The live labels of ``flt``'s ids (under the read lock: the labels cannot change)."""
        arr = self._label_array()
        cached = self._label_keys
        if cached is None or cached[0] != arr.shape[0]:
            cached = (arr.shape[0], _SortedKeys(arr, self._id_kind))
            self._label_keys = cached
        labels = cached[1].rows_of(flt, self._id_kind)
        labels = labels[self._label_live[labels] != 0]
        labels.sort()
        return _HnswAllowed(labels)

    def _hnsw_allowed(self, filter: Any) -> _HnswAllowed:  # noqa: A002
        """The allowed live labels of a filter (an IdFilter is compiled once per generation)."""
        if callable(filter) and not isinstance(filter, IdFilter):
            # Compatibility: one call per stored vector (slow on large indexes).
            live = self._live_labels()
            label_ids = self._label_ids
            keep = np.fromiter((bool(filter(label_ids[lab])) for lab in live.tolist()), bool, live.shape[0])
            return _HnswAllowed(live[keep])
        return as_id_filter(filter).compiled(self, self._generation, self._compile_hnsw)

    def _hnsw_exact_max(self) -> int:
        """Allowed sets up to this size are scanned exactly instead of walked (bench/dense.md)."""
        return max(_HNSW_EXACT_FILTER_MIN, int(_HNSW_EXACT_FILTER_FRACTION * len(self._id_to_slot)))

    def _hnsw_exact_subset(
        self, Qm: np.ndarray, k: int, labels: np.ndarray, allowed: _HnswAllowed | None = None
    ) -> tuple:
        """Exact top-k of each query over the given labels, in hnswlib's (labels, distances) form."""
        nq = Qm.shape[0]
        if labels.shape[0] == 0 or k == 0:
            return np.empty((nq, 0), np.uint64), np.empty((nq, 0), np.float32)
        V = None if allowed is None else allowed.vectors
        if V is None:
            V = np.ascontiguousarray(self._hnsw.get_items(labels, return_type="numpy"), dtype=np.float32)
            if allowed is not None:
                allowed.vectors = V
        if self._metric == "l2":
            dist = _core.dense_pairwise(Qm, V, "l2sq")
        else:
            dist = 1.0 - _core.dense_pairwise(Qm, V, "dot")
        kk = min(k, labels.shape[0])
        if kk < labels.shape[0]:
            part = np.argpartition(dist, kk - 1, axis=1)[:, :kk]
            # Ties at the cut: stable order over positions keeps the lower label first.
            cut = np.take_along_axis(dist, part, axis=1).max(axis=1, keepdims=True)
            cand = dist <= cut
            order = np.empty((nq, kk), np.int64)
            for i in range(nq):
                pos = np.flatnonzero(cand[i])
                order[i] = pos[np.argsort(dist[i, pos], kind="stable")[:kk]]
        else:
            order = np.argsort(dist, axis=1, kind="stable")
        return labels[order].astype(np.uint64), np.take_along_axis(dist, order, axis=1).astype(np.float32)

    def _hnsw_walk_or_exact(
        self, Qm: np.ndarray, kk: int, allowed: _HnswAllowed | None, threads: int
    ) -> tuple:
        """hnswlib's walk (filtered when ``allowed``), or an exact scan over the allowed labels
        when that set is small or the walk finds fewer than ``kk`` (hnswlib raises then)."""
        nq = Qm.shape[0]
        if kk == 0:
            return np.empty((nq, 0), np.uint64), np.empty((nq, 0), np.float32)
        if allowed is not None and len(allowed.labels) <= self._hnsw_exact_max():
            return self._hnsw_exact_subset(Qm, kk, allowed.labels, allowed)
        flt = None if allowed is None else allowed.contains
        nt = 1 if flt is not None else (threads or -1)
        try:
            return self._hnsw.knn_query(Qm, k=kk, num_threads=nt, filter=flt)
        except RuntimeError:
            pass
        subset = self._live_labels() if allowed is None else allowed.labels
        if nq == 1:
            return self._hnsw_exact_subset(Qm, kk, subset, allowed)
        labels = np.empty((nq, kk), np.uint64)
        dist = np.empty((nq, kk), np.float32)
        for i in range(nq):
            try:
                li, di = self._hnsw.knn_query(Qm[i], k=kk, num_threads=1, filter=flt)
            except RuntimeError:
                li, di = self._hnsw_exact_subset(Qm[i : i + 1], kk, subset, allowed)
            labels[i], dist[i] = li[0], di[0]
        return labels, dist

    def _search_hnsw(self, qv: np.ndarray, k: int, threshold: Any, filter: Any) -> tuple:  # noqa: A002
        rw = self._rw
        rw.acquire_read()
        try:
            if filter is None:
                kk = min(k, len(self._id_to_slot))
                try:
                    if not kk:
                        raise RuntimeError
                    labels, dist = self._hnsw.knn_query(qv, k=kk, num_threads=1)
                except RuntimeError:
                    labels, dist = self._hnsw_walk_or_exact(qv[None, :], kk, None, 1)
            else:
                allowed = self._hnsw_allowed(filter)
                labels, dist = self._hnsw_walk_or_exact(qv[None, :], min(k, len(allowed.labels)), allowed, 1)
            arr = self._label_ids_arr
            if arr is None or arr.shape[0] != len(self._label_ids):
                arr = self._label_array()
        except BaseException:
            rw.release_read()
            raise
        # One C++ call releases the lock, checks q, converts distances to scores, applies the
        # threshold and maps labels to ids: separate numpy calls on the result each cost
        # microseconds with the caches cold after the graph walk (bench/dense.md).
        n, code = arr.shape[0], self._metric_code
        if n == self._labels_are_ids_n:
            return _core.hnsw_finish_single(rw, labels, dist, qv, code, threshold, n, None)
        if arr.dtype == object:
            rows, scores = _core.hnsw_finish_single(rw, labels, dist, qv, code, threshold, n, None)
            return (arr.take(rows) if rows.size else empty_ids(self._id_kind)), scores
        return _core.hnsw_finish_single(rw, labels, dist, qv, code, threshold, n, arr)

    def _search_batch_hnsw(self, Qm: np.ndarray, k: int, threshold: Any, filter: Any, threads: int) -> tuple:  # noqa: A002
        nq = Qm.shape[0]
        self._rw.acquire_read()
        try:
            if filter is None:
                allowed, kk = None, min(k, len(self._id_to_slot))
            else:
                allowed = self._hnsw_allowed(filter)
                kk = min(k, len(allowed.labels))
            labels, dist = self._hnsw_walk_or_exact(Qm, kk, allowed, threads)
            arr = self._label_array()
        finally:
            self._rw.release_read()
        rows = labels.astype(np.int64)
        rows[np.isnan(dist)] = -1
        scores = dist if self._metric == "l2" else (1.0 - dist).astype(np.float32)
        if threshold is not None:
            bad = scores > threshold if self._metric == "l2" else scores < threshold
            rows[bad] = -1
        scores = np.where(rows < 0, np.float32(np.nan), scores).astype(np.float32)
        out_rows = np.full((nq, k), -1, np.int64)
        out_scores = np.full((nq, k), np.nan, np.float32)
        kk = rows.shape[1]
        # Move kept results to the front of each row (thresholding can leave holes).
        order = np.argsort(rows < 0, axis=1, kind="stable")
        out_rows[:, :kk] = np.take_along_axis(rows, order, axis=1)
        out_scores[:, :kk] = np.take_along_axis(scores, order, axis=1)
        return self._pad_ids(arr, out_rows), out_scores

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

    def _hnsw_bytes(self) -> bytes:
        with _scratch_file() as (fd, tmp):
            self._hnsw.save_index(tmp)
            with open(tmp, "rb") as f:
                return f.read()

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
        if h["kind"] == "exact":
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

    def _load_hnsw(self, blob: Any, max_elements: int) -> None:
        import hnswlib

        space = "l2" if self._metric == "l2" else "ip"
        with _scratch_file() as (fd, tmp):
            _write_all(fd, blob)
            h = hnswlib.Index(space=space, dim=self._dim)
            h.load_index(tmp, max_elements=max_elements, allow_replace_deleted=True)
        h.set_ef(self._ef)
        h.set_num_threads(max(1, os.cpu_count() or 1))
        self._hnsw = h
