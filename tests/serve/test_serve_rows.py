"""The ``/search`` answer's bytes against the rendering it replaced: the result rows
(:func:`ragfind.serve.service.passage_json`) and :meth:`Service.search`'s answer, for SciFact
queries (BM25, and BM25 + a hashing encoder), with and without highlights, and for passages
holding NumPy numbers, NaN and infinities."""

from __future__ import annotations

import json
import math
from types import MappingProxyType, SimpleNamespace

import numpy as np
import pytest

import ragfind
from hash_encoders import HashEncoder
from ragfind.serve.app import render_json
from ragfind.serve.service import Service, passage_json


def old_passage_json(p, highlight=False):
    """The row as it was built before the one-call field read (the reference)."""

    def finite(v):
        f = float(v)
        return f if math.isfinite(f) else None

    out = {
        "doc_id": p.doc_id,
        "chunk_id": int(p.id),
        "title": p.title,
        "text": p.text,
        "score": finite(p.score),
        "ranks": {k: int(v) for k, v in p.ranks.items()},
        "scores": {k: finite(v) for k, v in p.scores.items()},
        "metadata": dict(p.metadata),
        "source": p.source,
        "start": p.start,
        "end": p.end,
    }
    if highlight:
        out["highlights"] = [[int(a), int(b)] for a, b in getattr(p, "highlights", ())]
    return out


def old_answer(res, highlight):
    timings = dict(res.timings)
    return {
        "results": [old_passage_json(p, highlight) for p in res],
        "timings": {k: v * 1e3 for k, v in timings.items()},
        "timings_unit": "ms",
        "cached": bool(res.cached),
    }


class Recording:
    """A retriever whose last search result is kept, to render it the old way too."""

    def __init__(self, retriever):
        self.retriever, self.last = retriever, None

    def search(self, *args, **kwargs):
        self.last = self.retriever.search(*args, **kwargs)
        return self.last

    def __len__(self):
        return len(self.retriever)


def scifact(data_dir, n=None):
    lines = (data_dir / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    docs = [json.loads(x) for x in lines[:n] if x]
    docs = [{"id": d["_id"], "title": d.get("title", ""), "text": d["text"]} for d in docs]
    queries = (data_dir / "scifact" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return docs, [json.loads(q)["text"] for q in queries if q]


def same_bytes(service, recording, body):
    new = render_json(service.search(body))
    old = render_json(old_answer(recording.last, body.get("highlight") is True))
    assert new == old
    # the stdlib codec (no orjson) gives the same JSON too
    assert json.loads(new) == json.loads(old)


@pytest.mark.parametrize("encoder", [None, "hash"])
def test_scifact_answers_render_as_before(data_dir, encoder):
    docs, queries = scifact(data_dir, None if encoder is None else 800)
    r = ragfind.Retriever(encoder=HashEncoder() if encoder else None, chunk_size=None, cache_size=0)
    r.add_documents(docs)
    rec = Recording(r)
    s = Service(rec, None)
    for n, q in enumerate(queries[:60]):
        same_bytes(s, rec, {"query": q, "k": 10})
        if n % 4 == 0:
            same_bytes(s, rec, {"query": q, "k": 25, "highlight": True})
        if n % 7 == 0:
            same_bytes(s, rec, {"query": [q, q.lower()], "k": 5, "highlight": False, "collapse": "document"})
    r.close()


def fake(score, ranks, scores, chunk_id=3, highlights=()):
    return SimpleNamespace(
        doc_id="d",
        id=chunk_id,
        title="T",
        text="caf\u00e9 \u2014 text",
        score=score,
        ranks=MappingProxyType(ranks),
        scores=MappingProxyType(scores),
        metadata=MappingProxyType({"year": 2020, "tags": ["a"]}),
        source="s",
        start=0,
        end=11,
        highlights=highlights,
    )


@pytest.mark.parametrize(
    "p",
    [
        fake(0.5, {"bm25": 1}, {"bm25": 2.5, "fused": 0.5}),
        fake(np.float32(0.1), {"bm25": np.int64(2)}, {"bm25": np.float32(0.3)}, chunk_id=np.int64(9)),
        fake(math.nan, {"bm25": True}, {"bm25": math.inf, "dense": -math.inf, "fused": math.nan}),
        fake(np.float64("nan"), {}, {"x": np.float64("inf"), "y": np.float64(1e-300)}, highlights=[(0, 4)]),
        fake(True, {"a": 1, "b": 2}, {"a": 1, "b": False}, highlights=[(np.int64(1), np.int32(3))]),
        fake(-0.0, {"bm25": 1}, {"bm25": 1e308, "fused": 5e-324}),
    ],
)
@pytest.mark.parametrize("highlight", [False, True])
def test_rows_with_odd_numbers_as_before(p, highlight):
    new, old = passage_json(p, highlight), old_passage_json(p, highlight)
    assert render_json(new) == render_json(old)
    assert json.dumps(new, allow_nan=False) == json.dumps(old, allow_nan=False)  # no NaN left
    assert [type(v) for v in new["scores"].values()] == [type(v) for v in old["scores"].values()]
    assert type(new["score"]) is type(old["score"]) and type(new["chunk_id"]) is int
