"""``ragfind serve``: the HTTP service and its page over a saved retriever folder."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a retriever folder over HTTP (search, documents, explain, metrics, a page at /)",
        description="Serve a saved Retriever (or sharded) folder: POST /search, /explain, /documents, "
        "DELETE|GET /documents/{id}, GET /health, /metrics, and a page at / that shows why each passage "
        "ranked where it did. Needs the serve extra: pip install 'ragfind[serve]'.",
    )
    p.add_argument(
        "folder", help="a folder written by `ragfind index` / Retriever.save (or with shards.json)"
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on every request but /health and the page "
        "(default: the RAGFIND_API_KEY environment variable, else none)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="threads answering requests concurrently (default: uvicorn's thread pool, 40); one process "
        "owns the folder so that writes stay serialised and durable",
    )
    p.add_argument("--encoder", default=None, help="query encoder folder or name (default: the saved one)")
    p.add_argument(
        "--max-body", type=int, default=1 << 20, metavar="BYTES", help="largest request body (default 1 MB)"
    )
    p.add_argument("--max-k", type=int, default=1000, help="largest k a search may ask for (default 1000)")
    p.add_argument(
        "--checkpoint-bytes",
        type=int,
        default=16 << 20,
        metavar="BYTES",
        help="re-save the folder once the write log passes this size (default 16 MB; also at shutdown)",
    )
    p.add_argument("--read-only", action="store_true", help="refuse writes (no write log is kept)")
    p.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (default info)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Loads the folder (replaying a write log left by a crash) and serves until stopped."""
    import os
    from pathlib import Path

    try:
        import uvicorn

        from ragfind.serve.app import create_app
    except ImportError as exc:
        raise SystemExit(
            f"ragfind serve: needs the serve extra: pip install 'ragfind[serve]' ({exc})"
        ) from exc
    from ragfind.serve.config import ServeConfig

    folder = Path(args.folder)
    if not folder.is_dir():
        raise SystemExit(f"ragfind serve: no retriever folder at {str(folder)!r}")
    if args.workers is not None and args.workers < 1:
        raise SystemExit(f"ragfind serve: --workers {args.workers}: expected a positive integer")
    if not 0 <= args.port < 65536:
        raise SystemExit(f"ragfind serve: --port {args.port}: expected 0..65535")
    try:
        config = ServeConfig(
            api_key=args.api_key or os.environ.get("RAGFIND_API_KEY") or None,
            max_body_bytes=args.max_body,
            max_k=args.max_k,
            checkpoint_bytes=args.checkpoint_bytes,
            read_only=args.read_only,
        )
        app = create_app(folder=folder, config=config, encoder=args.encoder)
    except (ValueError, RuntimeError, OSError) as exc:
        raise SystemExit(f"ragfind serve: {exc}") from exc
    workers = args.workers

    if workers is not None:
        inner = app

        async def app(scope, receive, send):  # sets the thread limit inside uvicorn's event loop
            if scope["type"] == "lifespan":
                import anyio.to_thread

                anyio.to_thread.current_default_thread_limiter().total_tokens = workers
            await inner(scope, receive, send)

    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
