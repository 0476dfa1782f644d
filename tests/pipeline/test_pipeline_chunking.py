"""ragfind.chunk / chunk_documents / default_context: offsets, budgets, boundaries, bad input."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ragfind
from ragfind.pipeline.chunking import default_tokenizer_path, heading_path, load_tokenizer

TOK = load_tokenizer()


def n_tokens(text: str) -> int:
    return len(TOK.encode(text, add_special_tokens=False).ids)


def long_text(n_paragraphs=12, sentences=9):
    paras = []
    for p in range(n_paragraphs):
        paras.append(
            " ".join(
                f"Paragraph {p} sentence {s} talks about topic number {p * 10 + s}." for s in range(sentences)
            )
        )
    return "\n\n".join(paras)


def check_chunks(text, chunks, size):
    assert chunks, "expected chunks"
    for i, c in enumerate(chunks):
        assert text[c.start : c.end] == c.text
        assert c.index == i
        assert c.n_tokens == n_tokens(c.text)
        assert 0 < c.n_tokens <= size
        assert c.text == c.text.strip()
        # never mid-word: the characters around the span are not both word characters
        if c.start > 0:
            assert not (text[c.start - 1].isalnum() and text[c.start].isalnum())
        if c.end < len(text):
            assert not (text[c.end - 1].isalnum() and text[c.end].isalnum())
    # Coverage: every non-space character lies in some chunk.
    covered = [False] * len(text)
    for c in chunks:
        for k in range(c.start, c.end):
            covered[k] = True
    assert all(covered[k] or text[k].isspace() for k in range(len(text)))
    # Chunks move forward.
    assert all(b.start > a.start and b.end > a.end for a, b in zip(chunks, chunks[1:]))


@pytest.mark.parametrize("size", [16, 48, 128, 384])
def test_chunks_are_exact_slices_within_budget(size):
    text = long_text()
    chunks = ragfind.chunk(text, doc_id="d1", title="T", size=size)
    check_chunks(text, chunks, size)
    assert all(c.doc_id == "d1" and c.title == "T" for c in chunks)


def test_chunks_end_at_sentences_and_prefer_paragraphs():
    text = long_text()
    chunks = ragfind.chunk(text, size=100, overlap=0)
    for c in chunks:
        assert c.text.endswith(".")
    # Each paragraph has ~ 90 tokens: with size 100 and no overlap every chunk is one paragraph.
    paragraphs = text.split("\n\n")
    assert [c.text for c in chunks] == paragraphs


def test_overlap_repeats_whole_sentences():
    text = long_text(n_paragraphs=1, sentences=60)
    chunks = ragfind.chunk(text, size=64, overlap=0.25)
    for a, b in zip(chunks, chunks[1:]):
        assert b.start < a.end  # overlapping
        repeated = text[b.start : a.end]
        assert 0 < n_tokens(repeated) <= 16
        assert re.match(r"Paragraph 0 sentence \d+", repeated)
    no_overlap = ragfind.chunk(text, size=64, overlap=0)
    assert all(b.start >= a.end for a, b in zip(no_overlap, no_overlap[1:]))
    assert len(no_overlap) < len(chunks)


def test_long_sentence_splits_between_words_and_giant_word_is_cut():
    words = " ".join(f"word{i}" for i in range(400))
    chunks = ragfind.chunk(words, size=50, overlap=0)
    check_chunks(words, chunks, 50)
    giant = "x" * 3000  # one "word" over budget: the only case that cuts inside a word
    chunks = ragfind.chunk("before. " + giant + " after.", size=40, overlap=0)
    assert all(c.n_tokens <= 40 for c in chunks)
    assert "".join(c.text for c in chunks if "x" in c.text).count("x") == 3000


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(list("abc de.\n!?é日") + ["\n\n", ". ", "Zz", "word "]), max_size=300).map(
        "".join
    ),
    st.integers(4, 80),
    st.sampled_from([0, 0.1, 0.5, 3]),
)
def test_chunk_property(text, size, overlap):
    if isinstance(overlap, int) and overlap >= size:
        overlap = 0
    chunks = ragfind.chunk(text, size=size, overlap=overlap)
    if not text.strip():
        assert chunks == []
        return
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert c.n_tokens <= size
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(k in covered or text[k].isspace() for k in range(len(text)))


def test_chunk_documents_and_default_context():
    docs = [
        {
            "id": 1,
            "title": "Guide",
            "text": "# Install\n\nRun pip.\n\n## Linux\n\nUse apt first. Then pip.\n\n# Use\n\nImport it.",
        },
        {"id": "b", "text": "Plain text without headings.", "metadata": {"lang": "en"}},
    ]
    chunks = ragfind.chunk_documents(docs, size=5, overlap=0, contextualize=True)
    by_doc = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    assert set(by_doc) == {"1", "b"}
    contexts = [c.context for c in by_doc["1"]]
    assert contexts[0].startswith("Guide > Install")
    assert any(ctx == "Guide > Install > Linux" for ctx in contexts)
    assert contexts[-1] == "Guide > Use"
    assert by_doc["b"][0].context == ""  # no title, no headings
    assert by_doc["b"][0].metadata == {"lang": "en"}
    # The context is indexed but is not part of the chunk text.
    c = by_doc["1"][-1]
    assert c.context not in c.text and c.indexed_text() == c.context + "\n" + c.text


def test_custom_contextualize_callable():
    seen = []

    def ctx(doc, ch):
        seen.append((doc["id"], ch.index))
        return f"From {doc['id']}"

    chunks = ragfind.chunk_documents(
        [{"id": "x", "text": "One. Two. Three."}], size=3, overlap=0, contextualize=ctx
    )
    assert [c.context for c in chunks] == ["From x"] * len(chunks)
    assert seen == [("x", i) for i in range(len(chunks))]
    with pytest.raises(TypeError, match="contextualize returned a int"):
        ragfind.chunk_documents([{"id": "x", "text": "One."}], contextualize=lambda d, c: 3)


def test_heading_path():
    text = "# A\ntext\n## B\nmore\n### C\nx\n## D\ny"
    assert heading_path(text, text.index("more")) == ["A", "B"]
    assert heading_path(text, text.index("\nx\n") + 1) == ["A", "B", "C"]
    assert heading_path(text, len(text)) == ["A", "D"]
    assert heading_path("no headings", 5) == []


def test_tokenizer_choices(tmp_path):
    from tokenizers import Tokenizer

    path = default_tokenizer_path()
    tok = Tokenizer.from_file(str(path))
    tok.enable_truncation(8)  # the caller's settings must not leak in, nor be changed
    text = long_text(2)
    a = ragfind.chunk(text, size=30)
    b = ragfind.chunk(text, size=30, tokenizer=tok)
    c = ragfind.chunk(text, size=30, tokenizer=str(path))
    d = ragfind.chunk(text, size=30, tokenizer=path.parent)
    assert a == b == c == d
    assert tok.truncation is not None
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        ragfind.chunk(text, tokenizer=tmp_path)
    with pytest.raises(TypeError, match="expected None, a path"):
        ragfind.chunk(text, tokenizer=42)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"size": 0}, ValueError, "size = 0"),
        ({"size": 1.5}, ValueError, "size = 1.5"),
        ({"overlap": 0.9}, ValueError, "overlap = 0.9"),
        ({"overlap": 384}, ValueError, "overlap = 384 tokens"),
        ({"overlap": "a"}, TypeError, "overlap = 'a'"),
    ],
)
def test_chunk_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ragfind.chunk("Some text.", **kwargs)


def test_chunk_bad_inputs():
    with pytest.raises(TypeError, match="text is a bytes"):
        ragfind.chunk(b"bytes")
    assert ragfind.chunk("   \n\n ") == []
    with pytest.raises(ValueError, match="repeats id '1'"):
        ragfind.chunk_documents([{"id": 1, "text": "a"}, {"id": "1", "text": "b"}])
    with pytest.raises(ValueError, match="lacks 'text'"):
        ragfind.chunk_documents([{"id": 1}])
    with pytest.raises(TypeError, match=r"documents\[0\] is a str"):
        ragfind.chunk_documents(["text"])
    with pytest.raises(TypeError, match=r"documents\[0\]\['text'\] is a NoneType"):
        ragfind.chunk_documents([{"id": 1, "text": None}])
