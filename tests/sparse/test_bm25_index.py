"""BM25Index behaviour: API, ids, incremental add == rebuild, delete, explain, threads, bad input."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ragfind import Analyzer, BM25Index
from ragfind.errors import IdKindError

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]

DOCS = [
    "The quick brown fox jumps over the lazy dog",
    "A quick brown dog outpaces a quick fox",
    "Lazy dogs sleep all day long",
    "Foxes are quick and clever animals",
    "The dog and the fox are friends",
    "Nothing to see here",
    "",
    "quick quick quick quick",
]


def random_corpus(
    rng: np.random.Generator, n_docs: int, vocab: int = 300, max_len: int = 40
) -> list[list[str]]:
    # Zipf-like term distribution so that some terms are common and most are rare.
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    return [[f"t{t}" for t in rng.choice(vocab, size=rng.integers(0, max_len), p=p)] for _ in range(n_docs)]


def assert_same_scores(a: BM25Index, b: BM25Index, queries, rtol=1e-6):
    for q in queries:
        sa, sb = a.score(q), b.score(q)
        np.testing.assert_allclose(sa, sb, rtol=rtol, atol=1e-9)
        ia, va = a.search(q, k=5) if isinstance(q, str) else a.search_tokenized(q, k=5)
        ib, vb = b.search(q, k=5) if isinstance(q, str) else b.search_tokenized(q, k=5)
        np.testing.assert_allclose(va, vb, rtol=1e-5)
        assert list(ia) == list(ib)


def test_search_basics():
    idx = BM25Index()
    idx.add(DOCS)
    assert len(idx) == len(DOCS)
    assert list(idx.ids) == list(range(len(DOCS)))
    ids, scores = idx.search("quick fox", k=3)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    assert len(ids) == 3 and np.all(np.diff(scores) <= 0)
    full = idx.score("quick fox")
    assert full.dtype == np.float64 and full.shape == (len(DOCS),)
    np.testing.assert_allclose(scores, np.sort(full)[::-1][:3], rtol=1e-6)
    assert set(ids) <= set(np.flatnonzero(full > 0))


def test_k_larger_than_matches_and_corpus():
    idx = BM25Index()
    idx.add(DOCS)
    ids, scores = idx.search("lazy", k=1000)
    assert sorted(ids) == [0, 2]
    with pytest.raises(ValueError, match="k"):
        idx.search("lazy", k=0)
    with pytest.raises(ValueError, match="k"):
        idx.search("lazy", k=-3)
    with pytest.raises(TypeError, match="k"):
        idx.search("lazy", k=2.5)


def test_empty_and_stopword_queries_and_empty_index():
    idx = BM25Index()
    ids, scores = idx.search("anything", k=5)
    assert len(ids) == 0 and len(scores) == 0
    assert idx.score("anything").shape == (0,)
    idx.add(DOCS)
    for q in ["", "   ", "the and of a", "zzzzz", "!!! ???"]:
        ids, scores = idx.search(q, k=5)
        assert len(ids) == 0 and len(scores) == 0
    assert np.all(idx.score("the") == 0)
    idx.add([])
    assert len(idx) == len(DOCS)


def test_non_str_items_are_rejected_and_nothing_changes():
    idx = BM25Index()
    idx.add(["first doc"])
    with pytest.raises(TypeError, match=r"texts\[1\]: expected str, got int"):
        idx.add(["ok", 5, "x"])
    with pytest.raises(TypeError, match="texts"):
        idx.add("a single string")
    with pytest.raises(TypeError, match=r"texts\[0\].*NoneType"):
        idx.add([None])
    with pytest.raises(TypeError, match="query"):
        idx.search(["a", "list"], k=3)
    with pytest.raises(TypeError, match=r"token_lists\[0\]\[1\]"):
        idx.add_tokenized([["a", 3]])
    assert len(idx) == 1


def test_ids_int_str_defaults_duplicates():
    idx = BM25Index()
    idx.add(["a b", "b c"])
    idx.add(["c d"], ids=[10])
    idx.add(["d e"])
    assert list(idx.ids) == [0, 1, 10, 11]
    with pytest.raises(ValueError, match=r"\[10\] already in the index"):
        idx.add(["x"], ids=[10])
    with pytest.raises(ValueError, match="repeated"):
        idx.add(["x", "y"], ids=[20, 20])
    with pytest.raises(TypeError, match="int ids"):
        idx.add(["x"], ids=["s"])
    with pytest.raises(ValueError, match="one id per document"):
        idx.add(["x", "y"], ids=[30])
    assert len(idx) == 4
    s = BM25Index()
    s.add(["alpha", "beta"], ids=["doc-a", "doc-b"])
    ids, _ = s.search("beta", k=2)
    assert ids.dtype == object and list(ids) == ["doc-b"]
    with pytest.raises(IdKindError, match="has str ids; pass ids="):
        s.add(["gamma"])
    with pytest.raises(TypeError, match="mixes"):
        BM25Index().add(["a", "b"], ids=["x", 1])
    np_ids = BM25Index()
    np_ids.add(["a", "b"], ids=np.array([7, 9]))
    assert list(np_ids.ids) == [7, 9]


@pytest.mark.parametrize("method", METHODS)
def test_incremental_add_equals_rebuild(method):
    rng = np.random.default_rng(1)
    corpus = random_corpus(rng, 700)
    queries = [list(rng.choice([f"t{t}" for t in range(60)], size=rng.integers(1, 6))) for _ in range(25)]
    fresh = BM25Index(method=method)
    fresh.add_tokenized(corpus)
    inc = BM25Index(method=method)
    pos, most_segments = 0, 0
    for size in [1, 1, 3, 50, 2, 200, 1, 100, 342]:  # searches between adds, many segments
        inc.add_tokenized(corpus[pos : pos + size])
        inc.search_tokenized(["t1", "t2"], k=3)
        most_segments = max(most_segments, inc.stats()["num_segments"])
        pos += size
        prefix = BM25Index(method=method)
        prefix.add_tokenized(corpus[:pos])
        assert_same_scores(inc, prefix, queries[:5])
    assert pos == len(corpus)
    assert most_segments >= 2
    assert_same_scores(inc, fresh, queries)


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_delete_equals_rebuild(method):
    rng = np.random.default_rng(2)
    corpus = random_corpus(rng, 400)
    ids = [f"d{i}" for i in range(len(corpus))]
    idx = BM25Index(method=method)
    idx.add_tokenized(corpus[:250], ids=ids[:250])
    idx.add_tokenized(corpus[250:], ids=ids[250:])
    gone = set(rng.choice(len(corpus), size=120, replace=False).tolist())
    idx.delete([ids[i] for i in sorted(gone)])
    keep = [i for i in range(len(corpus)) if i not in gone]
    fresh = BM25Index(method=method)
    fresh.add_tokenized([corpus[i] for i in keep], ids=[ids[i] for i in keep])
    assert list(idx.ids) == list(fresh.ids)
    queries = [list(rng.choice([f"t{t}" for t in range(80)], size=3)) for _ in range(20)]
    assert_same_scores(idx, fresh, queries)
    # Deleted documents never come back; unknown ids raise and change nothing.
    for q in queries:
        got, _ = idx.search_tokenized(q, k=400)
        assert not ({ids[i] for i in gone} & set(got))
    with pytest.raises(KeyError, match="nothing was deleted"):
        idx.delete(["d0" if 0 not in gone else ids[keep[0]], "missing"])
    assert len(idx) == len(keep)
    idx.delete(list(idx.ids))
    assert len(idx) == 0 and len(idx.search_tokenized(["t1"], k=3)[0]) == 0
    idx.add_tokenized([["t1", "t2"]], ids=["again"])
    assert list(idx.search_tokenized(["t1"], k=3)[0]) == ["again"]


def test_explain_sums_to_score_and_follows_parameters():
    idx = BM25Index()
    idx.add(DOCS)
    ids, scores = idx.search("quick brown fox", k=1)
    ex = idx.explain("quick brown fox", int(ids[0]))
    assert ex.kind == "bm25" and ex.id == int(ids[0])
    assert ex.score == pytest.approx(float(scores[0]), rel=1e-6)
    assert ex.score == pytest.approx(sum(c.value for c in ex.contributions), rel=1e-12)
    assert [c.name for c in ex.contributions] == ["quick", "brown", "fox"]
    t = ex.contributions[0].detail
    n, df, dl, avgdl = ex.detail["num_docs"], t["df"], ex.detail["doc_len"], ex.detail["avgdl"]
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    norm = 1 - 0.75 + 0.75 * dl / avgdl
    assert t["idf"] == pytest.approx(idf) and t["length_norm"] == pytest.approx(norm)
    assert t["tf_component"] == pytest.approx(t["tf"] / (t["tf"] + 1.2 * norm))
    idx.set_params(k1=2.0, b=0.2)
    ex2 = idx.explain("quick brown fox", int(ids[0]))
    assert ex2.detail["k1"] == 2.0 and ex2.detail["b"] == 0.2 and ex2.score != ex.score
    assert ex2.score == pytest.approx(float(idx.score("quick brown fox")[int(ids[0])]), rel=1e-12)
    unknown = idx.explain("quick zebra", 0).contributions[1]
    assert unknown.detail["in_vocabulary"] is False and unknown.value == 0
    with pytest.warns(DeprecationWarning, match="explain\\(\\) returns an Explanation"):
        old = ex2["terms"]  # the dict explain returned before, for one release
    assert [t["contribution"] for t in old] == [c.value for c in ex2.contributions]
    with pytest.raises(KeyError, match="doc_id"):
        idx.explain("quick", 999)


def test_parameter_validation():
    with pytest.raises(ValueError, match="method"):
        BM25Index(method="bm26")
    with pytest.raises(ValueError, match="k1"):
        BM25Index(k1=-1)
    with pytest.raises(ValueError, match="b"):
        BM25Index(b=1.5)
    with pytest.raises(ValueError, match="delta"):
        BM25Index(method="bm25l", delta=float("nan"))
    with pytest.raises(TypeError, match="analyzer"):
        BM25Index(analyzer=object())
    with pytest.raises(ValueError, match="analyzer: unknown name"):
        BM25Index(analyzer="english")  # names: default, cjk, whitespace
    assert BM25Index(method="bm25l").delta == 0.5 and BM25Index(method="bm25+").delta == 1.0


def test_repeated_query_terms_count_per_occurrence():
    idx = BM25Index(analyzer=Analyzer(stemmer=None))
    idx.add(DOCS)
    np.testing.assert_allclose(idx.score("fox fox"), 2 * idx.score("fox"), rtol=1e-12)


def test_search_batch_matches_search_and_threads():
    rng = np.random.default_rng(3)
    idx = BM25Index()
    idx.add([" ".join(d) for d in random_corpus(rng, 2000)])
    queries = [" ".join(rng.choice([f"t{t}" for t in range(100)], size=4)) for _ in range(64)] + ["", "the"]
    single = [idx.search(q, k=7) for q in queries]
    for threads in (0, 1, 3):
        batch = idx.search_batch(queries, k=7, threads=threads)
        assert len(batch) == len(queries)
        for (i1, s1), (i2, s2) in zip(single, batch):
            assert list(i1) == list(i2)
            np.testing.assert_array_equal(s1, s2)
    with pytest.raises(ValueError, match="threads"):
        idx.search_batch(queries, threads=-1)


def test_concurrent_reads_and_writes():
    rng = np.random.default_rng(4)
    corpus = [" ".join(d) for d in random_corpus(rng, 3000)]
    idx = BM25Index()
    idx.add(corpus[:500])
    errors = []

    def reader():
        try:
            for _ in range(30):
                for ids, scores in idx.search_batch(["t1 t2", "t5 t9 t30"], k=5, threads=2):
                    assert len(ids) == len(scores)
                # Readers that hold the GIL while a writer stems new words (which needs the GIL)
                # must not deadlock.
                assert len(idx) >= 500 and len(idx.ids) >= 500
                idx.stats()
                idx.score("t1 fresh")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for start in range(500, 3000, 250):
        fresh_words = [
            f"{d} fresh{start}x{i} word{start}y{i}" for i, d in enumerate(corpus[start : start + 250])
        ]
        corpus[start : start + 250] = fresh_words
        idx.add(fresh_words)  # new surface forms: the stemmer runs while readers are active
    for t in threads:
        t.join()
    assert not errors
    fresh = BM25Index()
    fresh.add(corpus)
    assert_same_scores(idx, fresh, ["t1 t2", "t3", "t7 t8 t40"])


def test_default_ids_after_deletes_and_explicit_ids():
    idx = BM25Index()
    idx.add(["zero", "one", "two", "three"])
    idx.delete([1])
    assert list(idx.ids) == [0, 2, 3]
    assert idx.explain("three", 3).contributions[0].detail["tf"] == 1
    with pytest.raises(KeyError):
        idx.explain("one", 1)
    idx.add(["four"])  # next default id follows the largest
    assert list(idx.ids) == [0, 2, 3, 4]
    idx.delete([0, 4])
    assert list(idx.search("two three", k=5)[0]) == [2, 3] or list(idx.search("two three", k=5)[0]) == [3, 2]
    with pytest.raises(ValueError, match=r"\[2\] already in the index"):
        idx.add(["x"], ids=[2])


def test_many_term_queries_on_a_large_segment_match_exhaustive():
    # Segments past 65,536 documents use MaxScore, whose per-document cost grows with the number
    # of terms; long queries (a pasted document) switch to term-at-a-time and must stay exact.
    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(5000)]
    docs = np.array(vocab)[rng.integers(0, len(vocab), (70_000, 12))].tolist()
    index = BM25Index()
    index.add_tokenized(docs)
    for n_terms in (3, 64, 65, 400):
        query = vocab[:n_terms]
        ids, scores = index.search_tokenized(query, k=20)
        ref_ids, ref_scores = index.search_tokenized(query, k=20, algorithm="exhaustive")
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_allclose(scores, ref_scores, rtol=1e-6)


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
@pytest.mark.parametrize("corpus", ["copies", "distinct"])
def test_exhaustive_top_k_is_the_full_ranking_prefix(method, corpus):
    # The scan skips chunks of 32 documents whose maximum is below the k-th largest chunk
    # maximum. "copies": exact copies of a few documents tie across chunks (the bound is then
    # the k-th score itself); "distinct": the k best usually lie in k different chunks (a bound
    # one place too high drops the k-th). Several segments, so a segment starts with a full
    # queue; filters and deletes clear documents from the accumulator before the bound is taken.
    from ragfind.ids import IdFilter

    rng = np.random.default_rng(11)
    if corpus == "copies":
        templates = [[f"t{t}" for t in rng.integers(0, 40, size=rng.integers(1, 12))] for _ in range(25)]
        docs = [templates[i] for i in rng.integers(0, len(templates), size=5000)]
    else:
        docs = random_corpus(rng, 5000, vocab=2000)
    idx = BM25Index(method=method)
    for start in range(0, len(docs), 1700):
        idx.add_tokenized(docs[start : start + 1700])
    assert idx.stats()["num_segments"] > 1
    queries = [[f"t{t}" for t in rng.integers(0, 40, size=rng.integers(1, 6))] for _ in range(30)]

    def check(allowed=None):
        # Copies score the same bits, so their order is insertion order in both.
        ids = np.asarray(idx.ids)
        f = None if allowed is None else IdFilter(allowed)
        for q in queries:
            full = idx.score(q)
            keep = full > 0
            if allowed is not None:
                keep &= np.isin(ids, allowed)
            order = np.flatnonzero(keep)[np.argsort(-full[keep], kind="stable")]
            for k in (1, 7, 10, 40, 127, 128, 300):
                for algorithm in ("auto", "exhaustive"):
                    got_ids, got_scores = idx.search_tokenized(q, k=k, filter=f, algorithm=algorithm)
                    want = order[:k]
                    assert len(got_ids) == len(want)
                    np.testing.assert_allclose(got_scores, full[want], rtol=1e-6)
                    # Ids may differ only where float32 and float64 sums order a near tie.
                    pos = {d: i for i, d in enumerate(ids)}
                    got = np.array([pos[d] for d in got_ids], dtype=np.int64)
                    differ = got != want
                    np.testing.assert_allclose(full[got[differ]], full[want[differ]], rtol=1e-6)

    check()
    check(allowed=np.arange(0, 5000, 3))
    idx.delete(list(range(1, 5000, 4)))
    check()
    check(allowed=np.arange(0, 5000, 2))
