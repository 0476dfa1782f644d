"""Highlights (offsets of matched query terms and phrases) and snippet(), against offsets
worked out by hand here."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragfind
from ragfind.pipeline.highlights import highlight, snippet
from ragfind.sparse.analyzer import Analyzer, resolve_analyzer

TEXT = "Defibrillators save lives in New York. The new big York. York new! getUserById"


def words(text, spans):
    return [text[b:e] for b, e in spans]


def test_surface_forms_of_analyzed_terms():
    assert words(TEXT, highlight(TEXT, "defibrillator")) == ["Defibrillators"]
    assert words(TEXT, highlight(TEXT, "saving live")) == ["save", "lives"]
    # the stopword "the" matches nothing; an identifier part marks the part only
    assert highlight(TEXT, "the") == []
    assert words(TEXT, highlight(TEXT, "user")) == ["User"]
    assert words(TEXT, highlight(TEXT, "getuserbyid")) == ["getUserById"]
    assert highlight(TEXT, "") == [] and highlight(TEXT, "zebra") == []


def test_offsets_are_exact_and_merged():
    spans = highlight(TEXT, "york new")
    assert spans == sorted(spans)
    assert all(e1 < b2 for (_, e1), (b2, _) in zip(spans, spans[1:]))
    assert spans == [(29, 32), (33, 37), (43, 46), (51, 55), (57, 61), (62, 65)]


def test_phrases_with_slop():
    assert words(TEXT, highlight(TEXT, '"new york"')) == ["New York"]
    assert words(TEXT, highlight(TEXT, '"new york"~1')) == ["New York", "new big York"]
    assert words(TEXT, highlight(TEXT, '"new york"~2')) == ["New York", "new big York", "York new"]
    # a phrase and a plain word
    assert words(TEXT, highlight(TEXT, '"save lives" defibrillator')) == ["Defibrillators", "save lives"]
    # several phrasings: the union
    assert words(TEXT, highlight(TEXT, ["zebra", "user"])) == ["User"]


def test_non_ascii_offsets_are_code_points():
    text = "Ünïcode café — naïve Straße"
    assert words(text, highlight(text, "cafe café strasse straße")) == ["café", "Straße"]
    text = "🎉 emoji before Tokyo"
    assert words(text, highlight(text, "tokyo")) == ["Tokyo"]


def test_cjk_highlights():
    text = "我喜欢北京天安门"
    assert words(text, highlight(text, "北京", Analyzer.named("cjk"))) == ["北京"]
    assert words(text, highlight(text, '"北京天安门"', "cjk")) == ["北京天安门"]


def test_custom_tokenizer_highlights():
    a = Analyzer(tokenizer=lambda s: s.split(), stemmer=None)
    assert words("C++ rocks, c++ too", highlight("C++ rocks, c++ too", "c++", a)) == ["C++", "c++"]


class P:
    def __init__(self, text, highlights):
        self.text, self.highlights = text, highlights


def test_snippet_marks_and_cuts():
    p = P(TEXT, highlight(TEXT, "defibrillator"))
    assert snippet(p, 500) == "**Defibrillators**" + TEXT[len("Defibrillators") :]
    s = snippet(P(TEXT, highlight(TEXT, "user")), 20)
    assert "get**User**ById" in s and s.startswith("…")
    long = "word " * 100 + "needle " + "word " * 100
    s = snippet(P(long, highlight(long, "needle")), 40)
    assert "**needle**" in s and s.startswith("…") and s.endswith("…")
    assert len(s.replace("**", "")) <= 40 + 2 + 10  # width plus the ellipses and a word boundary
    assert snippet(P("no hits here", []), 5, ellipsis="...") == "no hi..."
    assert snippet(P("abc", [(0, 1)]), 10, before="[", after="]") == "[a]bc"
    with pytest.raises(ValueError, match="width"):
        snippet(p, 0)


def test_retriever_passages_carry_highlights():
    r = ragfind.Retriever(encoder=None)
    r.add_documents(
        [
            {"id": "a", "text": "Defibrillators restart hearts. A defibrillator is portable."},
            {"id": "b", "text": "Nothing related here."},
        ]
    )
    res = r.search("defibrillator", k=5)
    p = res[0]
    assert p.doc_id == "a"
    assert words(p.text, p.highlights) == ["Defibrillators", "defibrillator"]
    assert json.loads(json.dumps(p.highlights)) == [list(h) for h in p.highlights]
    assert "**Defibrillators**" in snippet(p, 100)
    # cached results keep them
    assert r.search("defibrillator", k=5)[0].highlights == p.highlights


@pytest.mark.parametrize("name", ["default", "cjk"])
@settings(max_examples=150, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(list("aAbBxyz eE-_.'T0123αβ東京ÄöChatGPT getUserById")),
        max_size=80,
    ),
    pick=st.integers(min_value=0, max_value=2**16),
)
def test_native_matching_equals_the_token_by_token_path(name, text, pick):
    from ragfind.pipeline.highlights import _merge, match_terms, positioned_terms

    an = resolve_analyzer(name)
    toks = positioned_terms(an, text)
    terms = sorted({t for t, *_ in toks})
    words = {t for i, t in enumerate(terms) if (pick >> (i % 16)) & 1} or set(terms[:1])
    slow = _merge([(b, e) for t, b, e, _ in toks if t in words])
    assert match_terms(text, words, [], an) == slow
    assert an._core.match_offsets([text, text], sorted(words))[1] == [
        (b, e) for t, b, e, _ in toks if t in words
    ]
