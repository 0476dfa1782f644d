"""pytest-benchmark suite for the request path of ``ragfind serve`` (run:
PYTHONPATH=python pytest bench/bench_serve.py -p no:asyncio).

Each piece of one ``POST /search`` on its own, then the whole ASGI request without sockets:
the search itself, the service's validation and result dicts, the JSON codecs, the hop to a
thread against running on the event loop, and the app end to end (``/health`` beside it).
The corpus is SciFact (``$RAGFIND_DATA`` or ``../shared/data``) when present, else the demo
corpus; BM25 only. bench/compare_serve.py measures the server over real sockets.
"""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import ragfind

pytest.importorskip("starlette")
orjson = pytest.importorskip("orjson")

from ragfind.serve import ServeConfig, create_app  # noqa: E402
from ragfind.serve.service import Service  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def corpus() -> tuple:
    data = Path(os.environ.get("RAGFIND_DATA", ROOT.parent / "shared" / "data")) / "scifact"

    def lines(path: Path) -> list:
        return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]

    if (data / "corpus.jsonl").is_file():
        docs = lines(data / "corpus.jsonl")
        queries = [q["text"] for q in lines(data / "queries.jsonl")]
        return [{"id": d["_id"], "title": d.get("title", ""), "text": d["text"]} for d in docs], queries
    base = ROOT / "python" / "ragfind" / "data"
    docs = lines(base / "demo_corpus.jsonl")
    queries = [q["text"] for q in lines(base / "demo_queries.jsonl")]
    return [{"id": d["id"], "title": d.get("title", ""), "text": d["text"]} for d in docs], queries


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    docs, queries = corpus()
    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)  # no cache: every search runs
    r.add_documents(docs)
    return r, queries


class Cycle:
    """The next query each call, so that no two consecutive calls are alike."""

    def __init__(self, queries: list) -> None:
        self.queries, self.n = queries, 0

    def __call__(self) -> str:
        self.n += 1
        return self.queries[self.n % len(self.queries)]


def test_retriever_search(benchmark, setup):
    r, queries = setup
    q = Cycle(queries)
    benchmark(lambda: r.search(q(), k=10))


@pytest.mark.parametrize("highlight", [False, True], ids=["plain", "highlight"])
def test_service_search(benchmark, setup, highlight):
    """Validation, the search and the result dicts: what the endpoint calls (``highlight``:
    the request asks for the highlights, which re-analyze the ten passages)."""
    r, queries = setup
    s, q = Service(r, None), Cycle(queries)
    benchmark(lambda: s.search({"query": q(), "k": 10, "highlight": highlight}))


def test_service_search_cached(benchmark, setup):
    """As served: a results cache of 1024, every query new. The cache's entries stay alive, so
    the cycle collector walks them in every young collection (compare with the plain case)."""
    r, queries = setup
    served = ragfind.Retriever(encoder=None, chunk_size=None)
    served.add_documents(corpus()[0])
    s, n = Service(served, None), [0]

    def one():
        n[0] += 1
        return s.search({"query": f"{queries[n[0] % len(queries)]} {n[0]}", "k": 10})

    benchmark(one)
    served.close()


@pytest.mark.parametrize("path", ["python", "native"])
def test_result_rows(benchmark, setup, path):
    """The ten result rows of one answer, the search done before: ``passage_json`` per passage
    (python), or ``passage_rows`` reading them natively in one call (native, what
    ``Service.search`` uses)."""
    from ragfind.serve.service import passage_json, passage_rows

    r, queries = setup
    results = [r.search(q, k=10).passages for q in queries[:50]]
    q = Cycle(list(range(50)))
    if path == "python":
        benchmark(lambda: [passage_json(p) for p in results[int(q())]])
    else:
        benchmark(lambda: passage_rows(results[int(q())]))


@pytest.mark.parametrize("path", ["rows+orjson", "native"])
def test_answer_json(benchmark, setup, path):
    """A search's ``/search`` answer as JSON bytes, the search included: the rows built and
    encoded by orjson (``render_json(Service.search(...))``), or its JSON text written natively
    in one pass (``Service.search_json``, what the endpoint calls)."""
    from ragfind.serve.service import render_json

    r, queries = setup
    s, q = Service(r, None), Cycle(queries)
    if path == "native":
        benchmark(lambda: s.search_json({"query": q(), "k": 10}))
    else:
        benchmark(lambda: render_json(s.search({"query": q(), "k": 10})))


@pytest.fixture(scope="module")
def answer(setup):
    r, queries = setup
    return Service(r, None).search({"query": queries[0], "k": 10})


def test_encode_stdlib_json(benchmark, answer):
    benchmark(lambda: json.dumps(answer, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode())


def test_encode_orjson(benchmark, answer):
    benchmark(orjson.dumps, answer)


def test_decode_stdlib_json(benchmark):
    body = json.dumps({"query": "what causes the common cold in young children", "k": 10}).encode()
    benchmark(lambda: json.loads(body.decode()))


def test_decode_orjson(benchmark):
    body = json.dumps({"query": "what causes the common cold in young children", "k": 10}).encode()
    benchmark(orjson.loads, body)


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_hop_to_a_thread(benchmark, loop):
    """One round trip event loop -> thread -> event loop around a no-op."""
    pool = ThreadPoolExecutor(1)

    async def hop():
        return await loop.run_in_executor(pool, int)

    benchmark(lambda: loop.run_until_complete(hop()))
    pool.shutdown()


def test_no_hop(benchmark, loop):
    async def inline():
        return 0

    benchmark(lambda: loop.run_until_complete(inline()))


def asgi_call(app, method: str, path: str, body: bytes = b""):
    """One request through the ASGI app, no sockets: routing, the endpoint, the response."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "scheme": "http",
        "root_path": "",
    }
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    async def run():
        await app(scope, receive, send)
        assert sent[0]["status"] == 200, sent
        return sent

    return run()


def _app(setup, inline_ms: float):
    r, _ = setup
    return create_app(r, config=ServeConfig(read_only=True, inline_ms=inline_ms))


def test_asgi_health(benchmark, setup, loop):
    app = _app(setup, 1.0)
    benchmark(lambda: loop.run_until_complete(asgi_call(app, "GET", "/health")))


@pytest.mark.parametrize("inline_ms", [0.0, 1000.0], ids=["thread", "loop"])
@pytest.mark.parametrize("route", ["direct", "routed"])
def test_asgi_search(benchmark, setup, loop, inline_ms, route):
    """The whole ``POST /search`` without sockets, on a thread or on the event loop; answered
    before Starlette's middleware and router (``direct``, as served) or through them."""
    app = _app(setup, inline_ms)
    if route == "routed":
        app.direct = {}
    q = Cycle(setup[1])

    def one():
        body = orjson.dumps({"query": q(), "k": 10})
        return loop.run_until_complete(asgi_call(app, "POST", "/search", body))

    benchmark(one)
    app.state.gate.close()
