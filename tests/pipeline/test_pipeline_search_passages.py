"""Retriever search results (ids, scores, ranks, highlights) against the plain path they must
equal: the BM25 index's own ranking at the full candidate depth, fused by RRF, with every
passage highlighted eagerly by :func:`ragfind.pipeline.highlights.highlight`."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ragfind
from ragfind import _core
from ragfind.pipeline.highlights import highlight
from ragfind.pipeline.results import Passage, pending

K = 10


def _load(data_dir, name: str):
    docs, queries = [], []
    with open(data_dir / name / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append({"id": d["_id"], "title": d.get("title") or "", "text": d["text"]})
    with open(data_dir / name / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line in f][:150]
    return docs, queries


@pytest.fixture(scope="module", params=["scifact", "cranfield"])
def built(request, data_dir):
    docs, queries = _load(data_dir, request.param)
    r = ragfind.Retriever(encoder=None, cache_size=0)
    r.add_documents(docs)
    yield r, queries
    r.close()


def _expected(r, queries: list, k: int) -> list:
    """(ids, fused scores, {id: {stage: (rank, score)}}) of the unshortened path: every phrasing
    searched ``candidates`` deep, fused with RRF over all of them."""
    lists = [r.bm25.search(q, r.candidates) for q in queries]
    lists = [(np.asarray(i, np.int64), np.asarray(s)) for i, s in lists]
    keep = [x for x in lists if len(x[0])]
    if not keep:
        return [], [], {}
    ids, fused = _core.rrf([x[0] for x in keep], r.rrf_k, None, k)
    ranks: dict = {}
    for got_ids, got_scores in lists:
        for rank, (i, s) in enumerate(zip(got_ids.tolist(), got_scores.tolist()), 1):
            per = ranks.setdefault(i, {})
            if "bm25" not in per or (rank, -s) < (per["bm25"][0], -per["bm25"][1]):
                per["bm25"] = (rank, s)
    return ids.tolist(), fused.tolist(), ranks


def _phrasings(q: str) -> list:
    words = q.split()
    return [q, [q, words[0]], f'"{" ".join(words[:2])}" {q}']


def test_search_equals_the_full_depth_path(built):
    r, queries = built
    analyzer = r.bm25.analyzer
    checked = 0
    for text in queries:
        for query in _phrasings(text):
            phrasings = [query] if isinstance(query, str) else query
            res = r.search(query, k=K)
            ids, fused, ranks = _expected(r, phrasings, K)
            assert [p.id for p in res] == ids, query
            assert [p.score for p in res] == fused, query
            for p in res:
                assert dict(p.ranks) == {"bm25": ranks[p.id]["bm25"][0]}
                assert p.scores["bm25"] == ranks[p.id]["bm25"][1]
                assert p.highlights == highlight(p.text, phrasings, analyzer), (query, p.id)
                checked += 1
    assert checked > 1000


def test_highlights_computed_once_on_first_read():
    calls = []

    def compute(text):
        calls.append(text)
        return [(0, 2)]

    p = Passage(1, "d", "text", "", "d", 1.0, 0, 4, highlights=pending(compute, "text"))
    assert calls == []
    assert p.highlights == [(0, 2)] and p.highlights is p.highlights
    assert calls == ["text"]
    assert Passage(1, "d", "text", "", "d", 1.0, 0, 4).highlights == []


def test_lazy_highlights_survive_the_results_cache_and_copies():
    r = ragfind.Retriever(encoder=None, chunk_size=None)
    r.add_documents(
        [
            {"id": "a", "text": "Defibrillators save lives. A defibrillator is simple."},
            {"id": "b", "text": "Nothing to see here about hearts."},
        ]
    )
    first = r.search("defibrillator", k=2)
    again = r.search("defibrillator", k=2)
    assert again.cached and again[0] is first[0]
    want = highlight(first[0].text, "defibrillator", r.bm25.analyzer)
    assert again[0].highlights == want == first[0].highlights
    import dataclasses

    fresh = r.search("defibrillator", k=2, use_cache=False)[0]
    assert dataclasses.replace(fresh, score=0.0).highlights == want
    assert "highlights=[(0, 14)" in repr(r.search("defibrillator", k=1, use_cache=False)[0])
    r.close()


def test_passages_and_results_are_frozen_slotted_and_pickle():
    import dataclasses
    import pickle

    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    r.add_documents(
        [
            {"id": "a", "text": "Défibrillateurs: defibrillators save lives.", "metadata": {"lang": "fr"}},
            {"id": "b", "text": "A defibrillator is simple.", "title": "t"},
        ]
    )
    res = r.search("defibrillator", k=2)
    assert [p.doc_id for p in res] == ["b", "a"]
    for p in res:
        assert not hasattr(p, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.score = 1.0  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.anything = 1  # type: ignore[attr-defined]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del p.text
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.cached = True  # type: ignore[misc]
    # A mappingproxy does not pickle: passages pickle their views as dicts and get views back.
    back = pickle.loads(pickle.dumps(res))
    assert back == res and list(back) == list(res) and back.timings == res.timings
    for got, want in zip(back, res):
        assert (got.metadata, got.ranks, got.scores, got.highlights) == (
            want.metadata,
            want.ranks,
            want.scores,
            want.highlights,
        )
        assert type(got.scores).__name__ == "mappingproxy"
    assert res[1].metadata == {"lang": "fr"} and res[1].text.startswith("Défibrillateurs")
    assert [f.name for f in dataclasses.fields(Passage)][-1] == "highlights"
    r.close()


def test_search_passages_are_not_walked_by_the_collector_and_are_freed():
    """The passages a search builds (one list natively, several in Python) leave the cyclic
    collector's lists; they are still freed when dropped."""
    import gc
    import tracemalloc

    docs = [{"id": f"d{i}", "text": f"alpha beta {'gamma ' * (i % 7)} delta {i}"} for i in range(300)]
    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    r.add_documents(docs)
    one = r.search("gamma delta", k=5)  # one list: built natively
    two = r.search(["gamma", "beta delta"], k=5)  # two phrasings: fused, built in Python
    assert len(one) == len(two) == 5
    for p in [*one, *two]:
        assert not gc.is_tracked(p)
        assert p.highlights and p.text  # usable as before
    assert gc.is_tracked(one)  # the result itself (its timings dict is the caller's to change)
    for _ in range(200):  # warm
        r.search("gamma delta", k=5)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(2000):
        assert r.search("gamma delta", k=5).passages[0].highlights
        r.search(["gamma", "beta delta"], k=5)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 200_000, grown  # 4,000 results of 5 passages would hold megabytes
    r.close()
