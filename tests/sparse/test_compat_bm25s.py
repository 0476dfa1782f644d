"""ragfind.compat.bm25s against the real bm25s: tokens, scores, retrieve results, persistence."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ragfind.compat.bm25s as rbm25s

bm25s = pytest.importorskip("bm25s")
Stemmer = pytest.importorskip("Stemmer")

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]
TEXTS = [
    "Cats purr and hunt mice.",
    "Dogs bark at cats.",
    "Mice fear cats that hunt mice.",
    "",
    "the the and",
    "A cat, a dog and a mouse walk into a bar.",
]


def load_beir(data_dir, name):
    with open(data_dir / name / "corpus.jsonl", encoding="utf-8") as f:
        texts = [(d["title"] + " " + d["text"]) for d in map(json.loads, f)]
    with open(data_dir / name / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f]
    return texts, queries


def assert_same_results(ours, ref, rtol=1e-6):
    """Same shapes and dtypes, scores within ``rtol``, and the same documents in the same order,
    except inside groups of (nearly, within ``rtol``) equal scores, whose order bm25s leaves to
    its backend and float rounding: there the same set (a group cut by ``k`` is not compared)."""
    assert type(ours).__name__ == "Results" and ours._fields == ref._fields
    assert ours.documents.shape == ref.documents.shape and ours.scores.shape == ref.scores.shape
    assert ours.documents.dtype == ref.documents.dtype and ours.scores.dtype == ref.scores.dtype
    np.testing.assert_allclose(ours.scores, ref.scores, rtol=rtol, atol=1e-6)
    for q, (d1, s1, d2) in enumerate(zip(ours.documents, ours.scores.astype(np.float64), ref.documents)):
        gap = np.abs(np.diff(s1)) > rtol * np.abs(s1[1:]) + 1e-6
        starts = np.r_[0, np.flatnonzero(gap) + 1]
        ends = np.r_[starts[1:], len(s1)]
        for a, b in zip(starts, ends):
            if b == len(s1):
                break
            assert set(d1[a:b].tolist()) == set(d2[a:b].tolist()), f"query {q}, ranks {a}-{b}"


@pytest.fixture(scope="module")
def stemmer():
    return Stemmer.Stemmer("english")


@pytest.mark.parametrize("kw", [{}, {"stopwords": None}, {"lower": False}, {"allow_empty": False}])
def test_tokenize_matches_bm25s(stemmer, kw):
    for stem in (None, stemmer):
        for ids in (True, False):
            ours = rbm25s.tokenize(TEXTS, stemmer=stem, return_ids=ids, show_progress=False, **kw)
            ref = bm25s.tokenize(TEXTS, stemmer=stem, return_ids=ids, show_progress=False, **kw)
            if ids:
                assert isinstance(ours, rbm25s.Tokenized)
                assert ours.ids == ref.ids and ours.vocab == ref.vocab
            else:
                assert ours == ref


def test_tokenizer_class_matches_bm25s(stemmer, tmp_path):
    for stem in (None, stemmer):
        ours = rbm25s.tokenization.Tokenizer(stemmer=stem)
        ref = bm25s.tokenization.Tokenizer(stemmer=stem)
        for return_as in ("ids", "string", "tuple"):
            assert ours.tokenize(TEXTS, return_as=return_as, show_progress=False) == ref.tokenize(
                TEXTS, return_as=return_as, show_progress=False
            )
        more = ["Hunting dogs and new words", ""]
        for update in (False, "never", True):
            assert ours.tokenize(more, update_vocab=update, show_progress=False) == ref.tokenize(
                more, update_vocab=update, show_progress=False
            )
        assert ours.get_vocab_dict() == ref.get_vocab_dict()
        ours.save_vocab(tmp_path)
        again = rbm25s.tokenization.Tokenizer(stemmer=stem)
        again.load_vocab(tmp_path)
        assert again.get_vocab_dict() == ours.get_vocab_dict()
    with pytest.raises(NotImplementedError, match="list of words"):
        rbm25s.tokenize(TEXTS, stopwords="german")


@pytest.mark.parametrize("method", METHODS)
def test_small_corpus_every_input_form(stemmer, method):
    ref_q = ["cats hunting", "zebra", "mice mice", ""]
    for form in ("tokenized", "strings", "tuple"):
        ids = form != "strings"
        corpus = rbm25s.tokenize(TEXTS, stemmer=stemmer, return_ids=ids, show_progress=False)
        q = rbm25s.tokenize(ref_q, stemmer=stemmer, return_ids=ids, show_progress=False)
        if form == "tuple":
            corpus, q = tuple(corpus), tuple(q)
        ours = rbm25s.BM25(method=method, k1=1.2, b=0.75, delta=0.7)
        ours.index(corpus, show_progress=False)
        ref = bm25s.BM25(method=method, k1=1.2, b=0.75, delta=0.7)
        ref.index(corpus, show_progress=False)
        assert ours.vocab_dict == ref.vocab_dict
        for k in (1, 3, len(TEXTS)):
            assert_same_results(
                ours.retrieve(q, k=k, show_progress=False), ref.retrieve(q, k=k, show_progress=False)
            )
        if form == "strings":
            np.testing.assert_allclose(ours.get_scores(q[0]), ref.get_scores(q[0]), rtol=1e-6)
            assert ours.get_scores(q[0]).dtype == np.float32


@pytest.mark.parametrize("name", ["scifact", "cranfield"])
@pytest.mark.parametrize("method", METHODS)
def test_beir_parity_with_bm25s(data_dir, stemmer, name, method):
    texts, queries = load_beir(data_dir, name)
    corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    query_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    delta = 0.5 if method == "bm25l" else 1.0
    ref = bm25s.BM25(method=method, k1=1.2, b=0.75, delta=delta)
    ref.index(corpus_tokens, show_progress=False)
    ours = rbm25s.BM25(method=method, k1=1.2, b=0.75, delta=delta)
    ours.index(corpus_tokens, show_progress=False)
    assert_same_results(
        ours.retrieve(query_tokens, k=100, show_progress=False),
        ref.retrieve(query_tokens, k=100, show_progress=False),
    )
    strings = bm25s.tokenization.convert_tokenized_to_string_list(query_tokens)
    for q in strings[::15]:
        if q:
            expected = ref.get_scores(q)
            got = ours.get_scores(q)
            assert got.dtype == expected.dtype
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_corpus_documents_mask_and_numba_dtype(stemmer):
    corpus = rbm25s.tokenize(TEXTS, stemmer=stemmer, show_progress=False)
    q = rbm25s.tokenize(["cats mice"], stemmer=stemmer, show_progress=False)
    mask = np.array([1, 1, 0, 1, 1, 1], dtype=np.float32)
    ours = rbm25s.BM25(corpus=TEXTS)
    ours.index(corpus, show_progress=False)
    ref = bm25s.BM25(corpus=TEXTS)
    ref.index(corpus, show_progress=False)
    docs = ours.retrieve(q, k=2, return_as="documents", show_progress=False)
    assert docs.tolist() == ref.retrieve(q, k=2, return_as="documents", show_progress=False).tolist()
    got = ours.retrieve(q, k=2, weight_mask=mask, show_progress=False)
    assert 2 not in ours.retrieve(q, k=2, weight_mask=mask, corpus=np.arange(6), show_progress=False)[0]
    assert (
        got.documents.tolist()
        == ref.retrieve(q, k=2, weight_mask=mask, show_progress=False).documents.tolist()
    )
    fast = rbm25s.BM25(backend="numba")
    fast.index(corpus, show_progress=False)
    assert fast.retrieve(q, k=2, show_progress=False).documents.dtype == np.int32
    with pytest.raises(ValueError, match="larger than the number"):
        ours.retrieve(q, k=7, show_progress=False)
    with pytest.raises(ValueError, match="return_as"):
        ours.retrieve(q, k=1, return_as="list")


def test_save_load_round_trip(tmp_path, stemmer):
    corpus = rbm25s.tokenize(TEXTS, stemmer=stemmer, show_progress=False)
    q = rbm25s.tokenize(["cats mice", "bark"], stemmer=stemmer, show_progress=False)
    ours = rbm25s.BM25(method="bm25+", k1=1.3)
    ours.index(corpus, show_progress=False)
    ours.save(tmp_path / "ix", corpus=TEXTS)
    back = rbm25s.BM25.load(tmp_path / "ix", load_corpus=True)
    assert back.method == "bm25+" and back.k1 == 1.3 and back.vocab_dict == ours.vocab_dict
    a = ours.retrieve(q, k=3, show_progress=False)
    b = rbm25s.BM25.load(tmp_path / "ix", mmap=True).retrieve(q, k=3, show_progress=False)
    assert a.documents.tolist() == b.documents.tolist() and np.array_equal(a.scores, b.scores)
    assert back.corpus[0] == {"id": 0, "text": TEXTS[0]}
    assert back.retrieve(q, k=1, show_progress=False).documents[0, 0] == back.corpus[a.documents[0, 0]]
    ref = bm25s.BM25()
    ref.index(corpus, show_progress=False)
    ref.save(tmp_path / "theirs")
    with pytest.raises(NotImplementedError, match="index the corpus again"):
        rbm25s.BM25.load(tmp_path / "theirs")


def test_what_cannot_be_matched_says_so(stemmer):
    r = rbm25s.BM25()
    r.index(rbm25s.tokenize(TEXTS, stemmer=stemmer, show_progress=False), show_progress=False)
    assert r.scores["num_docs"] == len(TEXTS)
    with pytest.raises(NotImplementedError, match="get_scores"):
        r.scores["data"]
    with pytest.raises(NotImplementedError, match="needs no compilation"):
        r.activate_numba_scorer()
    with pytest.raises(NotImplementedError, match="huggingface_hub"):
        rbm25s.hf  # noqa: B018
    with pytest.raises(NotImplementedError, match="idf"):
        rbm25s.BM25(method="lucene", idf_method="robertson")
    with pytest.raises(ValueError, match="no index yet"):
        rbm25s.BM25().retrieve([["a"]])
