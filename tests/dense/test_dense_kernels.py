"""Similarity kernels: every compiled SIMD level against the scalar reference and numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from ragfind import _core
from ragfind import dense as rdense

DIMS = [1, 7, 16, 384, 1536]
N_ROWS = 13  # not a multiple of the 4-row blocks


def _data(d: int, seed: int = 0):
    rng = np.random.default_rng(seed + d)
    X = rng.standard_normal((N_ROWS, d)).astype(np.float32)
    q = rng.standard_normal(d).astype(np.float32)
    return X, q


def _at_level(level: str, fn):
    before = _core.get_simd_level()
    ragfind.set_simd_level(level)
    try:
        return fn()
    finally:
        ragfind.set_simd_level(before)


def _tol(X: np.ndarray, q: np.ndarray) -> np.ndarray:
    # float32 summation error bound, relative to the sum of |products|
    return (
        2e-6
        * (np.abs(X.astype(np.float64)) @ np.abs(q.astype(np.float64)))
        * max(1.0, np.sqrt(X.shape[1]) / 4)
    )


@pytest.mark.parametrize("d", DIMS)
def test_f32_scan_matches_scalar_and_numpy(simd_level, d):
    X, q = _data(d)
    assert _core.dense_kernel_name() == simd_level
    ip = _core.dense_score_all(X, "f32", None, None, q, "ip")
    l2 = _core.dense_score_all(X, "f32", None, None, q, "l2")
    ref_ip = X.astype(np.float64) @ q
    ref_l2 = ((X.astype(np.float64) - q) ** 2).sum(axis=1)
    np.testing.assert_allclose(ip, ref_ip, rtol=0, atol=_tol(X, q).max())
    np.testing.assert_allclose(l2, ref_l2, rtol=2e-5 * max(1, d / 64), atol=1e-5)
    sc_ip = _at_level("scalar", lambda: _core.dense_score_all(X, "f32", None, None, q, "ip"))
    np.testing.assert_allclose(ip, sc_ip, rtol=0, atol=2 * _tol(X, q).max())


@pytest.mark.parametrize("d", DIMS)
def test_f16_scan_matches_scalar_and_numpy(simd_level, d):
    X, q = _data(d, 1)
    H = X.astype(np.float16)
    ip = _core.dense_score_all(H, "f16", None, None, q, "ip")
    l2 = _core.dense_score_all(H, "f16", None, None, q, "l2")
    Hd = H.astype(np.float64)
    np.testing.assert_allclose(ip, Hd @ q, rtol=0, atol=_tol(X, q).max())
    np.testing.assert_allclose(l2, ((Hd - q) ** 2).sum(axis=1), rtol=2e-5 * max(1, d / 64), atol=1e-5)
    sc = _at_level("scalar", lambda: _core.dense_score_all(H, "f16", None, None, q, "ip"))
    np.testing.assert_allclose(ip, sc, rtol=0, atol=2 * _tol(X, q).max())


@pytest.mark.parametrize("d", DIMS)
def test_i8_scan_is_exact_integer_arithmetic(simd_level, d):
    rng = np.random.default_rng(d)
    I8 = rng.integers(-127, 128, size=(N_ROWS, d), dtype=np.int8)
    I8[0] = 127  # extremes: the int32 lane sums must not overflow
    I8[1] = -127
    scales = rng.uniform(0.5, 2.0, N_ROWS).astype(np.float32)
    q = rng.standard_normal(d).astype(np.float32)
    q[0] = 3.0  # the largest |q| maps to 16383
    got = _core.dense_score_all(I8, "i8", scales, None, q, "ip")
    # reference: the documented int16 query quantisation, exact integer dot
    qscale = np.float32(np.abs(q).max() / np.float32(16383))
    q16 = np.rint(q * (np.float32(16383) / np.abs(q).max())).astype(np.int64)
    idot = I8.astype(np.int64) @ q16
    ref = idot.astype(np.float32) * (qscale * scales)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
    sc = _at_level("scalar", lambda: _core.dense_score_all(I8, "i8", scales, None, q, "ip"))
    np.testing.assert_array_equal(got, sc)
    # and close to the float product of the dequantised rows
    deq = I8.astype(np.float64) * scales[:, None]
    assert (np.abs(got - deq @ q) <= 1e-3 * (np.abs(deq) @ np.abs(q)) + 1e-6).all()


def test_i8_long_rows_cross_the_int32_chunk():
    d = 4096 * 2 + 37  # several kI8ChunkElems chunks plus a tail
    I8 = np.full((5, d), 127, dtype=np.int8)
    q = np.full(d, 1.0, np.float32)
    got = [
        _at_level(lv, lambda: _core.dense_score_all(I8, "i8", np.ones(5, np.float32), None, q, "ip"))
        for lv in _core.supported_simd_levels()
    ]
    expect = np.float32(127 * 16383 * d) * np.float32(1.0 / 16383)
    for g in got:
        np.testing.assert_allclose(g, expect, rtol=1e-6)


def test_f16_special_values_decode_exactly(simd_level):
    vals = np.array(
        [0.0, -0.0, 6e-8, -6e-8, 1e-5, 65504.0, -65504.0, 1.0, 0.333, 2.0**-14, 2.0**-24] * 2,
        dtype=np.float16,
    )
    H = vals.reshape(1, -1)
    for j in range(H.shape[1]):
        q = np.zeros(H.shape[1], np.float32)
        q[j] = 1.0
        got = _core.dense_score_all(H, "f16", None, None, q, "ip")[0]
        assert got == np.float32(H[0, j]), (j, got, H[0, j])


@pytest.mark.parametrize("d", DIMS)
def test_pairwise_tile_matches_numpy(simd_level, d):
    rng = np.random.default_rng(d)
    A = rng.standard_normal((9, d)).astype(np.float32)  # 9 = two 4-query blocks + 1
    B = rng.standard_normal((11, d)).astype(np.float32)  # odd: exercises the row remainder
    ref = A.astype(np.float64) @ B.T.astype(np.float64)
    tol = 4e-6 * (np.abs(A).astype(np.float64) @ np.abs(B).T) * max(1.0, np.sqrt(d) / 4)
    got = rdense.dot(A, B)
    assert got.shape == (9, 11) and got.dtype == np.float32
    assert (np.abs(got - ref) <= tol + 1e-7).all()
    l2 = rdense.l2sq(A, B)
    ref_l2 = ((A[:, None, :].astype(np.float64) - B[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(l2, ref_l2, rtol=2e-5 * max(1, d / 64), atol=1e-5)
    cos = rdense.cosine(A, B)
    ref_cos = ref / np.outer(np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1))
    np.testing.assert_allclose(cos, ref_cos, atol=1e-5)


def test_kernel_functions_shapes_and_errors():
    a = np.arange(5, dtype=np.float32)
    B = np.ones((3, 5), np.float32)
    assert rdense.dot(a, a).shape == ()
    assert float(rdense.dot(a, a)) == pytest.approx(30.0)
    assert rdense.dot(a, B).shape == (3,)
    assert rdense.dot(B, a).shape == (3,)
    assert rdense.l2sq(a.astype(np.float64), a).shape == ()  # float64 is cast
    assert float(rdense.cosine(np.zeros(5), a)) == 0.0
    with pytest.raises(TypeError, match="floating"):
        rdense.dot(np.arange(5), a)
    with pytest.raises(ValueError, match="columns|length"):
        rdense.dot(np.ones((2, 4), np.float32), B)


def test_core_entry_points_validate_arguments():
    X = np.ones((4, 8), np.float32)
    q = np.ones(8, np.float32)
    with pytest.raises(TypeError, match="data must have dtype float32"):
        _core.dense_search(X.astype(np.float64), "f32", None, None, q, 3, "ip")
    with pytest.raises(ValueError, match="dimension 7"):
        _core.dense_search(X, "f32", None, None, np.ones(7, np.float32), 3, "ip")
    with pytest.raises(ValueError, match="metric"):
        _core.dense_search(X, "f32", None, None, q, 3, "cos")
    with pytest.raises(ValueError, match="storage"):
        _core.dense_search(X, "f64", None, None, q, 3, "ip")
    with pytest.raises(ValueError, match="scales are required"):
        _core.dense_search(X.astype(np.int8), "i8", None, None, q, 3, "ip")
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.dense_search(np.asfortranarray(np.ones((4, 8), np.float32)), "f32", None, None, q, 3, "ip")
    with pytest.raises(ValueError, match="allowed must have one entry per row"):
        _core.dense_search(X, "f32", None, None, q, 3, "ip", np.ones(3, np.uint8))
