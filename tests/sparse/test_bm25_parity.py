"""Scores against bm25s on real data, and MaxScore (pruned) top-k against the exhaustive top-k."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ragfind import Analyzer, BM25Index

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


def load_beir(data_dir, name, max_docs=None):
    corpus = []
    with open(data_dir / name / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            corpus.append((d["_id"], d["title"] + " " + d["text"]))
            if max_docs and len(corpus) >= max_docs:
                break
    with open(data_dir / name / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f]
    return corpus, queries


@pytest.fixture(scope="module")
def scifact(data_dir):
    return load_beir(data_dir, "scifact")


@pytest.fixture(scope="module")
def scifact_tokens(scifact):
    bm25s = pytest.importorskip("bm25s")
    stemmer = pytest.importorskip("Stemmer").Stemmer("english")
    corpus, queries = scifact
    texts = [t for _, t in corpus[:2000]]
    docs = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    qs = bm25s.tokenize(queries[::10], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    return texts, docs, [q for q in qs if q]


def test_analyzer_matches_bm25s_tokens(scifact_tokens):
    texts, docs, _ = scifact_tokens
    analyzer = Analyzer(split_identifiers=False, symbol_letters=False, fold_accents=False)
    for text, expected in zip(texts, docs):
        assert analyzer.analyze(text) == expected


@pytest.mark.parametrize("method", METHODS)
def test_scores_match_bm25s(scifact_tokens, method):
    import bm25s

    _, docs, queries = scifact_tokens
    delta = 0.5 if method == "bm25l" else 1.0
    ref = bm25s.BM25(method=method, k1=1.2, b=0.75, delta=delta)
    ref.index(docs, show_progress=False)
    ours = BM25Index(method=method, k1=1.2, b=0.75, delta=delta)
    ours.add_tokenized(docs)
    for q in queries:
        expected = ref.get_scores(q).astype(np.float64)
        got = ours.score(q)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        ids, scores = ours.search_tokenized(q, k=10)
        top = np.sort(expected)[::-1][: len(ids)]
        np.testing.assert_allclose(scores, top, rtol=1e-5, atol=1e-6)


def test_string_search_matches_bm25s_pipeline(scifact_tokens):
    """With identifier splitting off, ragfind's own analysis reproduces bm25s end to end."""
    import bm25s
    import Stemmer

    texts, docs, _ = scifact_tokens
    ref = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    ref.index(docs, show_progress=False)
    ours = BM25Index(analyzer=Analyzer(split_identifiers=False, symbol_letters=False, fold_accents=False))
    ours.add(texts)
    stemmer = Stemmer.Stemmer("english")
    for q in ["protein misfolding in neurodegenerative disease", "Vitamin D deficiency and risk of cancer"]:
        qt = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)[0]
        np.testing.assert_allclose(ours.score(q), ref.get_scores(qt), rtol=1e-5, atol=1e-6)


def assert_valid_top_k(index: BM25Index, query, ids, scores, k):
    """ids/scores are an exact top-k: their true scores, sorted, and nothing better left out."""
    full = index.score(query if isinstance(query, str) else list(query))
    pos = {d: i for i, d in enumerate(index.ids)}
    np.testing.assert_allclose(scores, full[[pos[d] for d in ids]], rtol=1e-5, atol=1e-6)
    assert np.all(np.diff(scores) <= 1e-6 * np.maximum(1, np.abs(scores[:-1])))
    if index.method not in ("bm25l", "bm25+"):
        # Only matching documents (score > 0) are returned; bm25l / bm25+ give every
        # document a shared constant, so there "matching" is not visible in the scores.
        assert len(ids) == min(k, int((full > 0).sum()))
    left_out = np.ones(len(full), dtype=bool)
    left_out[[pos[d] for d in ids]] = False
    if len(ids) == k and left_out.any():
        assert full[left_out].max() <= scores[-1] * (1 + 1e-5) + 1e-6


@pytest.mark.parametrize("method", METHODS)
def test_maxscore_equals_exhaustive_random(method):
    rng = np.random.default_rng(7)
    vocab = 2000
    p = 1.0 / np.arange(1, vocab + 1) ** 1.1
    p /= p.sum()
    docs = [[f"w{t}" for t in rng.choice(vocab, size=rng.integers(1, 80), p=p)] for _ in range(3000)]
    idx = BM25Index(method=method)
    idx.add_tokenized(docs[:1000])
    idx.add_tokenized(docs[1000:1100])  # several segments
    idx.add_tokenized(docs[1100:])
    for _ in range(60):
        q = [f"w{t}" for t in rng.choice(vocab, size=rng.integers(1, 12), p=p)]
        k = int(rng.choice([1, 3, 10, 100, 5000]))
        pruned = idx.search_tokenized(q, k=k, algorithm="maxscore")
        exhaustive = idx.search_tokenized(q, k=k, algorithm="exhaustive")
        auto = idx.search_tokenized(q, k=k)
        assert len(pruned[0]) == len(exhaustive[0]) == len(auto[0])
        np.testing.assert_allclose(pruned[1], exhaustive[1], rtol=1e-5)
        np.testing.assert_allclose(auto[1], exhaustive[1], rtol=1e-5)
        assert_valid_top_k(idx, q, *pruned, k)
        # Identical ids except where scores tie (within float rounding).
        for a, b in zip(pruned[0], exhaustive[0]):
            if a != b:
                sa, sb = idx.score(q)[[a, b]]
                assert sa == pytest.approx(sb, rel=1e-5)


def test_ties_are_broken_by_insertion_order():
    idx = BM25Index(analyzer=Analyzer(stemmer=None))
    idx.add(["same words here"] * 5 + ["other"], ids=[50, 40, 30, 20, 10, 0])
    for algorithm in ("auto", "maxscore", "exhaustive"):
        ids, scores = idx.search("same", k=3, algorithm=algorithm)
        assert list(ids) == [50, 40, 30]
        assert scores[0] == scores[1] == scores[2]


def test_maxscore_equals_exhaustive_on_real_queries(scifact):
    corpus, queries = scifact
    idx = BM25Index()
    idx.add([t for _, t in corpus], ids=[i for i, _ in corpus])
    for q in queries[::12]:
        for k in (10, 100):
            pruned = idx.search(q, k=k, algorithm="maxscore")
            exhaustive = idx.search(q, k=k, algorithm="exhaustive")
            np.testing.assert_allclose(pruned[1], exhaustive[1], rtol=1e-5)
            assert_valid_top_k(idx, q, *pruned, k)
