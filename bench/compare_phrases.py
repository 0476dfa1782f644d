"""Phrase queries side by side: ragfind (positions=True) vs tantivy, in the same run.

    python bench/make_synthetic.py                       # once: bench/data/synthetic_1m
    python bench/compare_phrases.py                      # SciFact + synthetic 1M
    python bench/compare_phrases.py --skip-synthetic --json bench/data/phrases.json

For each corpus: build ragfind without and with positions and tantivy with ``freq`` and with
``position`` index options (one thread each: tantivy's writer gets ``num_threads=1``), save
them and report the on-disk sizes. Phrases are adjacent word pairs drawn (fixed seed) from the
documents' texts, so every phrase matches at least one document; the same phrase strings go to
both engines (``"w1 w2"`` and, for the sloppy run, ``"w1 w2"~2``), one query per call, top-10,
parsing included, single-threaded. q/s is the median over ``--repeats`` passes, by wall clock
and by CPU time (process time: the steadier figure on a shared machine).

Both sides tokenize alike: ragfind's analyzer without stopwords, stemming or identifier
splitting (lower-cased runs of word characters), tantivy's ``default`` tokenizer (lower-cased
alphanumeric runs); phrases use words of two or more letters only, so positions agree. The
match counts of every phrase are compared (``agree``) to check that both found the same
documents.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = Path(os.environ.get("RAGFIND_DATA", REPO.parent / "shared" / "data"))
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(REPO / "python"))

WORD = re.compile(r"^[^\W\d_]{2,}$")


def read_texts(kind: str, path: Path, limit: int | None) -> list[str]:
    texts = []
    if kind == "beir":
        with open(path / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                texts.append(f"{d.get('title') or ''} {d.get('text') or ''}".strip())
    else:
        with open(path / "docs.txt", encoding="utf-8") as f:
            texts = f.read().splitlines()
    return texts[:limit] if limit else texts


def sample_phrases(texts: list[str], n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        words = texts[rng.randrange(len(texts))].split()
        if len(words) < 2:
            continue
        i = rng.randrange(len(words) - 1)
        a, b = words[i].lower(), words[i + 1].lower()
        if WORD.match(a) and WORD.match(b):
            out.append(f"{a} {b}")
    return out


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def time_queries(run, queries: list[str], repeats: int) -> tuple[float, float]:
    """(wall-clock q/s, CPU-time q/s): medians over ``repeats`` passes after a warm-up. The
    CPU-time rate (process time, all threads) is the steadier one on a shared machine."""
    run(queries[: min(20, len(queries))])  # warm-up
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        run(queries)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return len(queries) / statistics.median(walls), len(queries) / statistics.median(cpus)


def bench_corpus(name: str, texts: list[str], n_phrases: int, repeats: int, tmp: Path) -> dict:
    import tantivy

    from ragfind import Analyzer, BM25Index

    res: dict = {"corpus": name, "docs": len(texts)}
    plain_an = dict(stopwords=None, stemmer=None, split_identifiers=False, symbol_letters=False)
    sizes = {}
    idx = None
    for positions in (False, True):
        t = time.perf_counter()
        idx = BM25Index(analyzer=Analyzer(**plain_an), positions=positions)
        idx.add(texts)
        build = time.perf_counter() - t
        f = tmp / f"ragfind-{positions}.bm25"
        idx.save(f)
        sizes[f"ragfind_{'positions' if positions else 'plain'}"] = f.stat().st_size
        res[f"ragfind_build_s_{'positions' if positions else 'plain'}"] = build
    assert idx is not None
    tan = {}
    for option in ("freq", "position"):
        sb = tantivy.SchemaBuilder()
        sb.add_text_field("body", stored=False, index_option=option)
        schema = sb.build()
        d = tmp / f"tantivy-{option}"
        d.mkdir()
        index = tantivy.Index(schema, path=str(d))
        t = time.perf_counter()
        w = index.writer(heap_size=512_000_000, num_threads=1)
        for text in texts:
            w.add_document(tantivy.Document(body=[text]))
        w.commit()
        w.wait_merging_threads()
        res[f"tantivy_build_s_{option}"] = time.perf_counter() - t
        index.reload()
        sizes[f"tantivy_{option}"] = dir_size(d)
        tan[option] = index
    res["sizes"] = sizes
    res["ragfind_positions_ratio"] = sizes["ragfind_positions"] / sizes["ragfind_plain"]
    res["tantivy_positions_ratio"] = sizes["tantivy_position"] / sizes["tantivy_freq"]

    phrases = sample_phrases(texts, n_phrases)
    index = tan["position"]
    searcher = index.searcher()
    loaded = BM25Index.load(tmp / "ragfind-True.bm25", mmap=True)
    for label, suffix in (("exact", ""), ("slop2", "~2")):
        qs = [f'"{p}"{suffix}' for p in phrases]

        def run_ragfind(batch, _idx=loaded):
            for q in batch:
                _idx.search(q, k=10)

        def run_tantivy(batch):
            for q in batch:
                searcher.search(index.parse_query(q, ["body"]), 10)

        r_qps, r_cpu = time_queries(run_ragfind, qs, repeats)
        t_qps, t_cpu = time_queries(run_tantivy, qs, repeats)
        # Same matches? Compare the number of documents each finds, per phrase (a sample).
        agree = 0
        checked = qs[: min(200, len(qs))]
        for q in checked:
            mine = len(loaded.search(q, k=1_000_000)[0])
            theirs = searcher.search(index.parse_query(q, ["body"]), 1, count=True).count
            agree += mine == theirs
        res[label] = {
            "queries": len(qs),
            "ragfind_qps": r_qps,
            "tantivy_qps": t_qps,
            "ratio": r_qps / t_qps,
            "ragfind_cpu_qps": r_cpu,
            "tantivy_cpu_qps": t_cpu,
            "cpu_ratio": r_cpu / t_cpu,
            "match_counts_agree": f"{agree}/{len(checked)}",
        }
        print(
            f"{name} {label}: ragfind {r_qps:,.0f} q/s, tantivy {t_qps:,.0f} q/s, x{r_qps / t_qps:.2f}; "
            f"CPU time: ragfind {r_cpu:,.0f} q/s, tantivy {t_cpu:,.0f} q/s, x{r_cpu / t_cpu:.2f}; "
            f"counts agree {agree}/{len(checked)}",
            flush=True,
        )
    print(
        f"{name} sizes: {sizes}; ragfind positions x{res['ragfind_positions_ratio']:.2f}, "
        f"tantivy x{res['tantivy_positions_ratio']:.2f}",
        flush=True,
    )
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--synthetic", type=Path, default=HERE / "data" / "synthetic_1m")
    p.add_argument("--skip-synthetic", action="store_true")
    p.add_argument("--skip-scifact", action="store_true")
    p.add_argument("--limit", type=int, default=None, help="use the first N documents only")
    p.add_argument("--phrases", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_scifact:
            d = Path(tmp) / "scifact"
            d.mkdir()
            texts = read_texts("beir", args.data / "scifact", args.limit)
            results.append(bench_corpus("scifact", texts, args.phrases, args.repeats, d))
        if not args.skip_synthetic:
            d = Path(tmp) / "synthetic"
            d.mkdir()
            texts = read_texts("lines", args.synthetic, args.limit)
            results.append(bench_corpus(args.synthetic.name, texts, args.phrases, args.repeats, d))
            del texts
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
