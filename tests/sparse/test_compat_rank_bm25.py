"""ragfind.compat.rank_bm25 gives rank_bm25's own scores (epsilon floor and quirks included)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragfind.compat import rank_bm25 as ours

rank_bm25 = pytest.importorskip("rank_bm25")

CLASSES = ["BM25Okapi", "BM25L", "BM25Plus"]

TOY = [
    "hello there good man".split(),
    "it is quite windy in london".split(),
    "how is the weather today".split(),
    "the the the weather weather".split(),
    [],
    "the man in london".split(),
]
TOY_QUERIES = [["the", "weather"], ["windy", "london"], ["the"], ["unknown"], [], ["the", "the", "man"]]


def assert_scores_match(ref, got, rtol=1e-6):
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=0)


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("params", [{}, {"k1": 1.2, "b": 0.3}, {"k1": 0.5, "b": 0.0}])
def test_toy_corpus_scores_and_attributes(name, params):
    if name == "BM25Okapi" and params:
        params = {**params, "epsilon": 0.5}
    if name != "BM25Okapi" and params:
        params = {**params, "delta": 0.7}
    ref = getattr(rank_bm25, name)(TOY, **params)
    got = getattr(ours, name)(TOY, **params)
    assert got.corpus_size == ref.corpus_size and got.avgdl == ref.avgdl and got.doc_len == ref.doc_len
    assert got.idf.keys() == ref.idf.keys()
    for word, value in ref.idf.items():
        assert got.idf[word] == pytest.approx(value, rel=1e-12)
    if name == "BM25Okapi":
        assert got.average_idf == pytest.approx(ref.average_idf, rel=1e-12)
        assert any(v < 0 for v in ref.idf.values()) is False  # "the" was floored in both
    for q in TOY_QUERIES:
        assert_scores_match(ref.get_scores(q), got.get_scores(q))
        assert got.get_batch_scores(q, [0, 3, 5]) == pytest.approx(
            ref.get_batch_scores(q, [0, 3, 5]), rel=1e-6
        )
    docs = [" ".join(d) for d in TOY]
    assert got.get_top_n(["windy", "london"], docs, n=2) == ref.get_top_n(["windy", "london"], docs, n=2)


def test_epsilon_floor_applies_to_common_words():
    corpus = [["common", f"rare{i}"] for i in range(10)] + [["other"]]
    ref = rank_bm25.BM25Okapi(corpus)
    got = ours.BM25Okapi(corpus)
    assert ref.idf["common"] == pytest.approx(0.25 * ref.average_idf)
    assert got.idf["common"] == pytest.approx(ref.idf["common"], rel=1e-12)
    assert_scores_match(ref.get_scores(["common", "rare3"]), got.get_scores(["common", "rare3"]))


@pytest.mark.parametrize("name", CLASSES)
def test_scifact_parity(data_dir, name):
    bm25s = pytest.importorskip("bm25s")
    import Stemmer

    with open(data_dir / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        texts = [(lambda d: d["title"] + " " + d["text"])(json.loads(line)) for line in f][:800]
    with open(data_dir / "scifact" / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f][:20]
    stemmer = Stemmer.Stemmer("english")
    docs = bm25s.tokenize(texts, stopwords=None, stemmer=stemmer, return_ids=False, show_progress=False)
    qs = bm25s.tokenize(queries, stopwords=None, stemmer=stemmer, return_ids=False, show_progress=False)
    ref = getattr(rank_bm25, name)(docs)
    got = getattr(ours, name)(docs)
    for q in qs:
        assert_scores_match(ref.get_scores(q), got.get_scores(q))
    assert got.get_top_n(qs[0], texts, n=5) == ref.get_top_n(qs[0], texts, n=5)


def test_tokenizer_argument():
    texts = ["Hello there good man", "It is quite windy in London", "How is the weather today"]
    # (rank_bm25 tokenizes through a multiprocessing pool it never closes: feed it tokens.)
    ref = rank_bm25.BM25Okapi([t.split() for t in texts])
    got = ours.BM25Okapi(texts, tokenizer=str.split)
    assert_scores_match(ref.get_scores(["windy", "London"]), got.get_scores(["windy", "London"]))


def test_bad_input():
    with pytest.raises(ValueError, match="empty"):
        ours.BM25Okapi([])
    bm = ours.BM25Okapi(TOY)
    with pytest.raises(TypeError, match="list of tokens"):
        bm.get_scores("the weather")
    with pytest.raises(ValueError, match="documents"):
        bm.get_top_n(["the"], ["only one"], n=1)
    with pytest.raises(ValueError, match="out of range"):
        bm.get_batch_scores(["the"], [0, 99])
    with pytest.raises(TypeError, match="str"):
        ours.BM25Okapi([["a", 1]])
