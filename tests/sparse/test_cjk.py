"""The "cjk" analysis (overlapping bigrams over Han, Hiragana, Katakana and Hangul runs, as
Lucene's CJKAnalyzer) and the named analyzers, against a reference written here."""

from __future__ import annotations

import re

import pytest

from ragfind import BM25Index
from ragfind.sparse.analyzer import ANALYZER_NAMES, Analyzer, resolve_analyzer


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    ranges = [
        (0x1100, 0x11FF), (0x3005, 0x3005), (0x3007, 0x3007), (0x3040, 0x30FF), (0x3130, 0x318F),
        (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA960, 0xA97F), (0xAC00, 0xD7FF),
        (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0xFFA0, 0xFFDC), (0x20000, 0x3134F),
    ]  # fmt: skip
    return any(a <= cp <= b for a, b in ranges)


def reference_cjk_tokens(text: str) -> list[tuple[str, int, int]]:
    """Counted tokens of the cjk analysis without stemming/stopwords/identifier parts: word runs
    cut at CJK/non-CJK changes; CJK pieces -> bigrams (a lone char itself), others -> the piece
    when it has >= 2 characters."""
    out = []
    for m in re.finditer(r"\w+", text):
        run, at = m.group(), m.start()
        i = 0
        while i < len(run):
            j = i + 1
            while j < len(run) and _is_cjk(run[j]) == _is_cjk(run[i]):
                j += 1
            if _is_cjk(run[i]):
                if j - i == 1:
                    out.append((run[i], at + i, at + i + 1))
                else:
                    out += [(run[a : a + 2], at + a, at + a + 2) for a in range(i, j - 1)]
            elif j - i >= 2:
                out.append((run[i:j].lower(), at + i, at + j))
            i = j
    return out


PLAIN = dict(stopwords=None, stemmer=None, split_identifiers=False, cjk=True)

CASES = [
    "東京都に住む",  # Han + Hiragana: one run, bigrams across the script change (as Lucene)
    "我喜欢北京天安门",
    "서울특별시 한국어",
    "カタカナ ひらがな 漢字",
    "日 本",  # isolated characters: unigrams
    "東京ABC東京",  # mixed run: cut at script changes
    "Tokyo 東京 is big",
    "ｶﾀｶﾅ",  # half-width katakana
    "𠀋𠀌",  # supplementary-plane Han
    "",
    "abc",
]


@pytest.mark.parametrize("text", CASES)
def test_bigrams_match_reference(text):
    a = Analyzer(**PLAIN)
    ref = reference_cjk_tokens(text)
    assert a.analyze(text) == [t for t, _, _ in ref]
    assert a.analyze_with_offsets(text) == ref
    for term, s, e in a.analyze_with_offsets(text):
        assert text[s:e].lower() == term


def test_other_scripts_keep_the_default_analysis():
    text = "The Defibrillators of getUserById v2.3.1 東京"
    cjk = Analyzer.named("cjk").analyze(text)
    default = Analyzer().analyze(text)
    assert cjk[:-1] == default[:-1]
    assert cjk[-1] == "東京" and default[-1] == "東京"


def test_default_analysis_leaves_cjk_runs_whole():
    assert Analyzer().analyze("東京都に住む") == ["東京都に住む"]


def test_two_character_word_found_in_unsegmented_sentence():
    docs = ["我喜欢北京天安门", "上海是一个大城市", "北京大学在海淀区", "东京是日本的首都"]
    idx = BM25Index(analyzer="cjk")
    idx.add(docs)
    ids, _ = idx.search("北京", k=10)
    assert sorted(ids.tolist()) == [0, 2]
    plain = BM25Index()
    plain.add(docs)
    assert len(plain.search("北京", k=10)[0]) == 0  # why the cjk analysis exists
    ids, _ = idx.search("日本首都", k=1)
    assert ids.tolist() == [3]


def test_japanese_and_korean_search():
    idx = BM25Index(analyzer="cjk")
    idx.add(["東京都に住んでいます", "大阪府の天気", "서울특별시는 한국의 수도입니다", "부산 날씨"])
    assert idx.search("東京", k=5)[0].tolist() == [0]
    assert idx.search("天気", k=5)[0].tolist() == [1]
    assert idx.search("서울", k=5)[0].tolist() == [2]


def test_cjk_index_save_load_keeps_the_analysis(tmp_path):
    idx = BM25Index(analyzer="cjk")
    idx.add(["我喜欢北京天安门", "上海是一个大城市"])
    idx.save(tmp_path / "i.bm25")
    back = BM25Index.load(tmp_path / "i.bm25")
    assert back.analyzer.name == "cjk"
    assert back.search("北京", k=5)[0].tolist() == [0]
    custom = Analyzer(cjk=True, stemmer=None)
    idx2 = BM25Index(analyzer=custom)
    idx2.add(["北京大学"])
    idx2.save(tmp_path / "j.bm25")
    back2 = BM25Index.load(tmp_path / "j.bm25")
    assert back2.analyzer.config()["cjk"] is True
    assert back2.search("大学", k=5)[0].tolist() == [0]


def test_named_analyzers():
    assert set(ANALYZER_NAMES) == {"default", "cjk", "whitespace"}
    ws = Analyzer.named("whitespace")
    assert ws.analyze("Hello, World  foo-bar") == ["Hello,", "World", "foo-bar"]
    assert ws.analyze_with_offsets("Hello  World") == [("Hello", 0, 5), ("World", 7, 12)]
    assert Analyzer.named("default").analyze("The Dogs") == Analyzer().analyze("The Dogs")
    assert resolve_analyzer(None).config()["stemmer"] == "english"
    with pytest.raises(ValueError, match="unknown name"):
        Analyzer.named("klingon")
    with pytest.raises(ValueError, match="unknown name"):
        BM25Index(analyzer="klingon")
    with pytest.raises(TypeError, match="analyzer"):
        BM25Index(analyzer=3)


def test_whitespace_index_roundtrip(tmp_path):
    idx = BM25Index(analyzer="whitespace")
    idx.add(["C++ and C#", "c++ lower"])
    assert idx.search("C++", k=5)[0].tolist() == [0]
    idx.save(tmp_path / "w.bm25")
    back = BM25Index.load(tmp_path / "w.bm25")
    assert back.search("C#", k=5)[0].tolist() == [0]
    assert BM25Index.load(tmp_path / "w.bm25", analyzer="whitespace").search("c++", k=5)[0].tolist() == [1]
