"""Retriever.fit_fusion_weight: the same weight as fit_convex_weight over the stages' own lists,
applied as convex fusion, kept by save/load, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind
from hash_encoders import HashEncoder

TOPICS = ["apple orchard", "ship harbour", "violin concert", "mountain glacier", "bread oven"]
DOCS = [
    {
        "id": f"{t.split()[0]}{j}",
        "text": f"{t} note {j} " + " ".join(f"w{(7 * j + i) % 40}" for i in range(5)),
    }
    for t in TOPICS
    for j in range(6)
]
QUERIES = {f"q{i}": t for i, t in enumerate(TOPICS)}
QRELS = {f"q{i}": {f"{t.split()[0]}{j}": 1 for j in range(3)} for i, t in enumerate(TOPICS)}


def make(**kw):
    r = ragfind.Retriever(encoder=HashEncoder(), chunk_size=None, contextualize=False, candidates=20, **kw)
    r.add_documents(DOCS)
    return r


def test_same_weight_as_fit_convex_weight_over_the_stage_lists():
    r = make()
    bm25, dense = r._first_of("bm25"), r._first_of("dense")
    doc_ids = [d["id"] for d in DOCS]  # chunk_size=None: chunk i is document i
    first = {q: bm25.search(t, 20) for q, t in QUERIES.items()}
    second = {q: dense.search(dense.embed(t), 20) for q, t in QUERIES.items()}
    want = ragfind.fit_convex_weight(first, second, QRELS, doc_ids=doc_ids)
    got = r.fit_fusion_weight(QUERIES, QRELS, apply=False)
    assert got[0] == want[0]
    assert got[1] == pytest.approx(want[1])
    assert r.fusion == "rrf"


def test_applied_searched_and_saved(tmp_path):
    r = make()
    w, means = r.fit_fusion_weight(QUERIES, QRELS, grid=[0.0, 0.3, 0.7, 1.0])
    assert set(means) == {0.0, 0.3, 0.7, 1.0} and w in means
    assert r.fusion == "convex" and r.weights == {"bm25": w, "dense": pytest.approx(1 - w)}
    lists = [r._first_of("bm25").search("apple orchard", 20)]
    dense = r._first_of("dense")
    lists.append(dense.search(dense.embed("apple orchard"), 20))
    ids, _ = ragfind.fuse_scores(lists, norm="min-max", method="sum", weights=[w, 1 - w], top_k=5)
    res = r.search("apple orchard", k=5)
    assert res.doc_ids == [DOCS[int(i)]["id"] for i in ids]
    r.save(tmp_path / "r")
    back = ragfind.Retriever.load(tmp_path / "r", encoder=HashEncoder())
    assert back.fusion == "convex" and back.weights == r.weights
    assert back.search("apple orchard", k=5).doc_ids == res.doc_ids


def test_refusals():
    with pytest.raises(ValueError, match="'bm25' and 'dense'"):
        ragfind.Retriever(encoder=None).fit_fusion_weight(QUERIES, QRELS)
    with pytest.raises(ValueError, match="no query"):
        make().fit_fusion_weight({"other": "apple"}, QRELS)
    assert np.isfinite(make().fit_fusion_weight(QUERIES, QRELS)[0])
