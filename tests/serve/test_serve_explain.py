"""The explanation logic: the BM25 re-scoring formulas against the C++ scorer for every variant
and many k1/b, and the MaxSim alignment of a late-interaction stage against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from serve_fixtures import DOCS, bm25_folder_fixture, encoder_fixture, hybrid_folder_fixture  # noqa: F401

import ragfind
from hash_encoders import WordColbert
from ragfind.pipeline.stages.late import LateInteractionStage
from ragfind.serve import bm25_rescore, explain_passage

TEXTS = [d["text"] for d in DOCS] + ["", "cats cats cats cats cats cats cats cats"]
QUERIES = ["cats hunt mice", "programming language python python", "zzz unknown cats", "the and of"]


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_rescore_equals_the_native_scorer_at_any_k1_and_b(method):
    index = ragfind.BM25Index(method=method)
    index.add(TEXTS, ids=list(range(len(TEXTS))))
    for q in QUERIES:
        for doc in range(len(TEXTS)):
            ex = index.explain(q, doc)
            assert bm25_rescore(ex)["score"] == pytest.approx(ex.score, rel=1e-12, abs=1e-12)
            for k1, b in ((0.0, 0.0), (0.5, 1.0), (2.0, 0.3), (3.0, 0.75), (1.2, 0.0)):
                other = ragfind.BM25Index(method=method, k1=k1, b=b)
                other.add(TEXTS, ids=list(range(len(TEXTS))))
                want = other.explain(q, doc)
                got = bm25_rescore(ex, k1, b)
                assert got["score"] == pytest.approx(want.score, rel=1e-12, abs=1e-12), (q, doc, k1, b)
                for g, w in zip(got["terms"], want.contributions):
                    assert g["contribution"] == pytest.approx(w.value, rel=1e-12, abs=1e-12)
                    assert g["length_norm"] == pytest.approx(w.detail["length_norm"], rel=1e-12)


def test_rescore_rejects_parameters_out_of_range():
    index = ragfind.BM25Index()
    index.add(TEXTS[:3])
    ex = index.explain("cats", 0)
    for k1, b, words in ((-0.1, None, "k1"), (float("nan"), None, "k1"), (None, 1.01, "b"), (None, -1, "b")):
        with pytest.raises(ValueError, match=words):
            bm25_rescore(ex, k1, b)


def test_maxsim_alignment_against_numpy():
    enc = WordColbert()
    r = ragfind.Retriever(
        encoder=None,
        chunk_size=None,
        contextualize=False,
        stages=[LateInteractionStage(enc, dtype="float32")],
    )
    r.add_documents(DOCS)
    query = "cats hunt small mice"
    res = r.search(query, k=3)
    top = res[0]
    ex = explain_passage(r, query, top.id)
    late = ex["stages"]["late"]
    assert late["present"]
    q, d = enc.encode_query(query), enc.encode_documents([top.text])[0]
    sims = q @ d.T
    # The matched token attains the row maximum (a repeated word ties: either copy is right).
    best = [m["doc_token"] for m in late["matches"]]
    assert sims[np.arange(len(q)), best] == pytest.approx(sims.max(axis=1), abs=1e-6)
    assert [m["similarity"] for m in late["matches"]] == pytest.approx(sims.max(axis=1).tolist(), abs=1e-5)
    assert late["score"] == pytest.approx(float(sims.max(axis=1).sum()), abs=1e-4)
    assert late["score"] == pytest.approx(top.scores["late"], abs=1e-4)
    words = enc.tokenize_document(top.text)
    assert [m["query_text"] for m in late["matches"]] == enc.tokenize_query(query)
    assert [m["doc_text"] for m in late["matches"]] == [words[i] for i in best]
    assert "cats" in [m["doc_text"] for m in late["matches"]]
    r.close()


def test_explain_a_passage_no_stage_retrieved(hybrid_folder, encoder):
    r = ragfind.Retriever.load(hybrid_folder, encoder=encoder)
    chats = next(p for p in r.search("chats", k=6, stages=["bm25"]))
    ex = explain_passage(r, "programming language", chats.id, filters={"lang": "en"})
    assert not ex["retrieved"] and ex["fusion"]["terms"] == [] and ex["final_score"] is None
    assert ex["stages"]["bm25"]["present"] and ex["stages"]["bm25"]["score"] == 0.0
    r.close()


def test_explain_under_convex_fusion_sums_to_the_fused_score(encoder):
    r = ragfind.Retriever(
        encoder=encoder, chunk_size=None, fusion="convex", weights={"bm25": 0.7, "dense": 0.3}
    )
    r.add_documents(DOCS)
    query = "cats hunt mice"
    res = r.search(query, k=5)
    for hit in res:
        ex = explain_passage(r, query, hit.id)
        assert ex["fusion"]["method"] == "convex"
        assert ex["fusion"]["score"] == pytest.approx(hit.score, rel=1e-9, abs=1e-12)
        for t in ex["fusion"]["terms"]:
            assert t["score"] == pytest.approx(hit.scores[t["stage"]])
            assert t["lo"] <= t["score"] <= t["hi"]
    r.close()
