"""``ragfind search``: ask a saved retriever a question."""

from __future__ import annotations

import argparse
import json

import ragfind
from ragfind.cli._common import k_value, ms, nonnegative_int, parse_filters
from ragfind.models.folder import ModelFolderError


def register(sub) -> None:
    p = sub.add_parser("search", help="search a retriever folder and print passages with stage timings")
    p.add_argument("index", help="a folder written by `ragfind index` / Retriever.save")
    p.add_argument(
        "query", nargs="+", help="the question; several arguments are phrasings fused together (RAG-Fusion)"
    )
    p.add_argument("-k", type=k_value, default=5, help="passages to return (default 5)")
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="metadata filter (also >=, <=, !=, >, <); repeatable",
    )
    p.add_argument("--reranker", default=None, help="cross-encoder folder to re-rank with")
    p.add_argument(
        "--context",
        type=nonnegative_int,
        default=0,
        metavar="TOKENS",
        help="also print the assembled prompt under this token budget",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Loads the folder, searches, prints; returns 0."""
    kwargs = {} if args.reranker is None else {"reranker": args.reranker}
    try:
        retriever = ragfind.Retriever.load(args.index, **kwargs)
    except ModelFolderError as exc:
        if args.reranker is None:
            raise
        raise SystemExit(
            f"ragfind search: --reranker {args.reranker!r}: {exc}; it takes a cross-encoder model folder "
            "(make one with `ragfind export CHECKPOINT FOLDER --role cross-encoder`; nothing is downloaded)"
        ) from exc
    query = args.query[0] if len(args.query) == 1 else args.query
    try:
        result = retriever.search(query, k=args.k, filters=parse_filters(args.filter) or None)
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"ragfind search: {exc}") from exc
    if args.json:
        print(
            json.dumps(
                {
                    "passages": [
                        {
                            "id": p.id,
                            "doc_id": p.doc_id,
                            "title": p.title,
                            "source": p.source,
                            "score": p.score,
                            "ranks": dict(p.ranks),
                            "scores": dict(p.scores),
                            "start": p.start,
                            "end": p.end,
                            "text": p.text,
                        }
                        for p in result
                    ],
                    "timings_ms": {k: v * 1e3 for k, v in result.timings.items()},
                    "concurrent": list(result.concurrent),
                },
                indent=1,
            )
        )
    else:
        stages = ", ".join(f"{k} {ms(v)}" for k, v in result.timings.items())
        print(f"{len(result)} passages ({stages})")
        for rank, p in enumerate(result, 1):
            snippet = " ".join(p.text.split())[:160]
            by_stage = " ".join(f"{n}#{r}" for n, r in p.ranks.items())
            print(f"{rank:>3}. {p.score:.4f}  {p.doc_id}  {p.title}  [{by_stage}]\n     {snippet}")
    if args.context:
        ctx = ragfind.assemble_context(result, args.context, question=args.query[0])
        print("\n" + ctx.prompt)
    return 0
