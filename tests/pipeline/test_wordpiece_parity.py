"""The native WordPiece counter against HuggingFace ``tokenizers``: token starts, counts, chunks.

Parity is the contract: for every text the counter accepts, the starts of its tokens equal the
starts of ``tokenizers``' ``Encoding.offsets`` (no special tokens); a text it declines goes to
``tokenizers``, so chunks are identical either way.
"""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

import ragfind
from ragfind import _core
from ragfind.eval import load_beir
from ragfind.pipeline import chunking
from ragfind.pipeline.chunking import default_tokenizer_path, load_tokenizer

MINILM = load_tokenizer()


def _variant(**normalizer) -> Tokenizer:
    """MiniLM's tokenizer with other BertNormalizer flags."""
    config = json.loads(default_tokenizer_path().read_text(encoding="utf-8"))
    config["normalizer"].update(normalizer)
    return load_tokenizer(Tokenizer.from_str(json.dumps(config)))


VARIANTS = {
    "minilm": MINILM,
    "cased": _variant(lowercase=False, strip_accents=False),
    "cased_stripped": _variant(lowercase=False, strip_accents=True),
    "lower_keep_accents": _variant(lowercase=True, strip_accents=False),
    "raw": _variant(clean_text=False, handle_chinese_chars=False, lowercase=False, strip_accents=False),
}


def reference_starts(tok, text: str) -> list[int]:
    return [s for s, _ in tok.encode(text, add_special_tokens=False).offsets]


def native_starts(tok, text: str):
    starts = chunking._native_counter(tok).token_starts(text)
    return None if starts is None else starts.tolist()


def assert_parity(tok, texts: list[str]) -> int:
    """Asserts parity on every text the counter accepts; returns how many it declined."""
    native = chunking._native_counter(tok)
    counts = native.count(texts).tolist()
    encodings = tok.encode_batch(texts, add_special_tokens=False)
    declined = 0
    for text, n, enc in zip(texts, counts, encodings):
        starts = native.token_starts(text)
        if n < 0:
            assert starts is None, text
            declined += 1
            continue
        want = [s for s, _ in enc.offsets]
        assert starts is not None, text
        assert starts.tolist() == want, text
        assert n == len(want), text
    return declined


def test_native_counter_is_used_for_bert_wordpiece_only():
    assert all(chunking._native_counter(t) is not None for t in VARIANTS.values())
    config = json.loads(default_tokenizer_path().read_text(encoding="utf-8"))
    config["pre_tokenizer"] = {"type": "Whitespace"}
    assert chunking._native_counter(load_tokenizer(Tokenizer.from_str(json.dumps(config)))) is None
    config = json.loads(default_tokenizer_path().read_text(encoding="utf-8"))
    config["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, config["normalizer"]]}
    assert chunking._native_counter(load_tokenizer(Tokenizer.from_str(json.dumps(config)))) is None
    config = json.loads(default_tokenizer_path().read_text(encoding="utf-8"))
    config["added_tokens"][0]["normalized"] = True
    assert chunking._native_counter(load_tokenizer(Tokenizer.from_str(json.dumps(config)))) is None


def test_counter_checks_its_inputs():
    with pytest.raises(ValueError, match="vocabulary is empty"):
        _core.WordPieceCounter([])
    with pytest.raises(ValueError, match="unk_token"):
        _core.WordPieceCounter(["a", "##b"], unk_token="[UNK]")
    counter = _core.WordPieceCounter(["[UNK]", "a", "##b"])
    with pytest.raises(TypeError, match=r"texts\[1\] is a int"):
        counter.count(["a", 3])
    assert counter.count(["ab", "ab ab", "", "b", "\ud800"]).tolist() == [2, 4, 0, 1, -1]
    # "ab" is a + ##b; "xa" has no first piece, so it is one [UNK].
    assert counter.token_starts("ab xa").tolist() == [0, 1, 3]
    counts, starts = counter.count_with_starts(["ab", "ab ab", "\ud800", "b"], 2)
    assert counts.tolist() == [2, 4, -1, 1]
    assert starts[0] is None and starts[2] is None and starts[3] is None
    assert starts[1].tolist() == [0, 1, 3, 4]
    with pytest.raises(TypeError, match=r"texts\[0\] is a bytes"):
        counter.count_with_starts([b"ab"], 0)


ADVERSARIAL = [
    "",
    " \t\n\r ",
    "plain ascii words, with punctuation! and numbers 3.14159 and $100 (really?) [ok] {x} <y> a_b ~`^|\\",
    "control \x00 chars \x01\x02\x07\x08 vt\x0bff\x0c fs\x1c us\x1f del\x7f nel\x85 end",
    "zero\u200bwidth\u200cjoin\u200d non\u2060joiner \ufeffbom soft\u00adhyphen",
    "combining: e\u0301 a\u0300\u0301 o\u0308\u0304 n\u0303 i\u0307 \u0301alone x\u20dd",
    "accents: café naïve résumé façade Ångström Øre Ærø Straße fiancée coöperate",
    "Greek: ΣΊΣΥΦΟΣ σίσυφος ὀδυσσεύς Ἀθῆναι ΐ ΰ ς final sigma ΑΣ",
    "CJK: 日本語のテキスト 中文文本 한국어 텍스트 汉字漢字 \u3000ideographic space 丽 \uf900\U0002f800",
    "emoji: 👍🏽 👨\u200d👩\u200d👧 🏳️\u200d🌈 ❤️ 🇫🇷 😀😀😀 ☃ ★",
    "very long: " + "a" * 99 + " " + "b" * 100 + " " + "c" * 101 + " " + "é" * 150 + " " + "x" * 5000,
    "Turkish İstanbul ıi KELVIN \u212a ANGSTROM \u212b ﬁnance ﬂow ẞ ǅ ǈ ǋ",
    "mixed: Привет мир Ελληνικά עברית العربية हिन्दी ภาษาไทย ქართული Ⴀ ᲐᲑᲒ Ꭰ ꭰ",
    "fullwidth: ＡＢＣ ａｂｃ １２３ ！？ Ⅻ ⅻ ⓐ Ⓐ",
    "symbols: ∑∫√∞≈≠±× ©®™ §¶ † ‡ • … ‰ ′″ ‹› «» “quotes” ‘single’ — – ‐ ¿¡",
    "hangul decomposition: 한 각 힣 ᄀ ᅡ ᆨ",
    "indic: क़ ख़ ग़ ज़ ড় ਲ਼ ଡ଼ ௌ ై ೈ ൌ ෞ",
    "math alnum: \U0001d400\U0001d41a \U0001d7ce \U0001d538",
    "urls: https://example.com/path?q=a&b=c#frag user@example.org C++ node.js e.g. U.S.A. 1,000,000",
    "tokens that are added: [CLS] [SEP] [MASK] [PAD] [UNK] text",
    "replacement \ufffd char and private use \ue000 \U000f0000",
    "tabs\tand\nnew\r\nlines\u2028line\u2029para",
    "unassigned \u0378 and new \U0001faf0 emoji",
    "#hash ##double ###triple ## # ##a a## ##",
]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_adversarial_texts(name):
    tok = VARIANTS[name]
    assert_parity(tok, ADVERSARIAL)
    native = chunking._native_counter(tok)
    # The counter must accept ordinary hard cases, or the parity above proves little.
    for k in (2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 18, 21, 23):
        assert native.token_starts(ADVERSARIAL[k]) is not None, ADVERSARIAL[k]
    assert native.token_starts(ADVERSARIAL[19]) is None  # added tokens: tokenizers matches them
    assert native.count(["a\ud800b"]).tolist() == [-1]  # a lone surrogate: tokenizers raises


@pytest.mark.parametrize("name", ["minilm", "cased", "raw"])
def test_every_code_point(name):
    """Each accepted code point alone, between letters, doubled, after a space and in a run."""
    tok = VARIANTS[name]
    native = chunking._native_counter(tok)
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    alone = native.count([chr(cp) for cp in cps]).tolist()
    accepted = [cp for cp, n in zip(cps, alone) if n >= 0]
    # Declined are code points whose Unicode data differs between tokenizers and Python
    # (almost all unassigned) or, under strip_accents, combining marks that are not Mn.
    assigned = [cp for cp in cps if unicodedata.category(chr(cp)) != "Cn"]
    assert len(set(assigned) - set(accepted)) < 600
    texts = []
    for first in range(0, len(accepted), 64):
        block = [chr(cp) for cp in accepted[first : first + 64]]
        texts.append(" ".join(f"a{c}b {c}{c}" for c in block) + " x" + "".join(block) + "y")
    assert assert_parity(tok, texts) == 0


@pytest.mark.parametrize("corpus", ["scifact", "cranfield"])
def test_every_corpus_document(data_dir, corpus):
    docs = load_beir(data_dir / corpus).corpus.values()
    texts = [d["text"] for d in docs] + [f"{d['title']}\n{d['text']}" for d in docs]
    for name in ("minilm", "cased"):
        declined = assert_parity(VARIANTS[name], texts)
        assert declined <= len(texts) // 100, f"{name}: {declined} of {len(texts)} declined"


_ALPHABET = st.one_of(
    st.sampled_from(list("aeiouxyzAEZ  \n.,!?-'\"()[]#0123456789") + ["##", "[CLS]", "\u00a0", "\u3000"]),
    st.sampled_from(list("éÉàçñøßİıΣσςΐ日本語한ｆＡ\u0301\u0308\u200b\ufeff\x00\x0b\ufffd👍\u212aﬁ")),
    st.characters(exclude_categories=("Cs",)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ALPHABET, max_size=120).map("".join), st.sampled_from(sorted(VARIANTS)))
def test_hypothesis_parity(text, name):
    tok = VARIANTS[name]
    starts = native_starts(tok, text)
    if starts is not None:
        assert starts == reference_starts(tok, text)


def _chunks_without_native(monkeypatch, documents, **kwargs):
    with monkeypatch.context() as m:
        m.setattr(chunking, "_native_counter", lambda tok: None)
        return ragfind.chunk_documents(documents, **kwargs)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["Alpha beta. ", "Gamma! ", "\n\n", "naïve café ", "日本 ", "x" * 120, "[SEP] ", "İi "]
        ),
        max_size=80,
    ).map("".join),
    st.integers(3, 60),
)
def test_chunks_equal_with_and_without_native(text, size):
    docs = [{"id": 0, "text": text}]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(chunking, "_native_counter", lambda tok: None)
        want = ragfind.chunk_documents(docs, size=size, overlap=0.2)
        want_one = ragfind.chunk(text, size=size, overlap=0.2)
    assert ragfind.chunk_documents(docs, size=size, overlap=0.2) == want
    assert ragfind.chunk(text, size=size, overlap=0.2) == want_one


@pytest.mark.parametrize("size", [384, 64])
def test_corpus_chunks_equal_with_and_without_native(data_dir, monkeypatch, size):
    docs = [{"id": k, "text": d["text"]} for k, d in load_beir(data_dir / "scifact").corpus.items()]
    want = _chunks_without_native(monkeypatch, docs, size=size)
    got = ragfind.chunk_documents(docs, size=size)
    assert got == want
    assert [c.n_tokens for c in got] == [c.n_tokens for c in want]


_LOOKBEHIND_SENTENCE = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+|\n\s*")


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(list("ab .!?\"')]\n\t\u00a0\u2028x") + [". ", ".) ", "\n\n"]), max_size=40).map(
        "".join
    )
)
def test_sentence_split_equals_the_lookbehind_pattern(text):
    """chunking's sentence pattern consumes the punctuation; the ends must be those of the
    plain look-behind form (the whitespace after . ! ? and an optional closer, or a line break)."""
    for ps, pe in chunking._spans(chunking._PARAGRAPH, text, 0, len(text)):
        want = chunking._spans(_LOOKBEHIND_SENTENCE, text, ps, pe)
        assert chunking._spans(chunking._SENTENCE, text, ps, pe) == want
