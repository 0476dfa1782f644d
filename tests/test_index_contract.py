"""The index protocol (``ragfind.index``), checked the same way on every index kind: BM25, BM25F,
SPLADE (SparseVectorIndex), dense exact / HNSW / IVF (float32, PQ and RaBitQ codes) and late
interaction.

add returns the ids as an array; delete and explain fail with one class and message; search_batch
item i is search(queries[i]) exactly, with and without a filter; ``threads`` is the one spelling
and a bad value gets the one error; explain's parts sum to the search score; save/load round
trips; len and ids follow every write."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import ragfind
from ragfind import BM25Index, DenseIndex, Explanation, IdFilter, LateInteractionIndex, SparseVectorIndex
from ragfind.errors import UnknownIdError, unknown_ids
from ragfind.index import Index, check_threads
from ragfind.sparse.vectors import SparseEmbeddings

KINDS = [
    "bm25",
    "bm25f",
    "splade",
    "dense-exact",
    "dense-hnsw",
    "dense-ivf",
    "dense-ivf-pq",
    "dense-ivf-rabitq",
    "late",
]
EXPLANATION_KIND = {"bm25f": "bm25f", "splade": "splade", "late": "late", "bm25": "bm25"}
N = 12
WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]


def _texts(rng: np.random.Generator) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 9)))) + f" w{i}" for i in range(N)]


def make(kind: str):
    """(an empty index, N items, three queries) for ``kind``; queries match most items."""
    rng = np.random.default_rng(11)
    if kind == "bm25":
        return BM25Index(), _texts(rng), ["alpha beta", "gamma omega sigma", "delta"]
    if kind == "bm25f":
        titles, bodies = _texts(rng), _texts(rng)
        docs = [{"title": t, "body": b} for t, b in zip(titles, bodies)]
        return BM25Index(fields={"title": 2.0, "body": 1.0}), docs, ["alpha beta", "gamma omega", "sigma"]
    if kind == "splade":
        # Small random CSR vectors over a vocabulary of 40 (term 0 in every document).
        dim, rows = 40, []
        for _ in range(N):
            terms = np.unique(np.concatenate([[0], rng.choice(np.arange(1, dim), size=5, replace=False)]))
            rows.append((terms, rng.uniform(0.1, 2.0, size=len(terms))))
        indptr = np.concatenate([[0], np.cumsum([len(t) for t, _ in rows])]).astype(np.int64)
        indices = np.concatenate([t for t, _ in rows]).astype(np.int32)
        values = np.concatenate([v for _, v in rows]).astype(np.float32)
        queries = [{0: 1.0, 3: 0.5, 7: 0.25}, {0: 0.2, 11: 1.5}, {5: 1.0, 9: 1.0, 0: 0.1}]
        return SparseVectorIndex(dim), SparseEmbeddings(indptr, indices, values, dim), queries
    if kind.startswith("dense"):
        X = rng.standard_normal((N, 8)).astype(np.float32)
        Q = rng.standard_normal((3, 8)).astype(np.float32)
        _, index_kind, *dtype = kind.split("-")  # dense-ivf-pq: kind "ivf", dtype "pq"
        return DenseIndex(8, metric="ip", kind=index_kind, dtype=dtype[0] if dtype else "f32"), X, list(Q)
    docs = [rng.standard_normal((int(rng.integers(2, 6)), 8)).astype(np.float32) for _ in range(N)]
    queries = [rng.standard_normal((m, 8)).astype(np.float32) for m in (2, 3, 1)]
    return LateInteractionIndex(8), docs, queries


def batch(kind: str, queries: list):
    """The queries as ``search_batch`` takes them (dense: one (nq, dim) array)."""
    return np.stack(queries) if kind.startswith("dense") else queries


def take(kind: str, items, rows):
    """Some of ``items`` (a list, a 2-D array or a SparseEmbeddings), in ``rows`` order."""
    if isinstance(items, SparseEmbeddings):
        parts = [
            (
                items.indices[items.indptr[r] : items.indptr[r + 1]],
                items.values[items.indptr[r] : items.indptr[r + 1]],
            )
            for r in rows
        ]
        return [(np.asarray(t, np.int64), np.asarray(v, np.float64)) for t, v in parts]
    if isinstance(items, np.ndarray):
        return items[list(rows)]
    return [items[r] for r in rows]


def id_list(id_kind: str, n: int, start: int = 0) -> list:
    return (
        [f"d{i}" for i in range(start, start + n)]
        if id_kind == "str"
        else [100 + i for i in range(start, start + n)]
    )


def same_pair(a, b) -> None:
    """Two (ids, scores) results are the same: ids (values and dtype) and scores bit for bit."""
    assert np.asarray(a[0]).dtype == np.asarray(b[0]).dtype
    assert np.asarray(a[0]).tolist() == np.asarray(b[0]).tolist()
    np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture(params=["int", "str"])
def id_kind(request):
    return request.param


@pytest.fixture
def built(kind, id_kind):
    """(index holding the N items under ``id_kind`` ids, items, queries, ids)."""
    index, items, queries = make(kind)
    ids = id_list(id_kind, N)
    index.add(items, ids=ids)
    return index, items, queries, ids


def test_every_kind_is_an_index(kind):
    index, _, _ = make(kind)
    assert isinstance(index, ragfind.Index)


def test_add_returns_the_ids_as_an_array(kind):
    index, items, _ = make(kind)
    got = index.add(take(kind, items, range(4)))
    assert isinstance(got, np.ndarray) and got.dtype == np.int64 and got.tolist() == [0, 1, 2, 3]
    got = index.add(take(kind, items, range(4, 6)), ids=[10, 11])
    assert isinstance(got, np.ndarray) and got.dtype == np.int64 and got.tolist() == [10, 11]
    got = index.add(take(kind, items, range(6, 8)))  # after the largest int id so far
    assert got.tolist() == [12, 13]
    assert len(index) == 8 and np.asarray(index.ids).tolist() == [0, 1, 2, 3, 10, 11, 12, 13]

    index, items, _ = make(kind)
    got = index.add(take(kind, items, range(3)), ids=["a", "b", "c"])
    assert isinstance(got, np.ndarray) and got.dtype == object and got.tolist() == ["a", "b", "c"]
    assert np.asarray(index.ids).dtype == object


def test_delete_and_explain_of_an_unknown_id_fail_with_one_class_and_message(built, id_kind):
    index, _, queries, ids = built
    absent = "nope" if id_kind == "str" else 99
    want = str(unknown_ids([absent], deleting=True))
    with pytest.raises(UnknownIdError, match=f"^{re.escape(want)}$"):
        index.delete([absent])
    with pytest.raises(UnknownIdError, match=f"^{re.escape(want)}$"):
        index.delete([ids[0], absent])  # all or nothing
    assert len(index) == N
    want = str(unknown_ids([absent], "doc_id"))
    with pytest.raises(UnknownIdError, match=f"^{re.escape(want)}$"):
        index.explain(queries[0], absent)
    index.delete([ids[1], ids[4]])
    assert len(index) == N - 2
    assert np.asarray(index.ids).tolist() == [i for i in ids if i not in (ids[1], ids[4])]
    with pytest.raises(UnknownIdError):
        index.explain(queries[0], ids[1])


@pytest.mark.parametrize("filtered", [None, "list", "IdFilter"])
def test_search_batch_item_i_is_search_of_query_i(built, kind, filtered):
    index, _, queries, ids = built
    allowed = [ids[i] for i in (0, 2, 3, 5, 8, 9, 11)]
    flt = {None: None, "list": allowed, "IdFilter": IdFilter(allowed)}[filtered]
    for k in (1, 4, N + 5):
        results = index.search_batch(batch(kind, queries), k, flt)
        assert isinstance(results, list) and len(results) == len(queries)
        for q, got in zip(queries, results):
            assert isinstance(got, tuple) and len(got) == 2
            single = index.search(q, k, flt)
            same_pair(got, single)
            if flt is not None:
                assert set(np.asarray(got[0]).tolist()) <= set(allowed)
    threaded = index.search_batch(batch(kind, queries), 4, flt, threads=2)
    for q, got in zip(queries, threaded):
        same_pair(got, index.search(q, 4, flt, threads=1))


def test_threads_is_the_one_spelling_with_one_error(built, kind):
    index, _, queries, _ = built
    ref = index.search(queries[0], 5)
    for threads in (None, 0, 1, 2):
        same_pair(index.search(queries[0], 5, threads=threads), ref)
        same_pair(index.search_batch(batch(kind, queries[:1]), 5, threads=threads)[0], ref)
    for bad in (-1, 1.5, "2", True):
        with pytest.raises((TypeError, ValueError)) as want:
            check_threads(bad)
        expected = f"^{re.escape(str(want.value))}$"
        with pytest.raises(type(want.value), match=expected):
            index.search(queries[0], 5, threads=bad)
        with pytest.raises(type(want.value), match=expected):
            index.search_batch(batch(kind, queries), 5, threads=bad)


def test_explain_parts_sum_to_the_search_score(built, kind):
    index, _, queries, _ = built
    for q in queries:
        ids, scores = index.search(q, 4)
        assert len(ids)
        for doc, score in zip(ids.tolist(), np.asarray(scores).tolist()):
            ex = index.explain(q, doc)
            assert isinstance(ex, Explanation)
            assert ex.kind == EXPLANATION_KIND.get(kind, "dense")
            assert ex.id == doc
            assert ex.score == pytest.approx(score, rel=1e-5, abs=1e-5)
            assert sum(c.value for c in ex.contributions) == pytest.approx(ex.score, rel=1e-5, abs=1e-5)
            assert ex.to_dict()["score"] == pytest.approx(ex.score)


@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip_gives_identical_results(built, kind, tmp_path, mmap):
    index, items, queries, ids = built
    index.delete([ids[2]])
    path = tmp_path / f"{kind}.idx"
    index.save(path)
    loaded = type(index).load(path, mmap=mmap)
    assert type(loaded) is type(index)
    assert len(loaded) == len(index) == N - 1
    assert np.asarray(loaded.ids).tolist() == np.asarray(index.ids).tolist()
    for q in queries:
        same_pair(loaded.search(q, 5), index.search(q, 5))
        same_pair(loaded.search(q, 5, [ids[0], ids[5]]), index.search(q, 5, [ids[0], ids[5]]))
    for a, b in zip(
        loaded.search_batch(batch(kind, queries), 5), index.search_batch(batch(kind, queries), 5)
    ):
        same_pair(a, b)
    doc = index.search(queries[0], 1)[0][0]
    assert loaded.explain(queries[0], doc).score == pytest.approx(
        index.explain(queries[0], doc).score, rel=1e-6
    )
    # The loaded index keeps taking writes under the same rules.
    new = loaded.add(take(kind, items, [2]), ids=[ids[2]])
    assert np.asarray(new).tolist() == [ids[2]] and len(loaded) == N


def test_old_spellings_still_work_for_one_release_with_a_warning():
    index, texts, queries = make("bm25")
    index.add(texts)
    with pytest.warns(DeprecationWarning, match="get_scores is deprecated"):
        np.testing.assert_array_equal(index.get_scores(queries[0]), index.score(queries[0]))
    with pytest.warns(DeprecationWarning, match="threads by position is deprecated.*use threads="):
        old = index.search_batch(queries, 3, None, 2)
    for got, want in zip(old, index.search_batch(queries, 3, threads=2)):
        same_pair(got, want)
    fielded, docs, _ = make("bm25f")
    fielded.add(docs)
    with pytest.warns(DeprecationWarning, match="get_scores is deprecated"):
        np.testing.assert_array_equal(fielded.get_scores(queries[0]), fielded.score(queries[0]))
    ex = index.explain(queries[0], 0)
    with pytest.warns(DeprecationWarning, match="old dict result"):
        assert dict(ex)["score"] == ex.score and ex["doc_len"] == ex.detail["doc_len"]

    sparse, vectors, squeries = make("splade")
    sparse.add(vectors)
    with pytest.warns(DeprecationWarning, match="n_threads= is deprecated"):
        old = sparse.search_batch(squeries, 3, n_threads=1)
    for got, want in zip(old, sparse.search_batch(squeries, 3, threads=1)):
        same_pair(got, want)
    with pytest.warns(DeprecationWarning, match="n_threads= is deprecated"):
        sparse.search_batch_padded(squeries, 3, n_threads=1)
    with pytest.warns(DeprecationWarning, match="old list result"):
        terms = [m.term_id for m in sparse.explain(squeries[0], 0)]
    assert terms == [c.detail["term_id"] for c in sparse.explain(squeries[0], 0).contributions]

    late, docs, lqueries = make("late")
    late.add(docs)
    with pytest.warns(DeprecationWarning, match="n_threads= is deprecated"):
        np.testing.assert_array_equal(
            late.score(lqueries[0], n_threads=1), late.score(lqueries[0], threads=1)
        )
    with pytest.warns(DeprecationWarning, match="n_probe= is deprecated"):
        old = late.search_batch(lqueries, 3, n_probe=2)
    for got, want in zip(old, late.search_batch(lqueries, 3, nprobe=2)):
        same_pair(got, want)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_prob'"):
        late.search(lqueries[0], 3, n_prob=2)


CALLS = ("add", "search", "search_batch", "explain", "delete", "save", "load", "__len__")


def _shape(fn) -> list:
    """(name, kind) of each parameter the caller passes (self / cls left out)."""
    return [
        (p.name, p.kind) for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")
    ]


def test_every_kind_has_the_protocol_signatures(kind):
    """The names and kinds (positional-or-keyword, keyword-only) of every call match the
    Index protocol; a kind's own options come after them, keyword-only, never a catch-all."""
    index, _, _ = make(kind)
    findings = []
    for name in CALLS:
        want = _shape(getattr(Index, name))
        got = _shape(getattr(type(index), name))
        if got[: len(want)] != want:
            findings.append(f"{name}: {got} != {want}")
        for extra, pkind in got[len(want) :]:
            if pkind is not inspect.Parameter.KEYWORD_ONLY:
                findings.append(f"{name}: extra parameter {extra} is {pkind.description}, not keyword-only")
    assert isinstance(inspect.getattr_static(type(index), "load"), classmethod)
    assert not findings, "\n".join(findings)


def test_old_names_warn_and_give_the_same_results():
    dense, X, dqueries = make("dense-exact")
    dense.add(X)
    with pytest.warns(DeprecationWarning, match=r"DenseIndex.search: q= is deprecated.*use query="):
        same_pair(dense.search(q=dqueries[0], k=3), dense.search(dqueries[0], 3))
    Q = np.stack(dqueries)
    with pytest.warns(DeprecationWarning, match=r"search_batch: Q= is deprecated.*use queries="):
        old = dense.search_batch(Q=Q, k=3)
    for got, want in zip(old, dense.search_batch(Q, 3)):
        same_pair(got, want)
    with pytest.warns(DeprecationWarning, match=r"search_batch_padded: Q= is deprecated"):
        old = dense.search_batch_padded(Q=Q, k=3)
    np.testing.assert_array_equal(old[1], dense.search_batch_padded(Q, 3)[1])
    with pytest.raises(TypeError, match="got both query= and its old name q="):
        dense.search(dqueries[0], 3, q=dqueries[0])

    late, docs, lqueries = make("late")
    late.add(docs)
    with pytest.warns(DeprecationWarning, match=r"query_vectors= is deprecated.*use query="):
        same_pair(late.search(query_vectors=lqueries[0], k=3), late.search(lqueries[0], 3))
    with pytest.warns(DeprecationWarning, match=r"query_vectors= is deprecated.*use query="):
        np.testing.assert_array_equal(late.score(query_vectors=lqueries[0]), late.score(lqueries[0]))

    for kind in ("bm25", "bm25f", "splade", "late"):
        index, items, queries = make(kind)
        index.add(items)
        with pytest.warns(DeprecationWarning, match=r"explain: doc_id= is deprecated.*use id="):
            old = index.explain(queries[0], doc_id=1)
        assert old.score == index.explain(queries[0], 1).score and old.id == 1


@pytest.mark.parametrize("kind", ["bm25", "bm25f", "dense-exact"])
def test_mmap_by_position_warns_and_loads_the_same(kind, tmp_path):
    index, items, queries = make(kind)
    index.add(items)
    path = tmp_path / "index.bin"
    index.save(path)
    with pytest.warns(DeprecationWarning, match=r"load: mmap by position is deprecated.*use mmap="):
        old = type(index).load(path, False)
    same_pair(old.search(queries[0], 5), type(index).load(path, mmap=False).search(queries[0], 5))
    same_pair(old.search(queries[0], 5), index.search(queries[0], 5))


def test_splade_search_batch_takes_the_one_row_embeddings_search_takes():
    index, vectors, queries = make("splade")
    index.add(vectors)
    rows = [
        SparseEmbeddings(
            vectors.indptr[[r, r + 1]] - vectors.indptr[r],
            *map(lambda a: a[vectors.indptr[r] : vectors.indptr[r + 1]], (vectors.indices, vectors.values)),
            vectors.dim,
        )
        for r in (0, 3, 7)
    ]
    got = index.search_batch(rows, 4)
    assert len(got) == 3
    for row, pair in zip(rows, got):
        same_pair(pair, index.search(row, 4))
    with pytest.raises(ValueError, match="must be one row"):
        index.search_batch(
            [SparseEmbeddings(vectors.indptr[:3], vectors.indices, vectors.values, vectors.dim)], 4
        )
