"""The shortcuts of ingestion against the full path: a document that fits its token budget is one
chunk (no sentence splitting), and ``chunk_size=None`` without an encoder skips the tokenizer;
the chunks are those :func:`ragfind.chunk` cuts from the same encodings."""

from __future__ import annotations

import dataclasses
import json

import pytest

import ragfind
from ragfind.pipeline.chunking import chunk, chunk_documents, default_context, load_tokenizer, whole_documents

EDGE_TEXTS = [
    "",
    "   \n\t ",
    "  Leading and trailing whitespace.  \n\n",
    "One sentence. Two sentences!\n\nA new paragraph?\n",
    "# Title\n\nBody under a heading.\n## Sub\nMore text here.",
    "control\x01chars\x0bjoin words \u00a0 nbsp\u2028line sep",
    "naïve café – em dash — “quotes” µg/mL ±3 αβγ 中文字符",
    "word " * 500,
    "x" * 3000,
]


def _docs_from(data_dir, name: str) -> list:
    with open(data_dir / name / "corpus.jsonl", encoding="utf-8") as f:
        return [
            {"id": d["_id"], "title": d.get("title") or "", "text": d["text"]}
            for d in (json.loads(line) for line in f)
        ]


def _slow(docs: list, size: int, overlap) -> list:
    """Every document cut by :func:`chunk` from its own encoding (no shortcut)."""
    tok = load_tokenizer()
    out = []
    for d in docs:
        enc = tok.encode(d["text"], add_special_tokens=False)
        chunks = chunk(
            d["text"],
            doc_id=str(d["id"]),
            title=d.get("title") or "",
            size=size,
            overlap=overlap,
            encoding=enc,
        )
        out += [dataclasses.replace(c, context=default_context(d, c).strip()) for c in chunks]
    return out


@pytest.mark.parametrize("size", [16, 64, 384])
def test_chunk_documents_equals_chunk_on_edge_texts(size):
    docs = [{"id": n, "title": "T" if n % 2 else "", "text": t} for n, t in enumerate(EDGE_TEXTS)]
    assert chunk_documents(docs, size=size, contextualize=True) == _slow(docs, size, 0.15)


@pytest.mark.parametrize("name", ["scifact", "cranfield"])
def test_chunk_documents_equals_chunk_on_collections(data_dir, name):
    docs = _docs_from(data_dir, name)[:1500]
    fast = chunk_documents(docs, size=384, contextualize=True)
    assert fast == _slow(docs, 384, 0.15)
    assert [c.n_tokens for c in fast] == [c.n_tokens for c in _slow(docs, 384, 0.15)]


def test_whole_documents_are_the_unbounded_chunks():
    docs = [{"id": n, "title": "T", "text": t} for n, t in enumerate(EDGE_TEXTS)]
    whole = whole_documents(docs, contextualize=True)
    bounded = chunk_documents(docs, size=1 << 30, overlap=0, contextualize=True)
    assert whole == [dataclasses.replace(c, n_tokens=-1) for c in bounded]


def test_retriever_without_budget_or_encoder_stores_the_same_passages():
    docs = [{"id": f"d{n}", "title": "T", "text": t} for n, t in enumerate(EDGE_TEXTS)]
    r = ragfind.Retriever(encoder=None, chunk_size=None)
    r.add_documents(docs)
    want = chunk_documents(docs, size=1 << 30, overlap=0, contextualize=True)
    got = r.store.db.execute('SELECT doc_id, text, start, "end", context FROM chunks ORDER BY id').fetchall()
    assert got == [(c.doc_id, c.text, c.start, c.end, c.context) for c in want]
    assert r.search("sentences", k=1)[0].doc_id == "d3"
    r.close()


def test_progress_bar_only_for_large_adds(capsys, monkeypatch):
    import ragfind.pipeline.retriever as retriever

    docs = [{"id": n, "text": f"document number {n}"} for n in range(30)]
    r = ragfind.Retriever(encoder=None, chunk_size=64)
    r.add_documents(docs[:10])
    assert "chunking" not in capsys.readouterr().err
    monkeypatch.setattr(retriever, "PROGRESS_DOCUMENTS", 10)
    r.add_documents(docs[10:20])
    assert "chunking" in capsys.readouterr().err
    r.show_progress = False
    r.add_documents(docs[20:])
    assert "chunking" not in capsys.readouterr().err
    r.close()


def test_encoding_overlaps_the_bm25_add_and_its_failure_undoes_it():
    import threading

    from hash_encoders import HashEncoder

    seen = {}

    class Watching(HashEncoder):
        fail = False

        def encode(self, texts, batch_size=32, show_progress=False):
            seen["thread"] = threading.current_thread().name
            if self.fail:
                raise RuntimeError("encoder broke")
            return super().encode(texts, batch_size, show_progress)

    enc = Watching()
    r = ragfind.Retriever(encoder=enc, chunk_size=None)
    r.add_documents([{"id": "a", "text": "alpha beta"}])
    assert seen["thread"].startswith("ragfind-encode")
    assert r.search("alpha", k=1)[0].doc_id == "a"
    enc.fail = True
    with pytest.raises(RuntimeError, match="encoder broke"):
        r.add_documents([{"id": "b", "text": "gamma delta"}])
    assert (len(r), r.n_chunks, len(r.bm25), len(r.dense)) == (1, 1, 1, 1)
    assert r.search("gamma", k=1, stages=["bm25"]).doc_ids == []
    r.close()
