"""DenseIndex(kind="ivf", dtype="pq" / "rabitq") against a brute-force numpy reference: every list
probed with a generous rerank finds the exact top k with the exact scores; filters, deletes,
threads, batches, growth with retraining, save/load (mapped), bad input."""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import DenseIndex, IdFilter, _core
from ragfind.errors import IndexFileError, UnknownIdError

DIM = 32
# The coded configurations tested: name -> DenseIndex arguments.
VARIANTS = {
    "pq": {"dtype": "pq"},
    "pq-f16": {"dtype": "pq", "rerank_dtype": "f16"},
    "pq8": {"dtype": "pq", "pq_bits": 8},
    "rabitq": {"dtype": "rabitq"},
}
CODED = list(VARIANTS)


def structured(n: int, seed: int = 0, latent: int = 6) -> np.ndarray:
    """Embedding-like vectors: a few latent factors plus noise."""
    rng = np.random.default_rng(seed)
    W = np.random.default_rng(99).standard_normal((latent, DIM))
    return (rng.standard_normal((n, latent)) @ W + 0.3 * rng.standard_normal((n, DIM))).astype(np.float32)


X = structured(3000)
Q = structured(40, seed=1)


def unit(A: np.ndarray) -> np.ndarray:
    return (A / np.linalg.norm(A.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)


def stored(rows: np.ndarray, metric: str, f16: bool = False) -> np.ndarray:
    """The rows as the index re-scores them: normalised for cosine, rounded to float16 if f16."""
    R = unit(rows) if metric == "cosine" else rows
    return R.astype(np.float16).astype(np.float32) if f16 else R


def reference(
    rows: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int, metric: str, f16: bool = False
) -> tuple:
    """Brute-force top k in float64: (ids, scores), ties to the earlier row."""
    R = stored(rows, metric, f16)
    qq = q / np.linalg.norm(q) if metric == "cosine" else q
    s = R.astype(np.float64) @ qq.astype(np.float64)
    order = np.lexsort((np.arange(s.shape[0]), -s))[:k]
    return ids[order], s[order]


def coded(variant: str, metric: str = "cosine", nlist: int = 32, rows: np.ndarray = X, **kw) -> DenseIndex:
    ix = DenseIndex(DIM, metric=metric, kind="ivf", nlist=nlist, **VARIANTS[variant], **kw)
    ix.add(rows)
    return ix


def check_exact(ix: DenseIndex, rows: np.ndarray, ids: np.ndarray, metric: str, k: int = 10, **kw) -> None:
    """Every query's results are the brute-force top k (ids, and scores to float32 precision)
    of the rows as stored (float16 ones with rerank_dtype "f16")."""
    for q in Q:
        want, ws = reference(rows, ids, q, k, metric, ix.rerank_dtype == "f16")
        got, gs = ix.search(q, k, **kw)
        # A near-tie at the k-th place may swap: compare the sets above it and the scores.
        assert got.tolist()[: k - 1] == want.tolist()[: k - 1] or set(got.tolist()) == set(want.tolist())
        np.testing.assert_allclose(gs, ws, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("metric", ["cosine", "ip"])
@pytest.mark.parametrize("dtype", CODED)
def test_full_probe_with_generous_rerank_is_the_exact_top_k(dtype, metric):
    ix = coded(dtype, metric, rerank=50)
    check_exact(ix, X, np.arange(3000), metric, nprobe=32)
    # The scores of what comes back are the exact scores of those ids (any nprobe).
    R = stored(X, metric, ix.rerank_dtype == "f16")
    for q in Q[:10]:
        ids, scores = ix.search(q, 10, nprobe=2)
        qq = q / np.linalg.norm(q) if metric == "cosine" else q
        np.testing.assert_allclose(scores, R[ids] @ qq, rtol=1e-5, atol=1e-5)
        assert np.all(np.diff(scores) <= 0)


@pytest.mark.parametrize("variant", ["pq", "pq-f16", "pq8"])
def test_l2_is_the_exact_top_k_by_squared_distance(variant):
    ix = coded(variant, "l2", rerank=50)
    R = stored(X, "l2", ix.rerank_dtype == "f16").astype(np.float64)
    hits = 0
    for q in Q:
        d = ((R - q) ** 2).sum(1)
        order = np.lexsort((np.arange(3000), d))[:10]
        got, gs = ix.search(q, 10, nprobe=32)
        assert got.tolist()[:9] == order.tolist()[:9] or set(got.tolist()) == set(order.tolist())
        np.testing.assert_allclose(gs, d[order], rtol=1e-5, atol=1e-3)
        assert np.all(np.diff(gs) >= 0)
        ix._backend.rerank = 3  # a short re-scoring list: the estimates must rank by distance
        hits += len(set(ix.search(q, 10, nprobe=32)[0].tolist()) & set(order.tolist()))
        ix._backend.rerank = 50
    assert hits / (10 * len(Q)) >= 0.8, hits
    one = [ix.search(q, 10, nprobe=3, threads=1) for q in Q]
    for got, want in zip(ix.search_batch(Q, 10, nprobe=3, threads=2), one):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    limit = float(one[0][1][4])
    a, sa = ix.search(Q[0], 10, nprobe=3, max_distance=limit)
    assert len(a) == 5 and (sa <= limit).all()
    b, sb = ix.search_batch_padded(Q[:1], 10, nprobe=3, max_distance=limit)
    np.testing.assert_array_equal(b[0][:5], a)
    assert (b[0][5:] == -1).all() and np.isneginf(sb[0][5:]).all()
    near = [ix.search(q, 10, nprobe=3, max_distance=limit) for q in Q]
    for got, want in zip(ix.search_batch(Q, 10, nprobe=3, max_distance=limit), near):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("dtype", CODED)
def test_recall_rises_with_nprobe_and_rerank(dtype):
    ix = coded(dtype, "cosine")
    ids = np.arange(3000)

    def recall(nprobe, rerank):
        ix._backend.rerank = rerank
        hits = 0
        for q in Q:
            hits += len(
                set(reference(X, ids, q, 10, "cosine", ix.rerank_dtype == "f16")[0].tolist())
                & set(ix.search(q, 10, nprobe=nprobe)[0].tolist())
            )
        return hits / (10 * len(Q))

    r = [recall(p, 20) for p in (1, 4, 32)]
    assert r == sorted(r) and r[0] < 0.9 and r[-1] == 1.0, r
    assert recall(32, 1) <= recall(32, 20)


def test_rabitq_skips_candidates_its_bound_rules_out():
    ix = coded("rabitq", "ip", rerank=50)
    s = ix._backend.snapshot
    Qc = np.ascontiguousarray(Q)
    rc = ix._backend._codes.rotated_centroids(s.centroids, s.code_params)
    bits, norm, ipq, cdot = s.codes
    pos, scores, stats = _core.ivf_rabitq_search(
        s.centroids, s.code_params, rc, bits, norm, ipq, cdot, s.start, s.lens, s.data, Qc, 10, 32,
        50, 1,
    )  # fmt: skip
    scanned, pooled, rescored = stats.T
    assert (scanned == 3000).all() and (pooled == 500).all()
    assert (rescored >= 10).all() and rescored.mean() < 0.5 * pooled.mean(), rescored
    truth = np.argsort(-(Qc.astype(np.float64) @ s.data.T.astype(np.float64)), axis=1)[:, :10]
    assert np.mean([len(set(a) & set(b)) for a, b in zip(pos.tolist(), truth.tolist())]) >= 9.9


def _at_level(level: str, fn):
    before = _core.get_simd_level()
    _core.set_simd_level(level)
    try:
        return fn()
    finally:
        _core.set_simd_level(before)


@pytest.mark.parametrize("words", [1, 3, 6, 8, 9, 16])
def test_rabitq_scan_is_the_same_at_every_level(words):
    rng = np.random.default_rng(words)
    codes = rng.integers(0, 2**64, size=(77, words), dtype=np.uint64)
    planes = rng.integers(0, 2**64, size=(4, words), dtype=np.uint64)
    bits = np.unpackbits(codes.view(np.uint8), axis=1, bitorder="little").astype(np.int64)
    u = sum(
        np.unpackbits(planes[b : b + 1].view(np.uint8), axis=1, bitorder="little")[0].astype(np.int64) << b
        for b in range(4)
    )
    want_s, want_p = bits @ u, bits.sum(1)
    for level in _core.supported_simd_levels():
        s, p = _at_level(level, lambda: _core.rabitq_scan(codes, planes))
        np.testing.assert_array_equal(s, want_s, err_msg=level)
        np.testing.assert_array_equal(p, want_p, err_msg=level)


def test_rabitq_search_and_encoding_are_the_same_at_every_level_and_thread_count():
    ix = coded("rabitq", "cosine", rerank=4)
    want = [ix.search(q, 10, nprobe=4) for q in Q[:10]]
    for level in _core.supported_simd_levels():
        got = _at_level(level, lambda: [ix.search(q, 10, nprobe=4) for q in Q[:10]])
        for (gi, gs), (wi, ws) in zip(got, want):
            np.testing.assert_array_equal(gi, wi, err_msg=level)
            # The exact re-scoring's dot product rounds per level; the ranking is the same.
            np.testing.assert_allclose(gs, ws, rtol=1e-6, atol=1e-6, err_msg=level)
    R = np.ascontiguousarray(X[:500] - X[:500].mean(0))
    rot = _core.rabitq_rotation(DIM)
    one, four = _core.rabitq_encode(R, rot, 1), _core.rabitq_encode(R, rot, 4)
    for a, b in zip(one, four):
        np.testing.assert_array_equal(a, b)


def test_rabitq_files_without_centroid_products_are_refused_by_name(tmp_path, monkeypatch):
    ix = coded("rabitq", "ip")
    codes = ix._backend._codes
    full = codes.sections
    # A file of the first RaBitQ version: the same sections without rabitq_cdot.
    monkeypatch.setattr(codes, "sections", lambda c: [x for x in full(c) if x[0] != "rabitq_cdot"])
    p = tmp_path / "r.rfd"
    ix.save(p)
    with pytest.raises(IndexFileError, match="first version.*rebuild"):
        DenseIndex.load(p)


@pytest.mark.parametrize("dtype", CODED)
def test_filters_deletes_threads_and_batches(dtype):
    ix = coded(dtype, "cosine", rerank=50)
    rng = np.random.default_rng(3)
    gone = rng.choice(3000, 1000, replace=False)
    ix.delete(gone.tolist())
    keep = np.setdiff1d(np.arange(3000), gone)
    check_exact(ix, X[keep], keep, "cosine", nprobe=32)
    allowed = rng.choice(keep, 900, replace=False)
    flt = IdFilter(allowed.tolist())
    srt = np.sort(allowed)
    check_exact(ix, X[srt], srt, "cosine", nprobe=32, filter=flt)
    check_exact(ix, X[srt], srt, "cosine", nprobe=32, filter=lambda i: i in set(allowed.tolist()))
    few = [int(keep[3]), int(keep[400]), int(keep[-1])]
    for q in Q[:5]:  # a selective filter never leaves a query short, at any nprobe
        assert sorted(ix.search(q, 10, filter=few, nprobe=1)[0].tolist()) == sorted(few)
        assert len(ix.search(q, 10, filter=flt, nprobe=1)[0]) == 10
    for p in (1, 4):
        one = [ix.search(q, 10, nprobe=p, threads=1) for q in Q]
        for got, want in zip(ix.search_batch(Q, 10, nprobe=p, threads=3), one):
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
        ids, scores = ix.search_batch_padded(Q, 10, nprobe=p, threads=2)
        np.testing.assert_array_equal(ids, np.stack([w[0] for w in one]))
        np.testing.assert_allclose(scores, np.stack([w[1] for w in one]), rtol=1e-5, atol=1e-6)
    # The batch's one coded search of every query answers each as search does: filters,
    # thresholds (scaled by each raw query's norm), k above the allowed rows.
    for kw in ({"filter": flt}, {"min_score": 0.3}, {"filter": few}, {"filter": flt, "min_score": 0.2}):
        for k in (10, 2000):
            one = [ix.search(q, k, nprobe=4, **kw) for q in Q]
            for got, want in zip(ix.search_batch(Q, k, nprobe=4, **kw), one):
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
    a, sa = ix.search(Q[0], 50, min_score=0.5, nprobe=32)
    assert len(a) and (sa >= 0.5).all()
    b, sb = ix.search_batch_padded(Q[:1], 50, min_score=0.5, nprobe=32)
    np.testing.assert_array_equal(b[0][: len(a)], a)
    assert (b[0][len(a) :] == -1).all() and np.isneginf(sb[0][len(a) :]).all()
    # Nearly everything deleted: the lists are repacked, codes with their rows.
    ix.delete(keep[:-20].tolist())
    assert ix._backend._iv_used < 1100
    check_exact(ix, X[keep[-20:]], keep[-20:], "cosine", nprobe=32)
    assert len(ix.search(Q[0], 15, nprobe=1)[0]) == 15  # more lists until k rows are seen
    ix.add(X[gone[:5]], ids=gone[:5].tolist())  # re-added ids are found again
    assert ix.search(X[gone[0]], 1, nprobe=32)[0][0] == gone[0]


@pytest.mark.parametrize("dtype", CODED)
def test_growth_retrains_and_moves_codes(dtype):
    ix = DenseIndex(DIM, metric="ip", kind="ivf", rerank=50, **VARIANTS[dtype])
    for b in range(0, 3000, 100):  # small adds: lists grow and move, then retrain
        ix.add(X[b : b + 100], ids=list(range(b, b + 100)))
    assert ix.nlist > 2 and ix._backend.trained_n > 100
    ix.delete(list(range(0, 3000, 7)))
    keep = np.array([i for i in range(3000) if i % 7])
    check_exact(ix, X[keep], keep, "ip", nprobe=10**6)
    s = ix._backend.snapshot
    b = ix._backend
    if ix.dtype == "pq":  # the codes in the blocks are the codes of the stored rows
        pos = np.concatenate([np.arange(st, st + n) for st, n in zip(s.start, s.lens)])
        owner = np.repeat(np.arange(len(s.lens)), s.lens)
        crow = s.code_start[owner] + pos - s.start[owner]
        res = s.data[pos].astype(np.float32) - s.centroids[owner]
        want = _core.pq_encode(np.ascontiguousarray(res), s.code_params)
        got = b._codes.take(s.codes, crow)[0]
        if ix.rerank_dtype == "f16":  # encoded before rounding (adds) or after (retrains)
            assert np.mean(got == want) > 0.9
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("dtype", CODED)
def test_save_load_round_trip(tmp_path, dtype, mmap):
    ix = coded(dtype, "cosine", nlist=20, nprobe=5, fingerprint="m1", rerank=8)
    ix.delete([1, 2, 3])
    ix.add(structured(50, seed=5), ids=list(range(5000, 5050)))
    before = ix.search_batch_padded(Q, 10)
    ix.save(tmp_path / "c.rfd")
    back = DenseIndex.load(tmp_path / "c.rfd", mmap=mmap)
    base = VARIANTS[dtype]["dtype"]
    assert (back.kind, back.dtype, back.nlist, back.nprobe, back.fingerprint) == ("ivf", base, 20, 5, "m1")
    assert back.rerank_dtype == ix.rerank_dtype == VARIANTS[dtype].get("rerank_dtype", "f32")
    assert back.ids.tolist() == ix.ids.tolist()
    if mmap:  # the rows stay in the file
        assert isinstance(back._backend.snapshot.data, np.memmap)
    assert back._backend.snapshot.data.dtype == (np.float16 if back.rerank_dtype == "f16" else np.float32)
    after = back.search_batch_padded(Q, 10)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_allclose(before[1], after[1], rtol=1e-6)
    for q in Q[:5]:
        np.testing.assert_array_equal(ix.search(q, 10)[0], back.search(q, 10)[0])
    back.add(X[:3], ids=[1, 2, 3])  # writes after a mapped load copy first
    back.delete([5000])
    back.rerank = 100  # RaBitQ's 32 bits a row rank coarsely: a deep pool for this check
    assert 5000 not in back and 1 in back and back.search(X[1], 1, nprobe=20)[0][0] == 2
    with pytest.raises(ValueError, match="from model 'm2'"):
        back.search(Q[0], 3, fingerprint="m2")
    e = back.explain(Q[0], 7)
    want = float(stored(X[7:8], "cosine", back.rerank_dtype == "f16")[0] @ (Q[0] / np.linalg.norm(Q[0])))
    np.testing.assert_allclose(e.score, want, rtol=1e-5)
    assert e.detail["dtype"] == base


def test_files_from_before_rerank_dtype_load_as_f32(tmp_path, monkeypatch):
    from ragfind.dense.ivf import IvfBackend

    ix = coded("pq", "ip", nlist=8)
    plain = IvfBackend.sections

    def old_sections(self):  # a header without the rerank_dtype field
        sections, ids, extra = plain(self)
        del extra["rerank_dtype"]
        return sections, ids, extra

    monkeypatch.setattr(IvfBackend, "sections", old_sections)
    ix.save(tmp_path / "old.rfd")
    monkeypatch.undo()
    back = DenseIndex.load(tmp_path / "old.rfd", mmap=True)
    assert back.rerank_dtype == "f32" and back._backend.snapshot.data.dtype == np.float32
    np.testing.assert_array_equal(back.search_batch_padded(Q, 10)[0], ix.search_batch_padded(Q, 10)[0])


def test_pq_options_and_corrupt_codes(tmp_path):
    ix = coded("pq", "ip", nlist=8, pq_m=16)
    assert ix._backend._codes.m == 16 and ix._backend.snapshot.code_params.shape == (16, 16, 2)
    assert coded("pq", "ip", nlist=8)._backend._codes.m == 8  # default: dim / 4
    p = tmp_path / "c.rfd"
    ix.save(p)
    from ragfind.persist.sectioned import SectionedFile

    f = SectionedFile(p, b"RFDENSE\x00", 2, "dense index")
    off = f.header["sections"]["pq_codes"]["offset"]
    raw = bytearray(p.read_bytes())
    raw[off] ^= 0xFF
    p.write_bytes(bytes(raw))
    with pytest.raises(IndexFileError):
        DenseIndex.load(p)


def test_bad_input():
    for kw, msg in [
        ({"dtype": "pq", "kind": "exact"}, "needs kind='ivf'"),
        ({"dtype": "rabitq", "kind": "hnsw"}, "needs kind='ivf'"),
        ({"dtype": "rabitq", "kind": "ivf", "metric": "l2"}, "inner product"),
        ({"dtype": "pq", "kind": "ivf", "rerank": 0}, "rerank must be >= 1"),
        ({"dtype": "pq", "kind": "ivf", "pq_m": 5}, "pq_m must be"),
        ({"dtype": "pq", "kind": "ivf", "pq_bits": 6}, "pq_bits must be 4 or 8"),
        ({"dtype": "pq", "kind": "ivf", "rerank_dtype": "i8"}, "rerank_dtype must be 'f32' or 'f16'"),
        ({"dtype": "rabitq", "kind": "ivf", "rerank_dtype": "f16"}, "rerank_dtype must be 'f32'"),
        ({"dtype": "f16", "kind": "ivf", "rerank_dtype": "f16"}, "rerank_dtype applies to dtype='pq'"),
        ({"dtype": "rabitq", "kind": "ivf", "pq_m": 4}, "apply to dtype='pq'"),
        ({"dtype": "f16", "kind": "ivf", "pq_m": 4}, "apply to dtype='pq'"),
        ({"dtype": "pq4", "kind": "ivf"}, "dtype must be one of"),
    ]:
        with pytest.raises(ValueError, match=msg):
            DenseIndex(DIM, **kw)
    for dtype in CODED:
        ix = coded(dtype, nlist=8)
        n = len(ix)
        with pytest.raises(ValueError, match="dimension"):
            ix.add(np.ones((2, DIM + 1), np.float32))
        with pytest.raises(ValueError, match="NaN"):
            ix.add(np.full((1, DIM), np.nan, np.float32))
        with pytest.raises(TypeError, match="floating"):
            ix.add(np.ones((1, DIM), np.int32))
        with pytest.raises(ValueError, match="NaN"):
            ix.search(np.full(DIM, np.nan, np.float32))
        with pytest.raises(ValueError, match="shape"):
            ix.search(np.ones(DIM + 1, np.float32))
        with pytest.raises(ValueError):
            ix.search(Q[0], 0)
        with pytest.raises(UnknownIdError):
            ix.delete([10**9])
        assert len(ix) == n
        ids, _ = ix.search(Q[0], 10**6)  # k above the size: every vector, once
        assert sorted(ids.tolist()) == list(range(n))


def test_loaded_slots_behave_as_the_dict_they_replace():
    from ragfind.dense._common import LoadedSlots, set_slots

    rng = np.random.default_rng(7)
    ids = rng.permutation(np.arange(-50, 950) * 3)[:600]
    ref = {int(x): i for i, x in enumerate(ids)}
    m = LoadedSlots(ids, np.arange(600))
    for step in range(3000):
        op = rng.integers(5)
        x = int(rng.choice(ids)) if rng.random() < 0.8 else int(rng.integers(-200, 3000))
        if op == 0 and x in ref:
            assert m.pop(x) == ref.pop(x)
        elif op == 1:
            ref[x] = m_val = step
            m[x] = m_val
        elif op == 2:
            assert (x in m) == (x in ref)
            if x in ref:
                assert m[x] == ref[x]
        elif op == 3:
            keys = [k for k in rng.choice(ids, 20).tolist() if k in ref][:5]
            vals = rng.integers(0, 10**6, len(keys)).tolist()
            set_slots(m, keys, vals)
            ref.update(zip(keys, vals))
        else:
            assert len(m) == len(ref)
    assert list(m) == list(ref) and len(m) == len(ref)
    assert "a" not in m and 2.5 not in m and 10**30 not in m
    with pytest.raises(KeyError):
        m.pop(10**30)


@pytest.mark.parametrize("dtype", ["f32", "pq"])
def test_loaded_int_ids_keep_insertion_order_through_writes(tmp_path, dtype):
    ix = DenseIndex(DIM, metric="ip", kind="ivf", dtype=dtype, nlist=8)
    order = np.random.default_rng(2).permutation(3000)[:1000]
    ix.add(X[order], ids=(order * 2).tolist())
    ix.delete((order[:10] * 2).tolist())
    ix.save(tmp_path / "o.rfd")
    back = DenseIndex.load(tmp_path / "o.rfd")
    assert back.ids.tolist() == ix.ids.tolist() and len(back) == 990
    for i in (order[:3] * 2).tolist():  # deleted then added again: at the end
        back.add(X[i // 2], ids=[i])
        ix.add(X[i // 2], ids=[i])
    back.delete((order[500:900] * 2).tolist())  # repacks the lists
    ix.delete((order[500:900] * 2).tolist())
    assert back.ids.tolist() == ix.ids.tolist()
    for q in Q[:5]:
        np.testing.assert_array_equal(back.search(q, 10, nprobe=8)[0], ix.search(q, 10, nprobe=8)[0])


@pytest.mark.parametrize("dtype", CODED)
def test_searches_during_adds_and_retrains_see_whole_states(dtype):
    import threading

    ix = DenseIndex(DIM, metric="cosine", kind="ivf", rerank=50, **VARIANTS[dtype])
    tol = 2e-3 if ix.rerank_dtype == "f16" else 1e-5  # a row's score with itself, rounded
    ix.add(X[:100], ids=list(range(100)))
    probes = list(range(0, 100, 9))
    errors: list = []
    stop = threading.Event()

    def searcher():
        try:
            while not stop.is_set():
                for i in probes:
                    ids, scores = ix.search(X[i], 3, nprobe=10**6)
                    assert ids[0] == i and abs(float(scores[0]) - 1.0) < tol, (i, ids, scores)
        except Exception as e:  # noqa: BLE001 - reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    nlists = set()
    for b in range(100, 3000, 100):
        ix.add(X[b : b + 100], ids=list(range(b, b + 100)))
        nlists.add(ix.nlist)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(nlists) >= 2  # retrained (new centroids, codebooks, codes) while searched


def test_rerank_is_settable_and_checked():
    ix = coded("pq", nlist=8, rerank=2)
    assert ix.rerank == 2
    ix.rerank = 40
    assert ix.rerank == 40 and ix._backend.rerank == 40
    with pytest.raises(ValueError, match="rerank must be >= 1"):
        ix.rerank = 0
    with pytest.raises(ValueError, match=r"\[0, 1024\]"):
        ix.rerank = 5000
    assert DenseIndex(DIM).rerank is None
    i8 = DenseIndex(DIM, kind="ivf", dtype="i8", rerank=0)
    with pytest.raises(ValueError, match="cannot switch"):
        i8.rerank = 4
