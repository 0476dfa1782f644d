"""The parts of one ``POST /search`` timed alone and back to back, in process (no sockets).

Run: ``RAGFIND_DATA=../shared/data PYTHONPATH=python python bench/compare_serve_parts.py``.

Rows: ``/health`` through the ASGI app; ``/search`` over a precomputed answer (the endpoint,
gate, body parse, render and metrics, no retrieval); ``Service.search`` plus the render of its
answer; the real ``/search``; and ``/health`` then ``Service.search`` + render called in turn
(the pair). Medians of rounds of 500 calls, ``gc.freeze()`` first, SciFact BM25, no results
cache, a new query each call. ``--only NAME --calls N`` runs one row N times after 300 warm-up
calls, for instruction counts under ``valgrind --tool=callgrind`` (run it with N=0 and N>0 and
subtract).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson  # noqa: E402

import ragfind  # noqa: E402
from bench_serve import asgi_call, corpus  # noqa: E402
from compare_fusion import median_us  # noqa: E402
from ragfind.serve import ServeConfig, create_app  # noqa: E402
from ragfind.serve.service import Service  # noqa: E402


def rows() -> dict:
    docs, queries = corpus()
    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    r.add_documents(docs)
    config = ServeConfig(read_only=True, inline_ms=1000.0)
    service = Service(r, None, config)
    real = service.search_json  # what /search calls: the answer's JSON bytes
    fixed = real({"query": queries[0], "k": 10})
    mode = {"fixed": False}
    service.search_json = lambda body: fixed if mode["fixed"] else real(body)
    app = create_app(r, config=config, service=service)
    loop = asyncio.new_event_loop()
    bodies = [orjson.dumps({"query": q, "k": 10}) for q in queries]
    n = [0]

    def body() -> bytes:
        n[0] += 1
        return bodies[n[0] % len(bodies)]

    def health() -> None:
        loop.run_until_complete(asgi_call(app, "GET", "/health"))

    def search(fixed: bool):
        def one() -> None:
            mode["fixed"] = fixed
            loop.run_until_complete(asgi_call(app, "POST", "/search", body()))

        return one

    def service_render() -> None:
        real(orjson.loads(body()))

    def pair() -> None:
        health()
        service_render()

    return {
        "/health": health,
        "/search, precomputed answer": search(True),
        "Service.search + render": service_render,
        "/search": search(False),
        "pair: /health, then Service.search + render": pair,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default=None, help="one row by name (for callgrind)")
    ap.add_argument("--calls", type=int, default=500)
    args = ap.parse_args()
    fs = rows()
    if args.only is not None:
        f = fs[args.only]
        for _ in range(300):
            f()
        gc.freeze()
        for _ in range(args.calls):
            f()
        return
    gc.freeze()
    res: dict = {k: [] for k in fs}
    for _ in range(args.rounds):
        for name, f in fs.items():
            res[name].append(median_us(f, args.calls))
    print("| row | p50 us (median of rounds) | range |")
    print("|---|---:|---|")
    for name, v in res.items():
        print(f"| {name} | {statistics.median(v):.1f} | {min(v):.1f}-{max(v):.1f} |")


if __name__ == "__main__":
    main()
