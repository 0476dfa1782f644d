"""``ragfind index``: build a hybrid retriever folder from a corpus."""

from __future__ import annotations

import argparse
import re
import time

import ragfind
from ragfind.cli._common import chunk_size, overlap_fraction, positive_int, read_documents


def register(sub) -> None:
    p = sub.add_parser(
        "index",
        help="chunk, embed and index a corpus into a retriever folder",
        description="Build a hybrid retriever (BM25 + dense, SQLite store) from a JSON-lines "
        "corpus or a BEIR folder and save it as one folder.",
    )
    p.add_argument("corpus", help="documents: a .jsonl file ({id,title,text,metadata}) or a BEIR folder")
    p.add_argument("output", help="the retriever folder to write (replaced atomically)")
    p.add_argument(
        "--encoder",
        default="all-MiniLM-L6-v2",
        help="embedding model folder or name (default all-MiniLM-L6-v2)",
    )
    p.add_argument("--no-dense", action="store_true", help="lexical (BM25) only")
    p.add_argument(
        "--chunk-size",
        type=chunk_size,
        default="auto",
        help="tokens per chunk, 'auto' or 'none' (whole documents)",
    )
    p.add_argument(
        "--overlap",
        type=overlap_fraction,
        default=0.15,
        help="chunk overlap as a fraction of a chunk, 0 to 0.5 (default 0.15)",
    )
    p.add_argument("--no-context", action="store_true", help="do not index the title/heading context")
    p.add_argument(
        "--dense-kind",
        choices=["exact", "hnsw", "ivf"],
        default="exact",
        help="dense index: exact SIMD scan (default), HNSW graph or IVF lists (automatic nlist)",
    )
    p.add_argument("--batch-size", type=positive_int, default=32, help="encoder batch size (default 32)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Builds and saves the retriever; returns 0."""
    from tqdm.auto import tqdm  # import cost: only a progress bar needs it

    t0 = time.perf_counter()
    retriever = ragfind.Retriever(
        encoder=None if args.no_dense else args.encoder,
        chunk_size=args.chunk_size,
        chunk_overlap=args.overlap,
        contextualize=not args.no_context,
        dense_kind=args.dense_kind,
        show_progress=not args.quiet,
    )
    numbered = list(tqdm(read_documents(args.corpus), desc="read", unit="doc", disable=args.quiet))
    lines = [n for n, _ in numbered]
    docs = [d for _, d in numbered]
    batch = 2048
    n_chunks = 0
    for start in tqdm(
        range(0, len(docs), batch), desc="index", unit="batch", disable=args.quiet or len(docs) <= batch
    ):
        try:
            n_chunks += retriever.add_documents(docs[start : start + batch], batch_size=args.batch_size)
        except (ValueError, TypeError) as exc:
            raise SystemExit(_document_error(args.corpus, lines[start : start + batch], exc)) from None
    retriever.save(args.output)
    print(
        f"ragfind index: {len(docs)} documents, {n_chunks} chunks -> {args.output} "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    return 0


def _document_error(corpus: str, lines: list, exc: BaseException) -> str:
    """The one-line message of a document the retriever refused, naming its line of ``corpus``
    when the message names it as ``documents[i]`` of the batch."""
    msg = " ".join(str(exc).split())
    m = re.search(r"documents\[(\d+)\]", msg)
    if m is not None and int(m.group(1)) < len(lines):
        return f"ragfind index: {corpus}:{lines[int(m.group(1))]}: {msg}"
    return f"ragfind index: {corpus}: {msg}"
