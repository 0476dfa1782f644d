"""The exact backend of DenseIndex: a published snapshot of stored rows scanned by the C++ kernels.

Rows live in capacity-doubling arrays; a search takes the current snapshot (arrays, live mask,
write generation) and never sees a half-done write. Deletes are tombstones in the live mask;
past half dead, a compaction copies the live rows into new arrays a chunk per write. Filters
compile (once per write generation) to a uint8 mask over the slots, or to the ascending slots
themselves when few enough to gather (bench/dense.md has the crossover).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ragfind import _core
from ragfind.dense._common import DenseConfig, SortedKeys, grown, pad_ids, padded_scores, query_norm
from ragfind.ids import IdFilter, as_id_filter, empty_ids

# Exact searches whose allowed set is at most 1/_GATHER_RATIO of the rows score only those
# rows (gathered); larger sets scan every row through the mask. Measured crossovers (200,000 x
# 384, 1 thread; bench/dense.md): about 0.7 of the rows for f32, 0.3-0.4 for f16 and i8.
_GATHER_RATIO = {"f32": 2, "f16": 4, "i8": 4}


@dataclass(frozen=True)
class ExactSnapshot:
    """What one search reads, published whole on every write (arrays never change below n)."""

    data: np.ndarray  # (n, dim) stored rows
    scales: np.ndarray | None  # (n,) i8 scales
    sqnorms: np.ndarray | None  # (n,) i8 + l2 squared norms
    live: np.ndarray | None  # (n,) uint8, None while nothing is deleted
    slot_ids: np.ndarray  # (n,) the id of each slot
    n: int
    generation: int  # bumped on every write: compiled filters are keyed by it
    layout: int  # bumped when slots are renumbered (compaction)


class _Compaction:
    """New arrays an exact index's live rows are copied into, one chunk per write."""

    # Old rows looked at per write (about half of them live and copied): writing fresh pages
    # costs about 4 ms per MB here (first-touch page faults), so chunks stay small.
    _CHUNK_BYTES = 1 << 19

    def __init__(self, cfg: DenseConfig, id_dtype: np.dtype, live_count: int) -> None:
        cap = max(live_count, 1024)
        dt = cfg.encoding.dtype
        self.data = np.empty((cap, cfg.dim), dtype=dt)
        self.scales = np.empty(cap, np.float32) if cfg.encoding.scaled else None
        self.sqnorms = np.empty(cap, np.float32) if cfg.has_sqnorms else None
        self.slot_ids = np.empty(cap, dtype=id_dtype)
        self.chunk_rows = max(128, self._CHUNK_BYTES // (cfg.dim * dt.itemsize))
        self.src = 0  # old rows below this have been looked at
        self.dst = 0  # rows copied
        self.old_rows: list[np.ndarray] = []
        self.new_map: dict = {}

    def copy(self, rows: np.ndarray, s: ExactSnapshot) -> None:
        m = rows.shape[0]
        if m == 0:
            return
        if self.dst + m > self.data.shape[0]:  # rows added during the compaction
            cap = max(self.dst + m, 2 * self.data.shape[0])
            self.data = grown(self.data, cap)
            self.scales = None if self.scales is None else grown(self.scales, cap)
            self.sqnorms = None if self.sqnorms is None else grown(self.sqnorms, cap)
            self.slot_ids = grown(self.slot_ids, cap)
        d0, d1 = self.dst, self.dst + m
        np.take(s.data, rows, axis=0, out=self.data[d0:d1], mode="clip")  # rows are in range
        if self.scales is not None:
            self.scales[d0:d1] = s.scales[rows]
        if self.sqnorms is not None:
            self.sqnorms[d0:d1] = s.sqnorms[rows]
        ids = s.slot_ids[rows]
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


class ExactBackend:
    """``kind="exact"``: every live row scored per query (exact for f32)."""

    kind = "exact"

    def __init__(self, cfg: DenseConfig) -> None:
        self.cfg = cfg
        self.id_kind: str | None = None
        self.id_to_slot: dict = {}
        # Writable storage with room to grow; snapshots are views of its first n rows.
        self._cap = 0
        self._data = np.empty((0, cfg.dim), dtype=cfg.encoding.dtype)
        self._scales = np.empty(0, np.float32)
        self._sqnorms = np.empty(0, np.float32)
        self._slot_ids = np.empty(0, dtype=np.int64)
        self._generation = 0
        self._layout = 0
        self._sorted_keys: tuple | None = None  # (layout, n, SortedKeys)
        self._n_deleted = 0
        self._compaction: _Compaction | None = None
        self.snapshot = self._snapshot(0, None)

    def _snapshot(self, n: int, live: np.ndarray | None) -> ExactSnapshot:
        return ExactSnapshot(
            self._data[:n],
            self._scales[:n] if self.cfg.encoding.scaled else None,
            self._sqnorms[:n] if self.cfg.has_sqnorms else None,
            live,
            self._slot_ids[:n],
            n,
            self._generation,
            self._layout,
        )

    # ----------------------------------------------------------------- writes

    def _ensure_capacity(self, need: int) -> None:
        if need <= self._cap and self._data.flags.writeable:
            return
        cap = max(need, 2 * self._cap, 1024) if need > self._cap else self._cap
        n = self.snapshot.n
        data = np.empty((cap, self.cfg.dim), dtype=self._data.dtype)
        data[:n] = self._data[:n]
        scales = np.empty(cap, np.float32)
        scales[:n] = self._scales[:n] if self._scales.shape[0] >= n else 0
        sqnorms = np.empty(cap, np.float32)
        sqnorms[:n] = self._sqnorms[:n] if self._sqnorms.shape[0] >= n else 0
        slot_ids = np.empty(cap, dtype=self._slot_ids.dtype)
        slot_ids[:n] = self._slot_ids[:n]
        self._data, self._scales, self._sqnorms, self._slot_ids = data, scales, sqnorms, slot_ids
        self._cap = cap

    def add(self, X: np.ndarray, id_list: list, kind: str, norms: np.ndarray | None = None) -> None:
        """Stores X's rows (unit rows already for cosine; ``norms`` is unused here)."""
        s = self.snapshot
        n0, n = s.n, X.shape[0]
        rows, scales, sqnorms = self.cfg.encode(X)
        if kind == "str" and self._slot_ids.dtype != object:
            self._slot_ids = self._slot_ids.astype(object)
        self._ensure_capacity(n0 + n)
        self._data[n0 : n0 + n] = rows
        if scales is not None:
            self._scales[n0 : n0 + n] = scales
        if sqnorms is not None:
            self._sqnorms[n0 : n0 + n] = sqnorms
        self._slot_ids[n0 : n0 + n] = np.asarray(id_list, dtype=self._slot_ids.dtype)
        live = s.live
        if live is not None:
            live = np.concatenate([live, np.ones(n, np.uint8)])
        for i, x in enumerate(id_list):
            self.id_to_slot[x] = n0 + i
        self.id_kind = kind
        self._generation += 1
        self.snapshot = self._snapshot(n0 + n, live)
        self._compaction_step()

    def delete(self, slots: list) -> None:
        s = self.snapshot
        n = s.n
        live = np.ones(n, np.uint8) if s.live is None else s.live.copy()
        live[slots] = 0
        self._n_deleted += len(slots)
        self._generation += 1
        self.snapshot = self._snapshot(n, live)
        if self._compaction is None and self._n_deleted > max(1024, n // 2):
            self._compaction = _Compaction(self.cfg, self._slot_ids.dtype, n - self._n_deleted)
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
        s = self.snapshot
        end = min(s.n, c.src + c.chunk_rows)
        rows = c.src + (np.flatnonzero(s.live[c.src : end]) if s.live is not None else np.arange(end - c.src))
        c.copy(rows, s)
        c.src = end
        if c.src >= s.n:
            self._finish_compaction()

    def _finish_compaction(self) -> None:
        c = self._compaction
        live = self.snapshot.live
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
        self.id_to_slot = new_map
        self._compaction = None
        self._generation += 1
        self._layout += 1
        self.snapshot = self._snapshot(m, new_live if dead.size else None)

    def compact(self) -> None:
        """Drops deleted rows now, finishing a compaction under way (under the write lock)."""
        if self._compaction is None:
            if self.snapshot.live is None:
                return
            self._compaction = _Compaction(self.cfg, self._slot_ids.dtype, self.snapshot.n - self._n_deleted)
        self._compaction.chunk_rows = 1 << 62
        self._compaction_step()

    # ----------------------------------------------------------------- filters

    def _sorted_keys_of(self, s: ExactSnapshot) -> SortedKeys:
        """The slots' ids sorted, shared by every filter compiled against this layout (slots are
        only appended within a layout: the keys of fewer slots are extended, not made again)."""
        cached = self._sorted_keys
        if cached is not None and cached[0] == s.layout and cached[1] == s.n:
            return cached[2]
        if cached is not None and cached[0] == s.layout and cached[1] < s.n:
            keys = cached[2].extended(s.slot_ids[: s.n], self.id_kind)
        else:
            keys = SortedKeys(s.slot_ids, self.id_kind)
        self._sorted_keys = (s.layout, s.n, keys)
        return keys

    def _compile(self, flt: IdFilter, s: ExactSnapshot) -> tuple:
        """(mask or None, subset or None, allowed count) of ``flt`` over ``s``'s live slots.

        A small allowed set becomes the ascending slots to gather; a larger one a uint8 mask.
        """
        keys = self._sorted_keys_of(s)
        ratio = _GATHER_RATIO[self.cfg.dtype]
        bits = flt.id_bits() if keys.base is not None and self.id_kind == "int" else None
        if bits is not None:
            # A metadata filter's bitmap over ids, slot i holding id base + i: read a word per
            # 64 slots, no id array.
            if s.live is None and bits.count(keys.base, s.n) * ratio <= s.n:
                slots = bits.rows(keys.base, s.n)
                return None, slots, slots.shape[0]
            mask = bits.mask(keys.base, s.n)
        else:
            mask = np.zeros(s.n, np.uint8)
            mask[keys.rows_of(flt, self.id_kind)] = 1
        if s.live is not None:
            mask &= s.live
        count = int(np.count_nonzero(mask))
        if count * ratio <= s.n:
            return None, np.flatnonzero(mask).astype(np.int64), count
        return mask, None, count

    def _allowed(self, filter: Any, s: ExactSnapshot) -> tuple:  # noqa: A002
        """(mask, subset, allowed count) for a search over ``s``."""
        if callable(filter) and not isinstance(filter, IdFilter):
            # Compatibility: one call per stored vector (slow on large indexes).
            mask = np.fromiter((bool(filter(x)) for x in s.slot_ids.tolist()), dtype=np.uint8, count=s.n)
            if s.live is not None:
                mask &= s.live
            return mask, None, int(np.count_nonzero(mask))
        return as_id_filter(filter).compiled(self, s.generation, lambda f: self._compile(f, s))

    # ----------------------------------------------------------------- search

    def search(  # noqa: A002
        self, qv: np.ndarray, k: int, threshold: Any, filter: Any, threads: int | None, nprobe: Any
    ) -> tuple:
        qv, qnorm = query_norm(qv, self.cfg)
        s = self.snapshot
        if filter is None:
            allowed, subset = s.live, None
            k = min(k, s.n)
        else:
            allowed, subset, count = self._allowed(filter, s)
            k = min(k, count)
        if k == 0:
            return empty_ids(self.id_kind), np.empty(0, np.float32)
        t = self.cfg.threads if threads is None else threads
        if threshold is not None and qnorm != 1.0:
            threshold = threshold * qnorm
        rows, scores = _core.dense_search(
            s.data,
            self.cfg.dtype,
            s.scales,
            s.sqnorms,
            qv,
            k,
            self.cfg.scan_metric,
            allowed,
            threshold,
            t,
            subset,
        )
        if qnorm != 1.0:
            scores *= np.float32(1.0 / qnorm)
        return s.slot_ids[rows], scores

    def search_batch_padded(  # noqa: A002
        self, Qm: np.ndarray, k: int, threshold: Any, filter: Any, threads: int, nprobe: Any
    ) -> tuple:
        s = self.snapshot
        if filter is None:
            allowed, subset = s.live, None
        else:
            allowed, subset, _count = self._allowed(filter, s)
        rows, scores, _counts = _core.dense_search_batch(
            s.data,
            self.cfg.dtype,
            s.scales,
            s.sqnorms,
            Qm,
            k,
            self.cfg.scan_metric,
            allowed,
            threshold,
            threads,
            subset,
        )
        return pad_ids(s.slot_ids, rows), padded_scores(scores)

    # ----------------------------------------------------------------- files

    def sections(self) -> tuple[list, list, dict]:
        """(sections, ids in file order, header fields) of a save: live rows only."""
        s = self.snapshot
        keep = np.flatnonzero(s.live) if s.live is not None else slice(None)
        sections = [("vectors", np.ascontiguousarray(s.data[keep]))]
        if s.scales is not None:
            sections.append(("scales", np.ascontiguousarray(s.scales[keep])))
        if s.sqnorms is not None:
            sections.append(("sqnorms", np.ascontiguousarray(s.sqnorms[keep])))
        return sections, s.slot_ids[keep].tolist(), {}

    @classmethod
    def load(cls, cfg: DenseConfig, header: dict, read: Any, ids: list, id_kind: str | None) -> ExactBackend:
        """The backend of a saved index; ``read(name, dtype, shape)`` returns a checked section."""
        b = cls(cfg)
        count = len(ids)
        b._data = read("vectors", cfg.encoding.dtype, (count, cfg.dim))
        if cfg.encoding.scaled:
            b._scales = read("scales", np.float32, (count,))
        if cfg.has_sqnorms:
            b._sqnorms = read("sqnorms", np.float32, (count,))
        b._cap = count
        b._slot_ids = np.asarray(ids, dtype=object if id_kind == "str" else np.int64)
        b.id_to_slot = {x: i for i, x in enumerate(ids)}
        b.id_kind = id_kind
        b.snapshot = b._snapshot(count, None)
        return b

    def vector(self, slot: int) -> np.ndarray:
        """The stored row of a slot as float32 (dequantised for f16/i8)."""
        s = self.snapshot
        scales = None if s.scales is None else s.scales[slot : slot + 1]
        return self.cfg.encoding.decode(s.data[slot : slot + 1], scales)[0]
