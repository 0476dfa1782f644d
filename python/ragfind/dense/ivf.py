"""The IVF backend of DenseIndex: k-means lists scanned by the C++ kernels.

Training (C++ k-means on the SIMD kernels, spherical for cosine/ip) places ``nlist`` centroids;
every vector goes to the list of its nearest centroid. All lists live in one row array, each a
contiguous range ``[start, start + len)`` with room to grow; a list that outgrows its room moves
to the end of the array with half again as much room, leaving a hole, and when holes and
deleted rows make up more than half the array it is repacked (a repack during an add leaves
every list half its length of room, so the adds after it do not move every list again).
Searches take a published snapshot (arrays + list table + live mask), so a write never
disturbs a running search.

With automatic nlist the index retrains as it grows: once the live rows reach ``_GROW_FACTOR``
times the count it was trained at and ``auto_nlist`` of the new count is at least
``_GROW_NLIST`` times the current nlist, k-means runs again on a sample of the stored rows and
every row moves to its new list, all published as one new snapshot (a search sees the old lists
or the new ones, never a mix). A retrain reassigns all n rows (O(n * nlist * dim)); as it only
happens after the store has grown 4x, the total work of all retrains stays within a constant
factor (about 4/3) of the last one, i.e. O(n) rows moved per row added, amortised. An explicit
``nlist=`` never retrains; deletes never shrink the lists.

f16/i8 lists keep a float32 copy of every row at the same position: the scan ranks the
quantised rows, and the ``k * rerank`` best are re-scored exactly from the copy, so with
enough lists probed the results equal an exact float32 search. The copy costs 4 bytes per
value on top of the list (a loaded index maps it: only the re-scored rows are read, so it
mostly stays on disk); ``rerank=0`` stores no copy and returns the quantised scores.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ragfind import _core
from ragfind.dense.exact import _DTYPES, _divide_rows, _quantise_i8, _SortedKeys
from ragfind.ids import IdFilter, as_id_filter, empty_ids

# Training rows per centroid at most (faiss uses up to 256; 64 keeps k-means to seconds).
_TRAIN_PER_LIST = 64
_TRAIN_ITERS = 10
_SEED = 1234
# Rows converted and written per step of an add (a few MB of temporaries at dim 384).
_WRITE_BLOCK = 4096
# Rows normalised and assigned per call when an add divides cosine rows itself (25 MB at dim 384).
_ASSIGN_BLOCK = 16384
# Automatic nlist: retrain when the live rows reach this multiple of the training count...
_GROW_FACTOR = 4
# ... and auto_nlist(live rows) is at least this multiple of the current nlist.
_GROW_NLIST = 1.5


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + n) for every (s, n), as int64."""
    total = int(lens.sum())
    if total == 0:
        return np.empty(0, np.int64)
    offs = np.cumsum(lens) - lens
    return np.repeat(starts - offs, lens) + np.arange(total, dtype=np.int64)


def auto_nlist(n: int) -> int:
    """The list count chosen when none is given: about 4 * sqrt(n), at least 39 rows per list."""
    return max(1, min(round(4 * math.sqrt(n)), n // 39))


def default_nprobe(nlist: int) -> int:
    """Lists probed when none is given: 1/32 of them, at least 16. Measured recall@10: 0.986
    with nlist 1024 on bench/compare_ivf.py's data (0.95 needs 24); 0.925 on SciFact's 5,183
    MiniLM embeddings with the automatic nlist 132 (bench/dense.md)."""
    return min(nlist, max(16, nlist // 32))


class IvfBackend:
    """DenseIndex's methods for ``kind="ivf"`` (state lives on the index)."""

    def _init_ivf(self, nlist: int | None, nprobe: int | None, rerank: int) -> None:
        self._ivf_nlist_arg = nlist  # None: chosen at training
        self._nprobe_arg = nprobe
        self._rerank = rerank
        self._centroids: np.ndarray | None = None
        self._imbalance = float("nan")
        self._trained_n = 0  # rows the current lists were trained on (growth policy)
        self._iv_cap = 0
        self._iv_reset(0)

    def _iv_reset(self, nlist: int) -> None:
        dt = _DTYPES[self._dtype]
        self._iv_data = np.empty((0, self._dim), dtype=dt)
        self._iv_scales = np.empty(0, np.float32)
        self._iv_sqnorms = np.empty(0, np.float32)
        self._iv_exact = np.empty((0, self._dim), np.float32) if self._keeps_exact() else None
        self._iv_ids = np.empty(0, dtype=object if self._id_kind == "str" else np.int64)
        self._iv_start = np.zeros(nlist, np.int64)
        self._iv_len = np.zeros(nlist, np.int64)
        self._iv_room = np.zeros(nlist, np.int64)
        self._iv_used = 0
        self._iv_cap = 0
        self._n_deleted = 0
        self._iv_publish(None)

    def _keeps_exact(self) -> bool:
        return self._dtype != "f32" and self._rerank > 0

    # ----------------------------------------------------------------- state

    def _iv_publish(self, live: np.ndarray | None) -> None:
        u = self._iv_used
        self._state = (
            self._centroids,
            self._iv_data[:u],
            self._iv_scales[:u] if self._dtype == "i8" else None,
            self._iv_sqnorms[:u] if (self._dtype == "i8" and self._metric == "l2") else None,
            None if self._iv_exact is None else self._iv_exact[:u],
            self._iv_ids[:u],
            self._iv_start.copy(),
            self._iv_len.copy(),
            live,
            u,
            self._generation,
            int(self._iv_len.sum()) - self._n_deleted,  # live rows
        )

    @property
    def nlist(self) -> int | None:
        """IVF lists (None until an index with automatic nlist is trained)."""
        if self._centroids is not None:
            return int(self._centroids.shape[0])
        return self._ivf_nlist_arg

    @property
    def nprobe(self) -> int | None:
        """IVF lists scanned per query (default: max(16, nlist / 32)); settable."""
        if self._nprobe_arg is not None:
            return self._nprobe_arg
        n = self.nlist
        return None if n is None else default_nprobe(n)

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        self._nprobe_arg = self._check_nprobe(value)

    @staticmethod
    def _check_nprobe(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"nprobe must be a positive integer, got {value!r}")
        return int(value)

    @property
    def is_trained(self) -> bool:
        """True once an IVF index has centroids (exact and HNSW indexes: always True)."""
        return self._kind != "ivf" or self._centroids is not None

    # ----------------------------------------------------------------- training

    @staticmethod
    def _train_sample(n: int, nlist: int) -> np.ndarray | None:
        """Sorted positions of the k-means sample of n rows, or None for all of them."""
        m = min(n, max(_TRAIN_PER_LIST * nlist, 10_000))
        if m == n:
            return None
        return np.sort(np.random.default_rng(_SEED).choice(n, m, replace=False))

    def _kmeans(self, X: np.ndarray, nlist: int) -> tuple[np.ndarray, float]:
        metric = "l2" if self._metric == "l2" else "ip"
        C, imbalance, _splits = _core.ivf_train(
            np.ascontiguousarray(X), nlist, metric, _TRAIN_ITERS, _SEED, self._threads
        )
        return C, float(imbalance)

    def _train_ivf(self, X: np.ndarray, norms: np.ndarray | None = None) -> None:
        """k-means on (a sample of) X; X is checked and normalised (cosine) already, or with
        ``norms`` its rows are divided by them (only the sample's rows are)."""
        n = X.shape[0]
        nlist = self._ivf_nlist_arg if self._ivf_nlist_arg is not None else auto_nlist(n)
        if n < nlist:
            raise ValueError(
                f"kind='ivf' with nlist={nlist} needs at least {nlist} vectors to train, got {n}; "
                "add more vectors at once, call train() with a larger sample, or pass a smaller nlist"
            )
        pick = self._train_sample(n, nlist)
        if pick is not None:
            X = X[pick]
            if norms is not None:
                X = _divide_rows(X, norms[pick], out=X)  # X is a fresh copy here
        elif norms is not None:
            X = _divide_rows(X, norms)
        self._centroids, self._imbalance = self._kmeans(X, nlist)
        self._trained_n = n
        self._iv_reset(nlist)

    def _iv_float_rows(self, pos: np.ndarray) -> np.ndarray:
        """float32 rows at list positions ``pos``: the rows or their float copy, else the
        dequantised rows (enough to choose lists; the stored rows are never re-quantised)."""
        if self._dtype == "f32":
            return self._iv_data[pos]
        if self._iv_exact is not None:
            return self._iv_exact[pos]
        if self._dtype == "f16":
            return self._iv_data[pos].astype(np.float32)
        return self._iv_data[pos].astype(np.float32) * self._iv_scales[pos][:, None]

    def _iv_maybe_retrain(self) -> None:
        """Retrains automatic-nlist lists once the index has outgrown them (under the write lock)."""
        if self._ivf_nlist_arg is not None or self._centroids is None:
            return
        live_rows = self._state[11]
        nlist = self._centroids.shape[0]
        if live_rows < _GROW_FACTOR * max(self._trained_n, 1):
            return
        new_nlist = auto_nlist(live_rows)
        if new_nlist < _GROW_NLIST * nlist:
            return
        self._retrain_ivf(new_nlist)

    def _retrain_ivf(self, nlist: int) -> None:
        """New centroids from a sample of the live rows; every row moves to its nearest new list,
        published as one snapshot."""
        src = self._iv_live_positions()
        n = src.shape[0]
        pick = self._train_sample(n, nlist)
        C, imbalance = self._kmeans(self._iv_float_rows(src if pick is None else src[pick]), nlist)
        metric = "l2" if self._metric == "l2" else "ip"
        owner = np.empty(n, np.int64)
        for b in range(0, n, _ASSIGN_BLOCK):
            xb = self._iv_float_rows(src[b : b + _ASSIGN_BLOCK])
            owner[b : b + xb.shape[0]] = _core.ivf_assign(np.ascontiguousarray(xb), C, metric, self._threads)
        order = np.argsort(owner, kind="stable")
        self._iv_pack(src[order], owner[order], nlist, C, slack=True)
        self._imbalance, self._trained_n = imbalance, n

    # ----------------------------------------------------------------- writes

    def _iv_reserve(self, need: int) -> None:
        """Room for ``need`` positions in writable arrays (new arrays: snapshots keep the old)."""
        if need <= self._iv_cap and self._iv_data.flags.writeable:
            return
        cap = max(need, self._iv_cap + self._iv_cap // 2, 1024) if need > self._iv_cap else self._iv_cap
        u = self._iv_used

        def grown(arr: np.ndarray | None, fill: Any = None) -> np.ndarray | None:
            if arr is None:
                return None
            out = (
                np.empty((cap, *arr.shape[1:]), dtype=arr.dtype)
                if fill is None
                else np.full(cap, fill, arr.dtype)
            )
            out[:u] = arr[:u]
            return out

        self._iv_data = grown(self._iv_data)
        if self._dtype == "i8":
            self._iv_scales = grown(self._iv_scales)
            if self._metric == "l2":
                self._iv_sqnorms = grown(self._iv_sqnorms)
        self._iv_exact = grown(self._iv_exact)
        self._iv_ids = grown(self._iv_ids, None if self._iv_ids.dtype == object else -1)
        self._iv_cap = cap

    def _iv_copy_rows(self, dst: np.ndarray, src: np.ndarray) -> None:
        self._iv_data[dst] = self._iv_data[src]
        if self._dtype == "i8":
            self._iv_scales[dst] = self._iv_scales[src]
            if self._metric == "l2":
                self._iv_sqnorms[dst] = self._iv_sqnorms[src]
        if self._iv_exact is not None:
            self._iv_exact[dst] = self._iv_exact[src]
        self._iv_ids[dst] = self._iv_ids[src]

    def _add_ivf(self, X: np.ndarray, id_list: list, kind: str, norms: np.ndarray | None = None) -> None:
        """Adds X's rows; with ``norms`` (cosine) row i is X[i] / norms[i], divided a block at a
        time as it is read, so no normalised copy of X is ever allocated."""
        if self._centroids is None:
            self._train_ivf(X, norms)
        if kind == "str" and self._iv_ids.dtype != object:
            self._iv_ids = self._iv_ids.astype(object)
        n = X.shape[0]
        nlist = self._centroids.shape[0]
        metric = "l2" if self._metric == "l2" else "ip"
        if norms is None:
            lists = _core.ivf_assign(X, self._centroids, metric, self._threads)
        else:
            lists = np.empty(n, np.int64)
            buf = np.empty((min(n, _ASSIGN_BLOCK), X.shape[1]), np.float32)
            for b in range(0, n, _ASSIGN_BLOCK):
                e = min(n, b + _ASSIGN_BLOCK)
                xb = _divide_rows(X[b:e], norms[b:e], out=buf[: e - b])
                lists[b:e] = _core.ivf_assign(xb, self._centroids, metric, self._threads)
        counts = np.bincount(lists, minlength=nlist).astype(np.int64)
        start, ln, room = self._iv_start.copy(), self._iv_len.copy(), self._iv_room.copy()
        live = self._state[8]
        need = ln + counts
        grow = np.flatnonzero(need > room)
        if grow.size:
            # A list's first rows fit exactly (one bulk add packs the array); a list that grows
            # again gets half again its size, so moves cost O(1) per row amortised.
            new_room = need[grow] + np.where(ln[grow] > 0, need[grow] // 2, 0)
            new_start = self._iv_used + np.cumsum(new_room) - new_room
            self._iv_reserve(self._iv_used + int(new_room.sum()))
            moving = ln[grow] > 0
            if moving.any():
                src = _ranges(start[grow][moving], ln[grow][moving])
                dst = _ranges(new_start[moving], ln[grow][moving])
                self._iv_copy_rows(dst, src)
                keep = np.ones(src.shape[0], bool) if live is None else live[src] != 0
                for x, p in zip(self._iv_ids[dst[keep]].tolist(), dst[keep].tolist()):
                    self._id_to_slot[x] = p
                if live is not None:
                    live = np.concatenate(
                        [live, np.zeros(self._iv_used + int(new_room.sum()) - live.shape[0], np.uint8)]
                    )
                    live[dst] = live[src]
                    live[src] = 0
            start[grow] = new_start
            room[grow] = new_room
            self._iv_used += int(new_room.sum())
        else:
            self._iv_reserve(self._iv_used)
        if live is not None:  # a new mask: the published one stays as searches saw it
            live = np.concatenate([live, np.zeros(max(0, self._iv_used - live.shape[0]), np.uint8)])
        order = np.argsort(lists, kind="stable")
        ls = lists[order]
        first = np.cumsum(counts) - counts
        pos = np.empty(n, np.int64)
        pos[order] = start[ls] + ln[ls] + (np.arange(n, dtype=np.int64) - first[ls])
        # Converted and scattered in blocks of rows: the temporaries stay in cache instead of
        # being n x dim arrays written once and read once.
        wbuf = None if norms is None else np.empty((min(n, _WRITE_BLOCK), X.shape[1]), np.float32)
        for b in range(0, n, _WRITE_BLOCK):
            xb, pb = X[b : b + _WRITE_BLOCK], pos[b : b + _WRITE_BLOCK]
            if norms is not None:
                xb = _divide_rows(xb, norms[b : b + _WRITE_BLOCK], out=wbuf[: xb.shape[0]])
            if self._dtype == "f32":
                self._iv_data[pb] = xb
            elif self._dtype == "f16":
                self._iv_data[pb] = xb.astype(np.float16)
            else:
                q, scales = _quantise_i8(xb)
                self._iv_data[pb] = q
                self._iv_scales[pb] = scales
                if self._metric == "l2":
                    deq = q.astype(np.float32) * scales[:, None]
                    self._iv_sqnorms[pb] = np.einsum("ij,ij->i", deq, deq)
            if self._iv_exact is not None:
                self._iv_exact[pb] = xb
        self._iv_ids[pos] = np.asarray(id_list, dtype=self._iv_ids.dtype)
        if live is not None:
            live[pos] = 1
        for x, p in zip(id_list, pos.tolist()):
            self._id_to_slot[x] = p
        self._iv_start, self._iv_len, self._iv_room = start, ln + counts, room
        self._generation += 1
        self._iv_publish(live)
        # The add is stored and published: upkeep that runs out of memory must not report it as
        # failed. The old lists stay valid and the next add tries again.
        try:
            self._iv_maybe_repack(growing=True)
            self._iv_maybe_retrain()
        except MemoryError as e:
            warnings.warn(
                f"IVF upkeep after an add ran out of memory ({e}); the add is stored and the index "
                "keeps its current lists",
                RuntimeWarning,
                stacklevel=3,
            )

    def _delete_ivf(self, positions: list) -> None:
        live = self._state[8]
        live = np.zeros(self._iv_used, np.uint8) if live is None else live.copy()
        if self._state[8] is None:
            live[_ranges(self._iv_start, self._iv_len)] = 1
        live[positions] = 0
        self._n_deleted += len(positions)
        self._generation += 1
        self._iv_publish(live)
        self._iv_maybe_repack()

    def _iv_maybe_repack(self, growing: bool = False) -> None:
        live_rows = self._state[11]
        if self._iv_used > 2 * live_rows + 1024:
            self._compact_ivf(slack=growing)

    def _iv_live_positions(self, with_owner: bool = False) -> Any:
        """The live rows' positions in list order (and their lists' numbers)."""
        live = self._state[8]
        src = _ranges(self._iv_start, self._iv_len)
        owner = None
        if with_owner:
            owner = np.repeat(np.arange(self._iv_len.shape[0], dtype=np.int64), self._iv_len)
        if live is not None:
            keep = live[src] != 0
            src = src[keep]
            owner = None if owner is None else owner[keep]
        return (src, owner) if with_owner else src

    def _compact_ivf(self, slack: bool = False) -> None:
        """Packs the live rows of every list contiguously, in list order (under the write lock)."""
        src, owner = self._iv_live_positions(with_owner=True)
        self._iv_pack(src, owner, self._iv_len.shape[0], slack=slack)

    def _iv_pack(
        self, src: np.ndarray, owner: np.ndarray, nlist: int, centroids: Any = None, slack: bool = False
    ) -> None:
        """New arrays holding the rows at ``src`` (``owner``: their lists, non-decreasing), packed
        list after list, published at once (snapshots keep the old arrays); with ``centroids``
        the lists are theirs (set only once every copy has succeeded). ``slack`` (a pack during
        adds) leaves every list half its length of room: packed tight, the next add would move
        every list it touches and refill the array with holes, i.e. a repack per add."""
        lens = np.bincount(owner, minlength=nlist).astype(np.int64)
        room = lens + lens // 2 if slack else lens.copy()
        start = np.cumsum(room) - room
        m = int(room.sum())
        dst = _ranges(start, lens)
        i8, sq = self._dtype == "i8", self._dtype == "i8" and self._metric == "l2"

        def packed(arr: np.ndarray, fill: Any = None) -> np.ndarray:
            if not slack:
                return arr[src]
            out = np.empty((m, *arr.shape[1:]), arr.dtype) if fill is None else np.full(m, fill, arr.dtype)
            out[dst] = arr[src]
            return out

        data = packed(self._iv_data)
        scales = packed(self._iv_scales) if i8 else np.empty(0, np.float32)
        sqn = packed(self._iv_sqnorms) if sq else np.empty(0, np.float32)
        exact = None if self._iv_exact is None else packed(self._iv_exact)
        ids = packed(self._iv_ids, None if self._iv_ids.dtype == object else -1)
        for x, p in zip(self._iv_ids[src].tolist(), dst.tolist()):  # existing keys: order kept
            self._id_to_slot[x] = p
        self._iv_data, self._iv_scales, self._iv_sqnorms, self._iv_exact, self._iv_ids = (
            data,
            scales,
            sqn,
            exact,
            ids,
        )
        self._iv_start = start
        self._iv_len = lens
        self._iv_room = room
        self._iv_used = self._iv_cap = m
        self._n_deleted = 0
        if centroids is not None:
            self._centroids = centroids
        self._generation += 1
        self._iv_publish(None)

    # ----------------------------------------------------------------- search

    def _compile_ivf(self, flt: IdFilter, state: tuple) -> tuple:
        """(mask, subset or None, allowed count) of ``flt`` over ``state``'s list positions."""
        ids, start, ln, live, used = state[5], state[6], state[7], state[8], state[9]
        key = self._sorted_keys
        if key is None or key[0] != state[10] or key[1] != used:
            key = (state[10], used, _SortedKeys(ids, self._id_kind))
            self._sorted_keys = key
        pos = key[2].rows_of(flt, self._id_kind)
        mask = np.zeros(used, np.uint8)
        mask[pos] = 1
        if live is not None:
            mask &= live
        else:
            inlist = np.zeros(used, np.uint8)
            inlist[_ranges(start, ln)] = 1
            mask &= inlist
        count = int(np.count_nonzero(mask))
        return mask, None, count

    def _ivf_allowed(self, filter: Any, state: tuple) -> tuple:  # noqa: A002
        if callable(filter) and not isinstance(filter, IdFilter):
            live = state[8]
            pos = _ranges(state[6], state[7])
            if live is not None:
                pos = pos[live[pos] != 0]
            ok = np.fromiter(
                (bool(filter(x)) for x in state[5][pos].tolist()), dtype=bool, count=pos.shape[0]
            )
            mask = np.zeros(state[9], np.uint8)
            mask[pos[ok]] = 1
            return mask, int(ok.sum())
        mask, _subset, count = as_id_filter(filter).compiled(
            self, state[10], lambda f: self._compile_ivf(f, state)
        )
        return mask, count

    def _ivf_gather(self, state: tuple, mask: np.ndarray, count: int, nprobe: int) -> np.ndarray | None:
        """The allowed positions when scanning just them costs less than the probe would."""
        nlist = state[0].shape[0]
        if count * nlist > nprobe * max(state[11], 1):
            return None
        return np.flatnonzero(mask).astype(np.int64)

    def _ivf_rows(self, state: tuple) -> tuple:
        """(data, dtype, scales, sqnorms) a gathered scan reads: the float32 copies when kept."""
        if state[4] is not None:
            return state[4], "f32", None, None
        return state[1], self._dtype, state[2], state[3]

    def _search_ivf(  # noqa: A002
        self, qv: np.ndarray, k: int, threshold: Any, filter: Any, threads: Any, qnorm: float, nprobe: Any
    ) -> tuple:
        state = self._state
        C = state[0]
        npb = self.nprobe if nprobe is None else self._check_nprobe(nprobe)
        if C is None:  # untrained means empty: no results, as from any empty index
            return empty_ids(self._id_kind), np.empty(0, np.float32)
        if filter is None:
            allowed, count = state[8], state[11]
        else:
            allowed, count = self._ivf_allowed(filter, state)
        k = min(k, count)
        if k == 0:
            return empty_ids(self._id_kind), np.empty(0, np.float32)
        t = self._threads if threads is None else int(threads)
        metric = "l2" if self._metric == "l2" else "ip"
        if threshold is not None and qnorm != 1.0:
            threshold = threshold * qnorm
        subset = None if filter is None else self._ivf_gather(state, allowed, count, npb)
        if subset is not None:
            data, dt, sc, sq = self._ivf_rows(state)
            rows, scores = _core.dense_search(data, dt, sc, sq, qv, k, metric, None, threshold, t, subset)
        else:
            rows, scores = _core.ivf_search(
                C, state[6], state[7], state[1], self._dtype, state[2], state[3], state[4],
                qv, k, npb, self._rerank, metric, allowed, threshold, t,
            )  # fmt: skip
        if qnorm != 1.0:
            scores *= np.float32(1.0 / qnorm)
        return state[5][rows], scores

    def _search_batch_ivf(  # noqa: A002
        self, Qm: np.ndarray, k: int, threshold: Any, filter: Any, threads: int, nprobe: Any
    ) -> tuple:
        state = self._state
        C = state[0]
        npb = self.nprobe if nprobe is None else self._check_nprobe(nprobe)
        if C is None:
            shape = (Qm.shape[0], k)
            return self._pad_ids(state[5], np.full(shape, -1, np.int64)), np.full(shape, np.nan, np.float32)
        if filter is None:
            allowed, count = state[8], state[11]
        else:
            allowed, count = self._ivf_allowed(filter, state)
        metric = "l2" if self._metric == "l2" else "ip"
        subset = None if filter is None else self._ivf_gather(state, allowed, count, npb)
        if subset is not None:
            data, dt, sc, sq = self._ivf_rows(state)
            rows, scores, _c = _core.dense_search_batch(
                data, dt, sc, sq, Qm, k, metric, None, threshold, threads, subset
            )
        else:
            rows, scores, _c = _core.ivf_search_batch(
                C, state[6], state[7], state[1], self._dtype, state[2], state[3], state[4],
                Qm, k, npb, self._rerank, metric, allowed, threshold, threads,
            )  # fmt: skip
        return self._pad_ids(state[5], rows), scores

    # ----------------------------------------------------------------- persistence

    def _ivf_sections(self) -> tuple[list, list, dict]:
        """(sections, ids in insertion order, header fields) of a save: lists packed, no holes."""
        state = self._state
        extra: dict = {
            "nlist": self.nlist,
            "nlist_arg": self._ivf_nlist_arg,
            "nprobe_arg": self._nprobe_arg,
            "rerank": self._rerank,
            "trained": state[0] is not None,
            "trained_n": self._trained_n,
        }
        if state[0] is None:
            return [], [], extra
        live = state[8]
        src = _ranges(state[6], state[7])
        owner = np.repeat(np.arange(state[7].shape[0], dtype=np.int64), state[7])
        if live is not None:
            keep = live[src] != 0
            src, owner = src[keep], owner[keep]
        lens = np.bincount(owner, minlength=state[7].shape[0]).astype(np.int64)
        offsets = np.zeros(lens.shape[0] + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        sections = [
            ("centroids", state[0]),
            ("list_offsets", offsets),
            ("vectors", np.ascontiguousarray(state[1][src])),
        ]
        if state[2] is not None:
            sections.append(("scales", np.ascontiguousarray(state[2][src])))
        if state[3] is not None:
            sections.append(("sqnorms", np.ascontiguousarray(state[3][src])))
        if state[4] is not None:
            sections.append(("exact", np.ascontiguousarray(state[4][src])))
        ids = state[5][src]
        # Insertion order of the saved rows (the order of ``ids`` after a load).
        where = {x: i for i, x in enumerate(ids.tolist())}
        order = np.fromiter((where[x] for x in self._id_to_slot), np.int64, count=len(where))
        sections.append(("id_order", order))
        return sections, ids.tolist(), extra

    @staticmethod
    def _ivf_args(h: dict) -> dict:
        """Constructor arguments of a saved IVF index (validated by the constructor)."""
        if h["kind"] != "ivf":
            return {}
        return {"nlist": h["nlist_arg"], "nprobe": h["nprobe_arg"], "rerank": h["rerank"]}

    def _load_ivf(self, h: dict, secs: dict, ids: list, bad: Any) -> None:
        count, dim = h["count"], self._dim
        if not h["trained"]:
            if count:
                raise bad("an untrained IVF index holds vectors")
            return
        C = secs["centroids"]
        nlist = h["nlist"]
        if not isinstance(nlist, int) or C.shape != (nlist, dim) or C.dtype != np.float32 or nlist < 1:
            raise bad("centroids section has the wrong shape or dtype")
        if not np.isfinite(C).all():
            raise bad("centroids are not finite")
        offs = secs["list_offsets"]
        if offs.shape != (nlist + 1,) or offs[0] != 0 or offs[-1] != count or (np.diff(offs) < 0).any():
            raise bad("list offsets are inconsistent")
        vec = secs["vectors"]
        if vec.shape != (count, dim) or vec.dtype != np.dtype(_DTYPES[self._dtype]):
            raise bad("vectors section has the wrong shape or dtype")
        for name, need in (
            ("scales", self._dtype == "i8"),
            ("sqnorms", self._dtype == "i8" and self._metric == "l2"),
        ):
            if need and (secs[name].shape != (count,) or secs[name].dtype != np.float32):
                raise bad(f"{name} section has the wrong shape or dtype")
        exact = None
        if self._keeps_exact():
            exact = secs["exact"]
            if exact.shape != (count, dim) or exact.dtype != np.float32:
                raise bad("exact section has the wrong shape or dtype")
        order = secs["id_order"]
        if order.shape != (count,) or (count and not np.array_equal(np.sort(order), np.arange(count))):
            raise bad("id order is not a permutation of the rows")
        self._centroids = C
        self._iv_data = vec
        self._iv_scales = secs["scales"] if self._dtype == "i8" else np.empty(0, np.float32)
        self._iv_sqnorms = (
            secs["sqnorms"] if (self._dtype == "i8" and self._metric == "l2") else np.empty(0, np.float32)
        )
        self._iv_exact = exact
        self._iv_ids = np.asarray(ids, dtype=object if h["id_kind"] == "str" else np.int64)
        lens = np.diff(offs).astype(np.int64)
        self._iv_start = offs[:-1].astype(np.int64)
        self._iv_len = lens
        self._iv_room = lens.copy()
        self._iv_used = self._iv_cap = count
        self._id_to_slot = {ids[i]: i for i in order.tolist()}
        # Files from before the growth policy: treated as trained at their current size.
        trained_n = h.get("trained_n", count)
        if not isinstance(trained_n, int) or isinstance(trained_n, bool) or trained_n < 0:
            raise bad(f"invalid training count {trained_n!r}")
        self._trained_n = trained_n
        self._generation += 1
        self._iv_publish(None)
