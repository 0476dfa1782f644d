"""DenseIndex(kind="ivf") against the exact index: recall rising with nprobe, nprobe >= nlist
equal to exact search (filters and deletes included), f16/i8 lists re-scored to exact float32
scores, every SIMD level, growth and repacking, save/load, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import DenseIndex, IdFilter
from ragfind.errors import IndexFileError

DIM = 32


def structured(n: int, seed: int = 0, latent: int = 6) -> np.ndarray:
    """Embedding-like vectors: a few latent factors plus noise (not i.i.d. noise)."""
    rng = np.random.default_rng(seed)
    W = np.random.default_rng(99).standard_normal((latent, DIM))
    return (rng.standard_normal((n, latent)) @ W + 0.3 * rng.standard_normal((n, DIM))).astype(np.float32)


X = structured(3000)
Q = structured(40, seed=1)


def pair(metric="cosine", dtype="f32", nlist=32, X=X, **kw):
    exact = DenseIndex(DIM, metric=metric)
    exact.add(X)
    ivf = DenseIndex(DIM, metric=metric, kind="ivf", dtype=dtype, nlist=nlist, **kw)
    ivf.add(X)
    return exact, ivf


def recall(exact, ivf, nprobe, k=10):
    hits = 0
    for q in Q:
        hits += len(set(exact.search(q, k)[0].tolist()) & set(ivf.search(q, k, nprobe=nprobe)[0].tolist()))
    return hits / (k * len(Q))


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_recall_rises_with_nprobe_and_reaches_one(metric):
    exact, ivf = pair(metric)
    r = [recall(exact, ivf, p) for p in (1, 2, 4, 8, 32)]
    assert r == sorted(r), r
    assert r[0] < 0.9 and r[-1] == 1.0, r
    assert r[3] >= 0.9, r  # structured data: a quarter of the lists hold nearly every neighbour


@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_nprobe_nlist_equals_exact(metric, dtype):
    exact, ivf = pair(metric, dtype)
    for q in Q:
        a, sa = exact.search(q, 10)
        b, sb = ivf.search(q, 10, nprobe=32)
        np.testing.assert_array_equal(a, b)
        # f32 lists score with the exact scan's kernel; f16/i8 are re-scored with it
        np.testing.assert_array_equal(sa, sb)
    ra, sa = exact.search_batch_padded(Q, 10)
    rb, sb = ivf.search_batch_padded(Q, 10, nprobe=1000)
    np.testing.assert_array_equal(ra, rb)
    np.testing.assert_allclose(sa, sb, rtol=1e-5, atol=1e-5)


def test_quantised_lists_without_rerank_keep_quantised_scores():
    exact, ivf = pair("ip", "i8", rerank=0)
    a, sa = exact.search(Q[0], 10)
    b, sb = ivf.search(Q[0], 10, nprobe=32)
    assert len(set(a.tolist()) & set(b.tolist())) >= 8
    assert not np.array_equal(sa, sb)
    np.testing.assert_allclose(sa, sb, rtol=0.05, atol=0.05)
    assert ivf._backend.snapshot.exact is None  # no float32 copy kept


def test_every_simd_level_gives_the_exact_results(simd_level):
    exact, ivf = pair("cosine", "i8")
    _, f32 = pair("l2", "f16")
    for q in Q[:10]:
        np.testing.assert_array_equal(exact.search(q, 10)[0], ivf.search(q, 10, nprobe=32)[0])
    exact_l2 = DenseIndex(DIM, metric="l2")
    exact_l2.add(X)
    np.testing.assert_array_equal(
        exact_l2.search_batch_padded(Q, 5)[0], f32.search_batch_padded(Q, 5, nprobe=32)[0]
    )
    # Approximate results are deterministic per level and recall stays high.
    assert recall(exact, ivf, 4) >= 0.8


def _numpy_nearest(Xa, C, metric):
    """Nearest centroid in float64, ties to the lower centroid (np.argmax keeps the first)."""
    S = Xa.astype(np.float64) @ C.astype(np.float64).T
    if metric == "l2":
        S -= 0.5 * (C.astype(np.float64) ** 2).sum(1)
    return S.argmax(1), np.sort(S, 1)


@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize("dim", [3, 24, 384])
def test_assignment_matches_numpy_at_every_simd_level(simd_level, metric, dim):
    from ragfind import _core

    rng = np.random.default_rng(dim)
    Xa = rng.standard_normal((517, dim)).astype(np.float32)
    C = rng.standard_normal((101, dim)).astype(np.float32)
    want, S = _numpy_nearest(Xa, C, metric)
    got = _core.ivf_assign(Xa, C, metric, 2)
    # Agreement wherever the float64 margin is beyond float32 rounding of the scores.
    clear = S[:, -1] - S[:, -2] > 1e-4 * np.abs(S[:, -1]) + 1e-4
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(got[clear], want[clear])
    # Every level and thread count picks the same centroids, bit-identical scores.
    for t in (1, 3):
        np.testing.assert_array_equal(_core.ivf_assign(Xa, C, metric, t), got)
    # Ties: centroid c copies centroid c % 13, so the lowest copy wins.
    Cd = np.concatenate([C[:13]] * 8)
    assert _core.ivf_assign(Xa, Cd, metric, 2).max() < 13


def test_training_is_the_same_at_every_simd_level_and_thread_count():
    import ragfind
    from ragfind import _core

    before = _core.get_simd_level()
    try:
        got = []
        for level in _core.supported_simd_levels():
            ragfind.set_simd_level(level)
            got += [_core.ivf_train(X[:2000], 40, m, 5, 3, t)[0] for m in ("ip", "l2") for t in (1, 2)]
    finally:
        ragfind.set_simd_level(before)
    # got[level * 4 + metric * 2 + thread case]: each equals scalar's single-thread run.
    for i, C in enumerate(got):
        np.testing.assert_array_equal(C, got[i % 4 // 2 * 2])


def test_training_is_deterministic_and_balanced():
    a = DenseIndex(DIM, kind="ivf", nlist=32)
    b = DenseIndex(DIM, kind="ivf", nlist=32)
    a.add(X)
    b.add(X)
    np.testing.assert_array_equal(a._backend._centroids, b._backend._centroids)
    assert a._backend._imbalance < 2.0, a._backend._imbalance
    sizes = a._backend.snapshot.lens
    assert sizes.sum() == len(X) and sizes.min() > 0 and sizes.max() < 8 * len(X) / 32


def test_adds_after_training_go_to_the_nearest_list():
    ivf = DenseIndex(DIM, metric="l2", kind="ivf", nlist=16)
    ivf.train(X[:1000])
    assert len(ivf) == 0 and ivf.is_trained
    for s in range(0, 3000, 250):  # many small adds: lists grow and move
        ivf.add(X[s : s + 250], ids=list(range(s, s + 250)))
    C = ivf._backend._centroids
    st = ivf._backend.snapshot
    for lst in range(16):
        rows = st.ids[st.start[lst] : st.start[lst] + st.lens[lst]]
        d = ((X[rows][:, None, :] - C[None, :, :]) ** 2).sum(-1)
        assert (d.argmin(1) == lst).mean() > 0.99  # float ties aside
    exact = DenseIndex(DIM, metric="l2")
    exact.add(X)
    np.testing.assert_array_equal(
        exact.search_batch_padded(Q, 10)[0], ivf.search_batch_padded(Q, 10, nprobe=16)[0]
    )
    assert ivf.ids.tolist() == list(range(3000))  # insertion order


def test_filters_and_deletes_at_full_probe_equal_exact():
    exact, ivf = pair("cosine", "f16")
    rng = np.random.default_rng(3)
    gone = rng.choice(3000, 2200, replace=False).tolist()  # mostly dead: the lists are repacked
    exact.delete(gone)
    ivf.delete(gone)
    assert ivf._backend._iv_used == len(ivf)  # repacked
    allowed = IdFilter(rng.choice(3000, 900, replace=False).tolist())
    for q in Q[:10]:
        for flt in (None, allowed, [5, 17, 2999, 1234]):
            a, sa = exact.search(q, 10, filter=flt)
            b, sb = ivf.search(q, 10, filter=flt, nprobe=32)
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(sa, sb)
    ra, _ = exact.search_batch_padded(Q, 10, filter=allowed)
    rb, _ = ivf.search_batch_padded(Q, 10, filter=allowed, nprobe=32)
    np.testing.assert_array_equal(ra, rb)
    # Re-adding deleted ids works and they are found again.
    ivf.add(X[gone[:5]], ids=gone[:5])
    assert ivf.search(X[gone[0]], 1, nprobe=32)[0][0] == gone[0]


def test_a_selective_filter_never_leaves_a_query_short():
    _, ivf = pair("cosine", "f32")
    few = [3, 400, 1600, 2500, 2999]
    for q in Q[:5]:
        ids, _ = ivf.search(q, 10, filter=few, nprobe=1)
        assert sorted(ids.tolist()) == few
        ids, _ = ivf.search(q, 3, filter=IdFilter(list(range(0, 3000, 3))), nprobe=1)
        assert len(ids) == 3
    ivf.delete(list(range(0, 2990)))
    ids, _ = ivf.search(Q[0], 10, nprobe=1)
    assert sorted(ids.tolist()) == list(range(2990, 3000))


def test_thresholds_threads_and_batches_agree():
    exact, ivf = pair("cosine", "i8")
    a, sa = exact.search(Q[0], 50, min_score=0.5)
    b, sb = ivf.search(Q[0], 50, min_score=0.5, nprobe=32, threads=2)
    np.testing.assert_array_equal(a, b)
    assert (sb >= 0.5).all()
    for p in (1, 4):
        ids1 = np.stack([ivf.search(q, 10, nprobe=p, threads=1)[0] for q in Q])
        np.testing.assert_array_equal(ids1, ivf.search_batch_padded(Q, 10, nprobe=p, threads=2)[0])
        np.testing.assert_array_equal(ids1, np.stack([ivf.search(q, 10, nprobe=p, threads=3)[0] for q in Q]))


def test_string_ids_and_defaults():
    ivf = DenseIndex(DIM, kind="ivf")
    assert ivf.nlist is None and ivf.nprobe is None and not ivf.is_trained
    ivf.add(X, ids=[f"d{i}" for i in range(3000)])
    assert ivf.nlist == 3000 // 39 and ivf.nprobe == 16
    ids, _ = ivf.search(X[7], 1)
    assert ids.tolist() == ["d7"]
    ivf.nprobe = 3
    assert ivf.nprobe == 3
    r, _ = ivf.search_batch_padded(Q[:2], 5000)
    assert r.shape == (2, 5000) and r[0, -1] is None


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("dtype", ["f32", "i8"])
def test_save_load_round_trip(tmp_path, mmap, dtype):
    exact, ivf = pair("l2", dtype, nlist=20, nprobe=5, fingerprint="m1")
    ivf.delete([1, 2, 3])
    ivf.add(structured(50, seed=5), ids=list(range(5000, 5050)))
    before = ivf.search_batch_padded(Q, 10)
    ivf.save(tmp_path / "i.rfd")
    back = DenseIndex.load(tmp_path / "i.rfd", mmap=mmap)
    assert (back.kind, back.nlist, back.nprobe, back.fingerprint, back.dtype) == ("ivf", 20, 5, "m1", dtype)
    assert back.ids.tolist() == ivf.ids.tolist()
    after = back.search_batch_padded(Q, 10)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_allclose(before[1], after[1], rtol=1e-6)
    back.add(X[:3], ids=[1, 2, 3])  # writes after a mapped load copy first
    back.delete([5000])
    assert 5000 not in back and len(back) == len(ivf) + 2 and 1 in back
    with pytest.raises(ValueError, match="from model 'm2'"):
        back.search(Q[0], 3, fingerprint="m2")
    untrained = DenseIndex(DIM, kind="ivf", nlist=4)
    untrained.save(tmp_path / "u.rfd")
    u = DenseIndex.load(tmp_path / "u.rfd")
    assert not u.is_trained and u.nlist == 4
    u.add(X[:100])
    assert len(u.search(Q[0], 3)[0]) == 3


def test_corrupt_ivf_file_is_refused(tmp_path):
    _, ivf = pair("cosine", "f32", nlist=8)
    p = tmp_path / "i.rfd"
    ivf.save(p)
    raw = bytearray(p.read_bytes())
    raw[-100] ^= 0xFF
    p.write_bytes(bytes(raw))
    with pytest.raises(IndexFileError):
        DenseIndex.load(p)


def test_bad_input():
    ivf = DenseIndex(DIM, kind="ivf", nlist=64)
    # Untrained means empty: no results, as from every empty index (the index contract).
    ids, scores = ivf.search(Q[0], 5)
    assert ids.shape == (0,) and ids.dtype == np.int64 and scores.shape == (0,)
    ids, scores = ivf.search_batch_padded(Q[:2], 5)
    assert (ids == -1).all() and ids.shape == (2, 5) and np.isneginf(scores).all()
    with pytest.raises(ValueError, match="nprobe must be a positive integer"):
        ivf.search(Q[0], 5, nprobe=0)
    with pytest.raises(ValueError, match="needs at least 64 vectors"):
        ivf.add(X[:10])
    assert len(ivf) == 0 and not ivf.is_trained  # nothing was stored
    with pytest.raises(ValueError, match="needs at least 64 vectors"):
        ivf.train(X[:10])
    with pytest.raises(ValueError, match="NaN"):
        ivf.add(np.full((100, DIM), np.nan, np.float32))
    ivf.add(X)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="nprobe must be a positive integer"):
            ivf.search(Q[0], 5, nprobe=bad)
        with pytest.raises(ValueError, match="nprobe must be a positive integer"):
            ivf.nprobe = bad
    with pytest.raises(ValueError, match="nprobe must be a positive integer"):
        DenseIndex(DIM, kind="ivf", nprobe=0)
    with pytest.raises(ValueError, match="nlist must be a positive integer"):
        DenseIndex(DIM, kind="ivf", nlist=0)
    with pytest.raises(ValueError, match="rerank must be"):
        DenseIndex(DIM, kind="ivf", rerank=-1)
    q = Q[0].copy()
    q[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ivf.search(q, 5)
    with pytest.raises(ValueError, match="needs an empty index"):
        ivf.train(X)
    with pytest.raises(ValueError, match="applies to kind='ivf'"):
        DenseIndex(DIM).train(X)
    with pytest.raises(ValueError, match="zero vector"):
        DenseIndex(DIM, kind="ivf", nlist=2).add(np.zeros((4, DIM), np.float32))


@pytest.mark.parametrize("dtype", ["f32", "i8"])
def test_cosine_add_normalising_block_by_block_stores_the_normalised_rows(monkeypatch, dtype):
    import ragfind.dense.ivf as ivf_module

    Xb = structured(20_000, seed=11)  # more rows than the training sample (10,000)
    before = Xb.copy()
    a = DenseIndex(DIM, kind="ivf", nlist=32, dtype=dtype)
    a.add(Xb)
    np.testing.assert_array_equal(Xb, before)  # the caller's array is never divided in place
    monkeypatch.setattr(ivf_module, "_ASSIGN_BLOCK", 700)
    monkeypatch.setattr(ivf_module, "_WRITE_BLOCK", 300)
    b = DenseIndex(DIM, kind="ivf", nlist=32, dtype=dtype)
    b.add(Xb)
    for f in ("centroids", "data", "scales", "exact", "ids", "start", "lens"):
        np.testing.assert_array_equal(getattr(a._backend.snapshot, f), getattr(b._backend.snapshot, f))
    # The stored rows are X's rows divided by their norms (float64, rounded once).
    norms = np.sqrt(np.einsum("ij,ij->i", Xb, Xb, dtype=np.float64))
    unit = (Xb / norms[:, None]).astype(np.float32)
    rows = b._backend.snapshot.exact if dtype == "i8" else b._backend.snapshot.data
    np.testing.assert_array_equal(rows[np.argsort(b._backend.snapshot.ids)], unit)
    # And every row sits in the list of its nearest centroid.
    from ragfind import _core

    lists = np.repeat(np.arange(32), b._backend.snapshot.lens)
    np.testing.assert_array_equal(
        lists[np.argsort(b._backend.snapshot.ids)], _core.ivf_assign(unit, b._backend._centroids, "ip", 1)
    )


# ----------------------------------------------------------------- growth (automatic nlist)


def grown(metric="cosine", dtype="f32", batch=100, n=3000, **kw):
    ivf = DenseIndex(DIM, metric=metric, kind="ivf", dtype=dtype, **kw)
    for b in range(0, n, batch):
        ivf.add(X[b : b + batch], ids=list(range(b, min(n, b + batch))))
    return ivf


def test_small_adds_retrain_and_keep_recall_of_one_big_add():
    exact = DenseIndex(DIM)
    exact.add(X)
    big = DenseIndex(DIM, kind="ivf")
    big.add(X)
    small = grown()
    assert small.nlist > 2 * (100 // 39) and small.nlist >= big.nlist // 2, (small.nlist, big.nlist)
    assert small._backend.trained_n > 100 and len(small) == 3000
    fixed = grown(nlist=2)  # an explicit nlist never retrains
    assert fixed.nlist == 2 and fixed._backend.trained_n == 100
    r_small = recall(exact, small, None)
    r_big = recall(exact, big, None)
    assert r_small >= r_big - 0.05, (r_small, r_big)
    assert r_small >= 0.9


def test_retrain_out_of_memory_keeps_the_add_and_retries(monkeypatch):
    ivf = DenseIndex(DIM, kind="ivf")
    ivf.add(X[:100], ids=list(range(100)))
    real = type(ivf._backend)._retrain_ivf
    calls = []

    def failing(self, nlist):
        calls.append(nlist)
        raise MemoryError("test")

    monkeypatch.setattr(type(ivf._backend), "_retrain_ivf", failing)
    with pytest.warns(RuntimeWarning, match="add is stored"):
        ivf.add(X[100:400], ids=list(range(100, 400)))
    assert calls and len(ivf) == 400 and ivf._backend.trained_n == 100
    ids, _ = ivf.search(X[350], k=1, nprobe=ivf.nlist)
    assert list(ids) == [350]
    monkeypatch.setattr(type(ivf._backend), "_retrain_ivf", real)
    ivf.add(X[400:500], ids=list(range(400, 500)))
    assert ivf._backend.trained_n == 500 and ivf.nlist > 1


@pytest.mark.parametrize("dtype,rerank", [("f32", 4), ("f16", 4), ("i8", 4), ("i8", 0), ("f16", 0)])
@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
def test_retrained_index_at_full_probe_equals_exact_with_deletes_and_filters(metric, dtype, rerank):
    ivf = grown(metric, dtype, rerank=rerank)
    assert ivf.nlist > 2
    ivf.delete(list(range(0, 3000, 7)))
    exact = DenseIndex(DIM, metric=metric, dtype="f32" if rerank else dtype)
    keep = [i for i in range(3000) if i % 7]
    exact.add(X[keep], ids=keep)
    assert sorted(ivf.ids.tolist()) == keep
    flt = IdFilter(list(range(0, 3000, 3)))
    for q in Q[:10]:
        for f in (None, flt, lambda x: x % 5 == 0):
            a, sa = exact.search(q, 10, filter=f)
            b, sb = ivf.search(q, 10, filter=f, nprobe=10**6)
            if rerank:
                np.testing.assert_array_equal(a, b)
                np.testing.assert_array_equal(sa, sb)
            else:  # quantised scores: the same rows as a quantised exact scan, up to ties
                np.testing.assert_allclose(sa, sb, rtol=1e-5, atol=1e-5)


def test_retrain_save_load_and_old_files(tmp_path, monkeypatch):
    ivf = grown(n=2000)
    trained = ivf._backend.trained_n
    ivf.save(tmp_path / "g.rfd")
    back = DenseIndex.load(tmp_path / "g.rfd")
    assert (back.nlist, back._backend.trained_n) == (ivf.nlist, trained)
    for q in Q[:5]:
        np.testing.assert_array_equal(ivf.search(q, 10)[0], back.search(q, 10)[0])
    back.add(X[2000:], ids=list(range(2000, 3000)))  # grows further after a mapped load
    assert len(back) == 3000 and back.search(X[2500], 1)[0][0] == 2500
    # A file written before the training count was saved: trained at its size when loaded.
    from ragfind.dense.ivf import IvfBackend

    real = IvfBackend.sections

    def old_sections(self):
        secs, ids, extra = real(self)
        extra.pop("trained_n")
        return secs, ids, extra

    monkeypatch.setattr(IvfBackend, "sections", old_sections)
    small = DenseIndex(DIM, kind="ivf")
    small.add(X[:200])
    small.save(tmp_path / "old.rfd")
    monkeypatch.undo()
    old = DenseIndex.load(tmp_path / "old.rfd")
    small.delete(list(range(100)))
    small.save(tmp_path / "old2.rfd")
    assert old._backend.trained_n == 200 and old.nlist == small.nlist
    old.add(X[200:700], ids=list(range(200, 700)))
    assert old.nlist == small.nlist  # 700 < 4 * 200: no retrain yet
    old.add(X[700:900], ids=list(range(700, 900)))
    assert old.nlist > small.nlist and old._backend.trained_n == 900
    assert old.search(X[850], 1, nprobe=10**6)[0][0] == 850


def test_search_during_retrains_sees_whole_states():
    import threading

    ivf = DenseIndex(DIM, kind="ivf")
    ivf.add(X[:100], ids=list(range(100)))
    probes = list(range(0, 100, 9))
    errors: list = []
    stop = threading.Event()

    def searcher():
        try:
            while not stop.is_set():
                for i in probes:
                    ids, scores = ivf.search(X[i], 3, nprobe=10**6)
                    assert ids[0] == i and abs(float(scores[0]) - 1.0) < 1e-5, (i, ids, scores)
                    ids, _ = ivf.search_batch_padded(X[probes], 1, nprobe=10**6)
                    assert ids[:, 0].tolist() == probes
        except Exception as e:  # noqa: BLE001 - reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    nlists = set()
    for b in range(100, 3000, 50):
        ivf.add(X[b : b + 50], ids=list(range(b, b + 50)))
        nlists.add(ivf.nlist)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(nlists) >= 2  # retrained at least once while searched


@pytest.mark.parametrize("nlist", [None, 16])
def test_small_adds_repack_rarely_and_stay_exact(monkeypatch, nlist):
    from ragfind.dense.ivf import IvfBackend

    packs = []
    real = IvfBackend._compact_ivf
    monkeypatch.setattr(IvfBackend, "_compact_ivf", lambda self, **kw: (packs.append(1), real(self, **kw)))
    Xb = structured(20_000, seed=7)
    ivf = DenseIndex(DIM, kind="ivf", nlist=nlist)
    for b in range(0, 20_000, 200):  # 100 adds
        ivf.add(Xb[b : b + 200], ids=list(range(b, b + 200)))
    # A repack leaves room in every list, so the next adds do not move them all again.
    assert len(packs) <= 12, len(packs)
    assert ivf._backend._iv_used <= 2 * len(ivf) + 1024
    exact = DenseIndex(DIM)
    exact.add(Xb)
    ivf.delete(list(range(0, 20_000, 2)))
    exact.delete(list(range(0, 20_000, 2)))
    ivf.add(Xb[:100:2], ids=list(range(0, 100, 2)))
    exact.add(Xb[:100:2], ids=list(range(0, 100, 2)))
    for q in Q[:10]:
        a, sa = exact.search(q, 10)
        b, sb = ivf.search(q, 10, nprobe=10**6)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(sa, sb)
