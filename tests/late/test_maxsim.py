"""MaxSim kernel: every SIMD level against a float64 numpy reference, and input validation."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from ragfind import _core


def reference_maxsim(query: np.ndarray, docs: list[np.ndarray]) -> np.ndarray:
    q = query.astype(np.float64)
    return np.array([(q @ d.astype(np.float64).T).max(axis=1).sum() for d in docs])


# Document lengths 1..600 including the tile edges (1, tile heights, the float16 block of 48).
LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 16, 17, 47, 48, 49, 96, 97, 255, 600]


@pytest.mark.parametrize("dim", [64, 96, 128, 384])
@pytest.mark.parametrize("m", [1, 7, 16, 32, 33, 70])
def test_maxsim_matches_reference_float32(simd_level, dim, m):
    rng = np.random.default_rng(dim * 100 + m)
    q = rng.standard_normal((m, dim)).astype(np.float32)
    docs = [rng.standard_normal((n, dim)).astype(np.float32) for n in LENGTHS]
    got = ragfind.maxsim(q, docs)
    want = reference_maxsim(q, docs)
    assert got.dtype == np.float32 and got.shape == (len(docs),)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.sqrt(dim) * m / 10)


@pytest.mark.parametrize("dim", [64, 96, 128, 384])
def test_maxsim_matches_reference_float16_docs(simd_level, dim):
    rng = np.random.default_rng(dim)
    q = rng.standard_normal((32, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    docs = [rng.standard_normal((n, dim)).astype(np.float16) for n in LENGTHS]
    got = ragfind.maxsim(q, docs)
    np.testing.assert_allclose(got, reference_maxsim(q, docs), rtol=1e-5, atol=1e-4)


def test_normalized_scores_within_1e4(simd_level):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((32, 128)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    docs = []
    for n in rng.integers(1, 601, size=40):
        d = rng.standard_normal((n, 128)).astype(np.float32)
        docs.append(d / np.linalg.norm(d, axis=1, keepdims=True))
    np.testing.assert_allclose(ragfind.maxsim(q, docs), reference_maxsim(q, docs), rtol=0, atol=1e-4)


def test_every_level_agrees_with_scalar():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((45, 100)).astype(np.float32)
    docs = [rng.standard_normal((n, 100)).astype(np.float32) for n in (1, 9, 50, 333)]
    before = _core.get_simd_level()
    try:
        ragfind.set_simd_level("scalar")
        scalar = ragfind.maxsim(q, docs)
        for level in _core.supported_simd_levels():
            ragfind.set_simd_level(level)
            np.testing.assert_allclose(ragfind.maxsim(q, docs), scalar, rtol=1e-5, atol=1e-4)
    finally:
        ragfind.set_simd_level(before)


def test_packed_form_and_threads_match_list(simd_level):
    rng = np.random.default_rng(11)
    q = rng.standard_normal((32, 64)).astype(np.float32)
    docs = [rng.standard_normal((n, 64)).astype(np.float32) for n in rng.integers(1, 200, size=300)]
    packed = np.concatenate(docs)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    a = ragfind.maxsim(q, docs, threads=1)
    b = ragfind.maxsim(q, packed, offsets=offsets, threads=4)
    np.testing.assert_array_equal(a, b)  # same kernel, same order of operations
    sub = _core.maxsim_packed(q, packed, offsets.astype(np.int64), np.array([5, 0, 5]), 0, True)
    np.testing.assert_array_equal(sub, a[[5, 0, 5]])


def test_other_float_dtypes_are_converted():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((4, 16))
    docs = [rng.standard_normal((3, 16)), rng.standard_normal((5, 16)).astype(np.float16)]
    np.testing.assert_allclose(ragfind.maxsim(q, docs), reference_maxsim(q, docs), rtol=1e-5, atol=1e-4)
    d3 = rng.standard_normal((6, 5, 16)).astype(np.float32)
    np.testing.assert_allclose(ragfind.maxsim(q, d3), reference_maxsim(q, list(d3)), rtol=1e-5, atol=1e-4)


def test_empty_document_list_gives_empty_scores():
    q = np.ones((2, 8), dtype=np.float32)
    out = ragfind.maxsim(q, [])
    assert out.shape == (0,) and out.dtype == np.float32


def test_bad_inputs_are_rejected_clearly():
    q = np.ones((4, 8), dtype=np.float32)
    good = np.ones((3, 8), dtype=np.float32)
    with pytest.raises(ValueError, match=r"documents\[1\] has dim 7, expected 8"):
        ragfind.maxsim(q, [good, np.ones((3, 7), dtype=np.float32)])
    with pytest.raises(ValueError, match=r"documents\[0\] is empty"):
        ragfind.maxsim(q, [np.ones((0, 8), dtype=np.float32)])
    bad = good.copy()
    bad[2, 5] = np.nan
    with pytest.raises(ValueError, match=r"documents\[1\] contains a non-finite value.*row 2, column 5"):
        ragfind.maxsim(q, [good, bad])
    with pytest.raises(ValueError, match="non-finite"):
        ragfind.maxsim(q, [good.astype(np.float16), np.full((2, 8), np.inf, dtype=np.float16)])
    qn = q.copy()
    qn[0, 0] = np.inf
    with pytest.raises(ValueError, match="query_vectors contains a non-finite"):
        ragfind.maxsim(qn, [good])
    with pytest.raises(ValueError, match="query_vectors must be 2-D"):
        ragfind.maxsim(np.ones(8, dtype=np.float32), [good])
    with pytest.raises(ValueError, match="at least one token vector"):
        ragfind.maxsim(np.ones((0, 8), dtype=np.float32), [good])
    with pytest.raises(TypeError, match="floating-point"):
        ragfind.maxsim(q, [np.ones((3, 8), dtype=np.int32)])
    with pytest.raises(TypeError, match="list of"):
        ragfind.maxsim(q, "not documents")
    packed = np.ones((5, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="strictly increasing"):
        ragfind.maxsim(q, packed, offsets=[0, 2, 2, 5])
    with pytest.raises(ValueError, match="does not match tokens rows"):
        ragfind.maxsim(q, packed, offsets=[0, 2, 4])
    with pytest.raises(ValueError, match="offsets\\[0\\] must be 0"):
        ragfind.maxsim(q, packed, offsets=[1, 5])
    with pytest.raises(IndexError, match="out of range"):
        _core.maxsim_packed(q, packed, np.array([0, 5], dtype=np.int64), np.array([1]), 0, True)


@pytest.mark.parametrize("threads", [1, 2, 4, 8])
def test_first_non_finite_document_is_reported_whatever_the_threads(threads):
    # Many documents on several workers, three of them bad: the lowest bad one is named, with
    # its exact row and column, whichever worker finds a bad document first.
    rng = np.random.default_rng(8)
    q = rng.standard_normal((40, 64)).astype(np.float32)
    docs = [rng.standard_normal((int(n), 64)).astype(np.float32) for n in rng.integers(50, 300, size=600)]
    for d, (r, c) in ((411, (3, 7)), (523, (0, 0)), (590, (1, 2))):
        docs[d][r, c] = np.inf if d % 2 else np.nan
    for _ in range(3):
        with pytest.raises(
            ValueError, match=r"documents\[411\] contains a non-finite value.*row 3, column 7"
        ):
            ragfind.maxsim(q, docs, threads=threads)
    good = ragfind.maxsim(q, docs[:400], threads=threads)
    np.testing.assert_allclose(good, ragfind.maxsim(q, docs[:400], threads=1), rtol=1e-6)


def test_n_threads_is_the_deprecated_name_of_threads():
    q = np.ones((2, 4), np.float32)
    docs = [np.ones((3, 4), np.float32), np.eye(4, dtype=np.float32)]
    with pytest.warns(DeprecationWarning, match="maxsim: n_threads= is deprecated"):
        old = ragfind.maxsim(q, docs, n_threads=1)
    np.testing.assert_array_equal(old, ragfind.maxsim(q, docs, threads=1))
    with pytest.raises(ValueError, match=r"^threads: expected None or an int >= 0"):
        ragfind.maxsim(q, docs, threads=-1)
