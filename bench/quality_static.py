"""Static query encoders against MiniLM: nDCG@10 on five judged collections, query latency.

For each of SciFact (test), Cranfield, MED, NPL and LISA: BM25 (ragfind's default), exact dense
search with all-MiniLM-L6-v2 (the document vectors are MiniLM's in every row but the plain
static one), and each hybrid with BM25 by weighted RRF (k=60):

- MiniLM: MiniLM queries (the default hybrid);
- plain static: ``distill_static(MiniLM, dim=256)`` embeds documents and queries (model2vec's
  recipe, no fit);
- fitted static: ``fit_query_encoder`` on the collection's own documents (+2 pseudo-queries
  per document) embeds the queries into MiniLM's space; documents keep MiniLM vectors.

Then, on SciFact: query-embedding p50, end-to-end ``Retriever.search`` p50 (k=10,
chunk_size=None, cache_size=0, documents added with their MiniLM vectors), fit time and
ingestion docs/s. MiniLM vectors of SciFact and Cranfield are the reference files under
../shared/data; those of MED, NPL and LISA are computed with ragfind's encoder and cached in
``--cache`` (reused when present).

    PYTHONPATH=python nice -n 10 python bench/quality_static.py [--cache /work/cache/emb]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ragfind  # noqa: E402
from ragfind.eval import evaluate, load_beir  # noqa: E402
from ragfind.fusion import convex  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CACHE = Path("/work/cache/emb")
COLLECTIONS = ("scifact", "cranfield", "med", "npl", "lisa")


def _all_queries(name: str) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with open(DATA / name / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                ids.append(str(d["_id"]))
                texts.append(str(d.get("text") or ""))
    return ids, texts


def _save_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def minilm_embeddings(name: str, cache: Path = CACHE, encoder=None):
    """(corpus ids, C, query ids, Q): MiniLM (ragfind's encoder) embeddings of a collection.

    SciFact and Cranfield use the reference files under ../shared/data; the others are read
    from ``cache/<name>/`` (corpus.npy, queries.npy, corpus_ids.txt, query_ids.txt), computed
    and written there atomically (ids last) when missing. Empty texts encode as one space
    (the encoder refuses "").
    """
    ref = DATA / name / "embeddings" / "all-MiniLM-L6-v2"
    folder = ref if (ref / "query_ids.txt").is_file() else cache / name
    if not (folder / "query_ids.txt").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        enc = encoder or ragfind.load_model("all-MiniLM-L6-v2")
        ds = load_beir(DATA / name, split="test")
        doc_ids, texts = ds.documents()
        C = enc.encode([t or " " for t in texts], batch_size=32, show_progress=True)
        q_ids, q_texts = _all_queries(name)
        Q = enc.encode([t or " " for t in q_texts], batch_size=32)
        _save_atomic(folder / "corpus.npy", lambda f: np.save(f, C.astype(np.float32)))
        _save_atomic(folder / "queries.npy", lambda f: np.save(f, Q.astype(np.float32)))
        _save_atomic(folder / "corpus_ids.txt", lambda f: f.write("\n".join(doc_ids).encode() + b"\n"))
        _save_atomic(folder / "query_ids.txt", lambda f: f.write("\n".join(q_ids).encode() + b"\n"))
    corpus_ids = (folder / "corpus_ids.txt").read_text().splitlines()
    query_ids = (folder / "query_ids.txt").read_text().splitlines()
    return corpus_ids, np.load(folder / "corpus.npy"), query_ids, np.load(folder / "queries.npy")


DEPTH = 100
WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "ragfind-bench-static"


def p50_us(fn, items, repeat: int = 3) -> float:
    """Median wall time of fn(item) in microseconds over ``repeat`` passes (one warm-up pass)."""
    for x in items[:20]:
        fn(x)
    times = []
    for _ in range(repeat):
        for x in items:
            t = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e6)


def dense_runs(Qv: np.ndarray, C: np.ndarray) -> list:
    sims = Qv @ C.T
    top = np.argpartition(-sims, DEPTH, axis=1)[:, :DEPTH]
    out = []
    for i in range(len(Qv)):
        order = top[i][np.argsort(-sims[i, top[i]], kind="stable")]
        out.append((order.astype(np.int64), sims[i, order].astype(np.float64)))
    return out


def ndcg(ds, doc_ids, qids, runs) -> float:
    from ragfind.eval import evaluate

    run = {q: {doc_ids[int(d)]: float(x) for d, x in zip(*runs[i])} for i, q in enumerate(qids)}
    return float(evaluate(ds.qrels, run, ["ndcg@10"]).mean["ndcg@10"])


FUSIONS = {
    "RRF k=60": lambda b, d: ragfind.rrf([b, d], k=60),
    "convex min-max, BM25 0.7": lambda b, d: convex(b, d, 0.7, "min-max"),
}


def collection(name: str, cache: Path, minilm, plain) -> dict:
    """nDCG@10 rows of one collection, and the fitted query encoder."""
    ds = load_beir(DATA / name, split="test")
    doc_ids, texts = ds.documents()
    cids, C, all_qids, Q = minilm_embeddings(name, cache, minilm)
    assert cids == doc_ids, f"{name}: embedding rows follow corpus.jsonl"
    qids, qtexts = ds.query_items()
    row = {q: i for i, q in enumerate(all_qids)}
    Qm = Q[[row[q] for q in qids]]
    bm = ragfind.BM25Index()
    bm.add(texts)
    bm25 = bm.search_batch(qtexts, k=DEPTH)
    t = time.perf_counter()
    fitted = ragfind.fit_query_encoder([t or " " for t in texts], C, minilm)
    fit_s = time.perf_counter() - t
    Cp = plain.encode([t or " " for t in texts])
    dense = {
        "MiniLM": dense_runs(Qm, C),
        "plain static (distilled, 256-d)": dense_runs(plain.encode(qtexts), Cp),
        "fitted static query encoder": dense_runs(fitted.encode(qtexts), C),
    }
    rows = {"BM25 alone": ndcg(ds, doc_ids, qids, bm25)}
    for label, runs in dense.items():
        rows[f"{label}: dense alone"] = ndcg(ds, doc_ids, qids, runs)
        for fusion, fuse in FUSIONS.items():
            fused = [fuse(bm25[i], runs[i]) for i in range(len(qids))]
            rows[f"{label}: hybrid, {fusion}"] = ndcg(ds, doc_ids, qids, fused)
    return {
        "rows": rows,
        "fit_s": fit_s,
        "docs": len(texts),
        "queries": len(qids),
        "fitted": fitted,
        "ds": ds,
        "qids": qids,
        "doc_ids": doc_ids,
        "texts": texts,
        "C": C,
        "qtexts": qtexts,
    }


def latency(sf: dict, minilm, plain) -> dict:
    """SciFact latencies (microseconds) and rates."""
    texts, C, qtexts, fitted = sf["texts"], sf["C"], sf["qtexts"], sf["fitted"]
    docs = [{"id": str(i), "text": t or " "} for i, t in enumerate(texts)]
    out = {
        "query embedding p50, MiniLM": p50_us(minilm.encode_query, qtexts, 1),
        "query embedding p50, plain static": p50_us(plain.encode_query, qtexts),
        "query embedding p50, fitted static": p50_us(fitted.encode_query, qtexts),
    }
    common = {"chunk_size": None, "cache_size": 0, "contextualize": False}
    bm25_only = ragfind.Retriever(encoder=None, **common)
    bm25_only.add_documents(docs)
    hybrid = ragfind.Retriever(encoder=minilm, **common)
    hybrid.add_documents(docs, embeddings=C)
    fast = ragfind.Retriever(encoder=minilm, query_encoder=fitted, **common)
    fast.add_documents(docs, embeddings=C)
    fast_i8 = ragfind.Retriever(encoder=minilm, query_encoder=fitted, dense_options={"dtype": "i8"}, **common)
    fast_i8.add_documents(docs, embeddings=C)
    out["search p50, BM25 alone"] = p50_us(lambda q: bm25_only.search(q, k=10), qtexts)
    out["search p50, hybrid BM25 + MiniLM"] = p50_us(lambda q: hybrid.search(q, k=10), qtexts, 1)
    out["search p50, hybrid BM25 + fitted static (fast preset: convex 0.7)"] = p50_us(
        lambda q: fast.search(q, k=10), qtexts
    )
    out["search p50, the same, dense vectors int8 (dense_options dtype i8)"] = p50_us(
        lambda q: fast_i8.search(q, k=10), qtexts
    )
    ds, qids = sf["ds"], sf["qids"]
    for label, r in (("fast preset", fast), ("fast preset, int8", fast_i8)):
        run = {
            q: {sf["doc_ids"][int(p.doc_id)]: p.score for p in r.search(t, k=10).passages}
            for q, t in zip(qids, qtexts)
        }
        out[f"nDCG@10 of Retriever.search, {label}"] = evaluate(ds.qrels, run, ["ndcg@10"]).mean["ndcg@10"]
    # ingestion: the same first 500 documents each way
    sub = docs[:500]
    for label, kw in (
        ("MiniLM hybrid", {"encoder": minilm}),
        (
            "fast (MiniLM documents + static query encoder fitted per add)",
            {"encoder": minilm, "query_encoder": "static"},
        ),
        ("plain static documents", {"encoder": plain}),
    ):
        r = ragfind.Retriever(**kw, **common)
        t = time.perf_counter()
        r.add_documents(sub)
        out[f"ingestion docs/s, {label}"] = len(sub) / (time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=CACHE, help="MiniLM embeddings of MED/NPL/LISA")
    ap.add_argument("--cache-only", action="store_true", help="only compute the missing embeddings")
    ap.add_argument("--collections", default=",".join(COLLECTIONS))
    a = ap.parse_args()
    names = a.collections.split(",")
    minilm = ragfind.load_model("all-MiniLM-L6-v2")
    if a.cache_only:
        for n in names:
            minilm_embeddings(n, a.cache, minilm)
        return
    print(f"load average at start {os.getloadavg()}")
    WORK.mkdir(parents=True, exist_ok=True)
    plain_dir = WORK / "minilm-static-256"
    if not plain_dir.is_dir():
        ragfind.distill_static(minilm, plain_dir, dim=256, show_progress=False)
    plain = ragfind.load_model(plain_dir)
    results = {n: collection(n, a.cache, minilm, plain) for n in names}
    rows = list(next(iter(results.values()))["rows"])
    print("\nnDCG@10 (test queries; mean = unweighted mean over the collections)\n")
    print("| method | " + " | ".join(names) + " | mean |")
    print("|---|" + "---:|" * (len(names) + 1))
    for r in rows:
        vals = [results[n]["rows"][r] for n in names]
        print(f"| {r} | " + " | ".join(f"{v:.4f}" for v in vals) + f" | {np.mean(vals):.4f} |")
    print(
        "\nfit time of the query encoder (s): "
        + ", ".join(f"{n} {results[n]['fit_s']:.1f} ({results[n]['docs']} docs)" for n in names)
    )
    if "scifact" in results:
        lat = latency(results["scifact"], minilm, plain)
        print("\nSciFact latency and ingestion\n\n| measure | value |\n|---|---:|")
        for k, v in lat.items():
            print(f"| {k} | {v:.4f} |" if k.startswith("nDCG") else f"| {k} | {v:.1f} |")
    print(f"\nload average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
