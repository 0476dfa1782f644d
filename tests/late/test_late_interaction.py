"""LateInteractionIndex: scoring, rerank/search against numpy, explain, persistence, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from ragfind import LateInteractionIndex
from ragfind.errors import DuplicateIdError, IdKindError, IndexFileError, UnknownIdError
from ragfind.ids import IdFilter


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _corpus(seed=0, n_docs=120, dim=32):
    rng = np.random.default_rng(seed)
    return [_unit(rng.standard_normal((int(n), dim))) for n in rng.integers(1, 60, size=n_docs)]


def _ref(q, docs):
    return np.array([(q.astype(np.float64) @ d.astype(np.float64).T).max(axis=1).sum() for d in docs])


@pytest.fixture
def index_and_docs():
    docs = _corpus()
    index = LateInteractionIndex(dim=32)
    ids = index.add(docs[:50])
    ids2 = index.add(docs[50:])
    np.testing.assert_array_equal(np.concatenate([ids, ids2]), np.arange(len(docs)))
    return index, docs


def test_score_rerank_and_search_match_reference(index_and_docs, simd_level):
    index, docs = index_and_docs
    rng = np.random.default_rng(1)
    q = _unit(rng.standard_normal((8, 32)))
    want = _ref(q, docs)
    np.testing.assert_allclose(index.score(q), want, atol=1e-4)
    ids, scores = index.search(q, k=10)
    np.testing.assert_array_equal(ids, np.argsort(-want, kind="stable")[:10])
    np.testing.assert_allclose(scores, want[ids], atol=1e-4)
    cand = np.array([5, 17, 3, 99, 17])
    r_ids, r_scores = index.rerank(q, cand, k=3)
    uniq = np.unique(cand)
    np.testing.assert_array_equal(r_ids, uniq[np.argsort(-want[uniq], kind="stable")][:3])
    assert np.all(np.diff(r_scores) <= 0)
    assert len(index) == 120 and index.n_tokens == sum(len(d) for d in docs)


def test_float16_storage_close_to_float32():
    docs = _corpus(2)
    idx16 = LateInteractionIndex(dim=32, dtype="float16")
    idx16.add(docs)
    q = _unit(np.random.default_rng(3).standard_normal((5, 32)))
    np.testing.assert_allclose(idx16.score(q), _ref(q, [d.astype(np.float16) for d in docs]), atol=1e-4)
    assert idx16.tokens.dtype == np.float16


def test_explain_sums_to_score_and_names_tokens(index_and_docs):
    index, docs = index_and_docs
    q = _unit(np.random.default_rng(4).standard_normal((3, 32)))
    doc_id = 7
    labels = [f"t{j}" for j in range(len(docs[doc_id]))]
    exp = index.explain(q, doc_id, query_tokens=["a", "b", "c"], doc_tokens=labels)
    sims = q @ docs[doc_id].T
    parts = exp.contributions
    assert exp.kind == "late" and exp.id == doc_id
    assert [c.detail["doc_token"] for c in parts] == list(sims.argmax(axis=1))
    np.testing.assert_allclose([c.value for c in parts], sims.max(axis=1), atol=1e-5)
    np.testing.assert_allclose(exp.score, index.score(q, [doc_id])[0], atol=1e-4)
    assert [c.name for c in parts] == ["a", "b", "c"]
    assert parts[1].detail["doc_text"] == labels[parts[1].detail["doc_token"]]
    assert "late 7" in str(exp)
    with pytest.warns(DeprecationWarning, match="MaxSimExplanation"):
        matches = exp.matches  # the MaxSimExplanation explain returned before, for one release
    assert [m.similarity for m in matches] == [c.value for c in parts]
    with pytest.raises(ValueError, match="query_tokens has 2 labels, expected 3"):
        index.explain(q, doc_id, query_tokens=["a", "b"])


def test_centroid_candidates_find_the_exact_top_hits():
    # Documents built around topics: the PLAID-style path must return the exhaustive top-5.
    rng = np.random.default_rng(5)
    topics = _unit(rng.standard_normal((40, 48)))
    docs = []
    for _ in range(400):
        t = rng.choice(40, size=3, replace=False)
        n = int(rng.integers(5, 40))
        docs.append(_unit(topics[rng.choice(t, size=n)] + 0.1 * rng.standard_normal((n, 48))))
    index = LateInteractionIndex(dim=48)
    index.add(docs)
    index.build_centroids(64, seed=0)
    assert index.has_centroids
    hits = 0
    for _ in range(10):
        t = rng.choice(40, size=2, replace=False)
        q = _unit(topics[np.repeat(t, 4)] + 0.1 * rng.standard_normal((8, 48)))
        exact_ids, _ = index.search(q, k=5, exhaustive=True)
        approx_ids, approx_scores = index.search(q, k=5, nprobe=4, n_rerank=32)
        hits += len(set(exact_ids) & set(approx_ids))
        np.testing.assert_allclose(approx_scores, index.score(q, approx_ids), atol=1e-6)
    assert hits >= 45  # recall@5 >= 0.9
    index.add(docs[:1])
    assert not index.has_centroids  # stale centroids are dropped


@pytest.mark.parametrize("with_centroids", [False, True])
@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip(tmp_path, index_and_docs, with_centroids, mmap):
    index, docs = index_and_docs
    if with_centroids:
        index.build_centroids(16)
    path = tmp_path / "li.rfli"
    index.save(path)
    loaded = LateInteractionIndex.load(path, mmap=mmap)
    assert len(loaded) == len(index) and loaded.dim == 32 and loaded.has_centroids == with_centroids
    q = _unit(np.random.default_rng(6).standard_normal((4, 32)))
    np.testing.assert_array_equal(loaded.score(q), index.score(q))
    if with_centroids:
        np.testing.assert_array_equal(loaded.candidates(q), index.candidates(q))
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind


def test_load_rejects_corrupt_truncated_and_foreign_files(tmp_path, index_and_docs):
    index, _ = index_and_docs
    path = tmp_path / "li.rfli"
    index.save(path)
    raw = path.read_bytes()
    foreign = tmp_path / "foreign"
    foreign.write_bytes(b"PK\x03\x04" + raw[4:])
    with pytest.raises(ValueError, match="bad magic"):
        LateInteractionIndex.load(foreign)
    truncated = tmp_path / "truncated"
    truncated.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="outside the file|truncated"):
        LateInteractionIndex.load(truncated)
    flipped = bytearray(raw)
    flipped[-100] ^= 0xFF  # inside the token section
    corrupt = tmp_path / "corrupt"
    corrupt.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="checksum mismatch in section 'tokens'"):
        LateInteractionIndex.load(corrupt)
    tiny = tmp_path / "tiny"
    tiny.write_bytes(b"RF")
    with pytest.raises(ValueError, match="bad magic"):
        LateInteractionIndex.load(tiny)
    header_bad = bytearray(raw)
    header_bad[20:24] = b"\xff\xff\xff\xff"
    bad_header = tmp_path / "bad_header"
    bad_header.write_bytes(bytes(header_bad))
    with pytest.raises(ValueError, match="corrupt header"):
        LateInteractionIndex.load(bad_header)


def test_bad_inputs_change_nothing(index_and_docs):
    index, docs = index_and_docs
    n_before, tokens_before = len(index), index.n_tokens
    nan_doc = docs[0].copy()
    nan_doc[0, 3] = np.nan
    with pytest.raises(
        ValueError, match=r"documents\[1\] contains a non-finite value .* token 0, dimension 3"
    ):
        index.add([docs[1], nan_doc])
    with pytest.raises(ValueError, match=r"documents\[0\] has dim 16, expected 32"):
        index.add([np.ones((2, 16), dtype=np.float32)])
    with pytest.raises(ValueError, match=r"documents\[0\] is empty"):
        index.add([np.ones((0, 32), dtype=np.float32)])
    with pytest.raises(TypeError, match="wrap a single document"):
        index.add(docs[0])
    assert len(index) == n_before and index.n_tokens == tokens_before
    q = np.ones((2, 32), dtype=np.float32)
    with pytest.raises(ValueError, match="query has dim 8, expected 32"):
        index.search(np.ones((2, 8), dtype=np.float32))
    with pytest.raises(UnknownIdError, match=r"candidate_ids: \[500\] not in the index"):
        index.rerank(q, [1, 500])
    with pytest.raises(UnknownIdError, match=r"doc_id: \[-1\] not in the index"):
        index.explain(q, -1)
    with pytest.raises(ValueError, match="k must be a positive int"):
        index.search(q, k=0)
    with pytest.raises(ValueError, match="build_centroids"):
        index.search(q, exhaustive=False)
    q_nan = q.copy()
    q_nan[1, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        index.search(q_nan)
    with pytest.raises(ValueError, match="dtype must be"):
        LateInteractionIndex(dim=4, dtype="int8")
    with pytest.raises(ValueError, match="dim must be a positive integer"):
        LateInteractionIndex(dim=0)


def test_empty_index_search():
    index = LateInteractionIndex(dim=4)
    ids, scores = index.search(np.ones((1, 4), dtype=np.float32))
    assert ids.shape == (0,) and scores.shape == (0,)
    assert ragfind.LateInteractionIndex is LateInteractionIndex


# ---------------------------------------------------------------- ids, deletes, filters


def _ref_top(q, docs_by_id, allowed, k):
    """(ids, float64 scores) of the exact top-k over the live documents (insertion order) that
    ``allowed`` (None: all) holds, ties by insertion order."""
    ids = [x for x in docs_by_id if allowed is None or x in allowed]
    s = _ref(q, [docs_by_id[x] for x in ids])
    order = np.lexsort((np.arange(len(ids)), -s))[:k]
    return [ids[i] for i in order], s[order]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_random_adds_deletes_and_filters_match_einsum(dtype, simd_level, tmp_path):
    # Random batches under gapped int ids, deletes between them (past the compaction fraction,
    # so the storage is rewritten several times), re-adds of deleted ids; exhaustive search
    # with and without filters, score() and rerank() by ids, against float64 MaxSim over the
    # live allowed documents; then save/load (dead documents left out).
    rng = np.random.default_rng(7)
    dim = 24
    index = LateInteractionIndex(dim, dtype=dtype)
    live: dict = {}
    deleted: list = []
    next_id = 3
    compactions = 0
    for step in range(6):
        n = int(rng.integers(20, 60))
        docs = [_unit(rng.standard_normal((int(m), dim))) for m in rng.integers(1, 30, size=n)]
        reuse = deleted[: n // 3] if step % 2 else []
        deleted = deleted[len(reuse) :]
        fresh = (next_id + np.cumsum(rng.integers(1, 5, size=n - len(reuse)))).tolist()
        next_id = fresh[-1] + 1
        ids = reuse + fresh
        assert index.add(docs, ids=ids).tolist() == ids
        stored = [d.astype(np.float16).astype(np.float32) if dtype == "float16" else d for d in docs]
        live.update(zip(ids, stored))
        victims = rng.choice(list(live), size=len(live) // 3, replace=False).tolist()
        rows_before = len(index.offsets) - 1
        index.delete(victims)
        compactions += len(index.offsets) - 1 < rows_before
        for v in victims:
            del live[v]
        deleted += victims
    assert compactions >= 2
    assert index.ids.tolist() == list(live) and len(index) == len(live)
    assert index.n_tokens == sum(len(d) for d in live.values())
    q = _unit(rng.standard_normal((5, dim)))
    live_ids = index.ids
    filters = [
        None,
        set(rng.choice(live_ids, size=3, replace=False).tolist()),
        IdFilter(rng.choice(live_ids, size=len(live_ids) // 2, replace=False)),
        rng.choice(live_ids, size=10, replace=False).tolist() + deleted[:5] + [10**15],
        [],
    ]
    for flt in filters:
        for k in (1, 7, 10**9):
            got_ids, got_scores = index.search(q, k, flt)
            want_ids, want_scores = _ref_top(q, live, None if flt is None else set(flt), k)
            assert got_ids.dtype == np.int64
            assert got_ids.tolist() == want_ids
            np.testing.assert_allclose(got_scores, want_scores, atol=1e-4)
    pick = [live_ids[5], live_ids[0], live_ids[2]]
    np.testing.assert_allclose(index.score(q, pick), _ref(q, [live[x] for x in pick]), atol=1e-4)
    np.testing.assert_allclose(index.score(q), _ref(q, list(live.values())), atol=1e-4)
    r_ids, r_scores = index.rerank(q, pick + pick[:1], k=2)
    want_ids, _ = _ref_top(q, {x: live[x] for x in live if x in set(pick)}, None, 2)
    assert r_ids.tolist() == want_ids
    with pytest.raises(UnknownIdError):
        index.score(q, [deleted[0]])
    path = tmp_path / "li.rfli"
    index.save(path)
    assert len(index.offsets) - 1 == len(live)  # saving compacted the storage
    for mmap in (True, False):
        loaded = LateInteractionIndex.load(path, mmap=mmap)
        assert loaded.ids.tolist() == live_ids.tolist() and loaded.dtype == dtype
        for flt in filters:
            a = loaded.search(q, 7, flt)
            b = index.search(q, 7, flt)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
        assert loaded.add([q]).tolist() == [max(max(live_ids), max(deleted)) + 1]


def test_compaction_gives_memory_back_and_keeps_centroids_valid():
    rng = np.random.default_rng(3)
    docs = [_unit(rng.standard_normal((20, 16))) for _ in range(100)]
    index = LateInteractionIndex(16)
    index.add(docs, ids=[f"d{i}" for i in range(100)])
    index.build_centroids(8)
    big = index.tokens
    assert big.shape == (2000, 16)
    index.delete([f"d{i}" for i in range(0, 100, 5)])  # 20% of the tokens: no compaction yet
    assert index.tokens.shape == (2000, 16) and index.n_tokens == 1600
    index.delete([f"d{i}" for i in range(1, 100, 5)])  # 40%: compacted
    assert index.tokens.shape == (1200, 16) and not np.shares_memory(index.tokens, big)
    assert index.has_centroids
    kept = [f"d{i}" for i in range(100) if i % 5 > 1]
    assert index.ids.tolist() == kept
    q = docs[2][:4]
    exact_ids, exact_scores = index.search(q, 5, exhaustive=True)
    assert exact_ids[0] == "d2"
    approx_ids, approx_scores = index.search(q, 5, nprobe=8, n_rerank=100)
    np.testing.assert_array_equal(approx_ids, exact_ids)  # every centroid probed: exact
    np.testing.assert_array_equal(approx_scores, exact_scores)
    allowed = IdFilter(["d3", "d8", "d0", "zz"])
    f_ids, _ = index.search(q, 5, allowed, nprobe=8, n_rerank=100)
    assert set(f_ids.tolist()) <= {"d3", "d8"} and len(f_ids) == 2
    with pytest.warns(DeprecationWarning, match="n_probe= is deprecated"):
        old_ids, _ = index.search(q, 5, allowed, n_probe=8, n_rerank=100)
    assert old_ids.tolist() == f_ids.tolist()
    with pytest.raises(TypeError, match="got both nprobe= and its old name n_probe="):
        index.search(q, 5, nprobe=8, n_probe=8)
    cand = index.candidates(q, nprobe=8, filter=allowed)
    assert sorted(cand.tolist()) == ["d3", "d8"]
    np.testing.assert_array_equal(index.document("d8"), docs[8])


def test_late_id_rules_and_errors_change_nothing():
    index = LateInteractionIndex(4)
    doc = np.ones((2, 4), np.float32)
    assert index.add([doc, doc], ids=[10, 4]).tolist() == [10, 4]
    assert index.add([doc]).tolist() == [11]  # after the largest int id
    before = (len(index), index.n_tokens, index.generation)
    with pytest.raises(IdKindError, match="this index has int ids"):
        index.add([doc], ids=["a"])
    with pytest.raises(IdKindError, match="mixes int and str"):
        index.add([doc, doc], ids=[1, "a"])
    with pytest.raises(DuplicateIdError, match="already in the index"):
        index.add([doc, doc], ids=[12, 4])
    with pytest.raises(DuplicateIdError, match="repeated"):
        index.add([doc, doc], ids=[12, 12])
    with pytest.raises(ValueError, match="non-finite"):
        index.add([doc, doc * np.nan], ids=[12, 13])
    with pytest.raises(UnknownIdError, match="99"):
        index.delete([10, 99])
    with pytest.raises(UnknownIdError):
        index.rerank(doc, ["10"])
    assert (len(index), index.n_tokens, index.generation) == before
    with pytest.raises(ValueError, match="k must be a positive int"):
        index.search(doc, 0)
    with pytest.raises(TypeError, match="k must be a positive int"):
        index.search(doc, 2.5)
    index.delete(4)
    assert index.ids.tolist() == [10, 11] and 4 not in index
    ids, scores = index.search(doc, 10**12)  # k clamped
    assert ids.tolist() == [10, 11] and np.all(scores == scores[0])  # ties: insertion order
    with pytest.raises(IdKindError, match=r"^filter: this index has int ids, got str ids$"):
        index.search(doc, 5, filter=["x"])  # ids of the other kind: a mistake, as in add
    empty = LateInteractionIndex(4)
    assert empty.ids.dtype == np.int64 and empty.id_kind is None
    s_ids, _ = empty.search(doc, 3)
    assert s_ids.dtype == np.int64 and s_ids.shape == (0,)
    strs = LateInteractionIndex(4)
    strs.add([doc], ids=["a"])
    with pytest.raises(IdKindError, match="str ids"):
        strs.add([doc])
    assert strs.search(doc, 3)[0].dtype == object
    assert strs.search(doc, 3, filter=["b"])[0].dtype == object


def test_late_loaders_reject_other_indexes_and_old_files(tmp_path):
    from ragfind.persist.sectioned import write_sectioned

    bm = ragfind.BM25Index()
    bm.add(["alpha beta"])
    bm.save(tmp_path / "bm25.idx")
    dense = ragfind.DenseIndex(4)
    dense.add(np.eye(4, dtype=np.float32))
    dense.save(tmp_path / "dense.idx")
    sparse = ragfind.SparseVectorIndex(8)
    sparse.add([{1: 1.0}])
    sparse.save(tmp_path / "sparse.idx")
    for name in ("bm25.idx", "dense.idx", "sparse.idx"):
        with pytest.raises(IndexFileError, match="bad magic"):
            LateInteractionIndex.load(tmp_path / name)
    old = tmp_path / "v1.rfli"
    header = {"dim": 4, "dtype": "float32", "n_docs": 0, "n_tokens": 0}
    write_sectioned(old, b"RFLATE\x00\x01", 1, header, {"offsets": np.zeros(1, np.int64)})
    with pytest.raises(IndexFileError, match="version 1 .*rebuild"):
        LateInteractionIndex.load(old)
    li = LateInteractionIndex(4)
    li.add([np.ones((2, 4), np.float32), np.ones((1, 4), np.float32)], ids=["a", "b"])
    li.save(tmp_path / "ok.rfli")
    raw = (tmp_path / "ok.rfli").read_bytes()
    assert LateInteractionIndex.load(tmp_path / "ok.rfli").ids.tolist() == ["a", "b"]
    good = {"dim": 4, "dtype": "float32", "n_docs": 2, "n_tokens": 3, "id_kind": "str", "next_id": 0}
    tokens = np.ones((3, 4), np.float32)
    offsets = np.array([0, 2, 3], np.int64)
    bad = tmp_path / "bad.rfli"
    for id_bytes, id_offsets, match in (
        (b"aa", [0, 1, 2], "repeated ids"),
        (b"a\xff", [0, 1, 2], "corrupt ids"),
        (b"ab", [0, 2, 1], "corrupt id offsets"),
    ):
        sections = {
            "offsets": offsets,
            "id_bytes": np.frombuffer(id_bytes, np.uint8),
            "id_offsets": np.array(id_offsets, np.int64),
            "tokens": tokens,
        }
        write_sectioned(bad, b"RFLATE\x00\x01", 2, good, sections)
        with pytest.raises(IndexFileError, match=match):
            LateInteractionIndex.load(bad)
    for cut in (5, len(raw) // 2, len(raw) - 1):
        bad.write_bytes(raw[:cut])
        with pytest.raises(IndexFileError):
            LateInteractionIndex.load(bad)
