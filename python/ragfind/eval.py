"""Retrieval evaluation: BEIR-layout collections and the standard ranking metrics.

The metrics follow ``trec_eval`` (and therefore ``pytrec_eval``, which wraps it) exactly:

- a run is ranked by score, highest first; **ties are broken by document id in descending
  string order**, as trec_eval does (ranx keeps the run's insertion order instead, so the two
  differ on tied scores unless the run is already in that order);
- a document is *relevant* when its judgement is ``>= relevance_level`` (default 1); unjudged
  documents are not relevant and have gain 0;
- ``ndcg@k``: DCG with linear gains (the judgement itself, negative judgements count as 0) and a
  ``log2(rank + 1)`` discount, divided by the DCG of the ideal ordering of all judged documents
  (trec_eval ``ndcg_cut.k``; ranx ``ndcg@k``);
- ``recall@k``: relevant documents in the top k / all relevant documents of the query;
- ``precision@k``: relevant documents in the top k / k (trec_eval ``P.k``);
- ``mrr@k``: 1 / rank of the first relevant document within the top k, else 0 (trec_eval
  ``recip_rank`` without a cut);
- ``map@k``: the sum of precision at the rank of each relevant document in the top k, divided
  by the number of relevant documents of the query (trec_eval ``map_cut.k``; ``map`` = no cut).

Only queries with at least one relevant judgement are scored. A scored query that is missing
from the run, or whose run is empty, scores 0 on every metric and counts in the mean (trec_eval
``-c``); pytrec_eval leaves missing queries out of its output instead. Queries of the run that
have no judgements are ignored.

Example::

    from ragfind.eval import load_beir, evaluate

    data = load_beir("../shared/data/scifact")
    run = {qid: dict(zip(*index.search(text, k=100))) for qid, text in data.queries.items()}
    result = evaluate(data.qrels, run, ["ndcg@10", "recall@100"])
    print(result.mean["ndcg@10"])
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BeirDataset",
    "EvalResult",
    "evaluate",
    "load_beir",
    "load_qrels",
    "rank_run",
    "METRICS",
]

#: The metric names ``evaluate`` understands; each takes an optional ``@k`` cutoff.
METRICS = ("ndcg", "recall", "precision", "mrr", "map")

# A run: {query id: {doc id: score}}, {query id: [doc ids best first]}, or
# {query id: (ids, scores)} as returned by BM25Index.search.
Run = Mapping[str, Any]
Qrels = Mapping[str, Mapping[str, int]]


# ----------------------------------------------------------------------------------------------
# Loading BEIR-layout folders
# ----------------------------------------------------------------------------------------------


@dataclass
class BeirDataset:
    """A BEIR-layout collection loaded into memory.

    Attributes:
        path: the folder it was read from.
        split: the qrels split (``qrels/<split>.tsv``).
        corpus: ``{doc id: {"title": str, "text": str}}`` in file order (empty when loaded with
            ``load_corpus=False``).
        queries: ``{query id: text}`` for the *scored* queries only (those with at least one
            judgement >= 1 in the split), in file order.
        qrels: ``{query id: {doc id: judgement}}`` for the same queries, every judgement kept
            (zeros and negatives included, as trec_eval reads them).
    """

    path: Path
    split: str
    corpus: dict[str, dict[str, str]] = field(repr=False)
    queries: dict[str, str] = field(repr=False)
    qrels: dict[str, dict[str, int]] = field(repr=False)

    def documents(self, separator: str = " ") -> tuple[list[str], list[str]]:
        """Returns ``(doc ids, texts)`` with each text = title + separator + text (BEIR's
        convention; a document without a title is its text alone)."""
        ids = list(self.corpus)
        texts = [
            (d["title"] + separator + d["text"]) if d["title"] else d["text"] for d in self.corpus.values()
        ]
        return ids, texts

    def query_items(self) -> tuple[list[str], list[str]]:
        """Returns ``(query ids, texts)`` of the scored queries, in file order."""
        return list(self.queries), list(self.queries.values())

    def __repr__(self) -> str:
        return (
            f"BeirDataset(path={str(self.path)!r}, split={self.split!r}, documents={len(self.corpus)}, "
            f"queries={len(self.queries)}, judgements={sum(len(v) for v in self.qrels.values())})"
        )


def _read_jsonl(path: Path) -> Iterable[tuple[int, dict]]:
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict) or "_id" not in obj:
                raise ValueError(f'{path}:{line_no}: expected a JSON object with an "_id" field')
            yield line_no, obj


def load_qrels(path: str | Path, relevance_level: int = 1) -> dict[str, dict[str, int]]:
    """Reads relevance judgements.

    Accepts BEIR's TSV (``query-id<TAB>corpus-id<TAB>score``, with or without the header line)
    and TREC qrels (``qid iteration docid rel``, whitespace separated).

    Args:
        path: the qrels file.
        relevance_level: judgements at or above it are relevant; only queries with at least one
            relevant judgement are returned.

    Returns:
        ``{query id: {doc id: judgement}}`` in file order, all of a kept query's judgements.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a line has the wrong number of fields or a non-integer judgement, or one
            query judges the same document twice with different values.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"qrels file not found: {path}")
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            parts = line.split("\t") if "\t" in line else line.split()
            parts = [p.strip() for p in parts]
            if not any(parts):
                continue
            if len(parts) == 4:  # TREC: qid iteration docid rel
                qid, docid, rel_text = parts[0], parts[2], parts[3]
            elif len(parts) == 3:
                qid, docid, rel_text = parts
            else:
                raise ValueError(
                    f"{path}:{line_no}: expected 3 (BEIR) or 4 (TREC) fields, got {len(parts)}: {line!r}"
                )
            try:
                rel = int(rel_text)
            except ValueError:
                if line_no == 1:  # header line, e.g. "query-id corpus-id score"
                    continue
                raise ValueError(
                    f"{path}:{line_no}: judgement must be an integer, got {rel_text!r}"
                ) from None
            judged = qrels.setdefault(qid, {})
            if docid in judged and judged[docid] != rel:
                raise ValueError(
                    f"{path}:{line_no}: query {qid!r} judges document {docid!r} twice "
                    f"({judged[docid]} and {rel})"
                )
            judged[docid] = rel
    return {q: d for q, d in qrels.items() if any(r >= relevance_level for r in d.values())}


def load_beir(
    path: str | Path, split: str = "test", load_corpus: bool = True, relevance_level: int = 1
) -> BeirDataset:
    """Loads a BEIR-layout folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

    Args:
        path: the collection folder.
        split: which qrels file to read (``test``, ``train``, ``dev``).
        load_corpus: read ``corpus.jsonl`` (set False to evaluate a saved run without it).
        relevance_level: judgements at or above it are relevant (see ``load_qrels``).

    Returns:
        a ``BeirDataset`` holding only the scored queries (at least one relevant judgement).

    Raises:
        FileNotFoundError: the folder or one of its files is missing.
        ValueError: a malformed line, a duplicate id, or a judged query absent from
            ``queries.jsonl``.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"BEIR folder not found: {path}")
    qrels = load_qrels(path / "qrels" / f"{split}.tsv", relevance_level=relevance_level)

    corpus: dict[str, dict[str, str]] = {}
    if load_corpus:
        corpus_path = path / "corpus.jsonl"
        if not corpus_path.is_file():
            raise FileNotFoundError(f"corpus file not found: {corpus_path}")
        for line_no, obj in _read_jsonl(corpus_path):
            doc_id = str(obj["_id"])
            if doc_id in corpus:
                raise ValueError(f"{corpus_path}:{line_no}: duplicate document id {doc_id!r}")
            corpus[doc_id] = {"title": str(obj.get("title") or ""), "text": str(obj.get("text") or "")}

    queries_path = path / "queries.jsonl"
    if not queries_path.is_file():
        raise FileNotFoundError(f"queries file not found: {queries_path}")
    all_queries: dict[str, str] = {}
    for _, obj in _read_jsonl(queries_path):
        all_queries[str(obj["_id"])] = str(obj.get("text") or "")
    missing = [q for q in qrels if q not in all_queries]
    if missing:
        raise ValueError(
            f"{len(missing)} judged queries of {path / 'qrels' / f'{split}.tsv'} are not in "
            f"{queries_path} (first: {missing[0]!r})"
        )
    queries = {q: t for q, t in all_queries.items() if q in qrels}
    qrels = {q: qrels[q] for q in queries}  # same order as the queries file
    return BeirDataset(path=path, split=split, corpus=corpus, queries=queries, qrels=qrels)


# ----------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------


def _is_pair(value: Any) -> bool:
    if not isinstance(value, tuple) or len(value) != 2:
        return False
    return all(not isinstance(v, (str, bytes)) and hasattr(v, "__len__") for v in value)


def rank_run(ranking: Any, qid: str = "?") -> list[str]:
    """Turns one query's results into document ids, best first, with trec_eval's tie order.

    Args:
        ranking: ``{doc id: score}`` (ranked by score, highest first, ties broken by doc id in
            descending string order); a sequence of doc ids already best first; or a pair
            ``(ids, scores)`` of equal length, as ``BM25Index.search`` returns (ranked like a
            dict). Doc ids are converted with ``str``.
        qid: the query id, used in error messages.

    Returns:
        the doc ids in rank order.

    Raises:
        ValueError: a NaN score, a duplicate doc id, or ids and scores of different lengths.
        TypeError: ``ranking`` is none of the above.
    """
    if isinstance(ranking, Mapping):
        items = [(str(d), float(s)) for d, s in ranking.items()]
    elif _is_pair(ranking):
        ids, scores = ranking
        if len(ids) != len(scores):
            raise ValueError(
                f"run for query {qid!r}: ids and scores differ in length ({len(ids)} != {len(scores)})"
            )
        ids = ids.tolist() if isinstance(ids, np.ndarray) else ids
        scores = scores.tolist() if isinstance(scores, np.ndarray) else scores
        items = [(str(d), float(s)) for d, s in zip(ids, scores)]
        if len({d for d, _ in items}) != len(items):
            raise ValueError(f"run for query {qid!r}: a document id appears twice")
    elif isinstance(ranking, (Sequence, np.ndarray)) and not isinstance(ranking, (str, bytes)):
        ranked = [str(d) for d in (ranking.tolist() if isinstance(ranking, np.ndarray) else ranking)]
        if len(set(ranked)) != len(ranked):
            raise ValueError(f"run for query {qid!r}: a document id appears twice in the ranked list")
        return ranked
    else:
        raise TypeError(
            f"run for query {qid!r} must be a {{doc id: score}} mapping, a list of doc ids or an "
            f"(ids, scores) pair, got {type(ranking).__name__}"
        )
    for d, s in items:
        if math.isnan(s):
            raise ValueError(f"run for query {qid!r}: document {d!r} has a NaN score")
    # trec_eval: score descending, then doc id descending (strcmp; Python's code-point order is
    # the same as UTF-8 byte order). Two stable sorts give that order.
    items.sort(key=lambda x: x[0], reverse=True)
    items.sort(key=lambda x: x[1], reverse=True)
    return [d for d, _ in items]


# ----------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------

_METRIC_RE = re.compile(r"^\s*(ndcg|recall|precision|p|mrr|map)\s*(?:@\s*(\d+))?\s*$", re.IGNORECASE)


def _parse_metric(name: str) -> tuple[str, int | None]:
    if not isinstance(name, str):
        raise TypeError(f"metric names must be strings like 'ndcg@10', got {name!r}")
    m = _METRIC_RE.match(name)
    if not m:
        raise ValueError(
            f"unknown metric {name!r}; expected one of {', '.join(METRICS)}, optionally with @k "
            "(e.g. 'ndcg@10', 'recall@100', 'mrr', 'map@1000')"
        )
    kind = m.group(1).lower()
    kind = "precision" if kind == "p" else kind
    k = int(m.group(2)) if m.group(2) is not None else None
    if k is not None and k <= 0:
        raise ValueError(f"metric {name!r}: the cutoff k must be >= 1, got {k}")
    if kind == "precision" and k is None:
        raise ValueError(f"metric {name!r}: precision needs a cutoff, e.g. 'precision@10'")
    return kind, k


def _query_scores(
    judged: Mapping[str, int], ranked: list[str], metrics: list[tuple[str, str, int | None]], level: int
) -> dict[str, float]:
    """Every requested metric for one query; ``judged`` has at least one relevant document."""
    num_rel = sum(1 for r in judged.values() if r >= level)
    gains = np.array([max(judged.get(d, 0), 0) for d in ranked], dtype=np.float64)
    relevant = np.array([judged.get(d, 0) >= level for d in ranked], dtype=bool)
    discounts = 1.0 / np.log2(np.arange(2, len(ranked) + 2, dtype=np.float64))
    ideal = np.sort(np.array([max(r, 0) for r in judged.values()], dtype=np.float64))[::-1]
    ideal_discounts = 1.0 / np.log2(np.arange(2, len(ideal) + 2, dtype=np.float64))
    hits = np.cumsum(relevant)
    out: dict[str, float] = {}
    for name, kind, k in metrics:
        n = len(ranked) if k is None else min(k, len(ranked))
        if kind == "ndcg":
            ik = len(ideal) if k is None else min(k, len(ideal))
            idcg = float(np.dot(ideal[:ik], ideal_discounts[:ik]))
            dcg = float(np.dot(gains[:n], discounts[:n]))
            out[name] = dcg / idcg if idcg > 0 else 0.0
        elif kind == "recall":
            out[name] = float(hits[n - 1]) / num_rel if n else 0.0
        elif kind == "precision":
            out[name] = float(hits[n - 1]) / k if n else 0.0
        elif kind == "mrr":
            first = np.flatnonzero(relevant[:n])
            out[name] = 1.0 / (first[0] + 1) if len(first) else 0.0
        else:  # map
            ranks = np.flatnonzero(relevant[:n])
            out[name] = float(np.sum(hits[ranks] / (ranks + 1.0))) / num_rel
    return out


@dataclass
class EvalResult:
    """What ``evaluate`` returns.

    Attributes:
        mean: ``{metric: mean over the scored queries}``.
        per_query: ``{metric: {query id: value}}`` for every scored query.
        num_queries: how many queries were scored.
        missing_queries: scored queries absent from the run (counted as 0).
    """

    mean: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(repr=False)
    num_queries: int
    missing_queries: list[str] = field(default_factory=list, repr=False)

    def __getitem__(self, metric: str) -> float:
        return self.mean[metric]

    def __str__(self) -> str:
        cells = "  ".join(f"{m} {v:.4f}" for m, v in self.mean.items())
        return f"{cells}  ({self.num_queries} queries)"


def evaluate(
    qrels: Qrels,
    run: Run,
    metrics: Sequence[str] | str = ("ndcg@10", "recall@100", "mrr@10", "map@100"),
    relevance_level: int = 1,
) -> EvalResult:
    """Scores a run against relevance judgements (trec_eval definitions; see the module doc).

    Args:
        qrels: ``{query id: {doc id: judgement}}``; queries without a judgement
            ``>= relevance_level`` are not scored.
        run: ``{query id: ranking}`` where a ranking is ``{doc id: score}``, a list of doc ids
            best first, or an ``(ids, scores)`` pair (see ``rank_run``).
        metrics: names like ``"ndcg@10"``, ``"recall@100"``, ``"precision@5"``, ``"mrr"``,
            ``"mrr@10"``, ``"map"``, ``"map@1000"`` (a single name is accepted too).
        relevance_level: the lowest judgement that counts as relevant.

    Returns:
        an ``EvalResult`` with the mean and per-query value of each metric.

    Raises:
        ValueError: an unknown metric, a cutoff < 1, no scored query in ``qrels``, or a
            malformed ranking (NaN score, duplicate doc id).
        TypeError: ``qrels`` or ``run`` is not a mapping, or a ranking has an unsupported type.
    """
    if isinstance(metrics, str):
        metrics = [metrics]
    if not metrics:
        raise ValueError("metrics must name at least one metric, got an empty list")
    parsed = []
    for m in metrics:
        kind, k = _parse_metric(m)
        parsed.append((m, kind, k))
    if not isinstance(qrels, Mapping):
        raise TypeError(
            f"qrels must be a {{query id: {{doc id: judgement}}}} mapping, got {type(qrels).__name__}"
        )
    if not isinstance(run, Mapping):
        raise TypeError(f"run must be a {{query id: ranking}} mapping, got {type(run).__name__}")

    scored = {
        str(q): {str(d): int(r) for d, r in judged.items()}
        for q, judged in qrels.items()
        if any(int(r) >= relevance_level for r in judged.values())
    }
    if not scored:
        raise ValueError(
            f"qrels has no query with a judgement >= relevance_level={relevance_level}; nothing to score"
        )
    run_by_qid = {str(q): r for q, r in run.items()}

    per_query: dict[str, dict[str, float]] = {m: {} for m, _, _ in parsed}
    missing: list[str] = []
    for qid, judged in scored.items():
        if qid in run_by_qid:
            ranked = rank_run(run_by_qid[qid], qid)
        else:
            missing.append(qid)
            ranked = []
        values = _query_scores(judged, ranked, parsed, relevance_level)
        for m, v in values.items():
            per_query[m][qid] = v
    mean = {m: float(np.mean(list(v.values()))) for m, v in per_query.items()}
    return EvalResult(mean=mean, per_query=per_query, num_queries=len(scored), missing_queries=missing)
