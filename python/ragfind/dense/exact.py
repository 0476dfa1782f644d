"""The exact backend of DenseIndex: a published snapshot of stored rows scanned by the C++ kernels.

Rows live in capacity-doubling arrays; a search takes the current snapshot (arrays, live mask,
write generation) and never sees a half-done write. Deletes are tombstones in the live mask;
past half dead, a compaction copies the live rows into new arrays a chunk per write. Filters
compile (once per write generation) to a uint8 mask over the slots, or to the ascending slots
themselves when few enough to gather (bench/dense.md has the crossover).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragfind import _core
from ragfind.ids import IdFilter, as_id_filter, empty_ids

_DTYPES = {"f32": np.float32, "f16": np.float16, "i8": np.int8}

# A search met a label the index never assigned: only a corrupt (crafted) graph does that.
_CORRUPT_GRAPH = "the HNSW graph returned a label this index never assigned (corrupt index file?)"

# Exact searches whose allowed set is at most 1/_GATHER_RATIO of the rows score only those
# rows (gathered); larger sets scan every row through the mask. Measured crossovers (200,000 x
# 384, 1 thread; bench/dense.md): about 0.7 of the rows for f32, 0.3-0.4 for f16 and i8.
_GATHER_RATIO = {"f32": 2, "f16": 4, "i8": 4}


def _row_norms(X: np.ndarray, name: str) -> np.ndarray:
    """Float64 L2 norms of X's rows; a zero row is an error (cosine is undefined for it)."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))
    zero = norms == 0
    if zero.any():
        raise ValueError(f"{name} row {int(np.flatnonzero(zero)[0])} is a zero vector; cosine is undefined")
    return norms


def _divide_rows(X: np.ndarray, norms: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """X / norms[:, None] divided in float64 and rounded once to float32, in numpy's buffered
    chunks: the values of (X / norms).astype(np.float32) without its float64 temporary."""
    out = np.empty_like(X) if out is None else out
    np.divide(X, norms[:, None], out=out, dtype=np.float64, casting="same_kind")
    return out


def _quantise_i8(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: scale = max|x| / 127, q = round(x / scale)."""
    amax = np.abs(X).max(axis=1)
    scales = (amax / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0).astype(np.float32)
    Q = np.clip(np.rint(X / safe[:, None]), -127, 127).astype(np.int8)
    return Q, scales


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


class _Compaction:
    """New arrays an exact index's live rows are copied into, one chunk per write."""

    # Old rows looked at per write (about half of them live and copied): writing fresh pages
    # costs about 4 ms per MB here (first-touch page faults), so chunks stay small.
    _CHUNK_BYTES = 1 << 19

    def __init__(self, index: Any, live_count: int) -> None:
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


class ExactBackend:
    """DenseIndex's methods for ``kind="exact"`` (state lives on the index)."""

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
