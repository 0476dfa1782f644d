"""Hybrid fusion quality on every judged collection with MiniLM embeddings: BM25, dense, RRF and
convex score fusion (min-max, z-score), fixed and fitted weights, and defaults chosen by
leave-one-collection-out.

BM25 (ragfind's default analyzer) and exact dense search over all-MiniLM-L6-v2 embeddings, top
100 of each, fused per query by ``ragfind.rrf`` and ``ragfind.fusion.convex``. Embeddings:
SciFact and Cranfield from ../shared/data/<c>/embeddings/all-MiniLM-L6-v2 (sentence-transformers),
MED, NPL and LISA from ``--emb-cache``/<c> (ragfind's own encoder; same four files); a collection
without embeddings is skipped. Fitted weights come from ``fit_convex_weight`` on other queries:
SciFact's train queries for its test queries, and ``--folds`` folds of the test queries
elsewhere (query i in fold i mod folds, each fold's weight fitted on the others).

The leave-one-collection-out rows pick, for each collection, the setting (an RRF k and BM25
share, or a convex weight) with the best mean nDCG@10 over the *other* collections, and score
it on the held-out one: a default that was not chosen on the collection it is scored on.

    PYTHONPATH=python python bench/quality_fusion.py [--emb-cache /work/cache/emb] [--folds 5]
    PYTHONPATH=python python bench/quality_fusion.py --rm3 0.7   # BM25 + RM3 as the lexical input

Prints nDCG@10 per collection and the paired differences (95% bootstrap interval,
randomisation p) against RRF and against the better of the two inputs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ragfind  # noqa: E402
from quality_bm25 import DATA, paired_ci, randomisation_p  # noqa: E402
from ragfind.eval import evaluate, load_beir, load_qrels  # noqa: E402
from ragfind.fusion import convex, fit_convex_weight  # noqa: E402
from ragfind.sparse.feedback import RM3  # noqa: E402

DEPTH = 100
COLLECTIONS = ("scifact", "cranfield", "med", "npl", "lisa")
GRID = [i / 20 for i in range(21)]
# RRF settings tried by leave-one-collection-out: k, and BM25's share of the two weights.
RRF_K = (10, 20, 40, 60, 100)
RRF_SHARE = (0.3, 0.4, 0.5, 0.6, 0.7)


def embedding_dir(name: str, cache: Path) -> Path | None:
    for d in (DATA / name / "embeddings" / "all-MiniLM-L6-v2", cache / name):
        if (d / "corpus.npy").is_file() and (d / "queries.npy").is_file():
            return d
    return None


def runs(name: str, emb: Path, feedback=None):
    """(bm25 run, dense run, qrels by split, corpus ids) with runs {qid: (row ids, scores)}."""
    ds = load_beir(DATA / name, split="test")
    corpus_ids = (emb / "corpus_ids.txt").read_text().split()
    query_ids = (emb / "query_ids.txt").read_text().split()
    assert corpus_ids == list(ds.corpus), "embedding rows follow corpus.jsonl"
    C, Q = np.load(emb / "corpus.npy"), np.load(emb / "queries.npy")
    qtext = {}
    with open(DATA / name / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            qtext[d["_id"]] = d["text"]
    splits = {p.stem: load_qrels(p) for p in sorted((DATA / name / "qrels").glob("*.tsv"))}
    wanted = [q for q in query_ids if any(q in r for r in splits.values())]
    _, texts = ds.documents()
    index = ragfind.BM25Index()
    index.add(texts)
    if feedback is None:
        bm25 = dict(zip(wanted, index.search_batch([qtext[q] for q in wanted], k=DEPTH)))
    else:  # BM25 expanded by RM3 in place of plain BM25
        rows = lambda ids: [texts[int(i)] for i in ids]  # noqa: E731
        bm25 = {q: feedback.search(index, qtext[q], DEPTH, rows) for q in wanted}
    row = {q: i for i, q in enumerate(query_ids)}
    sims = Q[[row[q] for q in wanted]] @ C.T
    top = np.argsort(-sims, axis=1)[:, :DEPTH]
    dense = {q: (top[i].astype(np.int64), sims[i, top[i]].astype(np.float64)) for i, q in enumerate(wanted)}
    return bm25, dense, splits, corpus_ids


def per_query(run_of, queries, qrels, doc_ids) -> dict:
    run = {}
    for q in queries:
        ids, s = run_of(q)
        run[q] = {doc_ids[int(d)]: float(x) for d, x in zip(ids, s)}
    return evaluate({q: qrels[q] for q in queries}, run, ["ndcg@10"]).per_query["ndcg@10"]


def rrf_of(bm25, dense, k, share):
    # Weights 2*share and 2*(1-share): equal shares are RRF's weights (1, 1).
    return lambda q: ragfind.rrf([bm25[q], dense[q]], k=k, weights=[2 * share, 2 * (1 - share)])


def convex_of(bm25, dense, w, norm):
    return lambda q: convex(bm25[q], dense[q], w, norm)


class Collection:
    """One collection's runs and per-query nDCG@10 of every setting tried."""

    def __init__(self, name: str, emb: Path, folds: int, feedback=None) -> None:
        self.name = name
        self.bm25, self.dense, splits, self.doc_ids = runs(name, emb, feedback)
        self.test = splits["test"]
        self.queries = [q for q in self.bm25 if q in self.test and any(v > 0 for v in self.test[q].values())]
        if name == "scifact":
            train = splits["train"]
            self.folds = [self.queries]
            self.fit_on = [[q for q in self.bm25 if q in train]]
            self.fit_qrels = [train]
        else:
            self.folds = [self.queries[i::folds] for i in range(folds)]
            self.fit_on = [[q for j, f in enumerate(self.folds) if j != i for q in f] for i in range(folds)]
            self.fit_qrels = [self.test] * folds
        self.settings: dict = {}  # (family, parameters) -> {qid: nDCG@10}

    def score(self, run_of) -> dict:
        return per_query(run_of, self.queries, self.test, self.doc_ids)

    def grid(self) -> None:
        """Every setting the leave-one-collection-out rows choose from."""
        for k in RRF_K:
            for share in RRF_SHARE:
                self.settings[("rrf", k, share)] = self.score(rrf_of(self.bm25, self.dense, k, share))
        for norm in ("min-max", "z-score"):
            for w in GRID:
                self.settings[(norm, w)] = self.score(convex_of(self.bm25, self.dense, w, norm))

    def fitted(self, norm: str) -> tuple[dict, list]:
        per, ws = {}, []
        for fold, fq, fqrels in zip(self.folds, self.fit_on, self.fit_qrels):
            w, _ = fit_convex_weight(
                {q: self.bm25[q] for q in fq},
                {q: self.dense[q] for q in fq},
                fqrels,
                norm=norm,
                doc_ids=self.doc_ids,
            )
            ws.append(w)
            per.update(per_query(convex_of(self.bm25, self.dense, w, norm), fold, self.test, self.doc_ids))
        return per, ws


def mean(per: dict) -> float:
    return float(np.mean(list(per.values())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--emb-cache", type=Path, default=Path("/work/cache/emb"))
    ap.add_argument("--folds", type=int, default=5, help="folds of the fitted weights (not SciFact)")
    ap.add_argument("--collections", default=",".join(COLLECTIONS))
    ap.add_argument(
        "--rm3", type=float, metavar="WEIGHT", help="BM25 expanded by RM3 with this original query weight"
    )
    args = ap.parse_args()
    feedback = None if args.rm3 is None else RM3(original_query_weight=args.rm3)
    cols: dict[str, Collection] = {}
    for name in args.collections.split(","):
        emb = embedding_dir(name, args.emb_cache)
        if emb is None or not (DATA / name).is_dir():
            print(f"{name}: no embeddings (or no data), skipped", file=sys.stderr)
            continue
        cols[name] = Collection(name, emb, args.folds, feedback)
        cols[name].grid()
        print(f"  {name}: {len(cols[name].queries)} queries", file=sys.stderr, flush=True)
    if not cols:
        sys.exit("no collection with embeddings")
    rows: dict[str, dict[str, dict]] = {}
    for name, c in cols.items():
        r = rows.setdefault
        r("BM25 alone", {})[name] = c.score(lambda q, c=c: c.bm25[q])
        r("dense alone", {})[name] = c.score(lambda q, c=c: c.dense[q])
        r("RRF k=60, equal weights (default)", {})[name] = c.settings[("rrf", 60, 0.5)]
        r("convex min-max w=0.5 (fixed)", {})[name] = c.settings[("min-max", 0.5)]
        r("convex z-score w=0.5 (fixed)", {})[name] = c.settings[("z-score", 0.5)]
        for norm in ("min-max", "z-score"):
            per, ws = c.fitted(norm)
            r(f"convex {norm}, weight fitted per collection (cross-validated)", {})[name] = per
            c.settings[("fitted", norm)] = ws
    # Leave one collection out: the setting best on the mean of the others.
    chosen: dict[str, dict[str, tuple]] = {}
    families = {
        "RRF, k and BM25 share": lambda key: key[0] == "rrf",
        "RRF k=60, BM25 share": lambda key: key[0] == "rrf" and key[1] == 60,
        "convex min-max": lambda key: key[0] == "min-max",
        "convex z-score": lambda key: key[0] == "z-score",
    }
    for fam, keep in families.items():
        label = f"{fam} chosen leaving the collection out"
        rows[label] = {}
        for name, c in cols.items():
            others = [o for o in cols.values() if o is not c]
            keys = [k for k in c.settings if isinstance(k, tuple) and keep(k) and k[0] != "fitted"]
            if not others:
                continue
            best = max(
                keys,
                key=lambda k: (round(np.mean([mean(o.settings[k]) for o in others]), 12), -abs(k[-1] - 0.5)),
            )
            chosen.setdefault(label, {})[name] = best
            rows[label][name] = c.settings[best]
        # The same family chosen on all collections at once (what a default would be).
        keys = [k for k in next(iter(cols.values())).settings if isinstance(k, tuple) and keep(k)]
        best = max(
            keys,
            key=lambda k: (
                round(np.mean([mean(o.settings[k]) for o in cols.values()]), 12),
                -abs(k[-1] - 0.5),
            ),
        )
        chosen.setdefault("on all", {})[fam] = best
    names = list(cols)
    print("\nnDCG@10 (BM25 + all-MiniLM-L6-v2, top 100 each)\n")
    print("| method | " + " | ".join(f"{n} ({len(cols[n].queries)})" for n in names) + " | mean |")
    print("|---|" + "---:|" * (len(names) + 1))
    for m, per in rows.items():
        cells = [f"{mean(per[n]):.4f}" if n in per else "" for n in names]
        avg = np.mean([mean(per[n]) for n in names]) if all(n in per for n in names) else float("nan")
        print(f"| {m} | " + " | ".join(cells) + f" | {avg:.4f} |")
    for norm in ("min-max", "z-score"):
        print(f"\nconvex {norm}, nDCG@10 by BM25 weight\n")
        print("| weight | " + " | ".join(names) + " | mean |")
        print("|---:|" + "---:|" * (len(names) + 1))
        for w in GRID[::2]:
            vals = [mean(cols[n].settings[(norm, w)]) for n in names]
            print(f"| {w:.1f} | " + " | ".join(f"{v:.4f}" for v in vals) + f" | {np.mean(vals):.4f} |")
    print(
        "\nfitted weights per fold:",
        {n: {k[1]: v for k, v in c.settings.items() if k[0] == "fitted"} for n, c in cols.items()},
    )
    for label, by in chosen.items():
        print(f"{label}: {by}")
    base = rows["RRF k=60, equal weights (default)"]
    for title, ref_of in (
        ("RRF k=60", lambda n: base[n]),
        ("the better input (BM25 or dense, by mean)", None),
    ):
        print(f"\nPaired per-query difference against {title}: mean [95% interval] p\n")
        print("| method | " + " | ".join(names) + " |")
        print("|---|" + "---:|" * len(names))
        for m, per in rows.items():
            cells = []
            for n in names:
                if n not in per:
                    cells.append("")
                    continue
                if ref_of is not None:
                    ref = ref_of(n)
                else:
                    b, d = rows["BM25 alone"][n], rows["dense alone"][n]
                    ref = b if mean(b) >= mean(d) else d
                got = per[n]
                if ref is got:
                    cells.append("=")  # the reference itself (or the same setting)
                    continue
                d, lo, hi = paired_ci(ref, got)
                cells.append(f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}] p={randomisation_p(ref, got):.3f}")
            print(f"| {m} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
