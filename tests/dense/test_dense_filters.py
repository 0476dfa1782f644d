"""DenseIndex filters and the shared index contract, against numpy references.

Exact: a filtered search (IdFilter, plain ids, callable) equals numpy's top-k over the allowed
live rows and the unfiltered ranking restricted to them, on both native paths (gathered rows
for a small allowed set, the masked scan for a large one), for every metric, storage dtype,
id kind and SIMD level, with an IdFilter reused across adds and deletes. HNSW: allowed ids
only, exact scores for them, exactly min(k, allowed) results. Then the contract's errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import DenseIndex
from ragfind.errors import DuplicateIdError, IdKindError, IndexFileError, UnknownIdError
from ragfind.ids import IdFilter


def _stored_rows(X, metric, dtype):
    """What the index scores against: normalised for cosine, then f16/i8 rounded."""
    X = X.astype(np.float32)
    if metric == "cosine":
        X = (X / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)
    if dtype == "f16":
        return X.astype(np.float16).astype(np.float64)
    if dtype == "i8":
        scale = np.abs(X).max(axis=1) / 127.0
        q = np.clip(np.rint(X / np.where(scale > 0, scale, 1)[:, None]), -127, 127)
        return q * scale[:, None]
    return X.astype(np.float64)


def _numpy_scores(R, q, metric):
    q64 = q.astype(np.float64)
    if metric == "cosine":
        q64 = q64 / np.linalg.norm(q64)
    if metric == "l2":
        return ((R - q64) ** 2).sum(axis=1)
    return R @ q64


def _check_against_numpy(ids, scores, ref_ids, ref_scores, metric, k, tol):
    """ids/scores equal numpy's top-k over (ref_ids, ref_scores), up to ties within tol."""
    n = min(k, len(ref_ids))
    assert len(ids) == n and len(scores) == n
    order = np.argsort(ref_scores if metric == "l2" else -ref_scores, kind="stable")
    best = ref_scores[order[:n]]
    np.testing.assert_allclose(scores, best, rtol=tol, atol=tol)
    got = dict(zip(ref_ids, ref_scores))
    for i, s in zip(ids.tolist(), scores.tolist()):
        assert i in got, f"id {i!r} is not allowed"
        assert abs(got[i] - s) <= tol * (1 + abs(s))
    if n:  # every id scoring clearly better than the k-th must be there
        kth = best[-1]
        clear = (ref_scores < kth - tol) if metric == "l2" else (ref_scores > kth + tol)
        must = [i for i, c in zip(ref_ids, clear) if c]
        assert set(must) <= set(ids.tolist())


def _restricted(index, q, allowed_ids, k):
    """The unfiltered ranking restricted to the allowed set (exact index)."""
    ids, scores = index.search(q, k=len(index))
    keep = np.asarray([x in allowed_ids for x in ids.tolist()], dtype=bool)
    return ids[keep][:k], scores[keep][:k]


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "i8"])
@pytest.mark.parametrize("id_kind", ["int", "str"])
def test_exact_filter_equals_numpy_over_allowed_live_rows(simd_level, metric, dtype, id_kind):
    rng = np.random.default_rng(hash((metric, dtype, id_kind)) % 2**32)
    n, d = 3000, 24
    X = rng.standard_normal((n, d)).astype(np.float32)
    ids = list(range(100, 100 + n)) if id_kind == "int" else [f"doc{i}" for i in range(n)]
    index = DenseIndex(d, metric=metric, dtype=dtype)
    index.add(X, ids=ids)
    tol = {"f32": 2e-5, "f16": 2e-3, "i8": 3e-2}[dtype] * (d if metric == "l2" else 1)
    # Small (gathered) and large (masked scan) allowed sets, with ids the index lacks.
    picks = [rng.choice(n, 40, replace=False), rng.choice(n, 2000, replace=False)]
    filters = [IdFilter([ids[i] for i in p] + ([-5] if id_kind == "int" else ["nope"])) for p in picks]
    live = dict(zip(ids, X))
    for step in range(3):
        q = rng.standard_normal(d).astype(np.float32)
        for flt in filters:
            allowed = [x for x in flt if x in live]
            R = _stored_rows(np.stack([live[x] for x in allowed]), metric, dtype)
            ref = _numpy_scores(R, q, metric)
            for k in (1, 10, 5000):
                got_ids, got_scores = index.search(q, k=k, filter=flt)
                assert got_ids.dtype == (object if id_kind == "str" else np.int64)
                _check_against_numpy(got_ids, got_scores, allowed, ref, metric, k, tol)
                r_ids, r_scores = _restricted(index, q, set(allowed), k)
                assert got_ids.tolist() == r_ids.tolist()
                np.testing.assert_array_equal(got_scores, r_scores)
            bids, bscores = index.search_batch_padded(np.stack([q, -q]), k=10, filter=flt)
            # The batch path scores i8 rows with a float query (single: int16), so ties may differ.
            _check_against_numpy(bids[0], bscores[0], allowed, ref, metric, 10, tol)
            # The gather path split over threads gives the same results.
            t_ids, t_scores = index.search(q, k=10, filter=flt, threads=2)
            assert t_ids.tolist() == index.search(q, k=10, filter=flt)[0].tolist()
            # The plain-list and callable forms give the same results.
            same = index.search(q, k=10, filter=list(flt))
            assert same[0].tolist() == index.search(q, k=10, filter=flt)[0].tolist()
            fset = set(flt)
            cal = index.search(q, k=10, filter=lambda x, fset=fset: x in fset)
            assert cal[0].tolist() == same[0].tolist()
        # Writes between searches: the reused filters must follow the current state.
        gone = [x for x in list(live)[step * 7 : step * 7 + 300 : 3]]
        index.delete(gone)
        for x in gone:
            del live[x]
        Y = rng.standard_normal((5, d)).astype(np.float32)
        new = [ids[i] for i in picks[0][step * 5 : step * 5 + 5]]
        new = [x for x in new if x not in live]
        if new:
            index.add(Y[: len(new)], ids=new)
            live.update(zip(new, Y))


def test_exact_filter_after_compaction_and_readd():
    rng = np.random.default_rng(1)
    n, d = 2500, 8
    X = rng.standard_normal((n, d)).astype(np.float32)
    index = DenseIndex(d, metric="ip")
    index.add(X)
    flt = IdFilter(range(0, n, 10))
    q = rng.standard_normal(d).astype(np.float32)
    before = index.search(q, k=5, filter=flt)
    index.delete(list(range(0, n, 10))[:100])  # deleted, then the same ids added again
    index.add(X[:1000:10] * 0 + q, ids=list(range(0, 1000, 10)))
    ids, scores = index.search(q, k=100, filter=flt)
    assert sorted(ids.tolist()) == list(range(0, 1000, 10))
    np.testing.assert_allclose(scores, float(q @ q), rtol=1e-5)
    index.delete(list(range(1, n, 2)))  # past half dead: compaction renumbers the slots
    index.delete(list(range(0, 1000, 10)))
    ids, _ = index.search(q, k=10, filter=flt)
    assert ids.tolist() == [x for x in before[0].tolist() if x >= 1000][: len(ids)] or all(
        x % 10 == 0 and x >= 1000 for x in ids.tolist()
    )
    assert len(ids) == 10
    ref = X[1000::10] @ q
    assert ids.tolist() == (1000 + 10 * np.argsort(-ref, kind="stable")[:10]).tolist()


def test_exact_filter_empty_and_foreign_kinds():
    X = np.eye(4, dtype=np.float32)
    index = DenseIndex(4)
    index.add(X)
    for flt in (IdFilter([]), [99]):
        ids, scores = index.search(X[0], k=3, filter=flt)
        assert ids.dtype == np.int64 and ids.shape == (0,) and scores.shape == (0,)
    # Ids of the other kind are a mistake (as in add), not an empty set.
    with pytest.raises(IdKindError, match=r"^filter: this index has int ids, got str ids$"):
        index.search(X[0], k=3, filter=["a", "b"])
    s = DenseIndex(4)
    s.add(X, ids=list("abcd"))
    with pytest.raises(IdKindError, match=r"^filter: this index has str ids, got int ids$"):
        s.search(X[0], k=3, filter=[1, 2])
    ids, _ = s.search(X[0], k=3, filter=IdFilter(["b"]))
    assert ids.tolist() == ["b"]
    with pytest.raises(TypeError, match="single str"):
        s.search(X[0], k=3, filter="b")


@pytest.mark.parametrize("metric", ["cosine", "ip", "l2"])
@pytest.mark.parametrize("allowed_n", [7, 300, 1500])
def test_hnsw_filter_allowed_only_exact_scores_min_k(metric, allowed_n, monkeypatch):
    import ragfind.dense.hnsw as dense_hnsw

    rng = np.random.default_rng(allowed_n)
    n, d = 2000, 16
    X = rng.standard_normal((n, d)).astype(np.float32)
    index = DenseIndex(d, metric=metric, kind="hnsw", M=8, ef_construction=64)
    index.add(X)
    # Force the graph walk for the larger sets (the exact threshold is 4096 by default).
    monkeypatch.setattr(dense_hnsw, "_HNSW_EXACT_FILTER_MIN", 200)
    allowed = rng.choice(n, allowed_n, replace=False)
    flt = IdFilter(allowed)
    R = _stored_rows(X, metric, "f32")
    for _ in range(3):
        q = rng.standard_normal(d).astype(np.float32)
        live = np.asarray(sorted(set(allowed.tolist()) & set(index.ids.tolist())))
        ref = dict(zip(live.tolist(), _numpy_scores(R[live], q, metric)))
        for k in (1, 10, 2000):
            ids, scores = index.search(q, k=k, filter=flt)
            assert len(ids) == min(k, len(live))
            assert set(ids.tolist()) <= set(live.tolist())
            for i, s in zip(ids.tolist(), scores.tolist()):
                assert s == pytest.approx(ref[i], rel=1e-4, abs=1e-4)
            bids, bscores = index.search_batch_padded(np.stack([q, q]), k=k, filter=flt)
            assert (bids[0] >= 0).sum() == min(k, len(live))
            assert set(bids[0][bids[0] >= 0].tolist()) <= set(live.tolist())
        index.delete(live[:3].tolist())


def test_gather_subset_argument_is_checked():
    from ragfind import _core

    X = np.eye(4, dtype=np.float32)
    q = X[0]
    for bad, msg in ((np.asarray([2, 1]), "strictly increasing"), (np.asarray([0, 4]), "in \\[0, 4\\)")):
        with pytest.raises(ValueError, match=msg):
            _core.dense_search(X, "f32", None, None, q, 2, "ip", None, None, 1, bad.astype(np.int64))
    with pytest.raises(TypeError, match="int64"):
        _core.dense_search(X, "f32", None, None, q, 2, "ip", None, None, 1, np.asarray([0], np.int32))
    rows, scores = _core.dense_search(X, "f32", None, None, q, 5, "ip", None, None, 1, np.asarray([0, 3]))
    assert rows.tolist() == [0, 3] and scores.tolist() == [1.0, 0.0]


def test_hnsw_filter_follows_writes_and_unfiltered_min_k(simd_level):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 8)).astype(np.float32)
    index = DenseIndex(8, kind="hnsw")
    index.add(X, ids=[f"d{i}" for i in range(300)])
    flt = IdFilter([f"d{i}" for i in range(0, 300, 3)])
    q = X[0]
    assert index.search(q, k=1, filter=flt)[0].tolist() == ["d0"]
    index.delete(["d0"])
    ids, _ = index.search(q, k=200, filter=flt)
    assert len(ids) == 99 and "d0" not in ids.tolist()
    index.add(X[:1], ids=["d0"])
    assert index.search(q, k=1, filter=flt)[0].tolist() == ["d0"]
    index.delete([f"d{i}" for i in range(1, 300)])
    ids, _ = index.search(q, k=50)
    assert ids.tolist() == ["d0"]
    ids, _ = index.search(q, k=5, filter=["zz"])
    assert ids.dtype == object and ids.shape == (0,)


# ------------------------------------------------------------------- the contract


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_huge_k_is_clamped_and_ids_property(kind):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 8)).astype(np.float32)
    index = DenseIndex(8, kind=kind)
    ids, scores = index.search(X[0], k=2**31)
    assert ids.dtype == np.int64 and ids.shape == (0,) and scores.shape == (0,)
    assert isinstance(index.ids, np.ndarray) and index.ids.dtype == np.int64 and index.ids.shape == (0,)
    index.add(X, ids=list(range(50, 30, -1)))
    ids, scores = index.search(X[0], k=2**31)
    assert len(ids) == 20
    ids, _ = index.search(X[0], k=2**31, filter=[50, 49])
    assert len(ids) == 2
    index.delete([45, 40])
    index.add(X[:1], ids=[45])
    assert index.ids.tolist() == [x for x in range(50, 30, -1) if x not in (45, 40)] + [45]
    with pytest.raises(ValueError, match="k="):
        index.search_batch_padded(X[:2], k=2**31)
    s = DenseIndex(8, kind=kind)
    s.add(X[:3], ids=["b", "a", "c"])
    assert s.ids.dtype == object and s.ids.tolist() == ["b", "a", "c"]


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_contract_errors_change_nothing(kind):
    X = np.eye(4, dtype=np.float32)
    index = DenseIndex(4, kind=kind)
    index.add(X[:2], ids=[1, 2])
    with pytest.raises(DuplicateIdError, match=r"\[2\] already in the index"):
        index.add(X[2:], ids=[3, 2])
    with pytest.raises(DuplicateIdError, match="id 5 is repeated"):
        index.add(X[2:], ids=[5, 5])
    with pytest.raises(IdKindError, match="has int ids, got str"):
        index.add(X[2:], ids=["a", "b"])
    with pytest.raises(IdKindError, match="all int or all str"):
        index.add(X[2:], ids=[7, "b"])
    with pytest.raises(UnknownIdError, match="99"):
        index.delete([1, 99])
    assert index.ids.tolist() == [1, 2]
    assert isinstance(UnknownIdError("x"), KeyError) and isinstance(IdKindError("x"), TypeError)


def test_load_foreign_truncated_and_old_files_raise_index_file_error(tmp_path):
    from ragfind import BM25Index

    bm = BM25Index()
    bm.add(["alpha beta", "gamma"])
    bpath = tmp_path / "bm25.idx"
    bm.save(bpath)
    with pytest.raises(IndexFileError):
        DenseIndex.load(bpath)
    d = DenseIndex(4)
    d.add(np.eye(4, dtype=np.float32))
    dpath = tmp_path / "dense.idx"
    d.save(dpath)
    raw = dpath.read_bytes()
    for i, bad in enumerate((b"", raw[:20], raw[: len(raw) // 2], raw[:60] + b"\xff" * (len(raw) - 60))):
        p = tmp_path / f"bad{i}.idx"
        p.write_bytes(bad)
        with pytest.raises(IndexFileError):
            DenseIndex.load(p)
    other = tmp_path / "other.idx"
    other.write_bytes(b"RFLATE\x00\x00" + raw[8:])
    with pytest.raises(IndexFileError, match="magic"):
        DenseIndex.load(other)


def test_load_late_and_sparse_files_raise_index_file_error(tmp_path):
    from ragfind import LateInteractionIndex, SparseVectorIndex
    from ragfind.models.splade import SparseEmbeddings

    rng = np.random.default_rng(0)
    late = LateInteractionIndex(dim=8)
    late.add([rng.standard_normal((3, 8)).astype(np.float32) for _ in range(4)])
    late.save(tmp_path / "late.idx")
    sparse = SparseVectorIndex(16)
    indptr = np.asarray([0, 2, 3], np.int64)
    sparse.add(SparseEmbeddings(indptr, np.asarray([1, 5, 2], np.int32), np.ones(3, np.float32), 16))
    sparse.save(tmp_path / "sparse.idx")
    for name in ("late.idx", "sparse.idx"):
        with pytest.raises(IndexFileError, match="magic"):
            DenseIndex.load(tmp_path / name)
    # And the other way round: the sectioned loaders raise IndexFileError for a dense file.
    d = DenseIndex(8)
    d.add(rng.standard_normal((2, 8)).astype(np.float32))
    d.save(tmp_path / "dense.idx")
    for cls in (LateInteractionIndex, SparseVectorIndex):
        with pytest.raises(IndexFileError):
            cls.load(tmp_path / "dense.idx")


@pytest.mark.parametrize("dtype", ["f32", "i8"])
def test_incremental_compaction_matches_reference(dtype, tmp_path, monkeypatch):
    """Writes during a chunked compaction: results, ids order and files follow the live rows."""
    import ragfind.dense.exact as dense_exact

    monkeypatch.setattr(dense_exact._Compaction, "_CHUNK_BYTES", 1)  # 128 rows per write
    rng = np.random.default_rng(11)
    n, d = 4000, 8
    X = rng.standard_normal((n, d)).astype(np.float32)
    index = DenseIndex(d, metric="l2", dtype=dtype)
    index.add(X)
    live = dict(enumerate(X))  # insertion order = expected ids order
    flt = IdFilter(range(0, 20_000, 3))
    saw_compaction = False
    for step in range(400):
        op = rng.integers(0, 10)
        if op < 7 and live:
            victims = rng.choice(
                list(live), size=min(len(live), int(rng.integers(1, 24))), replace=False
            ).tolist()
            index.delete(victims)
            for v in victims:
                del live[v]
        else:
            new = [int(x) for x in rng.integers(0, 6000, 4) if int(x) not in live]
            new = list(dict.fromkeys(new))
            if new:
                Y = rng.standard_normal((len(new), d)).astype(np.float32)
                index.add(Y, ids=new)
                live.update(zip(new, Y))
        saw_compaction |= index._backend._compaction is not None
        if step % 20 == 0 or index._backend._compaction is not None:
            assert index.ids.tolist() == list(live)
            q = rng.standard_normal(d).astype(np.float32)
            for f in (None, flt):
                allowed = [x for x in live if f is None or x in f]
                ids, scores = index.search(q, k=7, filter=f)
                R = _stored_rows(np.stack([live[x] for x in allowed]), "l2", dtype)
                ref = _numpy_scores(R, q, "l2")
                _check_against_numpy(ids, scores, allowed, ref, "l2", 7, 1e-4 if dtype == "f32" else 0.3)
        if step == 200:
            index.save(tmp_path / "mid.idx")
            loaded = DenseIndex.load(tmp_path / "mid.idx")
            assert loaded.ids.tolist() == list(live)
    assert saw_compaction
    index._backend.compact()
    assert index._backend._compaction is None and index.ids.tolist() == list(live)


@pytest.mark.parametrize("first", [0, 37, 200])
def test_exact_filter_from_a_metadata_bitmap_equals_the_same_ids(first):
    """A metadata filter's bitmap read a word per 64 slots (slot i holding id first + i) gives
    what the same ids as a plain IdFilter give, through appends (the slots' keys extended),
    deletes, an id added out of order, and both native paths (gathered and masked)."""
    from ragfind.pipeline.filters import FilterCompiler, MetadataFilters

    rng = np.random.default_rng(first)
    d, n = 8, 700
    total = first + n + 400
    meta = MetadataFilters()
    metadata = [{"t": i % 50} for i in range(total)]
    meta.add(np.arange(total, dtype=np.int64), [""] * total, [""] * total, metadata)
    store = type("S", (), {"fields": {"t"}, "kinds": {}, "kinds_version": 0, "generation": 0})()
    compiler = FilterCompiler(meta, store)
    X = rng.standard_normal((total, d)).astype(np.float32)
    index = DenseIndex(d, metric="ip")
    index.add(X[first : first + n], ids=list(range(first, first + n)))
    filters = [{"t": 3}, {"t": {"$lt": 40}}]  # 2%: gathered; 80%: masked
    used = []
    q = rng.standard_normal(d).astype(np.float32)

    def check():
        store.generation += 1
        for f in filters:
            flt = compiler(f)
            bits = flt.id_bits()
            assert bits is not None
            used.append(bits)
            plain = IdFilter(flt.ids)
            for k in (5, 60):
                got = index.search(q, k=k, filter=flt)
                want = index.search(q, k=k, filter=plain)
                assert got[0].tolist() == want[0].tolist()
                np.testing.assert_array_equal(got[1], want[1])

    check()
    for step in range(6):  # appends in id order: the keys are extended, the base kept
        lo = first + n + 50 * step
        index.add(X[lo : lo + 50], ids=list(range(lo, lo + 50)))
        check()
    index.delete([first + 3, first + 53, first + 100])  # tombstones: the live mask applies
    check()
    if first:
        index.add(X[:1], ids=[0])  # below every id: not consecutive any more
        check()
    assert len(used) == 2 * (8 + (first > 0))
