"""Why a passage ranked where it did: per stage, for one query and one chunk.

- BM25: per query term tf, df, N, avgdl, the document length, idf, the length norm and the
  contribution (:meth:`ragfind.BM25Index.explain`), plus :func:`bm25_rescore`, the same formulas
  as the C++ scorer, so a page (``static/app.js`` holds the JavaScript twin) can re-score for any
  k1 and b exactly as the server would;
- dense: the cosine similarity of the query embedding and the stored passage vector;
- fusion: each stage's rank and its reciprocal-rank term ``weight / (rrf_k + rank)``;
- late interaction: each query token, its best-matching passage token and their similarity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["bm25_idf", "bm25_tf_component", "bm25_rescore", "check_params", "explain_passage"]


def bm25_idf(method: str, df: float, n: float) -> float:
    """The idf of a term in ``df`` of ``n`` documents (``ragfind/bm25/scoring.hpp``)."""
    if method == "robertson":
        return math.log(max(1.0, (n - df + 0.5) / (df + 0.5)))
    if method == "lucene":
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    if method == "atire":
        return math.log(n / df)
    if method == "bm25l":
        return math.log((n + 1.0) / (df + 0.5))
    if method in ("bm25+", "bm25plus"):
        return math.log((n + 1.0) / df)
    raise ValueError(f"method = {method!r}; expected a BM25 variant")


def bm25_tf_component(
    method: str, k1: float, b: float, delta: float, tf: float, dl: float, avgdl: float
) -> float:
    """The term-frequency part for ``tf`` occurrences in a document of ``dl`` tokens."""
    norm = (1.0 - b + b * dl / avgdl) if avgdl > 0 else 1.0
    if tf <= 0:
        if method == "bm25l":
            return (k1 + 1) * delta / (k1 + delta)
        if method in ("bm25+", "bm25plus"):
            return delta
        return 0.0
    if method in ("lucene", "robertson"):
        return tf / (k1 * norm + tf)
    if method == "atire":
        return tf * (k1 + 1) / (tf + k1 * norm)
    if method == "bm25l":
        c = tf / norm
        return (k1 + 1) * (c + delta) / (k1 + c + delta)
    if method in ("bm25+", "bm25plus"):
        return (k1 + 1) * tf / (k1 * norm + tf) + delta
    raise ValueError(f"method = {method!r}; expected a BM25 variant")


def check_params(k1: float | None, b: float | None) -> None:
    """ValueError unless ``k1`` is a finite number >= 0 and ``b`` one in [0, 1] (None: unset)."""
    for name, v, hi in (("k1", k1, math.inf), ("b", b, 1.0)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= hi and math.isfinite(v)):
            want = "a finite number >= 0" if name == "k1" else "a number in [0, 1]"
            raise ValueError(f"{name} = {v!r}; expected {want}")


def bm25_rescore(explanation: Mapping[str, Any], k1: float | None = None, b: float | None = None) -> dict:
    """The explanation re-computed for other ``k1`` / ``b`` (default: its own), term by term.

    Returns ``{"k1", "b", "score", "terms": [{term, tf, df, idf, length_norm, tf_component,
    contribution}]}``. With the explanation's own parameters it reproduces its score.
    """
    method = explanation["method"]
    k1 = float(explanation["k1"] if k1 is None else k1)
    b = float(explanation["b"] if b is None else b)
    check_params(k1, b)
    delta = float(explanation["delta"])
    n, dl, avgdl = float(explanation["num_docs"]), float(explanation["doc_len"]), float(explanation["avgdl"])
    terms, total = [], 0.0
    for t in explanation["terms"]:
        df = float(t["df"])
        norm = (1.0 - b + b * dl / avgdl) if avgdl > 0 else 1.0
        if df == 0:
            idf = comp = contrib = 0.0
        else:
            idf = bm25_idf(method, df, n)
            comp = bm25_tf_component(method, k1, b, delta, float(t["tf"]), dl, avgdl)
            contrib = t["query_tf"] * idf * comp
        total += contrib
        terms.append(
            {
                "term": t["term"],
                "query_tf": t["query_tf"],
                "tf": t["tf"],
                "df": t["df"],
                "idf": idf,
                "length_norm": norm,
                "tf_component": comp,
                "contribution": contrib,
            }
        )
    return {"k1": k1, "b": b, "score": total, "terms": terms}


def _stage_kind(stage: Any) -> str:
    from ragfind.pipeline.stages.bm25 import BM25Stage
    from ragfind.pipeline.stages.dense import DenseStage
    from ragfind.pipeline.stages.late import LateInteractionStage

    if isinstance(stage, BM25Stage):
        return "bm25"
    if isinstance(stage, DenseStage):
        return "dense"
    if isinstance(stage, LateInteractionStage):
        return "late"
    return "other"


def _bm25(stage: Any, query: str, chunk_id: int, k1: float | None, b: float | None) -> dict:
    from ragfind.errors import UnknownIdError

    try:
        ex = dict(stage.index.explain(query, chunk_id))
    except UnknownIdError:
        return {"kind": "bm25", "present": False}
    ex.pop("doc_id", None)
    out = {"kind": "bm25", "present": True, **ex}
    if k1 is not None or b is not None:
        out["rescored"] = bm25_rescore(ex, k1, b)
    return out


def _dense(stage: Any, query: str, chunk_id: int) -> dict:
    import numpy as np

    from ragfind.ids import IdFilter

    vec = stage.embed(query)
    ids, scores = stage.index.search(vec, 1, filter=IdFilter([chunk_id]))
    if not len(ids):
        return {"kind": "dense", "present": False}
    return {
        "kind": "dense",
        "present": True,
        "metric": stage.index.metric,
        "dim": int(stage.index.dim),
        "cosine": float(np.asarray(scores)[0]),
    }


def _late(stage: Any, query: str, chunk_id: int, text: str) -> dict:
    index = getattr(stage, "_index", None)
    if index is None or chunk_id not in index:
        return {"kind": "late", "present": False}
    enc = stage.encoder
    q = enc.encode_query(query)
    qt = enc.tokenize_query(query) if hasattr(enc, "tokenize_query") else None
    dt = enc.tokenize_document(text) if hasattr(enc, "tokenize_document") else None
    try:
        ex = index.explain(q, chunk_id, query_tokens=qt, doc_tokens=dt)
    except ValueError:  # labels that do not line up with the stored rows: explain without them
        ex = index.explain(q, chunk_id)
    return {
        "kind": "late",
        "present": True,
        "score": ex.score,
        "matches": [
            {
                "query_token": m.query_token,
                "doc_token": m.doc_token,
                "similarity": m.similarity,
                "query_text": m.query_text,
                "doc_text": m.doc_text,
            }
            for m in ex.matches
        ],
    }


def explain_passage(
    retriever: Any,
    query: str,
    chunk_id: int,
    *,
    filters: Mapping[str, Any] | None = None,
    k1: float | None = None,
    b: float | None = None,
) -> dict:
    """The explanation of chunk ``chunk_id`` for ``query`` on a :class:`ragfind.Retriever`.

    Returns ``{"chunk_id", "doc_id", "text", "fusion": {"rrf_k", "terms": [{stage, rank,
    weight, term}], "score"}, "final_score", "stages": {name: detail}}``; ``stages`` holds a
    ``bm25`` / ``dense`` / ``late`` detail per stage of that kind (``present`` False when the
    stage does not hold the chunk). The ranks are those of the search the service runs
    (``candidates`` deep, the same filters).

    Raises:
        ragfind.UnknownIdError: no chunk ``chunk_id`` in the store. ValueError / TypeError: a bad
        query, filter, k1 or b.
    """
    from ragfind.errors import UnknownIdError

    rows = retriever.store.fetch([int(chunk_id)])
    if int(chunk_id) not in rows:
        raise UnknownIdError(f"chunk_id: [{int(chunk_id)}] not in the store")
    row = rows[int(chunk_id)]
    text = row[2]
    context = row[7]
    indexed = f"{context}\n{text}" if context else text
    check_params(k1, b)
    res = retriever.search(query, k=max(retriever.candidates, 1), filters=filters, use_cache=False)
    hit = next((p for p in res if p.id == int(chunk_id)), None)
    ranks = dict(hit.ranks) if hit is not None else {}
    terms, fused = [], 0.0
    for s in retriever.first_stages:
        if s.name in ranks:
            w = float(retriever.weights.get(s.name, 1.0))
            term = w / (retriever.rrf_k + ranks[s.name])
            fused += term
            terms.append({"stage": s.name, "rank": ranks[s.name], "weight": w, "term": term})
    stages: dict = {}
    for s in retriever.first_stages + retriever.rerank_stages:
        kind = _stage_kind(s)
        if kind == "bm25":
            stages[s.name] = _bm25(s, query, int(chunk_id), k1, b)
        elif kind == "dense":
            stages[s.name] = _dense(s, query, int(chunk_id))
        elif kind == "late":
            stages[s.name] = _late(s, query, int(chunk_id), indexed)
        else:
            stages[s.name] = {"kind": "other", "present": s.name in ranks}
        if s.name in ranks:
            stages[s.name]["rank"] = ranks[s.name]
            stages[s.name]["stage_score"] = float(hit.scores[s.name])
    return {
        "chunk_id": int(chunk_id),
        "doc_id": row[1],
        "title": row[3],
        "text": text,
        "query": query,
        "retrieved": hit is not None,
        "final_score": None if hit is None else hit.score,
        "fusion": {"rrf_k": retriever.rrf_k, "terms": terms, "score": fused},
        "stages": stages,
    }
