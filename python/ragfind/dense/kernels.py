"""The dense similarity kernels on matrices (``dot``, ``cosine``, ``l2sq``), dispatched to the
active SIMD level (``ragfind.set_simd_level``); exposed for tests and power users."""

from __future__ import annotations

from typing import Any

import numpy as np

from ragfind import _core

__all__ = ["dot", "cosine", "l2sq"]


def _as_f32_matrix(x: Any, name: str) -> tuple[np.ndarray, bool]:
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must hold floating-point values, got dtype {arr.dtype}")
    was_1d = arr.ndim == 1
    if was_1d:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 1-D or 2-D, got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.float32), was_1d


def _pairwise(a: Any, b: Any, op: str) -> np.ndarray:
    A, a1 = _as_f32_matrix(a, "a")
    B, b1 = _as_f32_matrix(b, "b")
    if a1 and b1:
        if A.shape != B.shape:
            raise ValueError(f"a and b must have the same length, got {A.shape[1]} and {B.shape[1]}")
        return _core.dense_rowwise(A, B, op)[0]
    out = _core.dense_pairwise(A, B, op)
    if a1:
        return out[0]
    if b1:
        return out[:, 0]
    return out


def dot(a: Any, b: Any) -> np.ndarray:
    """Inner products with the SIMD kernels.

    ``a`` is (m, d) or (d,), ``b`` is (n, d) or (d,); floating inputs are cast to float32
    (a copy when they are not already contiguous float32). Returns an (m, n) float32 matrix
    with the 1-D dimensions dropped (two 1-D inputs give a 0-D array). Raises TypeError for
    non-floating input and ValueError for mismatched dimensions.
    """
    return _pairwise(a, b, "dot")


def l2sq(a: Any, b: Any) -> np.ndarray:
    """Squared Euclidean distances with the SIMD kernels; shapes and errors as in ``dot``."""
    return _pairwise(a, b, "l2sq")


def cosine(a: Any, b: Any) -> np.ndarray:
    """Cosine similarities with the SIMD kernels; shapes and errors as in ``dot``.

    A zero vector has cosine 0 with everything.
    """
    A, _ = _as_f32_matrix(a, "a")
    B, _ = _as_f32_matrix(b, "b")
    na = np.sqrt(np.maximum(_core.dense_rowwise(A, A, "dot"), 0.0))
    nb = np.sqrt(np.maximum(_core.dense_rowwise(B, B, "dot"), 0.0))
    d = dot(a, b)
    na = na if np.ndim(a) == 2 else na[0]
    nb = nb if np.ndim(b) == 2 else nb[0]
    denom = np.multiply.outer(na, nb) if np.ndim(d) == 2 else na * nb
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(denom > 0, d / np.where(denom > 0, denom, 1.0), 0.0)
    return np.asarray(out, dtype=np.float32)
