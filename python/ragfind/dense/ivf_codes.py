"""Compressed codes of IVF lists: DenseIndex ``kind="ivf"`` with ``dtype="pq"`` or ``"rabitq"``.

The lists keep their float32 rows exactly as ``dtype="f32"`` does (float16 rows as ``"f16"``
does with ``rerank_dtype="f16"``; ivf.py moves, packs, saves and maps them the same way); a
codes object adds, per row, a short code of the row's residual to its list's centroid, which
the search scans instead of the rows. The ``k * rerank`` best estimates are then re-scored
exactly against the stored rows, so only those rows are read:
after ``load(mmap=True)`` the rows stay in the file and memory holds the codes, centroids, ids
and the codebooks (PQ) or rotation (RaBitQ).

- ``PqCodes``: product quantisation, ``pq_m`` sub-spaces of 16 codewords (4 bits a sub-space,
  ``pq_m / 2`` bytes a row), in the 4-bit fast-scan layout: blocks of 32 rows, so each list's
  codes start at a multiple of 32 "code rows" (its own numbering beside the list positions).
- ``Pq8Codes``: product quantisation with 256 codewords a sub-space (``pq_m`` bytes a row, at
  the list positions), scanned with float look-up tables.
- ``RabitqCodes``: RaBitQ, one bit a dimension plus three floats a row, at the list positions;
  its error bound lets the re-scoring skip candidates that cannot reach the top k.

``encode(residuals, params, rows)`` gets the rows the residuals were taken from (RaBitQ keeps
each row's centroid . residual; PQ ignores them). ``fit`` gets None instead of residuals when
the codes object sets ``learns_from_residuals = False`` (RaBitQ: its rotation is random).

A code state is a tuple of arrays; codes of n rows are a tuple of arrays with n rows each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragfind import _core

_SEED = 1234
# Residuals the PQ codebooks are trained on at most: 256 a codeword (faiss's k-means default,
# 65,536 for 8 bits), and no fewer than 16,384 (1,024 a codeword for 4 bits).
_TRAIN_PER_CODEWORD = 256
_TRAIN_ROWS_MIN = 16_384
_BLOCK = 32  # rows per fast-scan block
_STEP = 16_384  # code rows written or read per step


def default_pq_m(dim: int) -> int:
    """Sub-spaces when none are given: the largest divisor of dim up to dim / 4 (4 dimensions
    a sub-space: dim / 8 bytes a row) and 256."""
    top = max(1, min(256, dim // 4))
    return max(m for m in range(1, top + 1) if dim % m == 0)


def round_up(n: np.ndarray, align: int) -> np.ndarray:
    return (n + align - 1) // align * align


class _CoarseCentroids:
    """What both coded searches share: the int8 form of the centroids they pick lists with
    (the same lists as a float32 scan of the centroids, about a quarter of the bytes read)."""

    # (centroids, their int8 form) of the last search: made again when the centroids are
    # replaced (retraining, load), never when they are the same object.
    _coarse: tuple | None = None

    def coarse(self, centroids: np.ndarray) -> Any:
        c = self._coarse
        if c is None or c[0] is not centroids:
            c = self._coarse = (centroids, _core.coarse_centroids(centroids))
        return c[1]


class PqCodes(_CoarseCentroids):
    """4-bit PQ codes of residuals in fast-scan blocks (Pq8Codes: 8-bit ones)."""

    name = "pq"
    align = _BLOCK

    def __init__(self, dim: int, m: int, bits: int, threads: int, metric: str = "ip") -> None:
        self.dim, self.m, self.bits, self.threads = dim, m, bits, threads
        self.metric = "l2" if metric == "l2" else "ip"  # the search's: cosine rows are unit
        self.mpad = (m + 3) // 4 * 4
        self.params: np.ndarray | None = None  # codewords (m, 16, dim // m); replaced, never changed

    def header(self) -> dict:
        return {"pq_m": self.m, "pq_bits": self.bits}

    @property
    def code_bytes(self) -> float:
        """Bytes of code a row (what a scan reads per row)."""
        return self.m * self.bits / 8

    @property
    def train_rows(self) -> int:
        """Residuals ``fit`` trains on at most."""
        return max(_TRAIN_PER_CODEWORD << self.bits, _TRAIN_ROWS_MIN)

    def training_index(self, n: int) -> np.ndarray | None:
        """The rows of n whose residuals ``fit`` trains on, ascending (None: all of them)."""
        return sample_index(n, self.train_rows)

    def fit(self, residuals: np.ndarray) -> np.ndarray:
        """New codewords for these residuals, the rows ``training_index`` picked (``params`` is
        set by the caller once it commits)."""
        R = residuals
        if R.shape[0] < 1 << self.bits:  # k-means needs a row per codeword: repeat the few there are
            R = np.resize(R, (1 << self.bits, R.shape[1]))
        return _core.pq_train(np.ascontiguousarray(R), self.m, self.bits, 10, _SEED, self.threads)

    def encode(
        self, residuals: np.ndarray, params: np.ndarray | None = None, rows: np.ndarray | None = None
    ) -> tuple:
        cw = self.params if params is None else params
        return (_core.pq_encode(np.ascontiguousarray(residuals), cw, self.threads),)

    def empty(self, rows: int) -> tuple:
        return (np.zeros(rows // _BLOCK * self.mpad * 16, np.uint8),)

    def grown(self, state: tuple, used: int, rows: int) -> tuple:
        out = self.empty(rows)
        nbytes = used // _BLOCK * self.mpad * 16
        out[0][:nbytes] = state[0][:nbytes]
        return out

    def writeable(self, state: tuple) -> bool:
        return bool(state[0].flags.writeable)

    def published(self, state: tuple, used: int) -> tuple:
        return (state[0][: used // _BLOCK * self.mpad * 16],)

    def _where(self, rows: np.ndarray) -> tuple:
        """(block, byte, high nibble) of code rows."""
        r = rows % _BLOCK
        return rows // _BLOCK, r % 16, r >= 16

    def put(self, state: tuple, rows: np.ndarray, codes: tuple) -> None:
        """Writes codes at code rows (a nibble each: the other row of each byte is kept)."""
        B = state[0].reshape(-1, self.mpad, 16)
        j = np.arange(self.m)[None, :]
        for a in range(0, rows.shape[0], _STEP):  # bounded (rows, m) index temporaries
            blk, byte, high = self._where(rows[a : a + _STEP])
            cc = codes[0][a : a + _STEP]
            for sel, shift, keep in ((~high, 0, 0xF0), (high, 4, 0x0F)):
                if sel.any():
                    bb, yy = blk[sel][:, None], byte[sel][:, None]
                    B[bb, j, yy] = (B[bb, j, yy] & np.uint8(keep)) | (cc[sel] << np.uint8(shift))

    def take(self, state: tuple, rows: np.ndarray) -> tuple:
        B = state[0].reshape(-1, self.mpad, 16)
        j = np.arange(self.m)[None, :]
        out = np.empty((rows.shape[0], self.m), np.uint8)
        for a in range(0, rows.shape[0], _STEP):
            blk, byte, high = self._where(rows[a : a + _STEP])
            raw = B[blk[:, None], j, byte[:, None]]
            out[a : a + _STEP] = (raw >> np.where(high, 4, 0).astype(np.uint8)[:, None]) & 15
        return (out,)

    def search(
        self, s: Any, Q: np.ndarray, k: int, nprobe: int, rerank: int, threads: int, allowed: Any
    ) -> tuple:
        return _core.ivf_pq_search(
            s.centroids, s.code_params, s.codes[0], s.code_start, s.lens, None, s.data, Q, k, nprobe,
            rerank, threads, start=s.start, allowed=allowed, metric=self.metric,
            coarse=self.coarse(s.centroids),
        )  # fmt: skip

    def sections(self, codes: tuple) -> list:
        return [("pq_codewords", self.params), ("pq_codes", np.ascontiguousarray(codes[0]))]

    def load(self, read: Any, count: int, bad: Any) -> tuple:
        cw = read("pq_codewords", np.float32, (self.m, 1 << self.bits, self.dim // self.m))
        if not np.isfinite(cw).all():
            raise bad("PQ codewords are not finite")
        self.params = np.array(cw)
        codes = read("pq_codes", np.uint8, (count, self.m))
        if count and int(codes.max()) >= 1 << self.bits:
            raise bad("PQ codes out of range")
        return (codes,)


class Pq8Codes(PqCodes):
    """8-bit PQ codes of residuals, ``m`` bytes a code row (no blocks: align 1)."""

    align = 1

    def empty(self, rows: int) -> tuple:
        return (np.zeros((rows, self.m), np.uint8),)

    def grown(self, state: tuple, used: int, rows: int) -> tuple:
        out = self.empty(rows)
        out[0][:used] = state[0][:used]
        return out

    def published(self, state: tuple, used: int) -> tuple:
        return (state[0][:used],)

    def put(self, state: tuple, rows: np.ndarray, codes: tuple) -> None:
        state[0][rows] = codes[0]

    def take(self, state: tuple, rows: np.ndarray) -> tuple:
        return (state[0][rows],)

    def search(
        self, s: Any, Q: np.ndarray, k: int, nprobe: int, rerank: int, threads: int, allowed: Any
    ) -> tuple:
        return _core.ivf_pq_search(
            s.centroids, s.code_params, np.ascontiguousarray(s.codes[0]).reshape(-1), s.code_start,
            s.lens, None, s.data, Q, k, nprobe, rerank, threads, start=s.start, allowed=allowed,
            metric=self.metric, coarse=self.coarse(s.centroids),
        )  # fmt: skip


class RabitqCodes(_CoarseCentroids):
    """RaBitQ codes at the list positions: sign bits of the rotated residual, its norm,
    <xbar, o'> and centroid . residual (ragfind/dense/rabitq.hpp, ivf_rabitq.hpp)."""

    name = "rabitq"
    align = 1
    learns_from_residuals = False  # fit() draws a random rotation: no residuals needed

    def __init__(self, dim: int, threads: int) -> None:
        self.dim, self.threads = dim, threads
        self.words = (dim + 63) // 64
        self.params: np.ndarray | None = None  # the (dim, dim) rotation
        # (centroids, rotation, rotated centroids) of the last search: recomputed when either is
        # replaced (retraining, load), never when they are the same objects.
        self._rotated: tuple | None = None

    def header(self) -> dict:
        return {}

    @property
    def code_bytes(self) -> float:
        """Bytes of code a row: the sign bits and three floats."""
        return self.words * 8 + 12

    def fit(self, residuals: np.ndarray | None) -> np.ndarray:
        """The rotation: data-independent, so kept across retrains."""
        return _core.rabitq_rotation(self.dim, _SEED) if self.params is None else self.params

    def encode(
        self, residuals: np.ndarray, params: np.ndarray | None = None, rows: np.ndarray | None = None
    ) -> tuple:
        """Codes of residuals = rows - their centroids (``rows`` is required)."""
        if rows is None:
            raise ValueError("RaBitQ codes need the rows of the residuals (centroid . residual)")
        rot = self.params if params is None else params
        R = np.ascontiguousarray(residuals, dtype=np.float32)
        bits, norm, ipq = _core.rabitq_encode(R, rot, self.threads)
        cdot = np.einsum("ij,ij->i", np.asarray(rows, np.float32) - R, R, dtype=np.float32)
        return bits, norm, ipq, np.ascontiguousarray(cdot, dtype=np.float32)

    def empty(self, rows: int) -> tuple:
        return (
            np.zeros((rows, self.words), np.uint64),
            np.zeros(rows, np.float32),
            np.ones(rows, np.float32),
            np.zeros(rows, np.float32),
        )

    def grown(self, state: tuple, used: int, rows: int) -> tuple:
        out = self.empty(rows)
        for a, b in zip(out, state):
            a[:used] = b[:used]
        return out

    def writeable(self, state: tuple) -> bool:
        return all(a.flags.writeable for a in state)

    def published(self, state: tuple, used: int) -> tuple:
        return tuple(a[:used] for a in state)

    def put(self, state: tuple, rows: np.ndarray, codes: tuple) -> None:
        for a, c in zip(state, codes):
            a[rows] = c

    def take(self, state: tuple, rows: np.ndarray) -> tuple:
        return tuple(a[rows] for a in state)

    def rotated_centroids(self, centroids: np.ndarray, rotation: np.ndarray) -> np.ndarray:
        """centroids @ rotation.T (nlist x dim), cached for the same two arrays."""
        r = self._rotated
        if r is None or r[0] is not centroids or r[1] is not rotation:
            rc = np.ascontiguousarray(centroids @ rotation.T, dtype=np.float32)
            r = (centroids, rotation, rc)
            self._rotated = r
        return r[2]

    def search(
        self, s: Any, Q: np.ndarray, k: int, nprobe: int, rerank: int, threads: int, allowed: Any
    ) -> tuple:
        bits, norm, ipq, cdot = s.codes
        rc = self.rotated_centroids(s.centroids, s.code_params)
        # The scan's estimates and bounds lose recall on long queries (0.91 -> 0.87 at |q| 7):
        # it gets unit queries and the scores are scaled back (the ranking is the same).
        qn = np.sqrt(np.einsum("ij,ij->i", Q, Q, dtype=np.float64))
        scale = ~np.isclose(qn, 1.0, rtol=1e-6, atol=0.0) & (qn > 0)
        if scale.any():
            Q = np.ascontiguousarray(
                np.where(scale[:, None], Q / np.where(scale, qn, 1.0)[:, None], Q), np.float32
            )
        pos, scores, _stats = _core.ivf_rabitq_search(
            s.centroids, s.code_params, rc, bits, norm, ipq, cdot, s.start, s.lens, s.data, Q, k,
            nprobe, rerank, threads, allowed, coarse=self.coarse(s.centroids),
        )  # fmt: skip
        if scale.any():
            scores = scores * np.where(scale, qn, 1.0).astype(np.float32)[:, None]
        return pos, scores

    def sections(self, codes: tuple) -> list:
        bits, norm, ipq, cdot = (np.ascontiguousarray(a) for a in codes)
        return [
            ("rabitq_rotation", self.params),
            ("rabitq_bits", bits),
            ("rabitq_norm", norm),
            ("rabitq_ipq", ipq),
            ("rabitq_cdot", cdot),
        ]

    def load(self, read: Any, count: int, bad: Any) -> tuple:
        rot = read("rabitq_rotation", np.float32, (self.dim, self.dim))
        if not np.isfinite(rot).all():
            raise bad("RaBitQ rotation is not finite")
        self.params = np.array(rot)
        norm = read("rabitq_norm", np.float32, (count,))
        ipq = read("rabitq_ipq", np.float32, (count,))
        # ipq of a code lies in (0, 1]: the estimator divides by it.
        if count and not (np.isfinite(norm).all() and (ipq > 0).all() and (ipq <= 1.0001).all()):
            raise bad("RaBitQ norms or inner products are out of range")
        try:
            cdot = read("rabitq_cdot", np.float32, (count,))
        except Exception as e:  # the container's own error class: only a missing section is old
            if "missing section 'rabitq_cdot'" not in str(e):
                raise
            raise bad(
                "RaBitQ codes of the first version (no rabitq_cdot section: the estimator "
                "before query residuals); rebuild the index from its vectors with this ragfind"
            ) from None
        if count and not np.isfinite(cdot).all():
            raise bad("RaBitQ centroid products are not finite")
        return (read("rabitq_bits", np.uint64, (count, self.words)), norm, ipq, cdot)


def sample_index(n: int, most: int) -> np.ndarray | None:
    """Sorted positions of a fixed-seed sample of ``most`` of n rows, or None for all of them."""
    if n <= most:
        return None
    return np.sort(np.random.default_rng(_SEED).choice(n, most, replace=False))


def make_codes(dtype: str, dim: int, pq_m: int | None, pq_bits: int, threads: int, metric: str = "ip") -> Any:
    """The codes object of a coded dtype ("pq", "rabitq"); PQ also scores metric "l2"."""
    if dtype == "pq":
        cls = Pq8Codes if pq_bits == 8 else PqCodes
        return cls(dim, default_pq_m(dim) if pq_m is None else pq_m, pq_bits, threads, metric)
    return RabitqCodes(dim, threads)
