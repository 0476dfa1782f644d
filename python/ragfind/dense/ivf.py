"""The IVF backend of DenseIndex: k-means lists scanned by the C++ kernels.

Training (C++ k-means on the SIMD kernels, spherical for cosine/ip) places ``nlist`` centroids;
every vector goes to the list of its nearest centroid. All lists live in one row array, each a
contiguous range ``[start, start + len)`` with room to grow; a list that outgrows its room moves
to the end of the array with half again as much room, leaving a hole, and when holes and
deleted rows make up more than half the array it is repacked (a repack during an add leaves
every list half its length of room, so the adds after it do not move every list again).
Searches take a published snapshot (arrays + list table + live mask), so a write never
disturbs a running search. A batch (``search_batch``) groups its queries by list, so each
probed list is read once per batch, and gives every query exactly ``search``'s answer.

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

dtype "pq" and "rabitq" lists store float32 rows as "f32" does (float16 ones as "f16" does with
``rerank_dtype="f16"``), plus a compressed code of each row's residual to its centroid
(ivf_codes.py): the search scans the codes and re-scores the ``k * rerank`` best estimates
from the rows, so a loaded index keeps only the codes in memory.
Their default nprobe and rerank are calibrated when the lists are trained (``_calibrate``: held-
out stored rows as queries, tune.py's walk with a cost model instead of timings) and again after
a retrain; ``tune`` measures real queries instead.
Codes follow their rows through every add, move, repack and file; a retrain trains the PQ
codebooks again and re-encodes every row against the new centroids.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragfind import _core
from ragfind.dense import tune as _tune
from ragfind.dense._common import (
    DenseConfig,
    LoadedSlots,
    SortedKeys,
    divide_rows,
    pad_ids,
    padded_scores,
    query_norm,
    set_slots,
)
from ragfind.dense.ivf_codes import round_up, sample_index
from ragfind.ids import IdFilter, as_id_filter, empty_ids

# Training rows per centroid at most, and Lloyd iterations: faiss's IVF defaults. 64 rows per
# list needed nprobe 32 where faiss needs 24 for recall@10 0.95 (bench/dense.md).
_TRAIN_PER_LIST = 256
_TRAIN_ITERS = 10
_SEED = 1234
# Rows converted and written per step of an add (a few MB of temporaries at dim 384).
_WRITE_BLOCK = 4096
# Rows normalised and assigned per call when an add divides cosine rows itself (25 MB at dim 384).
_ASSIGN_BLOCK = 16384
# search_batch groups at least this many queries by list; fewer share too few lists to repay
# the grouping's setup, and run one by one (the same answers).
_GROUP_MIN = 8
# Automatic nlist: retrain when the live rows reach this multiple of the training count...
_GROW_FACTOR = 4
# ... and auto_nlist(live rows) is at least this multiple of the current nlist.
_GROW_NLIST = 1.5
# Coded lists calibrate their default nprobe/rerank on held-out stored rows as queries once
# trained with at least this many rows: no fixed setting holds across data shapes.
_CALIBRATE_MIN = 2000
_CALIBRATE_QUERIES = 200
# Above the 0.90 promised: rows stand in for queries (real queries lie farther from the rows:
# SciFact's MiniLM queries found 0.89 where its rows found 0.94), and 200 vary by about 0.01.
_CALIBRATE_TARGET = 0.95


def _coded_results(pos: np.ndarray, scores: np.ndarray, threshold: Any, l2: bool) -> tuple:
    """One query's (positions, scores) from a coded search: padding cut, threshold applied
    (the scores are exact and in rank order, so the ones kept are a prefix)."""
    k = pos.shape[0]
    n = k if k == 0 or pos[k - 1] >= 0 else int(np.count_nonzero(pos >= 0))  # the padding is a suffix
    if threshold is not None:
        t = np.float32(threshold)
        n = int(np.count_nonzero(scores[:n] <= t if l2 else scores[:n] >= t))
    return pos[:n], scores[:n]


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
    """Lists probed when none is given: 1/32 of them, at least 16. Measured recall@10: 0.987
    with nlist 1024 on bench/compare_ivf.py's data (0.95 needs 20); 0.925 on SciFact's 5,183
    MiniLM embeddings with the automatic nlist 132 (bench/dense.md)."""
    return min(nlist, max(16, nlist // 32))


@dataclass(frozen=True)
class IvfSnapshot:
    """What one search reads, published whole on every write (arrays never change below used)."""

    centroids: np.ndarray | None  # (nlist, dim); None until trained
    data: np.ndarray  # (used, dim) stored rows, list after list with room between
    scales: np.ndarray | None  # (used,) i8 scales
    sqnorms: np.ndarray | None  # (used,) i8 + l2 squared norms
    exact: np.ndarray | None  # (used, dim) float32 copies of f16/i8 rows for the rerank
    ids: np.ndarray  # (used,) the id at each position
    start: np.ndarray  # (nlist,) first position of each list
    lens: np.ndarray  # (nlist,) rows in each list, dead ones included
    live: np.ndarray | None  # (used,) uint8, None while nothing is deleted
    used: int
    generation: int  # bumped on every write: compiled filters are keyed by it
    live_rows: int
    codes: tuple | None = None  # pq/rabitq: the code state (ivf_codes.py)
    code_params: np.ndarray | None = None  # pq codewords or rabitq rotation
    code_start: np.ndarray | None = None  # (nlist,) first code row of each list


class IvfBackend:
    """``kind="ivf"``: k-means lists, the ``nprobe`` nearest the query scanned."""

    kind = "ivf"

    def __init__(
        self, cfg: DenseConfig, nlist: int | None, nprobe: int | None, rerank: int, codes: Any = None
    ) -> None:
        self.cfg = cfg
        self._codes = codes  # PqCodes/RabitqCodes for dtype "pq"/"rabitq", else None
        self.id_kind: str | None = None
        self.id_to_slot: Any = {}  # id -> list position (a dict, or LoadedSlots after a load)
        self._generation = 0
        self._sorted_keys: tuple | None = None  # (generation, used, SortedKeys)
        self.nlist_arg = nlist  # None: chosen at training
        self.nprobe_arg = nprobe
        self.rerank = rerank
        self._centroids: np.ndarray | None = None
        self._imbalance = float("nan")
        self.trained_n = 0  # rows the current lists were trained on (growth policy)
        self.tuned: dict | None = None  # what tune() chose and measured (saved with the index)
        self.auto: dict | None = None  # the calibrated default nprobe/rerank (coded lists)
        self.auto_rerank = False  # rerank is the calibration's (not given by the caller)
        self._calibrate_due = False
        self._iv_cap = 0
        self._iv_reset(0)

    def _iv_reset(self, nlist: int) -> None:
        self._iv_data = np.empty((0, self.cfg.dim), dtype=self.cfg.encoding.dtype)
        self._iv_scales = np.empty(0, np.float32)
        self._iv_sqnorms = np.empty(0, np.float32)
        self._iv_exact = np.empty((0, self.cfg.dim), np.float32) if self._keeps_exact() else None
        self._iv_ids = np.empty(0, dtype=object if self.id_kind == "str" else np.int64)
        self._iv_start = np.zeros(nlist, np.int64)
        self._iv_len = np.zeros(nlist, np.int64)
        self._iv_room = np.zeros(nlist, np.int64)
        self._iv_used = 0
        self._iv_cap = 0
        self._n_deleted = 0
        if self._codes is not None:
            self._cd = self._codes.empty(0)
            self._cd_start = np.zeros(nlist, np.int64)
            self._cd_used = self._cd_cap = 0
        self._iv_publish(None)

    def _keeps_exact(self) -> bool:
        # Coded lists re-score their stored rows (f16 ones too): no second copy.
        return self._codes is None and self.cfg.encoding.name != "f32" and self.rerank > 0

    # ----------------------------------------------------------------- state

    def _iv_publish(self, live: np.ndarray | None) -> None:
        u = self._iv_used
        self.snapshot = IvfSnapshot(
            self._centroids,
            self._iv_data[:u],
            self._iv_scales[:u] if self.cfg.encoding.scaled else None,
            self._iv_sqnorms[:u] if self.cfg.has_sqnorms else None,
            None if self._iv_exact is None else self._iv_exact[:u],
            self._iv_ids[:u],
            self._iv_start.copy(),
            self._iv_len.copy(),
            live,
            u,
            self._generation,
            int(self._iv_len.sum()) - self._n_deleted,
            *self._code_snapshot(),
        )

    def _code_snapshot(self) -> tuple:
        if self._codes is None:
            return None, None, None
        c = self._codes
        return c.published(self._cd, self._cd_used), c.params, self._cd_start.copy()

    @property
    def nlist(self) -> int | None:
        """IVF lists (None until an index with automatic nlist is trained)."""
        if self._centroids is not None:
            return int(self._centroids.shape[0])
        return self.nlist_arg

    @property
    def nprobe(self) -> int | None:
        """IVF lists scanned per query (default: max(16, nlist / 32))."""
        if self.nprobe_arg is not None:
            return self.nprobe_arg
        if self.auto is not None:
            return self.auto["nprobe"]
        n = self.nlist
        return None if n is None else default_nprobe(n)

    @property
    def is_trained(self) -> bool:
        return self._centroids is not None

    # ----------------------------------------------------------------- training

    @staticmethod
    def _train_sample(n: int, nlist: int) -> np.ndarray | None:
        """Sorted positions of the k-means sample of n rows, or None for all of them."""
        return sample_index(n, max(_TRAIN_PER_LIST * nlist, 10_000))

    def _kmeans(self, X: np.ndarray, nlist: int) -> tuple[np.ndarray, float]:
        metric = "l2" if self.cfg.metric == "l2" else "ip"
        C, imbalance, _splits = _core.ivf_train(
            np.ascontiguousarray(X), nlist, metric, _TRAIN_ITERS, _SEED, self.cfg.threads
        )
        return C, float(imbalance)

    def _train_ivf(self, X: np.ndarray, norms: np.ndarray | None = None) -> None:
        """k-means on (a sample of) X; X is checked and normalised (cosine) already, or with
        ``norms`` its rows are divided by them (only the sample's rows are)."""
        n = X.shape[0]
        nlist = self.nlist_arg if self.nlist_arg is not None else auto_nlist(n)
        if n < nlist:
            raise ValueError(
                f"kind='ivf' with nlist={nlist} needs at least {nlist} vectors to train, got {n}; "
                "add more vectors at once, call train() with a larger sample, or pass a smaller nlist"
            )
        pick = self._train_sample(n, nlist)
        if pick is not None:
            X = X[pick]
            if norms is not None:
                X = divide_rows(X, norms[pick], out=X)  # X is a fresh copy here
        elif norms is not None:
            X = divide_rows(X, norms)
        self._centroids, self._imbalance = self._kmeans(X, nlist)
        if self._codes is not None:
            self._codes.params = self._fit_codes(X, self._centroids)
            self._calibrate_due = True
        self.trained_n = n
        self._iv_reset(nlist)

    def _fit_codes(self, X: np.ndarray, C: np.ndarray) -> Any:
        """New code parameters from training rows X and centroids C; codes that learn from
        residuals get those of the rows they train on (``training_index``)."""
        if not getattr(self._codes, "learns_from_residuals", True):
            return self._codes.fit(None)
        # Only the rows fit trains on, a block at a time into one array: the residuals of every
        # row at once were two more copies of X (seconds of page faults at 200k x 384).
        idx = self._codes.training_index(X.shape[0])
        n = X.shape[0] if idx is None else idx.shape[0]
        R = np.empty((n, X.shape[1]), np.float32)
        for b in range(0, n, _WRITE_BLOCK):
            e = min(n, b + _WRITE_BLOCK)
            R[b:e] = self._residuals(X[b:e] if idx is None else X[idx[b:e]], C)
        return self._codes.fit(R)

    def _residuals(self, X: np.ndarray, C: np.ndarray, lists: np.ndarray | None = None) -> np.ndarray:
        """X minus the centroid of each row's list (its nearest in C unless ``lists`` says)."""
        if lists is None:
            lists = _core.ivf_assign(np.ascontiguousarray(X), C, self.cfg.scan_metric, self.cfg.threads)
        return X - C[lists]

    def _iv_float_rows(self, pos: np.ndarray) -> np.ndarray:
        """float32 rows at list positions ``pos``: the rows or their float copy, else the
        dequantised rows (enough to choose lists; the stored rows are never re-quantised)."""
        if self.cfg.encoding.name == "f32":
            return self._iv_data[pos]
        if self._iv_exact is not None:
            return self._iv_exact[pos]
        scales = self._iv_scales[pos] if self.cfg.encoding.scaled else None
        return self.cfg.encoding.decode(self._iv_data[pos], scales)

    def _iv_maybe_retrain(self) -> None:
        """Retrains automatic-nlist lists once the index has outgrown them (under the write lock)."""
        if self.nlist_arg is not None or self._centroids is None:
            return
        live_rows = self.snapshot.live_rows
        nlist = self._centroids.shape[0]
        if live_rows < _GROW_FACTOR * max(self.trained_n, 1):
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
        sample = self._iv_float_rows(src if pick is None else src[pick])
        C, imbalance = self._kmeans(sample, nlist)
        params = None if self._codes is None else self._fit_codes(sample, C)
        metric = "l2" if self.cfg.metric == "l2" else "ip"
        owner = np.empty(n, np.int64)
        for b in range(0, n, _ASSIGN_BLOCK):
            xb = self._iv_float_rows(src[b : b + _ASSIGN_BLOCK])
            owner[b : b + xb.shape[0]] = _core.ivf_assign(
                np.ascontiguousarray(xb), C, metric, self.cfg.threads
            )
        order = np.argsort(owner, kind="stable")
        old_nlist = self.nlist
        self._iv_pack(src[order], owner[order], nlist, C, slack=True, params=params)
        self._calibrate_due = self._codes is not None
        if self.tuned is not None and old_nlist:
            # A tuned nprobe keeps the share of lists it probed (recall follows the share).
            self.nprobe_arg = min(nlist, math.ceil(self.nprobe_arg * nlist / old_nlist))
            self.tuned = {**self.tuned, "nprobe": self.nprobe_arg, "retrained": True}
        self._imbalance, self.trained_n = imbalance, n

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
        if self.cfg.encoding.name == "i8":
            self._iv_scales = grown(self._iv_scales)
            if self.cfg.metric == "l2":
                self._iv_sqnorms = grown(self._iv_sqnorms)
        self._iv_exact = grown(self._iv_exact)
        self._iv_ids = grown(self._iv_ids, None if self._iv_ids.dtype == object else -1)
        self._iv_cap = cap

    def _cd_reserve(self, need: int) -> None:
        """Room for ``need`` code rows in writable arrays (new ones: snapshots keep the old)."""
        c = self._codes
        if need <= self._cd_cap and c.writeable(self._cd):
            return
        cap = max(need, self._cd_cap + self._cd_cap // 2, 1024) if need > self._cd_cap else self._cd_cap
        cap = int(round_up(cap, c.align))
        self._cd = c.grown(self._cd, self._cd_used, cap)
        self._cd_cap = cap

    def _iv_copy_rows(self, dst: np.ndarray, src: np.ndarray) -> None:
        self._iv_data[dst] = self._iv_data[src]
        if self.cfg.encoding.name == "i8":
            self._iv_scales[dst] = self._iv_scales[src]
            if self.cfg.metric == "l2":
                self._iv_sqnorms[dst] = self._iv_sqnorms[src]
        if self._iv_exact is not None:
            self._iv_exact[dst] = self._iv_exact[src]
        self._iv_ids[dst] = self._iv_ids[src]

    def train(self, X: np.ndarray) -> None:
        """Trains on X (checked and normalised for cosine already) and publishes empty lists."""
        self._train_ivf(X)
        self._generation += 1
        self._iv_publish(None)

    def add(self, X: np.ndarray, id_list: list, kind: str, norms: np.ndarray | None = None) -> None:
        """Adds X's rows; with ``norms`` (cosine) row i is X[i] / norms[i], divided a block at a
        time as it is read, so no normalised copy of X is ever allocated."""
        if self._centroids is None:
            self._train_ivf(X, norms)
        if kind == "str" and self._iv_ids.dtype != object:
            self._iv_ids = self._iv_ids.astype(object)
        n = X.shape[0]
        nlist = self._centroids.shape[0]
        metric = "l2" if self.cfg.metric == "l2" else "ip"
        if norms is None:
            lists = _core.ivf_assign(X, self._centroids, metric, self.cfg.threads)
        else:
            lists = np.empty(n, np.int64)
            buf = np.empty((min(n, _ASSIGN_BLOCK), X.shape[1]), np.float32)
            for b in range(0, n, _ASSIGN_BLOCK):
                e = min(n, b + _ASSIGN_BLOCK)
                xb = divide_rows(X[b:e], norms[b:e], out=buf[: e - b])
                lists[b:e] = _core.ivf_assign(xb, self._centroids, metric, self.cfg.threads)
        counts = np.bincount(lists, minlength=nlist).astype(np.int64)
        start, ln, room = self._iv_start.copy(), self._iv_len.copy(), self._iv_room.copy()
        cstart = None if self._codes is None else self._cd_start.copy()
        live = self.snapshot.live
        need = ln + counts
        grow = np.flatnonzero(need > room)
        if grow.size:
            # A list's first rows fit exactly (one bulk add packs the array); a list that grows
            # again gets half again its size, so moves cost O(1) per row amortised.
            new_room = need[grow] + np.where(ln[grow] > 0, need[grow] // 2, 0)
            new_start = self._iv_used + np.cumsum(new_room) - new_room
            self._iv_reserve(self._iv_used + int(new_room.sum()))
            moving = ln[grow] > 0
            if self._codes is not None:
                new_croom = round_up(new_room, self._codes.align)
                new_cstart = self._cd_used + np.cumsum(new_croom) - new_croom
                self._cd_reserve(self._cd_used + int(new_croom.sum()))
                if moving.any():
                    c = self._codes
                    csrc = _ranges(cstart[grow][moving], ln[grow][moving])
                    c.put(self._cd, _ranges(new_cstart[moving], ln[grow][moving]), c.take(self._cd, csrc))
                cstart[grow] = new_cstart
                self._cd_used += int(new_croom.sum())
            if moving.any():
                src = _ranges(start[grow][moving], ln[grow][moving])
                dst = _ranges(new_start[moving], ln[grow][moving])
                self._iv_copy_rows(dst, src)
                keep = np.ones(src.shape[0], bool) if live is None else live[src] != 0
                set_slots(self.id_to_slot, self._iv_ids[dst[keep]].tolist(), dst[keep].tolist())
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
            if self._codes is not None:
                self._cd_reserve(self._cd_used)
        if live is not None:  # a new mask: the published one stays as searches saw it
            live = np.concatenate([live, np.zeros(max(0, self._iv_used - live.shape[0]), np.uint8)])
        order = np.argsort(lists, kind="stable")
        ls = lists[order]
        first = np.cumsum(counts) - counts
        pos = np.empty(n, np.int64)
        pos[order] = start[ls] + ln[ls] + (np.arange(n, dtype=np.int64) - first[ls])
        crow = None if cstart is None else pos - start[lists] + cstart[lists]
        # Converted and scattered in blocks of rows: the temporaries stay in cache instead of
        # being n x dim arrays written once and read once.
        wbuf = None if norms is None else np.empty((min(n, _WRITE_BLOCK), X.shape[1]), np.float32)
        for b in range(0, n, _WRITE_BLOCK):
            xb, pb = X[b : b + _WRITE_BLOCK], pos[b : b + _WRITE_BLOCK]
            if norms is not None:
                xb = divide_rows(xb, norms[b : b + _WRITE_BLOCK], out=wbuf[: xb.shape[0]])
            rows, scales, sqnorms = self.cfg.encode(xb)
            self._iv_data[pb] = rows
            if scales is not None:
                self._iv_scales[pb] = scales
            if sqnorms is not None:
                self._iv_sqnorms[pb] = sqnorms
            if self._iv_exact is not None:
                self._iv_exact[pb] = xb
            if crow is not None:
                res = self._residuals(xb, self._centroids, lists[b : b + _WRITE_BLOCK])
                self._codes.put(self._cd, crow[b : b + _WRITE_BLOCK], self._codes.encode(res, rows=xb))
        self._iv_ids[pos] = np.asarray(id_list, dtype=self._iv_ids.dtype)
        if live is not None:
            live[pos] = 1
        set_slots(self.id_to_slot, id_list, pos.tolist())
        self._iv_start, self._iv_len, self._iv_room = start, ln + counts, room
        if cstart is not None:
            self._cd_start = cstart
        self.id_kind = kind
        self._generation += 1
        self._iv_publish(live)
        # The add is stored and published: upkeep that runs out of memory must not report it as
        # failed. The old lists stay valid and the next add tries again.
        try:
            self._iv_maybe_repack(growing=True)
            self._iv_maybe_retrain()
            if self.nprobe_arg is not None and not self.auto_rerank:
                self._calibrate_due = False  # both settings are the caller's (or tune's)
            if self._calibrate_due and self.snapshot.live_rows >= _CALIBRATE_MIN:
                self._calibrate()
        except MemoryError as e:
            warnings.warn(
                f"IVF upkeep after an add ran out of memory ({e}); the add is stored and the index "
                "keeps its current lists",
                RuntimeWarning,
                stacklevel=3,
            )

    def delete(self, positions: list) -> None:
        live = self.snapshot.live
        live = np.zeros(self._iv_used, np.uint8) if live is None else live.copy()
        if self.snapshot.live is None:
            live[_ranges(self._iv_start, self._iv_len)] = 1
        live[positions] = 0
        self._n_deleted += len(positions)
        self._generation += 1
        self._iv_publish(live)
        self._iv_maybe_repack()

    def _iv_maybe_repack(self, growing: bool = False) -> None:
        live_rows = self.snapshot.live_rows
        if self._iv_used > 2 * live_rows + 1024:
            self._compact_ivf(slack=growing)

    def _iv_live_positions(self, with_owner: bool = False) -> Any:
        """The live rows' positions in list order (and their lists' numbers)."""
        live = self.snapshot.live
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
        self,
        src: np.ndarray,
        owner: np.ndarray,
        nlist: int,
        centroids: Any = None,
        slack: bool = False,
        params: Any = None,
    ) -> None:
        """New arrays holding the rows at ``src`` (``owner``: their lists, non-decreasing), packed
        list after list, published at once (snapshots keep the old arrays); with ``centroids``
        the lists are theirs (set only once every copy has succeeded). ``slack`` (a pack during
        adds) leaves every list half its length of room: packed tight, the next add would move
        every list it touches and refill the array with holes, i.e. a repack per add. Codes move
        with their rows; with new ``centroids`` every row is encoded again (with ``params``)."""
        lens = np.bincount(owner, minlength=nlist).astype(np.int64)
        room = lens + lens // 2 if slack else lens.copy()
        start = np.cumsum(room) - room
        m = int(room.sum())
        dst = _ranges(start, lens)
        i8, sq = self.cfg.encoding.name == "i8", self.cfg.encoding.name == "i8" and self.cfg.metric == "l2"

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
        if self._codes is not None:
            codes = self._pack_codes(src, owner, lens, room, data, dst, centroids, params)
        set_slots(self.id_to_slot, self._iv_ids[src].tolist(), dst.tolist())  # existing keys: order kept
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
        if self._codes is not None:
            self._cd, self._cd_start, self._cd_used = codes
            self._cd_cap = self._cd_used
            if params is not None:
                self._codes.params = params
        if centroids is not None:
            self._centroids = centroids
        self._generation += 1
        self._iv_publish(None)

    def _pack_codes(
        self,
        src: np.ndarray,
        owner: np.ndarray,
        lens: np.ndarray,
        room: np.ndarray,
        data: np.ndarray,
        dst: np.ndarray,
        centroids: Any,
        params: Any,
    ) -> tuple:
        """(state, list code starts, code rows used) of ``_iv_pack``'s new layout: the codes
        copied from their old rows, or, with new centroids, encoded from the packed rows."""
        c = self._codes
        croom = round_up(room, c.align)
        cstart = np.cumsum(croom) - croom
        used = int(croom.sum())
        state = c.empty(used)
        cdst = _ranges(cstart, lens)
        if centroids is None:
            c.put(state, cdst, c.take(self._cd, self._cd_start[owner] + (src - self._iv_start[owner])))
            return state, cstart, used
        for b in range(0, cdst.shape[0], _WRITE_BLOCK):
            rows = data[dst[b : b + _WRITE_BLOCK]]
            res = self._residuals(rows, centroids, owner[b : b + _WRITE_BLOCK])
            c.put(state, cdst[b : b + _WRITE_BLOCK], c.encode(res, params, rows))
        return state, cstart, used

    # ----------------------------------------------------------------- search

    def _compile_ivf(self, flt: IdFilter, s: IvfSnapshot) -> tuple:
        """(mask, subset or None, allowed count) of ``flt`` over ``s``'s list positions."""
        ids, start, ln, live, used = s.ids, s.start, s.lens, s.live, s.used
        key = self._sorted_keys
        if key is None or key[0] != s.generation or key[1] != used:
            key = (s.generation, used, SortedKeys(ids, self.id_kind))
            self._sorted_keys = key
        pos = key[2].rows_of(flt, self.id_kind)
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

    def _ivf_allowed(self, filter: Any, s: IvfSnapshot) -> tuple:  # noqa: A002
        if callable(filter) and not isinstance(filter, IdFilter):
            live = s.live
            pos = _ranges(s.start, s.lens)
            if live is not None:
                pos = pos[live[pos] != 0]
            ok = np.fromiter((bool(filter(x)) for x in s.ids[pos].tolist()), dtype=bool, count=pos.shape[0])
            mask = np.zeros(s.used, np.uint8)
            mask[pos[ok]] = 1
            return mask, int(ok.sum())
        mask, _subset, count = as_id_filter(filter).compiled(
            self, s.generation, lambda f: self._compile_ivf(f, s)
        )
        return mask, count

    def _ivf_gather(self, s: IvfSnapshot, mask: np.ndarray, count: int, nprobe: int) -> np.ndarray | None:
        """The allowed positions when scanning just them costs less than the probe would."""
        nlist = s.centroids.shape[0]
        if count * nlist > nprobe * max(s.live_rows, 1):
            return None
        return np.flatnonzero(mask).astype(np.int64)

    def _ivf_rows(self, s: IvfSnapshot) -> tuple:
        """(data, dtype, scales, sqnorms) a gathered scan reads: the float32 copies when kept."""
        if s.exact is not None:
            return s.exact, "f32", None, None
        return s.data, self.cfg.encoding.name, s.scales, s.sqnorms

    def search(  # noqa: A002
        self, qv: np.ndarray, k: int, threshold: Any, filter: Any, threads: int | None, nprobe: int | None
    ) -> tuple:
        qv, qnorm = query_norm(qv, self.cfg)
        s = self.snapshot
        C = s.centroids
        npb = self.nprobe if nprobe is None else nprobe
        if C is None:  # untrained means empty: no results, as from any empty index
            return empty_ids(self.id_kind), np.empty(0, np.float32)
        if filter is None:
            allowed, count = s.live, s.live_rows
        else:
            allowed, count = self._ivf_allowed(filter, s)
        k = min(k, count)
        if k == 0:
            return empty_ids(self.id_kind), np.empty(0, np.float32)
        t = self.cfg.threads if threads is None else threads
        metric = self.cfg.scan_metric
        if threshold is not None and qnorm != 1.0:
            threshold = threshold * qnorm
        subset = None if filter is None else self._ivf_gather(s, allowed, count, npb)
        if subset is not None:
            data, dt, sc, sq = self._ivf_rows(s)
            rows, scores = _core.dense_search(data, dt, sc, sq, qv, k, metric, None, threshold, t, subset)
        elif self._codes is not None:
            pos, sc = self._codes.search(s, qv[None, :], k, npb, self.rerank, t, allowed)
            rows, scores = _coded_results(pos[0], sc[0], threshold, metric == "l2")
        else:
            rows, scores = _core.ivf_search(
                C, s.start, s.lens, s.data, self.cfg.encoding.name, s.scales, s.sqnorms, s.exact,
                qv, k, npb, self.rerank, metric, allowed, threshold, t,
            )  # fmt: skip
        if qnorm != 1.0:
            scores *= np.float32(1.0 / qnorm)
        return s.ids[rows], scores

    def search_batch(  # noqa: A002
        self, Qm: np.ndarray, k: int, threshold: Any, filter: Any, threads: int | None, nprobe: int | None
    ) -> list:
        """``search`` for every row of ``Qm``: item i equals ``search(Qm[i], ...)``, ids and
        scores. f32/f16/i8 lists group the queries by list, so each probed list is read once per
        batch (the C++ ivf_search_batch); coded lists take every query in one call, which scans
        each query's lists best first as ``search`` does, or list by list where that pays (small
        re-scoring pools, 8-bit PQ codes shared by many queries); batches of fewer than
        ``_GROUP_MIN`` queries search one query at a time."""
        nq = Qm.shape[0]
        if nq < _GROUP_MIN:
            return [self.search(Qm[i], k, threshold, filter, threads, nprobe) for i in range(nq)]
        if self._codes is not None:
            return self._coded_batch(Qm, k, threshold, filter, threads, nprobe)
        s = self.snapshot
        C = s.centroids
        npb = self.nprobe if nprobe is None else nprobe
        if C is None:
            return [(empty_ids(self.id_kind), np.empty(0, np.float32)) for _ in range(nq)]
        if filter is None:
            allowed, count = s.live, s.live_rows
        else:
            allowed, count = self._ivf_allowed(filter, s)
        qnorms = [query_norm(Qm[i], self.cfg)[1] for i in range(nq)]  # raises as search does
        k = min(k, count)
        if k == 0:
            return [(empty_ids(self.id_kind), np.empty(0, np.float32)) for _ in range(nq)]
        t = self.cfg.threads if threads is None else threads
        metric = self.cfg.scan_metric
        # Cosine scores the raw query (as search does), so its threshold scales with each
        # query's norm: applied per query below, where it cuts a prefix of the ranked results.
        cosine = self.cfg.metric == "cosine"
        subset = None if filter is None else self._ivf_gather(s, allowed, count, npb)
        if subset is not None:
            data, dt, sc, sq = self._ivf_rows(s)
            rows, scores, counts = _core.dense_search_batch(
                data, dt, sc, sq, Qm, k, metric, None, None if cosine else threshold, t, subset
            )
        else:
            rows, scores, counts = _core.ivf_search_batch(
                C, s.start, s.lens, s.data, self.cfg.encoding.name, s.scales, s.sqnorms, s.exact,
                Qm, k, npb, self.rerank, metric, allowed, None if cosine else threshold, t,
            )  # fmt: skip
        out = []
        for i, n in enumerate(counts.tolist()):
            sc_i = scores[i, :n].copy()
            qn = qnorms[i]
            if cosine and threshold is not None:
                floor = np.float32(threshold * qn if qn != 1.0 else threshold)
                n = int(np.count_nonzero(sc_i >= floor))
                sc_i = sc_i[:n]
            if qn != 1.0:
                sc_i *= np.float32(1.0 / qn)
            out.append((s.ids[rows[i, :n]], sc_i))
        return out

    def _coded_batch(  # noqa: A002
        self, Qm: np.ndarray, k: int, threshold: Any, filter: Any, threads: int | None, nprobe: int | None
    ) -> list:
        """:meth:`search_batch` of coded lists: one coded search of every query (each row's
        answer is the single search's), then each query's norm, threshold and padding as
        :meth:`search` applies them."""
        nq = Qm.shape[0]
        s = self.snapshot
        npb = self.nprobe if nprobe is None else nprobe
        if s.centroids is None:
            return [(empty_ids(self.id_kind), np.empty(0, np.float32)) for _ in range(nq)]
        if filter is None:
            allowed, count = s.live, s.live_rows
        else:
            allowed, count = self._ivf_allowed(filter, s)
        normed = [query_norm(Qm[i], self.cfg) for i in range(nq)]  # raises as search does
        k = min(k, count)
        if k == 0:
            return [(empty_ids(self.id_kind), np.empty(0, np.float32)) for _ in range(nq)]
        if filter is not None and self._ivf_gather(s, allowed, count, npb) is not None:
            # So few rows allowed that search scans them exactly: the same, query by query.
            return [self.search(Qm[i], k, threshold, filter, threads, nprobe) for i in range(nq)]
        t = self.cfg.threads if threads is None else threads
        Qv = np.ascontiguousarray(np.stack([q for q, _ in normed]))
        pos, sc = self._codes.search(s, Qv, k, npb, self.rerank, t, allowed)
        l2 = self.cfg.scan_metric == "l2"
        out = []
        for i, (_, qnorm) in enumerate(normed):
            limit = threshold * qnorm if threshold is not None and qnorm != 1.0 else threshold
            rows, scores = _coded_results(pos[i], sc[i], limit, l2)
            if qnorm != 1.0:
                scores = scores * np.float32(1.0 / qnorm)
            out.append((s.ids[rows], scores))
        return out

    def search_batch_padded(  # noqa: A002
        self, Qm: np.ndarray, k: int, threshold: Any, filter: Any, threads: int, nprobe: int | None
    ) -> tuple:
        s = self.snapshot
        C = s.centroids
        npb = self.nprobe if nprobe is None else nprobe
        if C is None:
            shape = (Qm.shape[0], k)
            return pad_ids(s.ids, np.full(shape, -1, np.int64)), np.full(shape, -np.inf, np.float32)
        if filter is None:
            allowed, count = s.live, s.live_rows
        else:
            allowed, count = self._ivf_allowed(filter, s)
        metric = self.cfg.scan_metric
        subset = None if filter is None else self._ivf_gather(s, allowed, count, npb)
        if subset is not None:
            data, dt, sc, sq = self._ivf_rows(s)
            rows, scores, _c = _core.dense_search_batch(
                data, dt, sc, sq, Qm, k, metric, None, threshold, threads, subset
            )
        elif self._codes is not None:
            rows, scores = self._codes.search(s, Qm, k, npb, self.rerank, threads, allowed)
            if threshold is not None:
                t = np.float32(threshold)
                below = ~(scores <= t if metric == "l2" else scores >= t)  # NaN padding included
                rows[below] = -1
                scores[below] = np.nan
        else:
            rows, scores, _c = _core.ivf_search_batch(
                C, s.start, s.lens, s.data, self.cfg.encoding.name, s.scales, s.sqnorms, s.exact,
                Qm, k, npb, self.rerank, metric, allowed, threshold, threads,
            )  # fmt: skip
        return pad_ids(s.ids, rows), padded_scores(scores)

    # ----------------------------------------------------------------- tuning

    def _probe(
        self,
        s: IvfSnapshot,
        Qm: np.ndarray,
        k: int,
        nprobe: int,
        rerank: int,
        threads: int,
        allowed: Any = None,
    ) -> np.ndarray:
        """(nq, k) positions found at this setting among ``allowed`` (default: the live rows;
        -1 padding)."""
        allowed = s.live if allowed is None else allowed
        if self._codes is not None:
            return self._codes.search(s, Qm, k, nprobe, rerank, threads, allowed)[0]
        return _core.ivf_search_batch(
            s.centroids, s.start, s.lens, s.data, self.cfg.encoding.name, s.scales, s.sqnorms, s.exact,
            Qm, k, nprobe, rerank, self.cfg.scan_metric, allowed, None, threads,
        )[0]  # fmt: skip

    def _exact(self, s: IvfSnapshot, Qm: np.ndarray, k: int, threads: int, allowed: Any = None) -> tuple:
        """(positions (nq, k), counts (nq,)) of an exact scan of the live rows (or ``allowed``)."""
        data, dt, sc, sq = self._ivf_rows(s)
        subset = np.sort(_ranges(s.start, s.lens))  # lists need not lie in order
        allowed = s.live if allowed is None else allowed
        if allowed is not None:
            subset = subset[allowed[subset] != 0]
        pos, _scores, counts = _core.dense_search_batch(
            data, dt, sc, sq, Qm, k, self.cfg.scan_metric, None, None, threads, subset
        )
        return pos, counts

    def _costs(self, s: IvfSnapshot, k: int) -> Any:
        """Relative cost of a coded search at (nprobe, rerank): code bytes scanned plus the rows
        re-scored, a row counted 4x its bytes (read at random, from a mapped file)."""
        per_list = s.live_rows / s.centroids.shape[0]
        code = self._codes.code_bytes
        row = self.cfg.dim * self.cfg.encoding.dtype.itemsize * 4
        return lambda npb, rr: npb * per_list * code + k * rr * row

    def _calibrate(self) -> None:
        """The default nprobe (and rerank unless the caller gave one) of coded lists: the
        cheapest setting, by ``_costs``, that finds ``_CALIBRATE_TARGET`` of the 10 nearest
        stored rows of a fixed sample of stored rows, held out of the search (masked), so
        they are queries the lists never saw. Never below the fixed defaults (nprobe
        ``default_nprobe``, rerank 4): real queries lie farther from the rows than rows do."""
        self._calibrate_due = False
        s = self.snapshot
        src = self._iv_live_positions()
        pick = src[sample_index(src.shape[0], _CALIBRATE_QUERIES)]
        Qm = np.ascontiguousarray(self._iv_float_rows(pick), np.float32)
        held = np.ones(s.used, np.uint8) if s.live is None else s.live.copy()
        held[pick] = 0
        k, t = 10, self.cfg.threads
        truth, counts = self._exact(s, Qm, k, t, held)

        def probe(npb: int, rr: int) -> np.ndarray:
            return self._probe(s, Qm, k, npb, rr, t, held)

        reranks = _tune.ladder(128, 4) if self.auto_rerank else [self.rerank]
        nlist = s.centroids.shape[0]
        nprobes = _tune.ladder(nlist, default_nprobe(nlist)) if self.nprobe_arg is None else [self.nprobe_arg]
        got = _tune.choose(probe, self._costs(s, k), truth, counts, _CALIBRATE_TARGET, nprobes, reranks)
        self.auto = {k_: got[k_] for k_ in ("nprobe", "rerank", "recall", "reached")}
        if self.auto_rerank:
            self.rerank = got["rerank"]

    def tune(self, Qm: np.ndarray, k: int, target: float, threads: int) -> dict:
        """Sets nprobe and rerank to the fastest setting reaching ``target`` recall@k on the
        queries ``Qm`` (checked, cosine ones normalised), measured against an exact scan of
        the stored rows (tune.py); returns and keeps what was chosen."""
        s = self.snapshot
        if s.centroids is None or s.live_rows == 0:
            raise ValueError("tune() needs an index holding vectors: add them first")
        k = min(k, s.live_rows)
        truth, counts = self._exact(s, Qm, k, threads)
        nlist = s.centroids.shape[0]
        if self._codes is not None:
            reranks = _tune.ladder(128)
        elif self.rerank > 0 and self.cfg.encoding.name != "f32":
            reranks = _tune.ladder(128)
        else:
            reranks = [self.rerank]  # f32 lists are exact, rerank=0 lists keep no copy

        def probe(npb: int, rr: int) -> np.ndarray:
            return self._probe(s, Qm, k, npb, rr, threads)

        def timer(npb: int, rr: int) -> float:
            return _tune.time_per_query(lambda i: self._probe(s, Qm[i : i + 1], k, npb, rr, 1), Qm.shape[0])

        got = _tune.choose(probe, timer, truth, counts, target, _tune.ladder(nlist), reranks)
        self.nprobe_arg = got["nprobe"]
        self.rerank = got["rerank"]
        self.auto_rerank = False  # a later calibration must not replace the tuned rerank
        self.tuned = {
            "target_recall": float(target),
            "k": int(k),
            "queries": int(Qm.shape[0]),
            "nprobe": got["nprobe"],
            "rerank": got["rerank"],
            "recall": got["recall"],
            "reached": got["reached"],
        }
        return dict(self.tuned)

    def vector(self, pos: int) -> np.ndarray:
        """The float32 row at a list position (the rerank copy, else dequantised)."""
        return self._iv_float_rows(np.asarray([pos]))[0]

    # ----------------------------------------------------------------- persistence

    def sections(self) -> tuple[list, list, dict]:
        """(sections, ids in insertion order, header fields) of a save: lists packed, no holes."""
        s = self.snapshot
        extra: dict = {
            "nlist": self.nlist,
            "nlist_arg": self.nlist_arg,
            "nprobe_arg": self.nprobe_arg,
            "rerank": self.rerank,
            "trained": s.centroids is not None,
            "trained_n": self.trained_n,
            **({} if self.tuned is None else {"tuned": self.tuned}),
            **({} if self.auto is None else {"auto": self.auto}),
            "auto_rerank": self.auto_rerank,
            **({} if self._codes is None else self._codes.header()),
        }
        if self._codes is not None:
            extra["rerank_dtype"] = self.cfg.rerank_dtype
        if s.centroids is None:
            return [], [], extra
        live = s.live
        src = _ranges(s.start, s.lens)
        owner = np.repeat(np.arange(s.lens.shape[0], dtype=np.int64), s.lens)
        if live is not None:
            keep = live[src] != 0
            src, owner = src[keep], owner[keep]
        lens = np.bincount(owner, minlength=s.lens.shape[0]).astype(np.int64)
        offsets = np.zeros(lens.shape[0] + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        sections = [
            ("centroids", s.centroids),
            ("list_offsets", offsets),
            ("vectors", np.ascontiguousarray(s.data[src])),
        ]
        if s.scales is not None:
            sections.append(("scales", np.ascontiguousarray(s.scales[src])))
        if s.sqnorms is not None:
            sections.append(("sqnorms", np.ascontiguousarray(s.sqnorms[src])))
        if s.exact is not None:
            sections.append(("exact", np.ascontiguousarray(s.exact[src])))
        if self._codes is not None:
            crows = s.code_start[owner] + (src - s.start[owner])
            sections += self._codes.sections(self._codes.take(s.codes, crows))
        ids = s.ids[src]
        # Insertion order of the saved rows (the order of ``ids`` after a load).
        where = {x: i for i, x in enumerate(ids.tolist())}
        order = np.fromiter((where[x] for x in self.id_to_slot), np.int64, count=len(where))
        sections.append(("id_order", order))
        return sections, ids.tolist(), extra

    @classmethod
    def load(
        cls, cfg: DenseConfig, h: dict, read: Any, ids: list, id_kind: str | None, bad: Any, codes: Any = None
    ) -> IvfBackend:
        """The backend of a saved index; ``read(name, dtype, shape)`` returns a checked section."""
        b = cls(cfg, h["nlist_arg"], h["nprobe_arg"], h["rerank"], codes)
        b.id_kind = id_kind
        count, dim = len(ids), cfg.dim
        if not h["trained"]:
            if count:
                raise bad("an untrained IVF index holds vectors")
            return b
        nlist = h["nlist"]
        if not isinstance(nlist, int) or isinstance(nlist, bool) or nlist < 1:
            raise bad(f"invalid nlist {nlist!r}")
        C = read("centroids", np.float32, (nlist, dim))
        if not np.isfinite(C).all():
            raise bad("centroids are not finite")
        offs = read("list_offsets", np.int64, (nlist + 1,))
        if offs[0] != 0 or offs[-1] != count or (np.diff(offs) < 0).any():
            raise bad("list offsets are inconsistent")
        b._iv_data = read("vectors", cfg.encoding.dtype, (count, dim))
        if cfg.encoding.scaled:
            b._iv_scales = read("scales", np.float32, (count,))
        if cfg.has_sqnorms:
            b._iv_sqnorms = read("sqnorms", np.float32, (count,))
        b._iv_exact = read("exact", np.float32, (count, dim)) if b._keeps_exact() else None
        order = read("id_order", np.int64, (count,))
        if count and not np.array_equal(np.sort(order), np.arange(count)):
            raise bad("id order is not a permutation of the rows")
        b._centroids = C
        b._iv_ids = np.asarray(ids, dtype=object if id_kind == "str" else np.int64)
        lens = np.diff(offs).astype(np.int64)
        b._iv_start = offs[:-1].astype(np.int64)
        b._iv_len = lens
        b._iv_room = lens.copy()
        b._iv_used = b._iv_cap = count
        if codes is not None:
            saved = codes.load(read, count, bad)
            if codes.align == 1:  # codes at the list positions: used as read (mapped)
                b._cd, b._cd_start = saved, b._iv_start.copy()
                b._cd_used = b._cd_cap = count
            else:
                croom = round_up(lens, codes.align)
                b._cd_start = np.cumsum(croom) - croom
                b._cd_used = b._cd_cap = int(croom.sum())
                b._cd = codes.empty(b._cd_used)
                codes.put(b._cd, _ranges(b._cd_start, lens), saved)
        if id_kind == "int":  # arrays, not a dict: a loaded index stays small in memory
            b.id_to_slot = LoadedSlots(b._iv_ids[order], order)
        else:
            b.id_to_slot = {ids[i]: i for i in order.tolist()}
        # Files from before the growth policy: treated as trained at their current size.
        trained_n = h.get("trained_n", count)
        if not isinstance(trained_n, int) or isinstance(trained_n, bool) or trained_n < 0:
            raise bad(f"invalid training count {trained_n!r}")
        b.trained_n = trained_n
        tuned = h.get("tuned")  # absent in files from before tune()
        if tuned is not None:
            if not isinstance(tuned, dict) or tuned.get("nprobe") != h["nprobe_arg"]:
                raise bad(f"invalid tuning record {tuned!r}")
            b.tuned = dict(tuned)
        # Files from before the calibration keep the fixed defaults they were saved with.
        auto = h.get("auto")
        if auto is not None:
            if not isinstance(auto, dict) or not all(
                isinstance(auto.get(f), int) and not isinstance(auto.get(f), bool) and auto[f] >= 1
                for f in ("nprobe", "rerank")
            ):
                raise bad(f"invalid calibration record {auto!r}")
            b.auto = dict(auto)
        b.auto_rerank = h.get("auto_rerank", False) is True
        b._generation += 1
        b._iv_publish(None)
        return b
