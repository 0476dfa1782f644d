"""What the dense backends (exact.py, hnsw.py, ivf.py) share: the index's fixed settings, the
storage encodings, input checks, the sorted-id lookup of filters and id padding.

A backend is one object per index holding that kind's storage; ``DenseIndex`` (index.py) owns
the arguments, ids and files and calls it under its write lock:

- ``id_to_slot`` (id -> slot, label or list position, insertion order) and ``id_kind``;
- ``add(X, ids, kind, norms)``, ``delete(slots)``;
- ``search(q, k, threshold, filter, threads, nprobe)`` (lock-free readers: each search reads
  one published snapshot) and ``search_batch_padded(Q, k, threshold, filter, threads, nprobe)``;
- ``sections()`` / ``load(config, header, sections, ids, bad)`` for save and load.

A storage encoding (``ENCODINGS``) names the row dtype and how float32 rows become stored rows
and back; the exact scan and the IVF lists both store rows through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragfind.ids import IdFilter

# A search met a row the index never assigned: only a corrupt (crafted) file does that.
CORRUPT_GRAPH = "the HNSW graph returned a label this index never assigned (corrupt index file?)"

# Rows checked for NaN/inf per step.
_CHECK_BLOCK = 8192


@dataclass(frozen=True)
class Encoding:
    """How float32 rows are stored: the row dtype, per-row scales when ``scaled``, and the two
    conversions. A new storage dtype is one more entry of ``ENCODINGS`` (plus its scan kernels
    in ``_core``, which take the dtype's name)."""

    name: str
    dtype: np.dtype
    scaled: bool  # per-row float32 scales beside the rows
    encode: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]]  # X -> (rows, scales)
    decode: Callable[[np.ndarray, np.ndarray | None], np.ndarray]  # (rows, scales) -> float32 X


ENCODINGS = {
    "f32": Encoding("f32", np.dtype(np.float32), False, lambda X: (X, None), lambda r, s: r),
    "f16": Encoding(
        "f16",
        np.dtype(np.float16),
        False,
        lambda X: (X.astype(np.float16), None),
        lambda r, s: r.astype(np.float32),
    ),
    "i8": Encoding(
        "i8",
        np.dtype(np.int8),
        True,
        lambda X: quantise_i8(X),
        lambda r, s: r.astype(np.float32) * s[:, None],
    ),
}


# IVF dtypes that scan compressed codes of the residuals (ivf_codes.py) and re-score the best
# against stored rows: float32, or float16 with rerank_dtype="f16" (dtype "pq").
CODED_DTYPES = ("pq", "rabitq")


@dataclass(frozen=True)
class DenseConfig:
    """The settings of an index that never change after construction."""

    dim: int
    metric: str  # "cosine", "ip" or "l2"
    dtype: str  # a key of ENCODINGS, or one of CODED_DTYPES
    threads: int  # default search workers (0 = one per core)
    rerank_dtype: str = "f32"  # coded dtypes: the stored rows they re-score ("f32" or "f16")
    encoding: Encoding = field(init=False)
    scan_metric: str = field(init=False)  # the kernels' metric: "l2", or "ip" for cosine too
    has_sqnorms: bool = field(init=False)  # i8 rows with l2 keep their squared norms

    def __post_init__(self) -> None:
        # Coded IVF lists (CODED_DTYPES) keep rows of rerank_dtype beside their codes.
        enc = ENCODINGS[self.dtype if self.dtype in ENCODINGS else self.rerank_dtype]
        object.__setattr__(self, "encoding", enc)
        object.__setattr__(self, "scan_metric", "l2" if self.metric == "l2" else "ip")
        object.__setattr__(self, "has_sqnorms", enc.scaled and self.metric == "l2")

    def encode(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(rows, scales or None, squared norms or None) to store for float32 rows X."""
        rows, scales = self.encoding.encode(X)
        sqnorms = None
        if self.has_sqnorms:
            deq = self.encoding.decode(rows, scales)
            sqnorms = np.einsum("ij,ij->i", deq, deq)
        return rows, scales, sqnorms


def row_norms(X: np.ndarray, name: str) -> np.ndarray:
    """Float64 L2 norms of X's rows; a zero row is an error (cosine is undefined for it)."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))
    zero = norms == 0
    if zero.any():
        raise ValueError(f"{name} row {int(np.flatnonzero(zero)[0])} is a zero vector; cosine is undefined")
    return norms


def divide_rows(X: np.ndarray, norms: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """X / norms[:, None] divided in float64 and rounded once to float32, in numpy's buffered
    chunks: the values of (X / norms).astype(np.float32) without its float64 temporary."""
    out = np.empty_like(X) if out is None else out
    np.divide(X, norms[:, None], out=out, dtype=np.float64, casting="same_kind")
    return out


def normalise_rows(X: np.ndarray, name: str) -> np.ndarray:
    return divide_rows(X, row_norms(X, name))


def quantise_i8(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: scale = max|x| / 127, q = round(x / scale)."""
    amax = np.abs(X).max(axis=1)
    scales = (amax / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    Q = np.clip(np.rint(X / safe[:, None]), -127, 127).astype(np.int8)
    return Q, scales


def check_vectors(vectors: Any, dim: int, name: str = "vectors") -> np.ndarray:
    """``vectors`` as a C-contiguous float32 (n, dim) array of finite values, or the error."""
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


def check_query(q: Any, dim: int, name: str = "q") -> np.ndarray:
    """``q`` as a C-contiguous float32 (dim,) vector of finite values, or the error."""
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


def query_norm(qv: np.ndarray, cfg: DenseConfig) -> tuple[np.ndarray, float]:
    """(q, |q| for cosine else 1.0); raises for NaN/inf, and for a zero query with cosine.

    Cosine rows are unit vectors, so scoring with the raw query ranks exactly as with the
    normalised one: scores (and min_score) are rescaled by |q| instead of normalising q.
    """
    sq = float(qv.dot(qv))  # the method skips np.dot's dispatch; same BLAS sdot
    if not math.isfinite(sq):
        qv = check_query(qv, cfg.dim)  # raises for NaN/inf; huge finite values pass
        sq = float(np.dot(qv.astype(np.float64), qv.astype(np.float64)))
    if cfg.metric != "cosine":
        return qv, 1.0
    if sq == 0.0:
        raise ValueError("q is a zero vector; cosine is undefined")
    return qv, math.sqrt(sq)


def grown(arr: np.ndarray, cap: int) -> np.ndarray:
    """A copy of ``arr`` with room for ``cap`` rows (the rows past its length uninitialised)."""
    out = np.empty((cap, *arr.shape[1:]), dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


class SortedKeys:
    """Ids of rows (slots or labels) sorted once, to map a filter's ids to rows vectorised.

    Int ids added in increasing order (the Retriever's chunk ids) need no sort, and a run of
    consecutive ids no search: a filter's id then maps to its row by a subtraction.
    """

    __slots__ = ("keys", "order", "base")

    def __init__(self, row_ids: np.ndarray, kind: str | None) -> None:
        keys = row_ids.astype(str) if kind == "str" else row_ids
        self.base = None
        if kind != "str" and keys.shape[0] and bool(np.all(keys[1:] > keys[:-1])):
            self.order = None  # strictly increasing: every id once, row i holds keys[i]
            self.keys = keys
            if int(keys[-1]) - int(keys[0]) == keys.shape[0] - 1:
                self.base = int(keys[0])
            return
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]

    def extended(self, row_ids: np.ndarray, kind: str | None) -> SortedKeys:
        """These keys for ``row_ids``, the rows they were made for plus rows appended since:
        increasing keys stay increasing when the new ones continue them, checked on the new
        rows only; otherwise sorted again."""
        n_old = self.keys.shape[0]
        tail = row_ids[n_old:]
        if self.order is not None or kind == "str" or not n_old or not tail.shape[0]:
            return SortedKeys(row_ids, kind)
        if not (tail[0] > self.keys[-1] and bool(np.all(tail[1:] > tail[:-1]))):
            return SortedKeys(row_ids, kind)
        out = SortedKeys.__new__(SortedKeys)
        out.order, out.keys = None, row_ids
        consecutive = self.base is not None and int(tail[-1]) - self.base == row_ids.shape[0] - 1
        out.base = self.base if consecutive and int(tail[0]) == self.base + n_old else None
        return out

    def rows_of(self, flt: IdFilter, kind: str | None) -> np.ndarray:
        """Rows whose id is in ``flt`` (every row of an id, dead ones included)."""
        if flt.kind is None or flt.kind != kind or self.keys.shape[0] == 0:
            return np.empty(0, np.int64)
        q = flt.ids.astype(str) if kind == "str" else flt.ids
        if self.order is None:
            if self.base is not None:  # filter ids are sorted: the ones in range are a slice
                a, b = np.searchsorted(q, [self.base, self.base + self.keys.shape[0]])
                return q[a:b] - self.base
            pos = np.searchsorted(self.keys, q)
            np.minimum(pos, self.keys.shape[0] - 1, out=pos)
            return pos[self.keys[pos] == q].astype(np.int64, copy=False)
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


def pad_ids(slot_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The ids of ``rows`` (-1 marks padding): -1 for int ids, None for str ids."""
    if rows.size and rows.max() >= slot_ids.shape[0]:
        raise ValueError(CORRUPT_GRAPH)
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


def padded_scores(scores: np.ndarray) -> np.ndarray:
    """Padded batch scores with -inf where the kernels leave NaN (in place)."""
    scores[np.isnan(scores)] = -np.inf
    return scores


class LoadedSlots:
    """The id -> slot map of a loaded index with int ids, as arrays instead of a dict.

    A dict of n int ids costs about 116 bytes a vector (the dict, a key and a value object):
    more than the codes of a coded IVF index. This map keeps the loaded ids sorted (int64),
    their slots (int64), their insertion rank (int32) and a deleted flag, 21 bytes a vector;
    ids added after the load go to a dict behind them. It behaves as the dict it replaces for
    what the backends do with ``id_to_slot``: ``len``, ``in``, ``[]``, ``[] =``, ``pop`` and
    iteration in insertion order (an id deleted and added again moves to the end, as in a
    dict); ``update(ids, slots)`` sets many at once.
    """

    __slots__ = ("_keys", "_slot", "_rank", "_gone", "_n_gone", "_more")

    def __init__(self, ids: np.ndarray, slots: np.ndarray) -> None:
        """``ids`` (distinct ints) in insertion order, ``slots`` their slots."""
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        self._keys = ids[order]
        self._slot = np.asarray(slots, dtype=np.int64)[order]
        self._rank = order.astype(np.int32 if order.shape[0] < 2**31 else np.int64)
        self._gone = np.zeros(ids.shape[0], bool)
        self._n_gone = 0
        self._more: dict = {}

    def _find(self, x: object) -> int:
        """Sorted index of a live loaded id, or -1."""
        if type(x) is not int and not isinstance(x, np.integer):
            return -1
        if not -(2**63) <= x < 2**63 or self._keys.shape[0] == 0:
            return -1
        i = int(np.searchsorted(self._keys, x))
        if i < self._keys.shape[0] and self._keys[i] == x and not self._gone[i]:
            return i
        return -1

    def __len__(self) -> int:
        return self._keys.shape[0] - self._n_gone + len(self._more)

    def __contains__(self, x: object) -> bool:
        return x in self._more or self._find(x) >= 0

    def __getitem__(self, x: object) -> int:
        if x in self._more:
            return self._more[x]
        i = self._find(x)
        if i < 0:
            raise KeyError(x)
        return int(self._slot[i])

    def __setitem__(self, x: object, slot: int) -> None:
        i = -1 if x in self._more else self._find(x)
        if i >= 0:
            self._slot[i] = slot
        else:
            self._more[x] = slot

    def update(self, ids: list, slots: list) -> None:
        """``self[ids[i]] = slots[i]`` for every i, the loaded ids in one step."""
        if not self._more and self._keys.shape[0]:
            q = np.asarray(ids, dtype=np.int64)
            i = np.minimum(np.searchsorted(self._keys, q), self._keys.shape[0] - 1)
            hit = (self._keys[i] == q) & ~self._gone[i]
            self._slot[i[hit]] = np.asarray(slots, dtype=np.int64)[hit]
            if hit.all():
                return
            ids = q[~hit].tolist()
            slots = np.asarray(slots, dtype=np.int64)[~hit].tolist()
        for x, p in zip(ids, slots):
            self[x] = p

    def pop(self, x: object) -> int:
        if x in self._more:
            return self._more.pop(x)
        i = self._find(x)
        if i < 0:
            raise KeyError(x)
        self._gone[i] = True
        self._n_gone += 1
        return int(self._slot[i])

    def __iter__(self) -> Any:
        by_rank = np.empty_like(self._rank)
        by_rank[self._rank] = np.arange(self._rank.shape[0], dtype=self._rank.dtype)
        if self._n_gone:
            by_rank = by_rank[~self._gone[by_rank]]
        yield from self._keys[by_rank].tolist()
        yield from list(self._more)


def set_slots(id_to_slot: Any, ids: list, slots: list) -> None:
    """``id_to_slot[ids[i]] = slots[i]`` for every i (a dict, or LoadedSlots at once)."""
    if isinstance(id_to_slot, LoadedSlots):
        id_to_slot.update(ids, slots)
        return
    for x, p in zip(ids, slots):
        id_to_slot[x] = p
