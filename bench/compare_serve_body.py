"""The floor of a large answer: what the HTTP stack alone costs to answer ``POST /search``'s
bytes, next to ``GET /health`` and the real ``POST /search`` of the same server, same run.

One server process (uvicorn + httptools + uvloop, ``ragfind serve``'s protocol and app, a
SciFact BM25 retriever, ``--read-only``), whose app has, besides its own routes, five that
exist only in this script (nothing in ``ragfind.serve`` changes):

- ``POST /search-unsent``: ``ragfind serve``'s own ``/search`` endpoint (the headers, the
  gate, the body parsed, the metrics) over ``Service.search_json`` in full (the answer's JSON
  written) whose answer is then dropped for its length: ``/search`` less sending the large
  answer.
- ``POST /search-small``: the same endpoint over a handler that runs the search
  (``Retriever.search``, k=10) and answers only how many passages it found: ``/search`` less
  the rows, the validation and the large answer.
- ``POST /search-fixed``: the same endpoint over a handler that returns a precomputed answer
  dict (a real answer of median size, rendered by ``render_json`` each time): ``/search`` less
  ``Service.search``'s work (validation, the retrieval, the ten rows).
- ``POST /bytes-fixed``: a bare ASGI app that reads the body and sends the precomputed answer's
  bytes with the same headers: the HTTP stack and the socket, nothing of ragfind's.
- ``POST /bytes-small``: the same, answering ``/health``'s few bytes: a POST with a body and a
  small answer, so that ``bytes-fixed - bytes-small`` is the large answer's own cost.

Each is driven by wrk at ``--clients`` (default 32) with ``compare_serve.py``'s search script
(a new query text each request), interleaved with ``/health`` and ``/search`` in every round;
reported: medians over rounds of req/s, its ratio to ``/health``, and the server's CPU per
request (user + system, from /proc).

    RAGFIND_DATA=../shared/data PYTHONPATH=python python bench/compare_serve_body.py --rounds 5
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_serve as cs  # noqa: E402  (bench/ is not a package)

PATHS = (
    "/health",
    "/search",
    "/search-unsent",
    "/search-small",
    "/search-fixed",
    "/bytes-fixed",
    "/bytes-small",
)


def answer_of_median_size(service, queries: list) -> tuple:
    """A real ``/search`` answer (dict, bytes) of median size over ``queries``."""
    from ragfind.serve.service import render_json

    answers = []
    for q in queries:
        out = service.search({"query": q, "k": 10})
        answers.append((len(render_json(out)), out))
    answers.sort(key=lambda x: x[0])
    out = answers[len(answers) // 2][1]
    return out, render_json(out)


def bytes_app(data: bytes):
    """A bare ASGI endpoint: reads the request's body, answers ``data`` as ragfind's endpoints
    answer JSON (the same headers, two sends)."""
    from ragfind.serve.app import JSON_HEADERS

    headers = [*JSON_HEADERS, (b"content-length", str(len(data)).encode())]

    async def app(scope, receive, send) -> None:
        while True:
            message = await receive()
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app


def server(folder: str, port: int, queries_file: str) -> None:
    """Child mode: the server (as ``ragfind serve --read-only --log-level error
    --no-access-log`` builds it) with this script's five routes added."""
    import uvicorn

    from ragfind.serve.app import create_app
    from ragfind.serve.config import ServeConfig
    from ragfind.serve.protocol import http_protocol
    from ragfind.serve.service import Service, load_retriever, render_json

    config = ServeConfig(read_only=True, freeze_gc=True)
    retriever = load_retriever(folder)
    service = Service(retriever, folder, config)
    app = create_app(service=service, config=config)
    queries = json.loads(Path(queries_file).read_text())
    answer, data = answer_of_median_size(service, queries)
    fixed = Service(retriever, None, config)
    fixed.search_json = lambda body: answer  # the endpoint binds service.search_json when created
    app.direct[("POST", "/search-fixed")] = create_app(service=fixed, config=config).direct[
        ("POST", "/search")
    ]
    unsent = Service(retriever, None, config)
    unsent.search_json = lambda body: {"results": len(service.search_json(body))}
    app.direct[("POST", "/search-unsent")] = create_app(service=unsent, config=config).direct[
        ("POST", "/search")
    ]
    small = Service(retriever, None, config)
    small.search_json = lambda body: {"results": len(retriever.search(body["query"], k=body["k"]))}
    app.direct[("POST", "/search-small")] = create_app(service=small, config=config).direct[
        ("POST", "/search")
    ]
    app.direct[("POST", "/bytes-fixed")] = bytes_app(data)
    app.direct[("POST", "/bytes-small")] = bytes_app(render_json(service.health()))
    print(f"ANSWER {len(data)} bytes", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False, http=http_protocol())


def start(folder: Path, queries_file: Path) -> tuple:
    port = cs.free_port()
    env = dict(os.environ, PYTHONPATH=str(cs.SERVER_PYTHON))
    cmd = [sys.executable, __file__, "--server", str(folder), str(port), str(queries_file)]
    proc = subprocess.Popen(cmd, env=env)
    for _ in range(1200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                c.close()
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


def script_for(path: str, base: Path, rnd: int, queries: list) -> Path:
    out = base.with_name(f"{base.stem}{path.replace('/', '_')}.lua")
    cs.lua_search(out, queries, rnd)
    out.write_text(out.read_text().replace('"POST", "/search"', f'"POST", "{path}"'))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=int, default=3, help="seconds per wrk run (default 3)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, medians reported (default 5)")
    ap.add_argument("--clients", type=int, default=32, help="wrk connections (default 32)")
    ap.add_argument("--server", nargs=3, metavar="ARG", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.server:
        server(args.server[0], int(args.server[1]), args.server[2])
        return
    name, docs, queries = cs.corpus()
    tmp = Path(tempfile.mkdtemp(prefix="ragfind-serve-body-"))
    rows: dict = {p: [] for p in PATHS}
    try:
        folder = cs.build(tmp, docs, ["bm25"])["bm25"]
        qfile = tmp / "sample.json"
        qfile.write_text(json.dumps([f"{q} sample" for q in queries[:61]]))
        proc, url = start(folder, qfile)
        try:
            cs.wrk(url + "/health", 8, 1, None)
            for rnd in range(args.rounds):
                for path in PATHS:
                    script = None if path == "/health" else script_for(path, tmp / "r.lua", rnd, queries)
                    if script is not None:
                        cs.wrk(url + path, 4, 1, script)  # warm-up
                    out = cs.wrk_cpu(proc.pid, url + path, args.clients, args.duration, script)
                    rows[path].append(out)
                    print(
                        f"round {rnd} {path}: {out['rps']:.0f} req/s, {out['cpu_us']:.1f} us CPU "
                        f"({out['sys_us']:.1f} system), p99 {out['p99']:.2f} ms, errors "
                        f"{out['non200'] + out['socket_errors']}",
                        flush=True,
                    )
        finally:
            proc.terminate()
            proc.wait(60)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    print(f"\n{name} BM25, {args.clients} clients, medians of {args.rounds} rounds, load {os.getloadavg()}\n")
    print("| endpoint | req/s | ratio to /health | CPU per request (system) | p99 | errors |")
    print("|---|---:|---:|---:|---:|---:|")
    health = rows["/health"]
    for path, rs in rows.items():
        ratio = med(r["rps"] / h["rps"] for r, h in zip(rs, health))
        errs = sum(r["non200"] + r["socket_errors"] for r in rs)
        print(
            f"| {path} | {med(r['rps'] for r in rs):.0f} | {ratio:.2f}x | "
            f"{med(r['cpu_us'] for r in rs):.1f} us "
            f"({med(r['sys_us'] for r in rs):.1f}) | {med(r['p99'] for r in rs):.2f} ms | {errs} |"
        )


if __name__ == "__main__":
    main()
