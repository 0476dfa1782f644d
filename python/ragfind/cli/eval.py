"""``ragfind eval``: nDCG/Recall/MRR/MAP of the hybrid pipeline on a BEIR folder."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import ragfind
from ragfind.cli._common import chunk_size, positive_int


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate BM25, dense and hybrid retrieval on a BEIR-layout folder")
    p.add_argument("beir", help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
    p.add_argument("--split", default="test", help="qrels split: qrels/<split>.tsv (default test)")
    p.add_argument(
        "--index", default=None, help="a saved retriever folder built from this corpus (default: build one)"
    )
    p.add_argument(
        "--encoder",
        default="all-MiniLM-L6-v2",
        help="embedding model folder or name when building (default all-MiniLM-L6-v2)",
    )
    p.add_argument(
        "--embeddings",
        default=None,
        help="folder with corpus.npy + corpus_ids.txt: precomputed document embeddings (whole documents)",
    )
    p.add_argument(
        "--modes",
        default="bm25,dense,hybrid",
        help="comma list of first-stage names (bm25, dense, ...) and hybrid",
    )
    p.add_argument(
        "--metrics",
        default="ndcg@10,recall@100,mrr@10,map@100",
        help="comma list of metric@depth (default ndcg@10,recall@100,mrr@10,map@100)",
    )
    p.add_argument("--depth", type=positive_int, default=100, help="documents ranked per query (default 100)")
    p.add_argument(
        "--chunk-size",
        type=chunk_size,
        default=None,
        help="tokens per chunk when building, 'auto' or 'none' (default: whole documents)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def build_from_beir(data, encoder: str, embeddings_dir, chunk_size, show_progress: bool):
    """A Retriever over a BEIR corpus (title indexed as context); embeddings reused when given."""
    docs = [{"id": i, "title": d["title"], "text": d["text"]} for i, d in data.corpus.items()]
    vectors = None
    if embeddings_dir is not None:
        ids = [x for x in (Path(embeddings_dir) / "corpus_ids.txt").read_text().split("\n") if x]
        matrix = np.load(Path(embeddings_dir) / "corpus.npy")
        row = {d: n for n, d in enumerate(ids)}
        missing = [d["id"] for d in docs if d["id"] not in row]
        if missing:
            raise SystemExit(
                f"ragfind eval: {len(missing)} documents have no precomputed embedding (first {missing[0]!r})"
            )
        vectors = matrix[[row[d["id"]] for d in docs]]
        chunk_size = None
    r = ragfind.Retriever(
        encoder=encoder, chunk_size=chunk_size, show_progress=show_progress, candidates=100, cache_size=0
    )
    r.add_documents(docs, embeddings=vectors)
    return r


def doc_run(result_passages, depth: int) -> dict:
    """Passages -> {doc id: score}: each document at the rank of its best passage."""
    run: dict = {}
    n = len(result_passages)
    for rank, p in enumerate(result_passages):
        if p.doc_id not in run:
            run[p.doc_id] = float(n - rank)
        if len(run) >= depth:
            break
    return run


def run(args: argparse.Namespace) -> int:
    """Builds or loads the retriever, runs every query in every mode, prints the metrics."""
    from tqdm.auto import tqdm  # import cost: only a progress bar needs it

    from ragfind.eval import evaluate, load_beir  # import cost: loaded on use

    qrels = Path(args.beir) / "qrels"
    if qrels.is_dir() and not (qrels / f"{args.split}.tsv").is_file():
        splits = sorted(p.stem for p in qrels.glob("*.tsv"))
        raise SystemExit(
            f"ragfind eval: --split {args.split!r}: no {qrels / (args.split + '.tsv')}; "
            f"splits here: {', '.join(splits) or 'none'}"
        )
    data = load_beir(args.beir, split=args.split)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    t0 = time.perf_counter()
    if args.index:
        retriever = ragfind.Retriever.load(args.index)
    else:
        retriever = build_from_beir(data, args.encoder, args.embeddings, args.chunk_size, not args.quiet)
    print(f"ragfind eval: {data!r}; retriever ready in {time.perf_counter() - t0:.1f} s")
    qids, texts = data.query_items()
    names = [s.name for s in retriever.first_stages]
    for mode in modes:
        if mode != "hybrid" and mode not in names:
            raise SystemExit(
                f"ragfind eval: unknown mode {mode!r}; expected one of {', '.join(names)} or hybrid"
            )
    for mode in modes:
        only = None if mode == "hybrid" else [mode]
        run_ = {}
        for qid, text in tqdm(list(zip(qids, texts)), desc=mode, unit="query", disable=args.quiet):
            res = retriever.search(text, k=args.depth * 3, use_cache=False, stages=only)
            run_[qid] = doc_run(res.passages, args.depth)
        result = evaluate(data.qrels, run_, metrics)
        print(f"{mode:>7}: {result}")
    return 0
