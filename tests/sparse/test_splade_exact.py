"""SparseVectorIndex exact re-scoring (the default) and the approximate query_cut mode against
an exhaustive float64 dot-product reference; file versions 2 and 3."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from ragfind import SparseVectorIndex
from ragfind.errors import IndexFileError
from ragfind.models.splade import SparseEmbeddings


def _corpus(rng, n, dim, nnz=(5, 40), q_terms=(2, 20), nq=30, coarse=False):
    """CSR docs and queries; with coarse, many weights differ by less than a quantisation
    step, so the quantised ranking differs from the float one and the pool has to grow."""

    def rows(m, lo_hi):
        lengths = rng.integers(lo_hi[0], lo_hi[1], size=m)
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        idx = np.concatenate([np.sort(rng.choice(dim, size=int(x), replace=False)) for x in lengths])
        if coarse:
            val = np.round(rng.uniform(0.5, 3.0, size=len(idx)), 1) + rng.uniform(0, 0.009, len(idx))
        else:
            val = rng.gamma(1.2, 0.7, size=len(idx)) + 0.001
        return SparseEmbeddings(indptr, idx.astype(np.int32), val.astype(np.float32), dim)

    return rows(n, nnz), rows(nq, q_terms)


def _slice(e, a, b):
    """Rows a..b of a SparseEmbeddings."""
    lo, hi = int(e.indptr[a]), int(e.indptr[b])
    return SparseEmbeddings(e.indptr[a : b + 1] - lo, e.indices[lo:hi], e.values[lo:hi], e.dim)


def _dense(e):
    out = np.zeros((len(e.indptr) - 1, e.dim), dtype=np.float64)
    for i in range(len(e.indptr) - 1):
        a, b = e.indptr[i], e.indptr[i + 1]
        out[i, e.indices[a:b]] = e.values[a:b]
    return out


def _check_exact(got_ids, got_scores, want, k, allowed=None):
    """got is the exact float top-k of want (float64 scores), up to ties."""
    for qi in range(want.shape[0]):
        w = want[qi].copy()
        if allowed is not None:
            w[~allowed] = 0.0
        order = np.lexsort((np.arange(len(w)), -w))
        n = min(k, int((w > 0).sum()))
        np.testing.assert_allclose(got_scores[qi, :n], w[order[:n]], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w[got_ids[qi, :n]], w[order[:n]], rtol=1e-5, atol=1e-6)
        assert np.all(got_ids[qi, n:] == -1)


@pytest.mark.parametrize("scale", [100.0, 10.0, 1.0])
@pytest.mark.parametrize("algorithm", ["auto", "maxscore", "exhaustive"])
def test_exact_default_equals_float_dot_product(scale, algorithm):
    rng = np.random.default_rng(3)
    dim = 400
    docs, queries = _corpus(rng, 2500, dim, coarse=scale == 10.0)
    index = SparseVectorIndex(dim, scale=scale)
    assert index.exact
    index.add(_slice(docs, 0, 1000))
    index.add(_slice(docs, 1000, len(docs)))
    want = _dense(queries) @ _dense(docs).T
    for k in (1, 10, 50):
        ids, scores = index.search_batch_padded(queries, k=k, algorithm=algorithm)
        _check_exact(ids, scores, want, k)
    # score() and explain() use the same float weights as search().
    np.testing.assert_allclose(index.score(_slice(queries, 0, 1)), want[0], rtol=1e-5, atol=1e-6)
    ids, scores = index.search(_slice(queries, 0, 1), k=1)
    parts = index.explain(_slice(queries, 0, 1), int(ids[0]))
    np.testing.assert_allclose(sum(m.value for m in parts.contributions), scores[0], rtol=1e-5)


def test_quantised_mode_loses_ranks_that_exact_keeps():
    # Weights 1.00x apart by less than 1 / scale: the quantised ranking ties or swaps them.
    rng = np.random.default_rng(4)
    dim = 300
    docs, queries = _corpus(rng, 2000, dim, coarse=True)
    want = _dense(queries) @ _dense(docs).T
    ref = np.argsort(-want, axis=1, kind="stable")[:, :10]
    recall = {}
    for exact in (True, False):
        index = SparseVectorIndex(dim, scale=10.0, exact=exact)
        index.add(docs)
        ids, _ = index.search_batch_padded(queries, k=10)
        recall[exact] = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, ref)])
    assert recall[True] == 1.0
    assert recall[False] < 1.0


def test_exact_with_deletes_and_filters():
    rng = np.random.default_rng(5)
    dim = 300
    docs, queries = _corpus(rng, 1500, dim)
    index = SparseVectorIndex(dim, scale=5.0)  # coarse: the pool and the fallback both run
    index.add(docs)
    dead = rng.choice(1500, size=300, replace=False)
    index.delete(dead)
    live = np.ones(1500, bool)
    live[dead] = False
    want = _dense(queries) @ _dense(docs).T
    ids, scores = index.search_batch_padded(queries, k=10)
    _check_exact(ids, scores, want, 10, allowed=live)
    allow = rng.choice(np.flatnonzero(live), size=40, replace=False)
    mask = np.zeros(1500, bool)
    mask[allow] = True
    ids, scores = index.search_batch_padded(queries, k=10, filter=allow)
    _check_exact(ids, scores, want, 10, allowed=mask)


def test_query_cut_is_approximate_and_opt_in():
    rng = np.random.default_rng(6)
    dim = 400
    docs, queries = _corpus(rng, 3000, dim, q_terms=(15, 30))
    want = _dense(queries) @ _dense(docs).T
    index = SparseVectorIndex(dim)
    index.add(docs)
    exact_ids, exact_scores = index.search_batch_padded(queries, k=10)
    # A cut at least the query length is the exact search.
    ids, scores = index.search_batch_padded(queries, k=10, query_cut=1000)
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_array_equal(scores, exact_scores)
    ids, scores = index.search_batch_padded(queries, k=10, query_cut=3)
    ref = np.argsort(-want, axis=1, kind="stable")[:, :10]
    recall = np.mean([len(set(a[a >= 0]) & set(b)) / 10 for a, b in zip(ids, ref)])
    assert 0.2 < recall < 1.0
    # Returned scores are still the whole query's exact scores, best first.
    for qi in range(len(queries)):
        got = ids[qi][ids[qi] >= 0]
        np.testing.assert_allclose(scores[qi, : len(got)], want[qi, got], rtol=1e-5, atol=1e-6)
        assert np.all(np.diff(scores[qi, : len(got)]) <= 0)
    one_ids, one_scores = index.search(_slice(queries, 0, 1), k=10, query_cut=3)
    np.testing.assert_array_equal(one_ids, ids[0][ids[0] >= 0])
    # Without float vectors the cut still applies to the quantised search.
    q_index = SparseVectorIndex(dim, exact=False)
    q_index.add(docs)
    c_ids, _ = q_index.search_batch_padded(queries, k=10, query_cut=3)
    assert not np.array_equal(c_ids, q_index.search_batch_padded(queries, k=10)[0])


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_query_cut_bad_values(bad):
    index = SparseVectorIndex(10)
    index.add([{1: 1.0}])
    with pytest.raises(ValueError, match="query_cut"):
        index.search({1: 1.0}, query_cut=bad)


def test_exact_must_be_bool():
    with pytest.raises(TypeError, match="exact"):
        SparseVectorIndex(10, exact="yes")
    assert SparseVectorIndex(10, scale=0.0).exact  # float postings are exact already
    assert not SparseVectorIndex(10, exact=False).exact


def test_save_load_keeps_exact_and_adds_after_load(tmp_path):
    rng = np.random.default_rng(7)
    dim = 300
    docs, queries = _corpus(rng, 1200, dim)
    index = SparseVectorIndex(dim, scale=10.0)
    index.add(_slice(docs, 0, 800))
    index.delete([3, 5, 700])
    path = tmp_path / "s.rfsp"
    index.save(path)
    want = _dense(queries) @ _dense(docs).T
    live = np.zeros(1200, bool)
    live[:800] = True
    live[[3, 5, 700]] = False
    for mmap in (True, False):
        loaded = SparseVectorIndex.load(path, mmap=mmap)
        assert loaded.exact
        ids, scores = loaded.search_batch_padded(queries, k=10)
        _check_exact(ids, scores, want, 10, allowed=live)  # ids (not rows) are returned
    loaded.add(_slice(docs, 800, 1200), ids=np.arange(800, 1200))
    live[800:] = True
    ids, scores = loaded.search_batch_padded(queries, k=10)
    _check_exact(ids, scores, want, 10, allowed=live)


def _write_v2(index, path):
    """A version-2 file (before float vectors were saved), as that ragfind wrote it."""
    from ragfind.persist.sectioned import write_sectioned

    offsets, docs, stored = index._index.export_arrays()
    header = {
        "dim": index.dim,
        "scale": index.scale,
        "n_docs": len(index),
        "n_postings": int(len(docs)),
        **index._ids.header(),
    }
    write_sectioned(
        path,
        b"RFSPARSE",
        2,
        header,
        {"offsets": offsets, "docs": docs, "impacts": stored, **index._ids.sections()},
    )


def test_version_2_file_loads_with_quantised_results(tmp_path):
    rng = np.random.default_rng(8)
    dim = 200
    docs, queries = _corpus(rng, 500, dim)
    quantised = SparseVectorIndex(dim, exact=False)
    quantised.add(docs)
    path = tmp_path / "v2.rfsp"
    _write_v2(quantised, path)
    loaded = SparseVectorIndex.load(path)
    assert not loaded.exact
    a_ids, a_scores = loaded.search_batch_padded(queries, k=10)
    b_ids, b_scores = quantised.search_batch_padded(queries, k=10)
    np.testing.assert_array_equal(a_ids, b_ids)
    np.testing.assert_array_equal(a_scores, b_scores)


def _rewrite_section(path, name, fn):
    """Rewrites one section's bytes in place (keeping its length) and fixes nothing else."""
    raw = bytearray(path.read_bytes())
    hlen = struct.unpack("<I", raw[12:16])[0]
    header = json.loads(raw[16 : 16 + hlen].decode())
    sec = header["sections"][name]
    off, n = sec["offset"], sec["nbytes"]
    raw[off : off + n] = fn(bytes(raw[off : off + n]))
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "section,patch",
    [
        ("fwd_terms", lambda b: np.full(len(b) // 4, 2**31, "<u4").tobytes()),
        ("fwd_values", lambda b: np.full(len(b) // 4, -1.0, "<f4").tobytes()),
        ("fwd_indptr", lambda b: np.full(len(b) // 8, 7, "<u8").tobytes()),
    ],
)
def test_corrupt_float_vectors_are_index_file_errors(tmp_path, section, patch):
    rng = np.random.default_rng(9)
    docs, _ = _corpus(rng, 50, 100)
    index = SparseVectorIndex(100)
    index.add(docs)
    path = tmp_path / "c.rfsp"
    index.save(path)
    _rewrite_section(path, section, patch)
    with pytest.raises(IndexFileError):
        SparseVectorIndex.load(path, verify=False)


def test_exact_returns_documents_whose_weights_quantise_to_zero():
    # 0.004 rounds to 0 at scale 100, so the posting is not stored: the quantised search never
    # sees document 0, the float vectors do.
    index = SparseVectorIndex(4)
    index.add([{1: 0.004}, {1: 1.0}, {2: 1.0}])
    ids, scores = index.search({1: 1.0}, k=10)
    assert ids.tolist() == [1, 0]
    np.testing.assert_allclose(scores, [1.0, 0.004], rtol=1e-6)
    quantised = SparseVectorIndex(4, exact=False)
    quantised.add([{1: 0.004}, {1: 1.0}, {2: 1.0}])
    assert quantised.search({1: 1.0}, k=10)[0].tolist() == [1]
