"""Hybrid fusion quality: RRF against convex score fusion (min-max, z-score) with a fitted weight.

BM25 (ragfind's default analyzer) and exact dense search over the reference all-MiniLM-L6-v2
embeddings of ../shared/data (SciFact and Cranfield), top 100 of each, fused per query by
``ragfind.rrf`` (k=60) and ``ragfind.fusion.convex`` (weight of BM25 0.5, or fitted by
``fit_convex_weight`` on other queries: SciFact's train queries for its test queries, and
two folds of Cranfield's queries, odd and even position, each fitted on the other). Prints
nDCG@10 and the paired difference against RRF (95% bootstrap interval, randomisation p).

    PYTHONPATH=python python bench/quality_fusion.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ragfind  # noqa: E402
from quality_bm25 import DATA, paired_ci, randomisation_p  # noqa: E402
from ragfind.eval import evaluate, load_beir, load_qrels  # noqa: E402
from ragfind.fusion import convex, fit_convex_weight  # noqa: E402

DEPTH = 100


def runs(name: str):
    """(bm25 run, dense run, qrels by split) with runs {qid: (row ids, scores)} over all queries."""
    ds = load_beir(DATA / name, split="test")
    emb = DATA / name / "embeddings" / "all-MiniLM-L6-v2"
    corpus_ids = (emb / "corpus_ids.txt").read_text().split()
    query_ids = (emb / "query_ids.txt").read_text().split()
    assert corpus_ids == list(ds.corpus), "embedding rows follow corpus.jsonl"
    C, Q = np.load(emb / "corpus.npy"), np.load(emb / "queries.npy")
    qtext = {}
    import json

    with open(DATA / name / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            qtext[d["_id"]] = d["text"]
    splits = {p.stem: load_qrels(p) for p in sorted((DATA / name / "qrels").glob("*.tsv"))}
    wanted = [q for q in query_ids if any(q in r for r in splits.values())]
    _, texts = ds.documents()
    index = ragfind.BM25Index()
    index.add(texts)
    bm25 = dict(zip(wanted, index.search_batch([qtext[q] for q in wanted], k=DEPTH)))
    row = {q: i for i, q in enumerate(query_ids)}
    sims = Q[[row[q] for q in wanted]] @ C.T
    top = np.argsort(-sims, axis=1)[:, :DEPTH]
    dense = {q: (top[i].astype(np.int64), sims[i, top[i]].astype(np.float64)) for i, q in enumerate(wanted)}
    return bm25, dense, splits, corpus_ids


def score(run_of, queries, qrels, doc_ids):
    run = {}
    for q in queries:
        ids, s = run_of(q)
        run[q] = {doc_ids[int(d)]: float(x) for d, x in zip(ids, s)}
    r = evaluate({q: qrels[q] for q in queries}, run, ["ndcg@10"])
    return float(r.mean["ndcg@10"]), r.per_query["ndcg@10"]


def report(name: str) -> None:
    """Prints the fusion table of one collection."""
    bm25, dense, splits, doc_ids = runs(name)
    test = splits["test"]
    scored = [q for q in bm25 if q in test and any(v > 0 for v in test[q].values())]
    if name == "scifact":
        train = splits["train"]
        fit_on = [[q for q in bm25 if q in train]]
        folds = [scored]
        fit_qrels = [train]
    else:  # two folds of the test queries, each weight fitted on the other fold
        folds = [scored[0::2], scored[1::2]]
        fit_on = [folds[1], folds[0]]
        fit_qrels = [test, test]
    methods = {
        "BM25 alone": lambda q, w=None: bm25[q],
        "dense alone": lambda q, w=None: dense[q],
        "RRF k=60": lambda q, w=None: ragfind.rrf([bm25[q], dense[q]], k=60),
        "convex min-max w=0.5": lambda q, w=None: convex(bm25[q], dense[q], 0.5, "min-max"),
        "convex z-score w=0.5": lambda q, w=None: convex(bm25[q], dense[q], 0.5, "z-score"),
    }
    rows = {}
    for m, fn in methods.items():
        per: dict = {}
        for fold in folds:
            per.update(score(fn, fold, test, doc_ids)[1])
        rows[m] = per
    for norm in ("min-max", "z-score"):
        per, ws = {}, []
        for fold, fq, fqrels in zip(folds, fit_on, fit_qrels):
            w, _ = fit_convex_weight(
                {q: bm25[q] for q in fq}, {q: dense[q] for q in fq}, fqrels, norm=norm, doc_ids=doc_ids
            )
            ws.append(w)
            per.update(
                score(lambda q, w=w, norm=norm: convex(bm25[q], dense[q], w, norm), fold, test, doc_ids)[1]
            )
        rows[f"convex {norm}, weight fitted ({', '.join(f'{w:.2f}' for w in ws)})"] = per
    print(f"\n{name} ({len(scored)} test queries): nDCG@10, paired difference against RRF k=60\n")
    print("| fusion | nDCG@10 | vs RRF [95% interval] p |")
    print("|---|---:|---:|")
    base = rows["RRF k=60"]
    for m, per in rows.items():
        mean = float(np.mean([per[q] for q in base]))
        if m == "RRF k=60":
            print(f"| {m} | {mean:.4f} | |")
            continue
        d, lo, hi = paired_ci(base, per)
        print(f"| {m} | {mean:.4f} | {d:+.4f} [{lo:+.4f}, {hi:+.4f}] p={randomisation_p(base, per):.3f} |")


def main() -> None:
    for name in ("scifact", "cranfield"):
        if not (DATA / name / "embeddings").is_dir():
            print(f"{name}: no embeddings under {DATA}, skipped")
            continue
        report(name)


if __name__ == "__main__":
    main()
