"""BM25 quality ablation: which analyzer and BM25 choices move nDCG@10, next to tantivy and PISA.

Evaluates ragfind.BM25Index under one-change-at-a-time variants of its default (tokens
``\\w\\w+`` plus one-letter capitals and Greek letters, Lucene's 33 stopwords, Snowball English
stemmer, identifier parts, k1=1.2 b=0.75, text = title + " " + text) on every collection of
../shared/data and split with judgements (SciFact test and train, Cranfield), and the same
collections with tantivy (in this process: its own tokenizers and BM25) and PISA through
pyterrier-pisa (when it is installed and starts).

    python bench/quality_bm25.py                       # the whole table
    python bench/quality_bm25.py --only default,k1=0.9/b=0.4
    python bench/quality_bm25.py --no-peers

Rows are configurations, columns collection/split: nDCG@10 (Recall@100 with --recall).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import ragfind  # noqa: E402
from ragfind.eval import evaluate, load_beir  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SPLITS = [("scifact", "test"), ("scifact", "train"), ("cranfield", "test")]

_WORD = re.compile(r"(?u)\w+")
_ALNUM = re.compile(r"[^\W_]+")  # tantivy's SimpleTokenizer: runs of alphanumerics


_DIGIT_OR_WORD = re.compile(r"(?u)\w\w+|\d")


def digit_tokens(text: str) -> list[str]:
    """The default tokens plus one-character digits (``IL-6`` -> ``il``, ``6``)."""
    return _DIGIT_OR_WORD.findall(text)


def single_char_tokens(text: str) -> list[str]:
    """``\\w+``: as the default tokens but one-character tokens kept (digits, single letters)."""
    return _WORD.findall(text)


def alnum_tokens(text: str) -> list[str]:
    """tantivy's SimpleTokenizer: alphanumeric runs (``_`` splits), one character kept."""
    return _ALNUM.findall(text)


def terrier_stopwords() -> list[str] | None:
    """Terrier's stopword list as pyterrier-pisa ships it (PISA's default); None if absent."""
    try:
        from pyterrier_pisa.stopwords import _STOPWORDS
    except ImportError:
        return None
    words = _STOPWORDS["terrier"]
    return words.split() if isinstance(words, str) else list(words)


def ragfind_variants() -> dict[str, dict]:
    """name -> BM25Index keyword arguments plus analyzer arguments (one change each)."""
    base = {"analyzer": {}, "bm25": {}}

    def v(analyzer=None, **bm25):
        return {"analyzer": {**base["analyzer"], **(analyzer or {})}, "bm25": {**base["bm25"], **bm25}}

    out = {
        "default": v(),
        "symbol_letters=False (the default before 2026-12-03)": v({"symbol_letters": False}),
        "split_identifiers=False, symbol_letters=False (bm25s tokens)": v(
            {"split_identifiers": False, "symbol_letters": False}
        ),
        "no stopwords": v({"stopwords": None}),
        "stemmer=porter (original Porter)": v({"stemmer": "porter"}),
        "stemmer=None": v({"stemmer": None}),
        "tokens \\w+ (one-char tokens kept)": v({"tokenizer": single_char_tokens}),
        "tokens alnum runs (tantivy-like)": v({"tokenizer": alnum_tokens}),
        "tokens \\w\\w+ plus one-digit tokens": v({"tokenizer": digit_tokens}),
        "no stopwords + tokens \\w+": v({"stopwords": None, "tokenizer": single_char_tokens}),
        "k1=0.9 b=0.4 (Anserini, PISA)": v(k1=0.9, b=0.4),
        "k1=1.2 b=0.4": v(k1=1.2, b=0.4),
        "k1=0.9 b=0.75": v(k1=0.9, b=0.75),
        "k1=1.5 b=0.75": v(k1=1.5, b=0.75),
        "method=robertson": v(method="robertson"),
        "method=atire": v(method="atire"),
        "method=bm25l": v(method="bm25l"),
        "method=bm25+": v(method="bm25+"),
    }
    terrier = terrier_stopwords()
    if terrier is not None:
        out[f"stopwords=Terrier's {len(terrier)} words (PISA's default)"] = v({"stopwords": terrier})
    return out


def load(name: str, split: str):
    ds = load_beir(DATA / name, split=split)
    doc_ids, texts = ds.documents()
    qids, qtexts = ds.query_items()
    return ds, doc_ids, texts, qids, qtexts


def metrics(qrels, run) -> tuple[float, float, dict]:
    r = evaluate(qrels, run, ["ndcg@10", "recall@100"])
    return float(r.mean["ndcg@10"]), float(r.mean["recall@100"]), r.per_query["ndcg@10"]


def paired_ci(a: dict, b: dict, rounds: int = 2000) -> tuple[float, float, float]:
    """Mean per-query nDCG@10 difference b - a and its 95% bootstrap interval (paired)."""
    q = sorted(a)
    d = np.array([b[x] - a[x] for x in q])
    rng = np.random.default_rng(0)
    means = d[rng.integers(0, len(d), size=(rounds, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def run_ragfind(cfg, doc_ids, texts, qids, qtexts):
    index = ragfind.BM25Index(analyzer=ragfind.Analyzer(**cfg["analyzer"]), **cfg["bm25"])
    index.add(texts)
    out = {}
    for q, (ids, scores) in zip(qids, index.search_batch(qtexts, k=100)):
        out[q] = {doc_ids[int(d)]: float(s) for d, s in zip(ids, scores)}
    return out


def run_tantivy(doc_ids, texts, qids, qtexts, stem: bool):
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("body", stored=False, tokenizer_name="en_stem" if stem else "default")
    sb.add_unsigned_field("row", stored=True, fast=True)
    schema = sb.build()
    index = tantivy.Index(schema)
    w = index.writer(heap_size=100_000_000, num_threads=1)
    for i, t in enumerate(texts):
        doc = tantivy.Document()
        doc.add_text("body", t)
        doc.add_unsigned("row", i)
        w.add_document(doc)
    w.commit()
    index.reload()
    searcher = index.searcher()
    out = {}
    for q, text in zip(qids, qtexts):
        query = index.parse_query_lenient(text, ["body"])[0]  # free text: OR of the terms
        hits = searcher.search(query, 100).hits
        out[q] = {doc_ids[searcher.doc(a)["row"][0]]: float(s) for s, a in hits}
    return out


def run_pisa(doc_ids, texts, qids, qtexts, raw_queries=False, **kw):
    import pandas as pd
    import pyterrier_pisa

    with tempfile.TemporaryDirectory() as tmp:
        idx = pyterrier_pisa.PisaIndex(str(Path(tmp) / "pisa"), text_field="text", threads=1, **kw)
        idx.index({"docno": d, "text": t} for d, t in zip(doc_ids, texts))
        retr = idx.bm25(num_results=100)
        # PISA's query parser: strip characters its tokenizer would reject anyway.
        q = qtexts if raw_queries else [re.sub(r"[^\w\s]", " ", t) for t in qtexts]
        frame = pd.DataFrame({"qid": qids, "query": q})
        res = retr.transform(frame)
    out: dict = {q: {} for q in qids}
    for q, d, s in zip(res["qid"], res["docno"], res["score"]):
        out[q][d] = float(s)
    return out


def k1_sweep(data) -> None:
    """nDCG@10 for k1 in 1.2 .. 2.0 (b=0.75), each with its paired interval against k1=1.2."""
    print("| setting | " + " | ".join(data) + " |")
    print("|---|" + "---:|" * len(data))
    base = None
    for k1 in (1.2, 1.4, 1.5, 1.6, 1.8, 2.0):
        cfg = {"analyzer": {}, "bm25": {"k1": k1, "b": 0.75}}
        r = {key: metrics(ds.qrels, run_ragfind(cfg, *rest)) for key, (ds, *rest) in data.items()}
        base = base or r
        cells = []
        for c in data:
            m, lo, hi = paired_ci(base[c][2], r[c][2])
            cells.append(f"{r[c][0]:.4f} ({m:+.4f} [{lo:+.4f}, {hi:+.4f}])")
        print(f"| k1={k1} b=0.75 | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="comma-separated variant name prefixes")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--peers-only", action="store_true")
    ap.add_argument("--k1-sweep", action="store_true", help="only: k1 in 1.2..2.0 at b=0.75 against k1=1.2")
    ap.add_argument("--recall", action="store_true", help="also print Recall@100")
    args = ap.parse_args()
    data = {f"{n}/{s}": load(n, s) for n, s in SPLITS if (DATA / n).is_dir()}
    if args.k1_sweep:
        return k1_sweep(data)
    rows: dict[str, dict[str, tuple[float, float]]] = {}
    variants = ragfind_variants()
    if args.peers_only:
        variants = {"default": variants["default"]}
    if args.only:
        keep = [p.strip() for p in args.only.split(",")]
        variants = {k: v for k, v in variants.items() if any(k.startswith(p) for p in keep)}
    for name, cfg in variants.items():
        t = time.perf_counter()
        rows["ragfind: " + name] = {
            key: metrics(ds.qrels, run_ragfind(cfg, d, tx, q, qt)) for key, (ds, d, tx, q, qt) in data.items()
        }
        print(f"  {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if not args.no_peers:
        peers = {
            "tantivy 0.27 default tokenizer (no stemming), BM25 k1=1.2 b=0.75": lambda *a: run_tantivy(
                *a, stem=False
            ),
            "tantivy 0.27 en_stem tokenizer": lambda *a: run_tantivy(*a, stem=True),
            "PISA (pyterrier-pisa defaults: porter2, terrier stopwords, k1=0.9 b=0.4)": run_pisa,
            "PISA defaults, queries passed raw to PISA's parser": lambda *a: run_pisa(*a, raw_queries=True),
            "PISA stops=none": lambda *a: run_pisa(*a, stops="none"),
            "PISA stemmer=none": lambda *a: run_pisa(*a, stemmer="none"),
        }
        for name, fn in peers.items():
            try:
                rows[name] = {
                    key: metrics(ds.qrels, fn(d, tx, q, qt)) for key, (ds, d, tx, q, qt) in data.items()
                }
            except Exception as exc:  # a peer that is not installed or does not start
                print(f"  {name}: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
    cols = list(data)
    print("| configuration | " + " | ".join(f"{c} nDCG@10" for c in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[c][0]:.4f}" for c in cols) + " |")
    base = rows.get("ragfind: default")
    if base is not None:
        print("\nPaired per-query nDCG@10 difference against ragfind's default, mean [95% bootstrap CI]:\n")
        print("| configuration | " + " | ".join(cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for name, r in rows.items():
            if name == "ragfind: default":
                continue
            cells = []
            for c in cols:
                m, lo, hi = paired_ci(base[c][2], r[c][2])
                cells.append(f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]")
            print(f"| {name} | " + " | ".join(cells) + " |")
    if args.recall:
        print("\n| configuration | " + " | ".join(f"{c} R@100" for c in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for name, r in rows.items():
            print(f"| {name} | " + " | ".join(f"{r[c][1]:.4f}" for c in cols) + " |")
    _ = np


if __name__ == "__main__":
    main()
