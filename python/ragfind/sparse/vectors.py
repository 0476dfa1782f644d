"""Sparse vectors in CSR form: what a SPLADE encoder produces and a SparseVectorIndex stores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SparseEmbeddings"]


@dataclass
class SparseEmbeddings:
    """A batch of sparse vectors in CSR form: row ``i`` is ``indices[indptr[i]:indptr[i+1]]``
    (int32 vocabulary ids, ascending) with weights ``values[...]`` (float32, > 0)."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dim: int

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, values) of row ``i``."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} out of range for {len(self)} rows")
        i %= len(self)
        a, b = self.indptr[i], self.indptr[i + 1]
        return self.indices[a:b], self.values[a:b]

    def to_dense(self) -> np.ndarray:
        """float32 (rows, dim) dense matrix."""
        out = np.zeros((len(self), self.dim), dtype=np.float32)
        rows = np.repeat(np.arange(len(self)), np.diff(self.indptr))
        out[rows, self.indices] = self.values
        return out

    def to_scipy(self):
        """A scipy.sparse.csr_matrix (needs scipy)."""
        import scipy.sparse  # optional: scipy is not a dependency

        return scipy.sparse.csr_matrix((self.values, self.indices, self.indptr), shape=(len(self), self.dim))
