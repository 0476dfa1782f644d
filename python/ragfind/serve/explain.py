"""Why a passage ranked where it did: per stage, for one query and one chunk.

Each stage is asked for its :class:`ragfind.Explanation` (``stage.explain``), written in the
shape the page reads:

- BM25: per query term tf, df, N, avgdl, the document length, idf, the length norm and the
  contribution (:meth:`ragfind.BM25Index.explain`), plus :func:`bm25_rescore`, the same formulas
  as the C++ scorer, so a page (``static/app.js`` holds the JavaScript twin) can re-score for any
  k1 and b exactly as the server would;
- dense: the cosine similarity of the query embedding and the stored passage vector;
- fusion: each stage's rank and its term: ``weight / (rrf_k + rank)`` under RRF, or under convex
  fusion ``weight * (score - lo) / (hi - lo)`` with ``lo``, ``hi`` the stage list's own bounds;
- late interaction: each query token, its best-matching passage token and their similarity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ragfind.errors import UnknownIdError
from ragfind.index import Explanation

__all__ = ["bm25_idf", "bm25_tf_component", "bm25_rescore", "bm25_terms", "check_params", "explain_passage"]


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


def bm25_rescore(
    explanation: Explanation | Mapping[str, Any], k1: float | None = None, b: float | None = None
) -> dict:
    """The explanation re-computed for other ``k1`` / ``b`` (default: its own), term by term.

    ``explanation``: what :meth:`ragfind.BM25Index.explain` returns, or its page dict
    (:func:`bm25_terms`). Returns ``{"k1", "b", "score", "terms": [{term, tf, df, idf,
    length_norm, tf_component, contribution}]}``. With the explanation's own parameters it
    reproduces its score.
    """
    if isinstance(explanation, Explanation):
        explanation = bm25_terms(explanation)
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


def bm25_terms(explanation: Explanation) -> dict:
    """A ``"bm25"`` :class:`~ragfind.Explanation` as the page's dict: ``score``, the
    document-wide figures (``method``, ``k1``, ``b``, ``delta``, ``num_docs``, ``doc_len``,
    ``avgdl``, ``phrases`` for a phrase query) and ``terms`` (per query term ``term``, its
    figures and ``contribution``)."""
    terms = [
        {"term": c.name, **c.detail, "contribution": c.value}
        for c in explanation.contributions
        if "phrase_freq" not in c.detail
    ]
    return {"score": explanation.score, **explanation.detail, "terms": terms}


def _bm25f_terms(explanation: Explanation) -> dict:
    """A ``"bm25f"`` Explanation as the page's dict: ``score``, ``k1``, ``num_docs`` and per
    query term its figures with ``fields`` (per field tf, lengths, weight, b, share)."""
    fields: dict = {}
    for c in explanation.contributions:
        per = {k: v for k, v in c.detail.items() if k not in ("term", "field")}
        fields.setdefault(c.detail["term"], {})[c.detail["field"]] = per
    detail = dict(explanation.detail)
    terms = [{**t, "fields": fields.get(t["term"], {})} for t in detail.pop("terms")]
    return {"score": explanation.score, **detail, "terms": terms}


def _page(kind: str, ex: Explanation, k1: float | None, b: float | None) -> dict:
    """The page's detail of one stage from its Explanation (the shape ``static/app.js`` reads)."""
    if ex.kind == "bm25":
        out = {"kind": kind, "present": True, **bm25_terms(ex)}
        if k1 is not None or b is not None:
            out["rescored"] = bm25_rescore(out, k1, b)
        return out
    if ex.kind == "bm25f":
        return {"kind": kind, "present": True, **_bm25f_terms(ex)}
    if ex.kind == "dense":
        return {
            "kind": kind,
            "present": True,
            "metric": ex.detail.get("metric"),
            "dim": ex.detail.get("dim"),
            "cosine": float(ex.score),
        }
    if ex.kind == "late":
        matches = [
            {
                "query_token": c.detail["query_token"],
                "doc_token": c.detail["doc_token"],
                "similarity": c.value,
                "query_text": c.detail["query_text"],
                "doc_text": c.detail["doc_text"],
            }
            for c in ex.contributions
        ]
        return {"kind": kind, "present": True, "score": ex.score, "matches": matches}
    d = ex.to_dict()
    return {
        "kind": kind,
        "present": True,
        "score": d["score"],
        "detail": d["detail"],
        "contributions": d["contributions"],
    }


def _stage_detail(stage: Any, query: str, chunk_id: int, text: str, k1: Any, b: Any, ranked: bool) -> dict:
    """What one stage says about the chunk: its explanation when it has ``explain``."""
    explain = getattr(stage, "explain", None)
    if explain is None:
        return {"kind": "other", "present": ranked}
    kind = getattr(stage, "kind", None) or "other"
    try:
        ex = explain(query, chunk_id, text=text)
    except UnknownIdError:
        return {"kind": kind, "present": False}
    return _page(kind, ex, k1, b)


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

    Returns ``{"chunk_id", "doc_id", "text", "fusion": {"method", "rrf_k", "terms": [{stage,
    rank, weight, term}], "score"}, "final_score", "stages": {name: detail}}`` (convex fusion's
    terms also hold the stage ``score`` and its list's ``lo`` and ``hi``); ``stages`` holds a
    ``bm25`` / ``dense`` / ``late`` detail per stage of that kind (``present`` False when the
    stage does not hold the chunk). The ranks are those of the search the service runs
    (``candidates`` deep, the same filters).

    Raises:
        ragfind.UnknownIdError: no chunk ``chunk_id`` in the store. ValueError / TypeError: a bad
        query, filter, k1 or b.
    """
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
    method = getattr(retriever, "fusion", "rrf")
    terms, fused = [], 0.0
    for s in retriever.first_stages:
        if s.name not in ranks:
            continue
        w = float(retriever.weights.get(s.name, 1.0))
        if method == "convex":
            # The bounds of the list this stage handed to fusion (the same depth and filters).
            own = retriever.search(
                query, k=max(retriever.candidates, 1), filters=filters, stages=[s.name], use_cache=False
            )
            listed = [float(p.scores[s.name]) for p in own]
            lo, hi = min(listed), max(listed)
            score = float(hit.scores[s.name])
            # A list of equal scores maps each of them to 1, as the fusion kernel does.
            term = w * ((score - lo) / (hi - lo) if hi > lo else 1.0)
            item = {"stage": s.name, "rank": ranks[s.name], "weight": w, "score": score, "lo": lo, "hi": hi}
        else:
            term = w / (retriever.rrf_k + ranks[s.name])
            item = {"stage": s.name, "rank": ranks[s.name], "weight": w}
        fused += term
        terms.append({**item, "term": term})
    stages: dict = {}
    for s in retriever.first_stages + retriever.rerank_stages:
        stages[s.name] = _stage_detail(s, query, int(chunk_id), indexed, k1, b, s.name in ranks)
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
        "fusion": {"method": method, "rrf_k": retriever.rrf_k, "terms": terms, "score": fused},
        "stages": stages,
    }
