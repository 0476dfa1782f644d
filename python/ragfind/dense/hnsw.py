"""The HNSW backend of DenseIndex: an hnswlib graph with growth, deletes and native filters.

Labels are assigned in insertion order (a re-added id gets a new label); a live-label mask
tracks deletes. A filter compiles (once per write generation) to the ascending allowed live
labels: small sets are scanned exactly, larger ones walked with hnswlib's filter, and a walk
that finds fewer than min(k, allowed) results falls back to the exact scan.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import hnswlib
import numpy as np

from ragfind import _core
from ragfind.dense._common import DenseConfig, SortedKeys, pad_ids
from ragfind.ids import IdFilter, as_id_filter, empty_ids

# HNSW searches restricted to at most max(_MIN, _FRACTION * live ids) ids scan those vectors
# exactly instead of walking the graph with a filter, whose Python callback per visited node
# makes selective walks slow (bench/dense.md has the crossover).
_HNSW_EXACT_FILTER_MIN = 4096
_HNSW_EXACT_FILTER_FRACTION = 0.05


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


class HnswBackend:
    """``kind="hnsw"``: an hnswlib graph; readers and writers share a reader-writer lock."""

    kind = "hnsw"

    def __init__(self, cfg: DenseConfig, M: int, ef_construction: int, ef: int, capacity: int = 1024) -> None:
        self.cfg = cfg
        self.M, self.ef_construction, self.ef = M, ef_construction, ef
        self.id_kind: str | None = None
        self.id_to_slot: dict = {}  # id -> label
        self._generation = 0
        self._metric_code = {"ip": 0, "cosine": 1, "l2": 2}[cfg.metric]  # for _core.hnsw_finish_single
        # Many readers or one writer (hnswlib searches must not overlap adds or resizes); writers
        # go ahead of readers that arrive after them (overlapping searches starved writers:
        # about 1 s per add/delete with 4 searching threads; tests/reliability/test_concurrency.py).
        self._rw = _core.ReaderWriterLock()
        self._hnsw: Any = None
        if capacity:
            self._hnsw = hnswlib.Index(space=cfg.scan_metric, dim=cfg.dim)
            self._hnsw.init_index(
                max_elements=capacity,
                ef_construction=ef_construction,
                M=M,
                random_seed=100,
                allow_replace_deleted=True,
            )
            self._hnsw.set_ef(ef)
            self._hnsw.set_num_threads(max(1, os.cpu_count() or 1))
        self._init_labels()

    def _init_labels(self) -> None:
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

    def set_ef(self, value: int) -> None:
        self._rw.acquire_write()
        try:
            self._hnsw.set_ef(value)
        finally:
            self._rw.release_write()
        self.ef = value

    @property
    def graph(self) -> Any:
        """The hnswlib index (for tests and benchmarks)."""
        return self._hnsw

    def add(self, X: np.ndarray, id_list: list, kind: str, norms: np.ndarray | None = None) -> None:
        """Adds X's rows (unit rows already for cosine) under new labels."""
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
                self.id_to_slot[x] = lab
            self._set_label_live(labels, 1)
            self._label_ids_arr = None  # rebuilt lazily for id mapping
            self.id_kind = kind
            self._generation += 1
        finally:
            self._rw.release_write()

    def _label_array(self) -> np.ndarray:
        arr = self._label_ids_arr
        if arr is None or arr.shape[0] != len(self._label_ids):
            dtype = object if self.id_kind == "str" else np.int64
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

    def delete(self, labels: list) -> None:
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
            cached = (arr.shape[0], SortedKeys(arr, self.id_kind))
            self._label_keys = cached
        labels = cached[1].rows_of(flt, self.id_kind)
        labels = labels[self._label_live[labels] != 0]
        if cached[1].order is not None:  # else already ascending
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
        return max(_HNSW_EXACT_FILTER_MIN, int(_HNSW_EXACT_FILTER_FRACTION * len(self.id_to_slot)))

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
        if self.cfg.metric == "l2":
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

    def search(  # noqa: A002
        self, qv: np.ndarray, k: int, threshold: Any, filter: Any, threads: int | None, nprobe: Any
    ) -> tuple:
        # q is checked (finite, non-zero for cosine) by the C++ call that finishes the search.
        rw = self._rw
        rw.acquire_read()
        try:
            if filter is None:
                kk = min(k, len(self.id_to_slot))
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
            return (arr.take(rows) if rows.size else empty_ids(self.id_kind)), scores
        return _core.hnsw_finish_single(rw, labels, dist, qv, code, threshold, n, arr)

    def search_batch_padded(  # noqa: A002
        self, Qm: np.ndarray, k: int, threshold: Any, filter: Any, threads: int, nprobe: Any
    ) -> tuple:
        nq = Qm.shape[0]
        self._rw.acquire_read()
        try:
            if filter is None:
                allowed, kk = None, min(k, len(self.id_to_slot))
            else:
                allowed = self._hnsw_allowed(filter)
                kk = min(k, len(allowed.labels))
            labels, dist = self._hnsw_walk_or_exact(Qm, kk, allowed, threads)
            arr = self._label_array()
        finally:
            self._rw.release_read()
        rows = labels.astype(np.int64)
        rows[np.isnan(dist)] = -1
        l2 = self.cfg.metric == "l2"
        scores = dist if l2 else (1.0 - dist).astype(np.float32)
        if threshold is not None:
            bad = scores > threshold if l2 else scores < threshold
            rows[bad] = -1
        scores = np.where(rows < 0, np.float32(-np.inf), scores).astype(np.float32)
        out_rows = np.full((nq, k), -1, np.int64)
        out_scores = np.full((nq, k), -np.inf, np.float32)
        kk = rows.shape[1]
        # Move kept results to the front of each row (thresholding can leave holes).
        order = np.argsort(rows < 0, axis=1, kind="stable")
        out_rows[:, :kk] = np.take_along_axis(rows, order, axis=1)
        out_scores[:, :kk] = np.take_along_axis(scores, order, axis=1)
        return pad_ids(arr, out_rows), out_scores

    # ----------------------------------------------------------------- files

    def _graph_bytes(self) -> bytes:
        with _scratch_file() as (fd, tmp):
            self._hnsw.save_index(tmp)
            with open(tmp, "rb") as f:
                return f.read()

    def sections(self) -> tuple[list, list, dict]:
        """(sections, ids in insertion order, header fields) of a save."""
        self._rw.acquire_read()
        try:
            blob = self._graph_bytes()
        finally:
            self._rw.release_read()
        ids_in_order = list(self.id_to_slot)
        labels = np.asarray([self.id_to_slot[x] for x in ids_in_order], np.int64)
        sections = [("hnsw", np.frombuffer(blob, dtype=np.uint8)), ("labels", labels)]
        extra = {"next_label": self._next_label, "max_elements": int(self._hnsw.max_elements)}
        return sections, ids_in_order, extra

    @classmethod
    def load(
        cls,
        cfg: DenseConfig,
        M: int,
        ef_construction: int,
        ef: int,
        header: dict,
        secs: dict,
        ids: list,
        bad: Any,
    ) -> HnswBackend:
        """The backend of a saved index from its checked ``hnsw`` and ``labels`` sections."""
        count = len(ids)
        labels = secs["labels"]
        if labels.shape != (count,):
            raise bad("labels section has the wrong shape")
        try:
            next_label = int(header["next_label"])
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"invalid next_label ({e})") from None
        if count and (labels.min() < 0 or labels.max() >= next_label):
            raise bad("labels out of range")
        # hnswlib trusts its graph file (neighbour ids, record sizes, levels): a file whose
        # checksums were recomputed after tampering would make a later search or add read
        # or write out of bounds, so the whole graph is checked before hnswlib sees it.
        try:
            g = _core.hnsw_check_graph(secs["hnsw"], cfg.dim)
        except ValueError as e:
            raise bad(str(e)) from None
        if g["M"] != M or g["ef_construction"] != ef_construction:
            raise bad("the HNSW graph's M or ef_construction differs from the header's")
        # The graph stores its own labels: the live ones are exactly the labels section.
        graph_labels = g["labels"].view(np.int64)
        if graph_labels.size and (graph_labels.min() < 0 or graph_labels.max() >= next_label):
            raise bad("the HNSW graph holds labels outside the labels section")
        live = graph_labels[~g["deleted"]]
        if live.shape != labels.shape or not np.array_equal(np.sort(live), np.sort(labels)):
            raise bad("the labels section does not match the HNSW graph's live elements")
        b = cls(cfg, M, ef_construction, ef, capacity=0)
        # Capacity is not taken from the file (a huge value would allocate per slot): what is
        # stored, at least the initial 1024; adds grow it by doubling.
        try:
            with _scratch_file() as (fd, tmp):
                _write_all(fd, secs["hnsw"])
                h = hnswlib.Index(space=cfg.scan_metric, dim=cfg.dim)
                h.load_index(tmp, max_elements=max(1024, g["count"]), allow_replace_deleted=True)
        except RuntimeError as e:  # hnswlib's own reader rejecting the graph bytes
            raise bad(f"the HNSW graph section is corrupt ({e})") from None
        h.set_ef(ef)
        h.set_num_threads(max(1, os.cpu_count() or 1))
        b._hnsw = h
        b._next_label = next_label
        label_ids: list = [None] * next_label
        for x, lab in zip(ids, labels.tolist()):
            label_ids[lab] = x
        b._label_ids = label_ids
        b._set_label_live(labels.astype(np.int64), 1)
        b.id_to_slot = dict(zip(ids, labels.tolist()))
        b._n_hnsw_deleted = int(h.element_count) - count
        return b

    def vector(self, label: int) -> np.ndarray:
        """The stored row of a label (float32)."""
        self._rw.acquire_read()
        try:
            return np.asarray(self._hnsw.get_items([label], return_type="numpy"), np.float32)[0]
        finally:
            self._rw.release_read()
