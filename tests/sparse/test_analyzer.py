"""The C++ analyzer: tokenization, identifiers, Unicode, invalid input, stopwords, stemming."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragfind import Analyzer, BM25Index, _core
from ragfind.sparse.bm25 import ENGLISH_STOPWORDS

WORD_RE = re.compile(r"(?u)\b\w\w+\b")


def plain() -> Analyzer:
    return Analyzer(
        stopwords=None, stemmer=None, split_identifiers=False, symbol_letters=False, fold_accents=False
    )


def simple_lower(token: str) -> str:
    # The analyzer uses the 1:1 lower-case mapping (first code point of str.lower()), with a
    # word-final capital sigma becoming the final form.
    low = "".join(c.lower()[0] for c in token)
    return low[:-1] + "ς" if len(token) > 1 and token[-1] == "Σ" else low


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_base_tokens_equal_the_bm25s_regex(text):
    assert plain().analyze(text) == [simple_lower(t) for t in WORD_RE.findall(text)]


GREEK_SMALL = {chr(c) for c in range(0x3B1, 0x3CA)} | {"\u03d1", "\u03d5", "\u03f5"}


def symbol_tokens(text: str) -> list[str]:
    """Reference for symbol_letters: runs of 2+ word characters, plus one-letter runs that are a
    capital or a Greek letter and do not follow an apostrophe."""
    out = []
    for m in re.finditer(r"(?u)\w+", text):
        t = m.group()
        if len(t) == 1:
            after_apostrophe = m.start() > 0 and text[m.start() - 1] in "'\u2019"
            if after_apostrophe or not (simple_lower(t) != t or t in GREEK_SMALL):
                continue
        out.append(simple_lower(t))
    return out


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_symbol_letters_equal_the_reference(text):
    a = Analyzer(
        stopwords=None,
        stemmer=None,
        split_identifiers=False,
        symbol_letters=True,
        caps_text_symbols=True,
        fold_accents=False,
    )
    assert a.analyze(text) == symbol_tokens(text)


@pytest.mark.parametrize(
    "text, terms",
    [
        ("T cells and vitamin D", ["t", "cells", "vitamin", "d"]),
        ("TNF-α, IFN-γ and Δ", ["tnf", "α", "ifn", "γ", "δ"]),
        ("hepatitis B, type A", ["hepatitis", "b", "type"]),  # "a" is a stopword
        ("DON'T mind patient's data", ["don", "mind", "patient", "data"]),
        ("DON\u2019T", ["don"]),
        ("a b c 1 2 _ e.g.", []),
    ],
)
def test_symbol_letters_keep_capitals_and_greek(text, terms):
    a = Analyzer(stemmer=None, split_identifiers=False)
    assert a.analyze(text) == terms
    assert Analyzer(stemmer=None, split_identifiers=False, symbol_letters=False).analyze(text) == [
        t for t in terms if len(t) > 1
    ]


def test_symbol_letters_count_towards_the_length_and_have_offsets():
    a = Analyzer(stemmer=None)
    assert a.analyze_with_offsets("the T cell") == [("t", 4, 5), ("cell", 6, 10)]
    index = BM25Index(analyzer=a)
    index.add(["T cell", "cell"])
    assert [index.explain("cell", d).detail["doc_len"] for d in (0, 1)] == [2, 1]


def test_ascii_examples_and_stopwords():
    a = Analyzer(stemmer=None, split_identifiers=False)
    assert a.analyze("The quick brown fox, and a dog!") == ["quick", "brown", "fox", "dog"]
    assert plain().analyze("The quick brown fox, and a dog!") == [
        "the",
        "quick",
        "brown",
        "fox",
        "and",
        "dog",
    ]
    assert Analyzer(stopwords=["quick", "FOX"], stemmer=None).analyze("the quick fox") == ["the"]
    assert set(ENGLISH_STOPWORDS) == {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
        "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this",
        "to", "was", "will", "with",
    }  # fmt: skip


@pytest.mark.parametrize(
    "identifier, whole, parts",
    [
        ("XJ-2000", "xj-2000", ["xj", "2000"]),
        ("E_ACCESS_DENIED", "e_access_denied", ["access", "denied"]),
        ("getUserById", "getuserbyid", ["get", "user", "by", "id"]),
        ("v2.3.1", "v2.3.1", ["v2"]),
        ("HTTPServerError", "httpservererror", ["http", "server", "error"]),
        ("src/v2/file_name.py", "src/v2/file_name.py", ["src", "v2", "file_name", "file", "name", "py"]),
        ("boundary-layer", None, ["boundary", "layer"]),  # word compounds: parts only
    ],
)
def test_identifier_tokens(identifier, whole, parts):
    tokens = plain().analyze(f"see {identifier} now")
    tokens_split = Analyzer(stopwords=None, stemmer=None).analyze(f"see {identifier} now")
    if whole is not None:
        assert whole in tokens_split
    else:
        assert not [t for t in tokens_split if "-" in t]
    for p in parts:
        assert p in tokens_split
    assert tokens == [t for t in tokens_split if t in tokens]  # base tokens unchanged by splitting


@pytest.mark.parametrize(
    "query, expected",
    [
        ("XJ-2000", "xj"), ("2000", "xj"), ("xj-2000", "xj"),
        ("E_ACCESS_DENIED", "err"), ("access", "err"), ("denied", "err"),
        ("getUserById", "api"), ("user", "api"), ("UserById", "api"),
        ("v2.3.1", "ver"), ("v2", "ver"),
    ],
)  # fmt: skip
def test_identifiers_are_findable(query, expected):
    idx = BM25Index()
    idx.add(
        [
            "The XJ-2000 pump ships in May.",
            "Request failed with E_ACCESS_DENIED after login.",
            "Call getUserById(42) to fetch the record.",
            "Upgrade to v2.3.1 for the fix.",
            "An unrelated document about pumps, users and versions 2 and 3.",
        ],
        ids=["xj", "err", "api", "ver", "other"],
    )
    ids, _ = idx.search(query, k=5)
    assert ids[0] == expected


def test_whole_identifier_ranks_above_partial_matches():
    idx = BM25Index()
    idx.add(["model XJ 2000 and XJ 3000", "model XJ-2000 manual"], ids=[0, 1])
    ids, _ = idx.search("XJ-2000", k=2)
    assert list(ids) == [1, 0]


def test_overlapping_tokens_do_not_count_towards_length():
    idx = BM25Index(analyzer=Analyzer(stopwords=None, stemmer=None))
    idx.add(["getUserById XJ-2000", "alpha beta gamma"])
    ex = idx.explain("alpha", 0)
    assert ex.detail["doc_len"] == 3  # getuserbyid, xj, 2000


def test_unicode_lowercasing():
    a = plain()
    assert a.analyze("ÉCOLE Straße ΑΘΗΝΑ МОСКВА Ünïcode") == ["école", "straße", "αθηνα", "москва", "ünïcode"]
    assert a.analyze("日本語のテキスト") == ["日本語のテキスト"]
    assert a.analyze("ΟΔΥΣΣΕΥΣ ΣΟΦΟΣ") == ["οδυσσευς", "σοφος"] == "ΟΔΥΣΣΕΥΣ ΣΟΦΟΣ".lower().split()


def test_invalid_utf8_bytes_and_lone_surrogates_never_crash():
    a = Analyzer(stemmer=None, fold_accents=False)
    assert a.analyze(b"good \xff\xfe bad\xc3 \xe2\x82 end") == ["good", "bad", "end"]
    assert a.analyze(b"caf\xc3\xa9 ok") == ["café", "ok"]
    assert a.analyze("lone \udc80 surrogate\ud800x") == ["lone", "surrogate"]
    idx = BM25Index()
    idx.add(["\ufffd", "bad \udcff text", "valid words here"])
    assert list(idx.search("words", k=3)[0]) == [2]
    assert list(idx.search("\udc80 text", k=3)[0]) == [1]
    # BM25Index takes str only (the Analyzer itself accepts bytes): bytes are a clear error.
    with pytest.raises(TypeError, match=r"texts\[0\]: expected str, got bytes"):
        idx.add([b"valid words"])
    with pytest.raises(TypeError, match="query"):
        idx.search(b"text", k=3)
    with pytest.raises(TypeError, match=r"queries\[0\]"):
        idx.search_batch([b"text"], k=3)
    assert len(idx) == 3


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_are_safe(data):
    tokens = Analyzer().analyze(data)
    assert all(isinstance(t, str) and t for t in tokens)


def test_non_text_is_rejected():
    with pytest.raises(TypeError, match="expected str or bytes"):
        Analyzer().analyze(42)
    with pytest.raises(TypeError, match="tokenizer"):
        Analyzer(tokenizer="not callable")
    with pytest.raises(ValueError, match="stopwords"):
        Analyzer(stopwords="klingon")


def test_stemming_languages_and_off():
    assert Analyzer().analyze("running runs") == ["run", "run"]
    assert Analyzer(stemmer=None).analyze("running runs") == ["running", "runs"]
    assert Analyzer(stemmer="french", stopwords=None).analyze("continuellement") == ["continuel"]
    assert Analyzer(stemmer="russian", stopwords=None).analyze("книгами") == ["книг"]
    with pytest.raises(ValueError, match="Snowball"):
        Analyzer(stemmer="klingon")


def test_stemming_runs_once_per_distinct_word_form():
    calls: list[str] = []

    def stem_words(words):
        calls.extend(words)
        return [w[:4] for w in words]

    analyzer = _core.Analyzer(True, [], stem_words, False, None)
    core = _core.BM25Core("lucene", 1.2, 0.75, 0.0, analyzer)
    core.add(["running runner running RUNNING", "runner runs"] * 50)
    assert sorted(calls) == ["runner", "running", "runs"]
    core.add(["running runs again"])
    assert sorted(calls) == ["again", "runner", "running", "runs"]
    core.search("running again", 5)
    core.search("unseen unseen", 5)
    core.search("unseen", 5)
    assert sorted(calls) == ["again", "runner", "running", "runs", "unseen"]


def test_user_tokenizer_for_cjk():
    def bigrams(text: str) -> list[str]:
        chars = [c for c in text if not c.isspace()]
        return [a + b for a, b in zip(chars, chars[1:])] or chars

    analyzer = Analyzer(tokenizer=bigrams, stemmer=None, stopwords=None)
    assert analyzer.analyze("東京都") == ["東京", "京都"]
    idx = BM25Index(analyzer=analyzer)
    idx.add(["東京都の天気は晴れ", "京都の寺院を訪ねる", "大阪の食べ物"], ids=["tokyo", "kyoto", "osaka"])
    ids, scores = idx.search("京都の寺院", k=3)
    assert ids[0] == "kyoto"
    assert len(ids) == 2 and scores[0] > scores[1]


def test_user_tokenizer_errors_are_clear():
    idx = BM25Index(analyzer=Analyzer(tokenizer=lambda s: s))  # returns a str, not a list
    with pytest.raises(TypeError, match="list of str"):
        idx.add(["abc"])
    idx = BM25Index(analyzer=Analyzer(tokenizer=lambda s: [1, 2]))
    with pytest.raises(TypeError, match="list of str"):
        idx.add(["abc"])
    assert len(idx) == 0


def test_ten_megabyte_document():
    text = ("alpha beta gamma getUserById " * 400_000)[: 10 * 1024 * 1024]
    idx = BM25Index()
    idx.add([text, "beta only"])
    ids, _ = idx.search("gamma", k=5)
    assert list(ids) == [0]
    assert idx.explain("gamma", 0).contributions[0].detail["tf"] >= 349_000
