"""LateInteractionIndex: scoring, rerank/search against numpy, explain, persistence, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from ragfind import LateInteractionIndex


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
    assert [m.doc_token for m in exp.matches] == list(sims.argmax(axis=1))
    np.testing.assert_allclose([m.similarity for m in exp.matches], sims.max(axis=1), atol=1e-5)
    np.testing.assert_allclose(exp.score, index.score(q, [doc_id])[0], atol=1e-4)
    assert exp.matches[0].query_text == "a" and exp.matches[1].doc_text == labels[exp.matches[1].doc_token]
    assert "MaxSim" in str(exp)
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
        approx_ids, approx_scores = index.search(q, k=5, n_probe=4, n_rerank=32)
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
    with pytest.raises(ValueError, match="query_vectors has dim 8, expected 32"):
        index.search(np.ones((2, 8), dtype=np.float32))
    with pytest.raises(IndexError, match="unknown document id 500"):
        index.rerank(q, [1, 500])
    with pytest.raises(IndexError, match="unknown document id -1"):
        index.explain(q, -1)
    with pytest.raises(ValueError, match="k must be positive"):
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
