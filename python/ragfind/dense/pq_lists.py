"""IVF lists of 4-bit product-quantisation codes (a building block, not yet a ``DenseIndex``
dtype): k-means lists as ``kind="ivf"`` trains them, residuals to each list's centroid coded
in ``pq_m`` sub-spaces of 16 codewords, scanned with the SIMD fast-scan kernel, and the
``rerank * k`` best estimates re-scored exactly against float32 rows (which may be a
memory-mapped array). Inner product only (cosine: pass unit-norm rows and queries).

The index is built once from all rows: no adds, deletes, filters or files yet.
"""

from __future__ import annotations

import numpy as np

from ragfind import _core

__all__ = ["IvfPqLists"]

_TRAIN_PER_LIST = 256  # as ivf.py
_PQ_TRAIN_ROWS = 65_536  # residuals the codebooks are trained on at most
_SEED = 1234
_BLOCK = 32  # rows per fast-scan block


class IvfPqLists:
    """``IvfPqLists(X, nlist, pq_m)``: X (n, d) float32 rows (kept by reference for re-scoring),
    nlist lists, pq_m sub-spaces (d % pq_m == 0; 4 bits each, pq_m / 2 bytes per row).
    ``search(Q, k, nprobe, rerank)`` returns (row numbers (nq, k) padded with -1, scores
    padded with NaN). Raises ValueError on shapes the kernels refuse."""

    def __init__(self, X: np.ndarray, nlist: int, pq_m: int, threads: int = 0) -> None:
        X = np.ascontiguousarray(X, dtype=np.float32)  # a copy only if X is not float32 already
        n, d = X.shape
        rng = np.random.default_rng(_SEED)
        m = min(n, _TRAIN_PER_LIST * nlist)
        sample = X if m == n else X[np.sort(rng.choice(n, m, replace=False))]
        self.centroids, _imb, _splits = _core.ivf_train(sample, nlist, "ip", 10, _SEED, threads)
        lists = _core.ivf_assign(X, self.centroids, "ip", threads)
        pick = np.sort(rng.choice(n, min(n, _PQ_TRAIN_ROWS), replace=False))
        res = X[pick] - self.centroids[lists[pick]]
        self.codewords = _core.pq_train(np.ascontiguousarray(res), pq_m, 4, 10, _SEED, threads)
        codes = np.empty((n, pq_m), np.uint8)
        for s in range(0, n, 65_536):  # residuals a block at a time
            e = min(n, s + 65_536)
            codes[s:e] = _core.pq_encode(X[s:e] - self.centroids[lists[s:e]], self.codewords, threads)
        order = np.argsort(lists, kind="stable")
        self.lens = np.bincount(lists, minlength=nlist).astype(np.int64)
        padded = (self.lens + _BLOCK - 1) // _BLOCK * _BLOCK
        self.row0 = (np.cumsum(padded) - padded).astype(np.int64)
        rows = int(padded.sum())
        self.pos = np.full(rows, -1, np.int64)
        dst = np.repeat(self.row0 - (np.cumsum(self.lens) - self.lens), self.lens) + np.arange(n)
        self.pos[dst] = order
        pcodes = np.zeros((rows, pq_m), np.uint8)
        pcodes[dst] = codes[order]
        self.blocks = _core.pq4_pack(pcodes)
        self.exact = X
        self.threads = threads

    def nbytes_resident(self) -> int:
        """Bytes of codes, centroids, codebooks and row numbers (not the re-scoring rows)."""
        return sum(
            a.nbytes for a in (self.blocks, self.centroids, self.codewords, self.pos, self.row0, self.lens)
        )

    def search(self, Q: np.ndarray, k: int, nprobe: int, rerank: int, threads: int | None = None) -> tuple:
        Q = np.ascontiguousarray(np.atleast_2d(Q), dtype=np.float32)
        t = self.threads if threads is None else threads
        return _core.ivf_pq_search(
            self.centroids, self.codewords, self.blocks, self.row0, self.lens, self.pos,
            self.exact, Q, k, nprobe, rerank, t,
        )  # fmt: skip
