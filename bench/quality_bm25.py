"""BM25 quality on five judged collections: which analyzer and BM25 choices move nDCG@10.

Evaluates ragfind.BM25Index under variants of its default (tokens ``\\w\\w+`` plus one-letter
symbols, Lucene's 33 stopwords, Snowball English stemmer, identifier parts, k1=1.2 b=0.75,
text = title + " " + text) on the five collections of ../shared/data (SciFact test, Cranfield,
MED, NPL, LISA; ``--train`` adds SciFact's 809 train queries as a column outside the mean), next
to bm25s, tantivy and PISA (pyterrier-pisa) at their defaults when they are installed.

    python bench/quality_bm25.py --train                # candidates of issue 46 + peers
    python bench/quality_bm25.py --set ablation         # the one-change-at-a-time ablation
    python bench/quality_bm25.py --only default,k1=0.9 --no-peers
    python bench/quality_bm25.py --k1-sweep
    python bench/quality_bm25.py --rm3 --train --no-peers   # RM3 feedback against the default

Prints nDCG@10 per collection and the mean over the five, then for each variant the paired
per-query difference against the baseline row (``--baseline``, ragfind's default by default):
mean, 95% bootstrap interval (2,000 resamples of the queries) and the two-sided p-value of a
paired randomisation (sign-flip) test (10,000 rounds).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import ragfind  # noqa: E402
from ragfind.eval import evaluate, load_beir  # noqa: E402
from ragfind.sparse.analyzer import ENGLISH_STOPWORDS  # noqa: E402
from ragfind.sparse.feedback import RM3  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FIVE = [("scifact", "test"), ("cranfield", "test"), ("med", "test"), ("npl", "test"), ("lisa", "test")]

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


def caps_neighbours_lowered(text: str) -> str:
    """Lower-cases a one-letter capital whose neighbouring words (the runs of ``\\w`` before and
    after it, where present) are written in capitals only (simulates a local case rule)."""
    runs = list(_WORD.finditer(text))

    def caps(m) -> bool:
        s = m.group()
        return any(c.isupper() for c in s) and not any(c.islower() for c in s)

    out = list(text)
    for i, m in enumerate(runs):
        s = m.group()
        if len(s) != 1 or not s.isupper():
            continue
        near = [runs[j] for j in (i - 1, i + 1) if 0 <= j < len(runs)]
        if near and all(caps(n) for n in near):
            out[m.start()] = s.lower()
    return "".join(out)


_DIGIT_CAPITAL = re.compile(r"\d[^\W\d_a-z]")


def caps_text_unsplit(text: str) -> str:
    """A text without lower-case letters lower-cased: what the analyzer would give if a
    digit-capital boundary (``35TH``, ``1960S``) were no identifier boundary in such a text
    (there the boundary is the only camel-case cut, and its one-letter capitals are already not
    symbols). Simulates a text-level rule, as ``caps_text_symbols``."""
    return text if any(c.islower() for c in text) else text.lower()


def caps_runs_unsplit(text: str) -> str:
    """As :func:`caps_text_unsplit`, and in mixed-case texts a run of word characters without a
    lower-case letter that holds a digit-capital boundary is lower-cased too: a run-level rule
    (``35TH`` is not cut in any text; ``md5Hash`` still is)."""
    if not any(c.islower() for c in text):
        return text.lower()

    def run(m) -> str:
        w = m.group()
        return w.lower() if not any(c.islower() for c in w) and _DIGIT_CAPITAL.search(w) else w

    return _WORD.sub(run, text)


def fold_accents(text: str) -> str:
    """Accents removed: NFD, combining marks dropped, NFC (``café`` -> ``cafe``)."""
    d = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(c for c in d if unicodedata.category(c) != "Mn"))


def terrier_stopwords() -> list[str] | None:
    """Terrier's stopword list as pyterrier-pisa ships it (PISA's default); None if absent."""
    try:
        from pyterrier_pisa.stopwords import _STOPWORDS
    except ImportError:
        return None
    words = _STOPWORDS["terrier"]
    return words.split() if isinstance(words, str) else list(words)


def title_twice(ds) -> list[str]:
    """Documents as title + " " + title + " " + text (the title counted twice)."""
    return [
        (d["title"] + " " + d["title"] + " " + d["text"]) if d["title"] else d["text"]
        for d in ds.corpus.values()
    ]


def _v(analyzer=None, text=None, docs=None, query=None, feedback=None, **bm25) -> dict:
    return {
        "analyzer": dict(analyzer or {}),
        "bm25": bm25,
        "text": text,
        "docs": docs,
        "query": query,
        "feedback": feedback,
    }


def query_stopwords_removed(words) -> callable:
    """A query transform that deletes ``words`` (case-insensitive): with an analyzer without
    stopwords this is PISA's way, stopwords indexed (and counted in the lengths), dropped from
    queries."""
    pattern = re.compile(r"(?u)\b(?:" + "|".join(map(re.escape, words)) + r")\b", re.IGNORECASE)
    return lambda text: pattern.sub(" ", text)


def ablation_variants() -> dict[str, dict]:
    """name -> configuration: one change each from ragfind's default."""
    out = {
        "default": _v(),
        "symbol_letters=False": _v({"symbol_letters": False}),
        "split_identifiers=False, symbol_letters=False (bm25s tokens)": _v(
            {"split_identifiers": False, "symbol_letters": False}
        ),
        "no stopwords": _v({"stopwords": None}),
        "stemmer=porter (original Porter)": _v({"stemmer": "porter"}),
        "stemmer=None": _v({"stemmer": None}),
        "tokens \\w+ (one-char tokens kept)": _v({"tokenizer": single_char_tokens}),
        "tokens alnum runs (tantivy-like)": _v({"tokenizer": alnum_tokens}),
        "tokens \\w\\w+ plus one-digit tokens": _v({"tokenizer": digit_tokens}),
        "k1=0.9 b=0.4 (Anserini, PISA)": _v(k1=0.9, b=0.4),
        "k1=1.2 b=0.4": _v(k1=1.2, b=0.4),
        "k1=0.9 b=0.75": _v(k1=0.9, b=0.75),
        "k1=1.5 b=0.75": _v(k1=1.5, b=0.75),
        "method=robertson": _v(method="robertson"),
        "method=atire": _v(method="atire"),
        "method=bm25l": _v(method="bm25l"),
        "method=bm25+": _v(method="bm25+"),
    }
    terrier = terrier_stopwords()
    if terrier is not None:
        out[f"stopwords=Terrier's {len(terrier)} words (PISA's default)"] = _v({"stopwords": terrier})
    return out


OLD_DEFAULT = "default before 2026-12-07"


def candidate_variants() -> dict[str, dict]:
    """name -> configuration: the defaults before and after issue 46 and the other candidates,
    each one change from today's default."""
    out = {
        OLD_DEFAULT + " (caps_text_symbols=True, fold_accents=False)": _v(
            {"caps_text_symbols": True, "fold_accents": False}
        ),
        "default": _v(),
        "caps_text_symbols=True (capitals of all-caps texts kept)": _v({"caps_text_symbols": True}),
        "capitals between all-caps words are not symbols (simulated)": _v(
            {"caps_text_symbols": True}, text=caps_neighbours_lowered
        ),
        "fold_accents=False": _v({"fold_accents": False}),
        "symbol_letters=False": _v({"symbol_letters": False}),
        "no stopwords": _v({"stopwords": None}),
        "stopwords on the query side only (indexed and counted in lengths, as PISA)": _v(
            {"stopwords": None}, query=query_stopwords_removed(ENGLISH_STOPWORDS)
        ),
        "stemmer=porter": _v({"stemmer": "porter"}),
        "split_identifiers=False": _v({"split_identifiers": False}),
        "no digit-capital cut in all-caps texts (simulated, text-level rule)": _v(text=caps_text_unsplit),
        "no digit-capital cut in runs without lower case (simulated, run-level rule)": _v(
            text=caps_runs_unsplit
        ),
        "title twice": _v(docs=title_twice),
        "k1=0.9 b=0.4": _v(k1=0.9, b=0.4),
        "k1=1.2 b=0.6": _v(k1=1.2, b=0.6),
        "k1=1.2 b=0.7": _v(k1=1.2, b=0.7),
        "k1=1.5 b=0.75": _v(k1=1.5, b=0.75),
        "k1=1.2 b=0.9": _v(k1=1.2, b=0.9),
        "method=bm25l": _v(method="bm25l"),
    }
    terrier = terrier_stopwords()
    if terrier is not None:
        out["stopwords=Terrier's 733 words"] = _v({"stopwords": terrier})
        out["stopwords=Terrier's, query side only (PISA's way)"] = _v(
            {"stopwords": None}, query=query_stopwords_removed(terrier)
        )
    return out


def rm3_variants() -> dict[str, dict]:
    """name -> configuration: today's default with and without RM3 feedback (Anserini's
    defaults, and the original query weighted 0.7 and 0.3)."""
    return {
        "default": _v(),
        "RM3 fb_docs=10 fb_terms=10 original_query_weight=0.5 (Anserini's defaults)": _v(feedback=RM3()),
        "RM3 original_query_weight=0.7": _v(feedback=RM3(original_query_weight=0.7)),
        "RM3 original_query_weight=0.3": _v(feedback=RM3(original_query_weight=0.3)),
    }


def rm3_latency(data, rounds: int = 3) -> None:
    """Per-query latency of BM25 top 100 alone and with RM3 (one query at a time, one thread:
    the feedback runs in Python between two searches), the best of ``rounds`` passes."""
    rm3 = RM3()
    print("\n| collection | docs | queries | BM25 ms/query | BM25 + RM3 ms/query | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for key, d in data.items():
        texts, qtexts = d[2], d[4]
        index = ragfind.BM25Index()
        index.add(texts)
        rows = lambda ids, texts=texts: [texts[int(i)] for i in ids]  # noqa: E731
        plain = with_rm3 = float("inf")
        for _ in range(rounds):
            t = time.perf_counter()
            for q in qtexts:
                index.search(q, 100)
            plain = min(plain, (time.perf_counter() - t) / len(qtexts))
            t = time.perf_counter()
            for q in qtexts:
                rm3.search(index, q, 100, rows)
            with_rm3 = min(with_rm3, (time.perf_counter() - t) / len(qtexts))
        print(
            f"| {key} | {len(texts)} | {len(qtexts)} | {plain * 1e3:.3f} | {with_rm3 * 1e3:.3f} "
            f"| {with_rm3 / plain:.1f}x |",
            flush=True,
        )


def load(name: str, split: str):
    ds = load_beir(DATA / name, split=split)
    doc_ids, texts = ds.documents()
    qids, qtexts = ds.query_items()
    return ds, doc_ids, texts, qids, qtexts


def metrics(qrels, run) -> tuple[float, float, dict]:
    r = evaluate(qrels, run, ["ndcg@10", "recall@100"])
    return float(r.mean["ndcg@10"]), float(r.mean["recall@100"]), r.per_query["ndcg@10"]


def _diffs(a: dict, b: dict) -> np.ndarray:
    return np.array([b[x] - a[x] for x in sorted(a)])


def paired_ci(a: dict, b: dict, rounds: int = 2000) -> tuple[float, float, float]:
    """Mean per-query nDCG@10 difference b - a and its 95% bootstrap interval (paired)."""
    d = _diffs(a, b)
    rng = np.random.default_rng(0)
    means = d[rng.integers(0, len(d), size=(rounds, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def randomisation_p(a: dict, b: dict, rounds: int = 10000) -> float:
    """Two-sided p-value of the paired randomisation test (random sign flips of the differences)."""
    d = _diffs(a, b)
    if not d.any():
        return 1.0
    rng = np.random.default_rng(1)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(rounds, len(d)))
    null = np.abs((signs * d).mean(axis=1))
    return float((np.count_nonzero(null >= abs(d.mean()) - 1e-12) + 1) / (rounds + 1))


def mean_ci(pairs: list[tuple[dict, dict]], rounds: int = 2000) -> tuple[float, float, float]:
    """Difference of the mean over collections (macro) and its 95% interval, resampling the
    queries of each collection independently (stratified paired bootstrap)."""
    rng = np.random.default_rng(0)
    total = np.zeros(rounds)
    point = 0.0
    for a, b in pairs:
        d = _diffs(a, b)
        point += d.mean()
        total += d[rng.integers(0, len(d), size=(rounds, len(d)))].mean(axis=1)
    n = len(pairs)
    return point / n, float(np.percentile(total / n, 2.5)), float(np.percentile(total / n, 97.5))


def run_ragfind(cfg, ds, doc_ids, texts, qids, qtexts):
    index = ragfind.BM25Index(analyzer=ragfind.Analyzer(**cfg["analyzer"]), **cfg["bm25"])
    if cfg.get("docs") is not None:
        texts = cfg["docs"](ds)
    if cfg.get("text") is not None:
        texts = [cfg["text"](t) for t in texts]
        qtexts = [cfg["text"](t) for t in qtexts]
    if cfg.get("query") is not None:
        qtexts = [cfg["query"](t) for t in qtexts]
    index.add(texts)
    out = {}
    if cfg.get("feedback") is not None:
        rows = lambda ids: [texts[int(i)] for i in ids]  # noqa: E731
        results = [cfg["feedback"].search(index, q, 100, rows) for q in qtexts]
    else:
        results = index.search_batch(qtexts, k=100)
    for q, (ids, scores) in zip(qids, results):
        out[q] = {doc_ids[int(d)]: float(s) for d, s in zip(ids, scores)}
    return out


def run_bm25s(ds, doc_ids, texts, qids, qtexts):
    """bm25s at the settings of ../shared/data/README.md (its usual use): lucene k1=1.2 b=0.75,
    its English stopwords, the Snowball English stemmer."""
    import bm25s
    import Stemmer

    stem = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False
    )
    qtok = bm25s.tokenize(qtexts, stopwords="en", stemmer=stem, show_progress=False)
    docs, scores = retriever.retrieve(qtok, k=100, show_progress=False, n_threads=1)
    return {
        q: {doc_ids[int(d)]: float(s) for d, s in zip(docs[i], scores[i]) if s > 0}
        for i, q in enumerate(qids)
    }


def run_tantivy(ds, doc_ids, texts, qids, qtexts, stem: bool = True):
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
        # Punctuation removed: tantivy's query parser reads it as syntax.
        query = index.parse_query_lenient(re.sub(r"[^\w\s]", " ", text), ["body"])[0]
        hits = searcher.search(query, 100).hits
        out[q] = {doc_ids[searcher.doc(a)["row"][0]]: float(s) for s, a in hits}
    return out


def run_pisa(ds, doc_ids, texts, qids, qtexts, raw_queries=False, k1=0.9, b=0.4, **kw):
    import pandas as pd
    import pyterrier_pisa

    with tempfile.TemporaryDirectory() as tmp:
        idx = pyterrier_pisa.PisaIndex(str(Path(tmp) / "pisa"), text_field="text", threads=1, **kw)
        idx.index({"docno": d, "text": t} for d, t in zip(doc_ids, texts))
        retr = idx.bm25(k1=k1, b=b, num_results=100)
        # PISA's query parser: strip characters its tokenizer would reject anyway.
        q = qtexts if raw_queries else [re.sub(r"[^\w\s]", " ", t) for t in qtexts]
        frame = pd.DataFrame({"qid": qids, "query": q})
        res = retr.transform(frame)
    out: dict = {q: {} for q in qids}
    for q, d, s in zip(res["qid"], res["docno"], res["score"]):
        out[q][d] = float(s)
    return out


def peers(ablation: bool) -> dict:
    out = {
        "bm25s 0.3.16 (lucene, stemmer, stopwords en)": run_bm25s,
        "PISA (pyterrier-pisa defaults: k1=0.9 b=0.4)": run_pisa,
        "PISA k1=1.2 b=0.75 (../shared/data/README.md's reference)": lambda *a: run_pisa(*a, k1=1.2, b=0.75),
        "tantivy en_stem": run_tantivy,
    }
    if ablation:
        out.update(
            {
                "tantivy default tokenizer (no stemming)": lambda *a: run_tantivy(*a, stem=False),
                "PISA stops=none": lambda *a: run_pisa(*a, stops="none"),
                "PISA stemmer=none": lambda *a: run_pisa(*a, stemmer="none"),
            }
        )
    return out


def k1_sweep(data, five) -> None:
    """nDCG@10 for k1 in 0.9 .. 2.0 and b in 0.4 .. 0.9 against k1=1.2 b=0.75."""
    print("| setting | " + " | ".join(data) + " | mean of five |")
    print("|---|" + "---:|" * (len(data) + 1))
    base = None
    for k1, b in [
        (1.2, 0.75),
        (0.9, 0.75),
        (1.5, 0.75),
        (1.8, 0.75),
        (2.0, 0.75),
        (1.2, 0.6),
        (1.2, 0.9),
        (1.5, 0.9),
    ]:
        cfg = _v(k1=k1, b=b)
        r = {key: metrics(d[0].qrels, run_ragfind(cfg, *d)) for key, d in data.items()}
        base = base or r
        cells = []
        for c in data:
            m, lo, hi = paired_ci(base[c][2], r[c][2])
            cells.append(f"{r[c][0]:.4f} ({m:+.4f} [{lo:+.4f}, {hi:+.4f}])")
        mean = np.mean([r[c][0] for c in five])
        print(f"| k1={k1} b={b} | " + " | ".join(cells) + f" | {mean:.4f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("candidates", "ablation"), default="candidates")
    ap.add_argument("--only", default=None, help="comma-separated variant name prefixes")
    ap.add_argument(
        "--baseline", default=None, help="variant the differences are against (default: the old default)"
    )
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--peers-only", action="store_true")
    ap.add_argument("--peer-ablation", action="store_true", help="also tantivy/PISA without stemming etc.")
    ap.add_argument("--collections", default=None, help="comma-separated subset of the five")
    ap.add_argument("--train", action="store_true", help="also SciFact's train queries (not in the mean)")
    ap.add_argument("--k1-sweep", action="store_true", help="only: a k1/b grid against k1=1.2 b=0.75")
    ap.add_argument("--recall", action="store_true", help="also print Recall@100")
    ap.add_argument("--rm3", action="store_true", help="RM3 feedback rows against the default, and latency")
    args = ap.parse_args()
    splits = FIVE + ([("scifact", "train")] if args.train else [])
    if args.collections:
        splits = [(n, s) for n, s in splits if n in args.collections.split(",")]
    data = {f"{n}/{s}": load(n, s) for n, s in splits if (DATA / n).is_dir()}
    if not data:
        sys.exit(f"no collections under {DATA}: see ../shared/data/README.md")
    five = [f"{n}/{s}" for n, s in FIVE if f"{n}/{s}" in data]
    if args.k1_sweep:
        return k1_sweep(data, five)
    rows: dict[str, dict[str, tuple[float, float, dict]]] = {}
    variants = ablation_variants() if args.set == "ablation" else candidate_variants()
    if args.rm3:
        variants = rm3_variants()
        args.baseline = args.baseline or "default"
    if args.baseline is None:
        args.baseline = (
            next(k for k in variants if k.startswith(OLD_DEFAULT)) if args.set == "candidates" else "default"
        )
    if args.peers_only:
        variants = {k: v for k, v in variants.items() if k in (args.baseline, "default")}
    if args.only:
        keep = [p.strip() for p in args.only.split(",")] + [args.baseline]
        variants = {k: v for k, v in variants.items() if any(k.startswith(p) for p in keep)}
    for name, cfg in variants.items():
        t = time.perf_counter()
        rows["ragfind: " + name] = {key: metrics(d[0].qrels, run_ragfind(cfg, *d)) for key, d in data.items()}
        print(f"  {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    if not args.no_peers:
        for name, fn in peers(args.peer_ablation).items():
            t = time.perf_counter()
            try:
                rows[name] = {key: metrics(d[0].qrels, fn(*d)) for key, d in data.items()}
            except Exception as exc:  # a peer that is not installed or does not start
                print(f"  {name}: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
                continue
            print(f"  {name}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    cols = list(data)
    print("| configuration | " + " | ".join(cols) + " | mean of five |")
    print("|---|" + "---:|" * (len(cols) + 1))
    for name, r in rows.items():
        mean = np.mean([r[c][0] for c in five]) if all(c in r for c in five) else float("nan")
        print(f"| {name} | " + " | ".join(f"{r[c][0]:.4f}" for c in cols) + f" | {mean:.4f} |")
    base = rows.get("ragfind: " + args.baseline)
    if base is not None:
        print(
            f"\nPaired per-query nDCG@10 difference against ragfind: {args.baseline}: mean [95% bootstrap "
            "interval] p (randomisation test); the mean column resamples each collection's queries:\n"
        )
        print("| configuration | " + " | ".join(cols) + " | mean of five |")
        print("|---|" + "---:|" * (len(cols) + 1))
        for name, r in rows.items():
            if name == "ragfind: " + args.baseline:
                continue
            cells = []
            for c in cols:
                m, lo, hi = paired_ci(base[c][2], r[c][2])
                cells.append(f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}] p={randomisation_p(base[c][2], r[c][2]):.3f}")
            m, lo, hi = mean_ci([(base[c][2], r[c][2]) for c in five])
            print(f"| {name} | " + " | ".join(cells) + f" | {m:+.4f} [{lo:+.4f}, {hi:+.4f}] |")
    if args.rm3:
        rm3_latency(data)
    if args.recall:
        print("\n| configuration | " + " | ".join(f"{c} R@100" for c in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for name, r in rows.items():
            print(f"| {name} | " + " | ".join(f"{r[c][1]:.4f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
