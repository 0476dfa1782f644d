"""The analyzer's all-caps rule (caps_text_symbols) and accent folding (fold_accents), each
against a plain Python reference, and how indexes saved before them load."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragfind import Analyzer, BM25Index

GREEK_SMALL = {chr(c) for c in range(0x3B1, 0x3CA)} | {"\u03d1", "\u03d5", "\u03f5"}


def lower(t: str) -> str:
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in t)


def is_capital(c: str) -> bool:
    return len(c.lower()) == 1 and c.lower() != c


LOWER_OF_CAPITALS = {chr(c).lower() for c in range(0x110000) if is_capital(chr(c))}


def caps_rule_tokens(text: str) -> list[str]:
    """symbol_letters with caps_text_symbols=False: a one-letter capital is kept only when the
    text holds a lower-case letter."""
    text_lower = any(c in LOWER_OF_CAPITALS for c in text)
    out = []
    for m in re.finditer(r"(?u)\w+", text):
        t = m.group()
        if len(t) == 1:
            after_apostrophe = m.start() > 0 and text[m.start() - 1] in "'\u2019"
            symbol = (is_capital(t) and text_lower) or t in GREEK_SMALL
            if after_apostrophe or not symbol:
                continue
        out.append(lower(t))
    return out


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_caps_rule_equals_the_reference(text):
    a = Analyzer(stopwords=None, stemmer=None, split_identifiers=False, fold_accents=False)
    assert a.analyze(text) == caps_rule_tokens(text)


@given(st.text(alphabet="ABCDEFGHIJ Tx ", max_size=30))
def test_caps_rule_on_ascii(text):
    a = Analyzer(stopwords=None, stemmer=None, split_identifiers=False)
    assert a.analyze(text) == caps_rule_tokens(text)


@pytest.mark.parametrize(
    "text, default, kept",
    [
        (
            "I AM INTERESTED IN VITAMIN D",
            ["am", "interest", "vitamin"],
            ["i", "am", "interest", "vitamin", "d"],
        ),
        ("T cells and vitamin D", ["t", "cell", "vitamin", "d"], ["t", "cell", "vitamin", "d"]),
        ("VITAMIN D (see vitamin)", ["vitamin", "d", "see", "vitamin"], ["vitamin", "d", "see", "vitamin"]),
        ("TNF-α IN T CELLS", ["tnf", "α", "t", "cell"], ["tnf", "α", "t", "cell"]),  # α is lower case
        ("ÉTUDE DE L'EAU À Z", ["etud", "de", "eau"], ["etud", "de", "l", "eau", "a", "z"]),
    ],
)
def test_all_caps_text_has_no_symbol_capitals(text, default, kept):
    assert Analyzer().analyze(text) == default
    assert Analyzer(caps_text_symbols=True).analyze(text) == kept


def fold(text: str) -> str:
    """Reference folding: NFD with U+0300..U+036F dropped, for the Latin blocks only."""
    out = []
    for c in text:
        if 0xC0 <= ord(c) <= 0x24F or 0x1E00 <= ord(c) <= 0x1EFF:
            d = unicodedata.normalize("NFD", c)
            base = "".join(x for x in d if unicodedata.category(x) != "Mn")
            out.append(base if len(base) == 1 else c)
        elif not 0x300 <= ord(c) <= 0x36F:
            out.append(c)
    return "".join(out)


LATIN = st.characters(min_codepoint=0x20, max_codepoint=0x24F, blacklist_categories=("Cs", "Cc"))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=LATIN, max_size=40))
def test_folded_terms_are_the_plain_terms_of_the_folded_text(text):
    # Precomposed Latin text: folding each term equals analyzing the folded text (no stemmer).
    a = Analyzer(stopwords=None, stemmer=None, split_identifiers=False, symbol_letters=False)
    plain = Analyzer(
        stopwords=None, stemmer=None, split_identifiers=False, symbol_letters=False, fold_accents=False
    )
    assert a.analyze(text) == [fold(t) for t in plain.analyze(text)]


@pytest.mark.parametrize(
    "doc, query",
    [
        ("un café noir", "cafe"),
        ("a naïve approach", "naive"),
        ("my résumé", "resume"),
        ("Crème brûlée", "CREME BRULEE"),
        ("Zoë and Chloë", "zoe"),
        ("cafe\u0301 au lait", "café"),  # decomposed accent: one word
        ("São Paulo, Łódź", "sao lodz"),
    ],
)
def test_plain_spelling_finds_accented_words(doc, query):
    index = BM25Index()
    index.add([doc, "something else entirely"])
    ids, _ = index.search(query, k=2)
    assert list(ids) == [0]


def test_without_folding_the_plain_spelling_misses():
    off = BM25Index(analyzer=Analyzer(fold_accents=False))
    off.add(["un café noir", "something else"])
    assert len(off.search("cafe", k=2)[0]) == 0


def test_decomposed_accent_stays_in_the_word_with_offsets():
    a = Analyzer(stemmer=None)
    assert a.analyze_with_offsets("un cafe\u0301 noir") == [("un", 0, 2), ("cafe", 3, 8), ("noir", 9, 13)]
    assert Analyzer(stemmer=None, fold_accents=False).analyze("un cafe\u0301 noir") == ["un", "cafe", "noir"]


def test_other_scripts_are_not_folded():
    a = Analyzer(stemmer=None)
    assert a.analyze("Ελληνικά ёлка が") == ["ελληνικά", "ёлка"]  # が is one character: dropped
    assert a.analyze("ひらがな") == ["ひらがな"]


@pytest.mark.parametrize("missing", ["caps_text_symbols", "fold_accents"])
def test_config_saved_before_the_options_loads_as_it_was_built(missing):
    config = Analyzer().config()
    del config[missing]
    a = Analyzer.from_config(config)
    assert a.config()[missing] is (missing == "caps_text_symbols")
    assert Analyzer.from_config(Analyzer().config()).config() == Analyzer().config()


def test_saved_index_keeps_its_analysis(tmp_path):
    index = BM25Index()
    index.add(["un café noir", "I AM HERE"])
    index.save(tmp_path / "i.bm25")
    loaded = BM25Index.load(tmp_path / "i.bm25")
    assert loaded.analyzer.config() == index.analyzer.config()
    assert list(loaded.search("cafe", k=1)[0]) == [0]
