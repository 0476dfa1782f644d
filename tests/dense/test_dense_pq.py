"""Product quantisation in _core: training and codes against numpy, the 4-bit fast scan and the
8-bit float-table scan at every compiled SIMD level against the scalar level and a numpy
look-up, IVF-PQ re-scoring float16 rows at every level against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from ragfind import _core


def _rows(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((4, d)).astype(np.float32)
    return (rng.standard_normal((n, 4)).astype(np.float32) @ W + 0.2 * rng.standard_normal((n, d))).astype(
        np.float32
    )


def _at_level(level: str, fn):
    before = _core.get_simd_level()
    ragfind.set_simd_level(level)
    try:
        return fn()
    finally:
        ragfind.set_simd_level(before)


def test_codes_are_the_nearest_codewords():
    X = _rows(500, 24)
    cw = _core.pq_train(X, 6, 4, threads=1)
    assert cw.shape == (6, 16, 4) and cw.dtype == np.float32
    codes = _core.pq_encode(X, cw)
    assert codes.shape == (500, 6) and codes.dtype == np.uint8
    sub = X.reshape(500, 6, 1, 4)
    dist = ((sub - cw[None]) ** 2).sum(-1)  # (n, m, 16)
    chosen = np.take_along_axis(dist, codes[..., None].astype(np.int64), -1)[..., 0]
    assert np.all(chosen <= dist.min(-1) + 1e-5)
    np.testing.assert_array_equal(_core.pq_train(X, 6, 4, threads=2), cw)  # any thread count


@pytest.mark.parametrize("m", [1, 5, 8, 48])
@pytest.mark.parametrize("n", [1, 32, 77])
def test_fast_scan_matches_scalar_and_numpy(simd_level, m, n):
    assert _core.pq4_kernel_name() == simd_level
    rng = np.random.default_rng(m * 100 + n)
    codes = rng.integers(0, 16, (n, m), dtype=np.uint8)
    lut = rng.standard_normal((m, 16)).astype(np.float32)
    blocks = _core.pq4_pack(codes)
    sums, bias, scale = _core.pq4_scan(blocks, n, lut)
    ref, _, _ = _at_level("scalar", lambda: _core.pq4_scan(blocks, n, lut))
    np.testing.assert_array_equal(sums, ref)
    exact = lut[np.arange(m)[None, :], codes].sum(1, dtype=np.float64)
    np.testing.assert_allclose(bias + scale * sums.astype(np.float64), exact, atol=0.5 * scale * m + 1e-4)


@pytest.mark.parametrize("m", [1, 3, 24, 48])
@pytest.mark.parametrize("n", [0, 1, 5, 77])
def test_8bit_scan_matches_scalar_and_numpy(simd_level, m, n):
    rng = np.random.default_rng(m * 100 + n)
    codes = rng.integers(0, 256, (n, m), dtype=np.uint8)
    lut = rng.standard_normal((m, 256)).astype(np.float32)
    sums = _core.pq8_scan(codes, lut)
    ref = _at_level("scalar", lambda: _core.pq8_scan(codes, lut))
    np.testing.assert_array_equal(sums, ref)
    want = np.zeros(n, np.float32)  # summed in float32 in order of the sub-spaces: the same bits
    for j in range(m):
        want += lut[j, codes[:, j]]
    np.testing.assert_array_equal(sums, want)


def test_8bit_codebooks_and_codes():
    X = _rows(2000, 16)
    cw = _core.pq_train(X, 4, 8, threads=1)
    assert cw.shape == (4, 256, 4)
    codes = _core.pq_encode(X, cw)
    dist = ((X.reshape(2000, 4, 1, 4) - cw[None]) ** 2).sum(-1)
    chosen = np.take_along_axis(dist, codes[..., None].astype(np.int64), -1)[..., 0]
    assert np.all(chosen <= dist.min(-1) + 1e-5)
    # 256 codewords fit the rows more closely than 16.
    cw4 = _core.pq_train(X, 4, 4, threads=1)
    err = lambda w, c: float(((X.reshape(2000, 4, 4) - w[np.arange(4), c]) ** 2).sum())  # noqa: E731
    assert err(cw, codes) < 0.5 * err(cw4, _core.pq_encode(X, cw4))


@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize("bits", [4, 8])
def test_ivf_pq_rescores_float16_rows_at_every_level(simd_level, bits, metric):
    from ragfind import DenseIndex

    X = _rows(2000, 32, seed=5)
    Q = _rows(20, 32, seed=6)
    ix = DenseIndex(
        32,
        metric=metric,
        kind="ivf",
        dtype="pq",
        nlist=8,
        pq_m=8,
        pq_bits=bits,
        rerank_dtype="f16",
        rerank=50,
    )
    ix.add(X)
    s = ix._backend.snapshot
    assert s.data.dtype == np.float16
    ids, scores = ix.search_batch_padded(Q, 10, nprobe=8)
    X16 = X.astype(np.float16).astype(np.float32)  # ids 0..n-1
    if metric == "ip":
        S = Q @ X16.T
        truth = np.argsort(-S, axis=1)[:, :10]
    else:  # squared distances, ascending
        S = ((Q[:, None, :].astype(np.float64) - X16[None]) ** 2).sum(-1)
        truth = np.argsort(S, axis=1)[:, :10]
    hits = np.mean([len(set(a) & set(b)) for a, b in zip(ids.tolist(), truth.tolist())])
    assert hits >= 9.8, hits
    # The scores are the float32 query against the float16 rows, summed in float32.
    np.testing.assert_allclose(scores, np.take_along_axis(S, ids, 1), rtol=1e-5, atol=1e-4)
    ref = _at_level("scalar", lambda: ix.search_batch_padded(Q, 10, nprobe=8))
    np.testing.assert_array_equal(ref[0], ids)
    np.testing.assert_allclose(ref[1], scores, rtol=1e-5, atol=1e-6)


def test_arguments_are_checked():
    X = _rows(40, 12)
    with pytest.raises(ValueError, match="pq_m must divide"):
        _core.pq_train(X, 5, 4)
    with pytest.raises(ValueError, match="pq_bits must be 4 or 8"):
        _core.pq_train(X, 4, 6)
    with pytest.raises(ValueError, match="at least 256 rows"):
        _core.pq_train(X, 4, 8)
    with pytest.raises(TypeError, match="float32"):
        _core.pq_train(X.astype(np.float64), 4, 4)
    with pytest.raises(ValueError, match="below 16"):
        _core.pq4_pack(np.full((3, 4), 16, np.uint8))
    with pytest.raises(ValueError, match="blocks must hold"):
        _core.pq4_scan(np.zeros(10, np.uint8), 3, np.zeros((4, 16), np.float32))
    with pytest.raises(ValueError, match="256 columns"):
        _core.pq8_scan(np.zeros((3, 4), np.uint8), np.zeros((4, 16), np.float32))
    with pytest.raises(ValueError, match="one row per column"):
        _core.pq8_scan(np.zeros((3, 4), np.uint8), np.zeros((5, 256), np.float32))


def test_ivf_pq_search_with_pos_or_start_finds_the_exact_top_k():
    from ragfind import DenseIndex

    X = _rows(3000, 32, seed=3)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Q = _rows(40, 32, seed=4)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    ix = DenseIndex(32, metric="ip", kind="ivf", dtype="pq", nlist=16, pq_m=16)
    ix.add(X)
    s = ix._backend.snapshot
    # The same lists as a table of code rows -> positions (-1 for the padding of each block).
    pos = np.full(s.codes[0].shape[0] // (16 * 16) * 32, -1, np.int64)
    for st, cs, n in zip(s.start, s.code_start, s.lens):
        pos[cs : cs + n] = np.arange(st, st + n)
    args = (s.centroids, s.code_params, s.codes[0], s.code_start, s.lens)
    rows, scores = _core.ivf_pq_search(*args, pos, s.data, Q, 10, 16, 30, 1)  # every list
    rows2, scores2 = _core.ivf_pq_search(*args, None, s.data, Q, 10, 16, 30, 1, start=s.start)
    np.testing.assert_array_equal(rows, rows2)
    np.testing.assert_array_equal(scores, scores2)
    S = Q @ s.data.T  # positions are rows of s.data
    truth = np.argsort(-S, axis=1)[:, :10]
    recall = np.mean([len(set(r) & set(t)) / 10 for r, t in zip(rows.tolist(), truth.tolist())])
    assert recall >= 0.95, recall
    np.testing.assert_allclose(scores, np.take_along_axis(S, rows, 1), rtol=1e-5, atol=1e-6)
    assert np.all(np.diff(scores, axis=1) <= 0)
    few, _ = _core.ivf_pq_search(*args, pos, s.data, Q[:1], 5000, 16, 1, 1)  # more than the rows
    assert sorted(few[0][few[0] >= 0].tolist()) == list(range(3000))
    allowed = np.zeros(3000, np.uint8)
    allowed[::7] = 1
    got, _ = _core.ivf_pq_search(*args, pos, s.data, Q[:3], 5000, 1, 1, 1, allowed=allowed)
    assert sorted(got[0][got[0] >= 0].tolist()) == list(range(0, 3000, 7))  # nprobe 1, widened
    bad = pos.copy()
    bad[bad >= 0] += 3000  # rows outside exact
    with pytest.raises(ValueError, match="outside exact"):
        _core.ivf_pq_search(*args, bad, s.data, Q, 10, 16, 1, 1)
    with pytest.raises(ValueError, match="exactly one of pos and start"):
        _core.ivf_pq_search(*args, pos, s.data, Q, 10, 16, 1, 1, start=s.start)
    with pytest.raises(ValueError, match="allowed must have"):
        _core.ivf_pq_search(*args, pos, s.data, Q, 10, 16, 1, 1, allowed=allowed[:5])


@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_the_int8_centroid_pass_picks_the_lists_of_a_float32_scan(metric):
    from ragfind import DenseIndex
    from ragfind.dense import ivf_codes

    X = _rows(3000, 32, seed=7)
    Q = _rows(40, 32, seed=8)
    ix = DenseIndex(32, metric=metric, kind="ivf", dtype="pq", pq_m=8, rerank=4)  # automatic nlist: retrains
    ix.add(X[:600])
    codes = ix._backend._codes

    def both():
        with_pass = [ix.search(q, 10, nprobe=3) for q in Q]
        saved = ivf_codes.PqCodes.coarse
        ivf_codes.PqCodes.coarse = lambda self, c: None  # the float32 scan of every centroid
        try:
            without = [ix.search(q, 10, nprobe=3) for q in Q]
        finally:
            ivf_codes.PqCodes.coarse = saved
        for (a, sa), (b, sb) in zip(with_pass, without):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(sa, sb)

    both()
    first = codes.coarse(ix._backend.snapshot.centroids)
    ix.add(X[600:])  # 5x the rows: new centroids, and the pass is made again from them
    assert ix._backend.snapshot.centroids.shape[0] > first.nlist
    both()
    assert codes.coarse(ix._backend.snapshot.centroids) is not first
    s = ix._backend.snapshot
    with pytest.raises(ValueError, match="not made from these centroids"):
        _core.ivf_pq_search(
            s.centroids, s.code_params, s.codes[0], s.code_start, s.lens, None, s.data, Q[:1], 10, 3, 4,
            start=s.start, coarse=first,
        )  # fmt: skip
    with pytest.raises(ValueError, match="finite"):
        _core.coarse_centroids(np.full((4, 32), np.nan, np.float32))
