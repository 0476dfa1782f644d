"""RM3 feedback in the Retriever: the same ranking as RM3 over the same texts, texts read from
the store, deletes and filters, saved and reloaded with the folder, and the clear refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ragfind
from ragfind import RM3, BM25Index
from ragfind.sparse.fields import BM25FIndex

TWO = RM3(fb_docs=2)

# "apple" is in documents 0 and 1 only; document 2 shares their other terms, without "apple".
DOCS = [
    "apple orchard cider harvest",
    "apple cider orchard press",
    "orchard cider barrel",
    "ship sail harbour",
] + [f"filler{i} word{i}" for i in range(26)]


def make(feedback=TWO, **kw):
    r = ragfind.Retriever(
        encoder=None,
        chunk_size=None,
        contextualize=False,
        bm25=BM25Index(analyzer="whitespace"),
        feedback=feedback,
        **kw,
    )
    r.add_documents([{"id": f"d{i}", "text": t, "metadata": {"group": i % 3}} for i, t in enumerate(DOCS)])
    return r


def reference(query, k, rm3=TWO, filter=None):  # noqa: A002
    index = BM25Index(analyzer="whitespace")
    index.add(DOCS)
    return rm3.search(index, query, k, lambda ids: [DOCS[int(i)] for i in ids], filter)


def test_same_ranking_as_rm3_over_the_same_texts():
    r = make()
    res = r.search("apple", k=10)
    ids, _ = reference("apple", 10)
    assert res.doc_ids == [f"d{i}" for i in ids.tolist()]
    assert "d2" in res.doc_ids and "d2" not in make(feedback=None).search("apple", k=10).doc_ids
    assert r.feedback == RM3(fb_docs=2)


def test_feedback_texts_come_from_the_store_with_their_context():
    r = ragfind.Retriever(encoder=None, chunk_size=None, feedback=RM3())
    r.add_documents([{"id": "a", "title": "Orchards", "text": "apple cider"}])
    stage = r._first_of("bm25")
    assert stage._texts is None  # no second copy of the texts
    (text,) = stage._feedback_texts(np.array([0]))
    assert "Orchards" in text and text.endswith("apple cider")
    assert stage._feedback_texts(np.array([99])) == [""]


def test_deleted_documents_are_neither_results_nor_feedback():
    r = make()
    r.delete_documents(["d2"])
    assert "d2" not in r.search("apple", k=10).doc_ids
    r.delete_documents(["d0"])
    # d1 is the only feedback document left; d2 is gone, so nothing without "apple" but
    # d1's own terms can come back.
    assert r.search("apple", k=10).doc_ids[0] == "d1"


def test_filters_restrict_the_feedback_ranking():
    r = make()
    full = r.search("apple", k=10).doc_ids
    got = r.search("apple", k=10, filters={"group": 2}).doc_ids
    assert got == [d for d in full if int(d[1:]) % 3 == 2]
    assert "d2" in got


def test_no_match_and_empty_retriever():
    assert len(make().search("nothing", k=5)) == 0
    empty = ragfind.Retriever(encoder=None, feedback=RM3())
    assert len(empty.search("apple", k=5)) == 0


def test_explain_shows_the_expanded_query():
    r = make()
    stage = r._first_of("bm25")
    ids, scores = stage.search("apple", 10)
    e = stage.explain("apple", int(ids[0]))
    assert e.score == pytest.approx(float(scores[0]), rel=1e-5)
    assert "apple" in e.detail["feedback"] and len(e.detail["feedback"]) > 1
    assert sum(c.value for c in e.contributions) == pytest.approx(e.score, rel=1e-5)


def test_saved_and_loaded_with_the_feedback(tmp_path):
    r = make(feedback=RM3(fb_docs=2, fb_terms=5, original_query_weight=0.6))
    r.save(tmp_path / "r")
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["config"]["feedback"]["original_query_weight"] == 0.6
    back = ragfind.Retriever.load(tmp_path / "r")
    assert back.feedback == r.feedback
    assert back.search("apple", k=10).doc_ids == r.search("apple", k=10).doc_ids
    plain = make(feedback=None)
    plain.save(tmp_path / "p")
    assert ragfind.Retriever.load(tmp_path / "p").feedback is None


def test_a_bad_saved_feedback_is_refused(tmp_path):
    make().save(tmp_path / "r")
    path = tmp_path / "r" / "manifest.json"
    m = json.loads(path.read_text())
    m["config"]["feedback"]["fb_docs"] = 0
    path.write_text(json.dumps(m))
    with pytest.raises(ragfind.RetrieverFolderError, match="fb_docs"):
        ragfind.Retriever.load(tmp_path / "r")


def test_refusals():
    with pytest.raises(ValueError, match="BM25 stage"):
        ragfind.Retriever(encoder=None, bm25=None, stages=[ragfind.BM25Stage(name="x")], feedback=RM3())
    with pytest.raises(ValueError, match="BM25F"):
        ragfind.Retriever(encoder=None, bm25=BM25FIndex(fields={"title": 2.0, "text": 1.0}), feedback=RM3())
    with pytest.raises(TypeError, match="feedback"):
        ragfind.Retriever(encoder=None, feedback={"fb_docs": 5})


def test_a_sharded_build_refuses_feedback(tmp_path):
    pytest.importorskip("ray")
    from ragfind.distributed import build

    src = tmp_path / "c.jsonl"
    src.write_text('{"id": "a", "text": "apple"}\n')
    with pytest.raises(ValueError, match="feedback: not supported by a sharded index"):
        build(src, tmp_path / "kb", 2, encoder=None, feedback=RM3())
    assert not (tmp_path / "kb").exists()
