"""``ragfind serve``: the HTTP service and its page over a saved retriever folder."""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import logging
import os
import shutil
import signal
import socket
import stat
import tempfile
from pathlib import Path

from ragfind.serve.config import ServeConfig


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
        default=1,
        help="worker processes answering on the port, as uvicorn's and gunicorn's --workers (default 1: "
        "one process does everything). Past 1, one more process owns the folder: the workers forward "
        "writes to it, and see each acknowledged write before they answer the next request",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=8,
        help="threads per process running searches, explanations and document reads and writes (default 8)",
    )
    p.add_argument(
        "--queue-depth",
        type=int,
        default=256,
        metavar="N",
        help="requests admitted per process at once (running and waiting for a thread); past it they "
        "get 503 with Retry-After (default 256). /health and /metrics never queue",
    )
    p.add_argument(
        "--queue-wait-ms",
        type=float,
        default=2000.0,
        metavar="MS",
        help="longest wait for a thread; a request waiting longer gets 503 with Retry-After (default 2000)",
    )
    p.add_argument(
        "--inline-ms",
        type=float,
        default=1.0,
        metavar="MS",
        help="searches whose kind averages under this run on the event loop without a thread hop "
        "(default 1; 0: always a thread)",
    )
    p.add_argument(
        "--cache-size",
        type=int,
        default=None,
        metavar="N",
        help="entries of the query-embedding and result caches, per process (default: the size saved "
        "with the folder, 1024 unless set; 0: no caching)",
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
    p.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one uvicorn log line per request at info level, as uvicorn's --access-log (default on); "
        "--no-access-log skips even the line's formatting, which uvicorn does below info too",
    )
    # Internal: FD,FD (listening socket, the writer's pipe) of a worker started by the writer.
    p.add_argument("--worker-of", default=None, help=argparse.SUPPRESS)
    p.add_argument("--writer-socket", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Loads the folder (replaying a write log left by a crash) and serves until stopped."""
    try:
        import uvicorn  # the serve extra

        from ragfind.serve.app import create_app  # the serve extra
        from ragfind.serve.protocol import http_protocol
    except ImportError as exc:
        raise SystemExit(
            f"ragfind serve: needs the serve extra: pip install 'ragfind[serve]' ({exc})"
        ) from exc
    folder = Path(args.folder)
    if not folder.is_dir():
        raise SystemExit(f"ragfind serve: no retriever folder at {str(folder)!r}")
    if args.workers < 1:
        raise SystemExit(f"ragfind serve: --workers {args.workers}: expected a positive integer")
    if args.workers > 1 and os.name != "posix":  # the workers inherit the socket and a pipe
        raise SystemExit("ragfind serve: --workers above 1 needs a POSIX system")
    if args.workers > 1 and (folder / "shards.json").is_file():
        raise SystemExit(
            "ragfind serve: --workers above 1 serves a Retriever folder; a sharded one already spreads "
            "its searches over its Ray actors"
        )
    if not 0 <= args.port < 65536:
        raise SystemExit(f"ragfind serve: --port {args.port}: expected 0..65535")
    try:
        config = ServeConfig(
            api_key=args.api_key or os.environ.get("RAGFIND_API_KEY") or None,
            max_body_bytes=args.max_body,
            max_k=args.max_k,
            checkpoint_bytes=args.checkpoint_bytes,
            read_only=args.read_only,
            threads=args.threads,
            queue_depth=args.queue_depth,
            queue_wait_ms=args.queue_wait_ms,
            inline_ms=args.inline_ms,
            freeze_gc=True,  # this process is the server: no full collection walks the retriever
            cache_size=args.cache_size,
        )
        if args.worker_of:
            return _worker(args, config)
        app = create_app(folder=folder, config=config, encoder=args.encoder)
    except (ValueError, RuntimeError, OSError) as exc:
        raise SystemExit(f"ragfind serve: {exc}") from exc
    if args.workers == 1:
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=args.access_log,
            http=http_protocol(),
        )
        return 0
    return _writer(args, config, app)


def _worker_args(args: argparse.Namespace) -> list:
    out = [str(args.folder), "--log-level", args.log_level, "--max-body", str(args.max_body)]
    out.append("--access-log" if args.access_log else "--no-access-log")
    out += [
        "--max-k",
        str(args.max_k),
        "--threads",
        str(args.threads),
        "--queue-depth",
        str(args.queue_depth),
    ]
    out += ["--queue-wait-ms", repr(args.queue_wait_ms), "--inline-ms", repr(args.inline_ms)]
    if args.encoder:
        out += ["--encoder", args.encoder]
    if args.cache_size is not None:
        out += ["--cache-size", str(args.cache_size)]
    return out


#: The private folders of ``--workers`` writers (the Unix socket the workers forward writes
#: to): ``ragfind-serve-<pid>-<random>`` in the temporary folder, mode 0700.
_PRIVATE_PREFIX = "ragfind-serve-"


def _private_folder() -> str:
    """A new private folder for this writer, named after its pid, after removing those of
    writers that are gone (a ``kill -9`` leaves its folder behind: nothing runs then)."""
    _remove_stale_folders(tempfile.gettempdir())
    return tempfile.mkdtemp(prefix=f"{_PRIVATE_PREFIX}{os.getpid()}-")


def _remove_stale_folders(tmp: str) -> None:
    """Removes this user's writer folders under ``tmp`` whose pid runs no process any more."""
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        pid = name[len(_PRIVATE_PREFIX) :].split("-", 1)[0]
        if not name.startswith(_PRIVATE_PREFIX) or not pid.isdigit():
            continue  # another program's, or a folder from before they held the pid
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue  # gone meanwhile, or a live process of another user


def _on_exit(remove) -> None:
    """Runs ``remove`` on every exit that can be caught: a return or an exception (atexit), and
    SIGTERM, SIGINT and SIGHUP. uvicorn handles SIGTERM/SIGINT while it serves (a graceful
    shutdown), then raises the signal again with the handler found before it: this one, which
    removes and then dies of the signal as it would have. A ``kill -9`` cannot be caught: the
    next writer's start removes the folder (:func:`_remove_stale_folders`)."""
    atexit.register(remove)

    def handler(sig, frame) -> None:
        remove()
        signal.signal(sig, signal.SIG_DFL)
        signal.raise_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def _writer(args: argparse.Namespace, config, app) -> int:
    """The process that owns the folder: serves forwarded writes on a private Unix socket and
    runs the workers on the public port (see ragfind.serve.workers)."""
    import uvicorn  # the serve extra

    from ragfind.serve.workers import Workers  # the serve extra

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    try:
        sock = socket.create_server((args.host, args.port), family=family, backlog=2048)
    except OSError as exc:
        raise SystemExit(f"ragfind serve: cannot listen on {args.host}:{args.port}: {exc}") from exc
    private = _private_folder()  # mode 0700: only this user reaches the writer
    _on_exit(lambda: shutil.rmtree(private, ignore_errors=True))
    uds = os.path.join(private, "writer.sock")
    env = dict(os.environ)
    if config.api_key:
        env["RAGFIND_API_KEY"] = config.api_key  # not on the command line, where ps shows it
    workers = Workers(args.workers, [*_worker_args(args), "--writer-socket", uds], sock, env)
    inner = app
    host = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    public = f"http://{host}:{sock.getsockname()[1]}"  # the port bound, when --port 0 picked it

    async def writer_app(scope, receive, send):
        if scope["type"] != "lifespan":
            return await inner(scope, receive, send)

        async def lifespan_receive():
            message = await receive()
            if message["type"] == "lifespan.startup":
                workers.start()
                # What one process prints for its port; uvicorn prints only the writer's socket.
                logging.getLogger("uvicorn.error").info(
                    "Uvicorn running on %s with %d workers (Press CTRL+C to quit)", public, args.workers
                )
            elif message["type"] == "lifespan.shutdown":
                workers.stop()  # no worker forwards a write past this point
            return message

        await inner(scope, lifespan_receive, send)

    try:
        uvicorn.run(writer_app, uds=uds, log_level=args.log_level, access_log=args.access_log)
    finally:
        if not workers.stopping.is_set():
            workers.stop()
        sock.close()
        shutil.rmtree(private, ignore_errors=True)
    return 0


def _worker(args: argparse.Namespace, config) -> int:
    """One worker process: the listening socket and the writer's pipe are inherited."""
    import uvicorn  # the serve extra

    from ragfind.serve.app import create_app  # the serve extra
    from ragfind.serve.protocol import http_protocol
    from ragfind.serve.service import Service
    from ragfind.serve.workers import Follower, watch_parent

    listen_fd, parent_fd = (int(x) for x in args.worker_of.split(","))
    watch_parent(parent_fd)
    service = Service(None, None, dataclasses.replace(config, read_only=True))
    follower = Follower(service, args.folder, args.writer_socket, args.encoder)
    follower.writable = not config.read_only  # the writer refuses them with 405 then
    app = create_app(service=service, config=config, follower=follower)
    sock = socket.socket(fileno=listen_fd)
    options = uvicorn.Config(app, log_level=args.log_level, access_log=args.access_log, http=http_protocol())
    server = uvicorn.Server(options)
    server.run(sockets=[sock])
    return 0
