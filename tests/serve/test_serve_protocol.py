"""The HTTP protocol ``ragfind serve`` runs (uvicorn's httptools protocol, each response's head
joined to its body in one socket write): the joining itself against a recording transport, and
the service over real sockets through it (keep-alive, pipelining, partial reads, bad requests,
body limits, HEAD, 100-continue, connection close)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from serve_fixtures import bm25_folder_fixture  # noqa: F401

pytest.importorskip("httptools")
uvicorn = pytest.importorskip("uvicorn")

import ragfind  # noqa: E402
from ragfind.serve import ServeConfig, create_app  # noqa: E402
from ragfind.serve.protocol import HeadJoiningProtocol, HeldHeadTransport, http_protocol  # noqa: E402


class Recording:
    """A transport that records each write (one entry per socket write)."""

    def __init__(self) -> None:
        self.writes: list = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "a write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5000)}.get(name, default)


def test_http_protocol_is_the_joining_one():
    assert http_protocol() is HeadJoiningProtocol


def test_held_head_goes_out_with_the_body():
    loop = asyncio.new_event_loop()
    try:
        t = Recording()
        h = HeldHeadTransport(t, loop)
        h.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        assert t.writes == []
        assert h.get_write_buffer_size() > 0
        h.write(b"ok")
        assert t.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
        # Not a head: straight through.
        h.write(b"more")
        assert t.writes[-1] == b"more"
        # An interim 100 Continue is never held (the client waits for it to send the body).
        h.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        assert t.writes[-1] == b"HTTP/1.1 100 Continue\r\n\r\n"
        # A head alone goes out at the next turn of the loop.
        h.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        n = len(t.writes)
        loop.run_until_complete(asyncio.sleep(0))
        assert len(t.writes) == n + 1 and t.writes[-1].startswith(b"HTTP/1.1 204")
        # ... or on close, before the close.
        h.write(b"HTTP/1.1 200 OK\r\n\r\n")
        h.close()
        assert t.writes[-1] == b"HTTP/1.1 200 OK\r\n\r\n" and t.closed
        loop.run_until_complete(asyncio.sleep(0))  # the scheduled flush finds nothing held
        # Held when the peer is gone: dropped, not written to a closed transport.
        t2 = Recording()
        h2 = HeldHeadTransport(t2, loop)
        h2.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t2.closed = True
        h2.flush()
        assert t2.writes == []
        # A body of another buffer type passes through (and joins a held head).
        t3 = Recording()
        h3 = HeldHeadTransport(t3, loop)
        h3.write(memoryview(b"HTTP/1.1 looks like a head"))
        assert t3.writes == [b"HTTP/1.1 looks like a head"]
        h3.write(b"HTTP/1.1 200 OK\r\n\r\n")
        h3.write(bytearray(b"xy"))
        assert t3.writes[-1] == b"HTTP/1.1 200 OK\r\n\r\nxy"
        # Everything else passes through.
        assert h.get_extra_info("peername") == ("127.0.0.1", 5000)
    finally:
        loop.close()


async def _app(scope, receive, send):
    """A small ASGI app: /json answers at once, /slow sends its head and waits before the body,
    /echo returns the body, /stream sends three chunks."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/echo":
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"a", b"b", b"c"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/slow":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"slow"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})


def _drive(requests: bytes) -> Recording:
    """``requests`` fed to one :class:`HeadJoiningProtocol` over a recording transport, the loop
    run until every response is out."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    loop = asyncio.new_event_loop()
    try:
        config = Config(app=_app, http=HeadJoiningProtocol, access_log=False, lifespan="off")
        config.load()
        state = ServerState()
        proto = HeadJoiningProtocol(config=config, server_state=state, app_state={}, _loop=loop)
        t = Recording()
        proto.connection_made(t)
        proto.data_received(requests)

        async def settle():
            for _ in range(200):
                await asyncio.sleep(0.002)
                if not state.tasks:
                    await asyncio.sleep(0.002)
                    return

        loop.run_until_complete(settle())
        if proto.timeout_keep_alive_task is not None:
            proto.timeout_keep_alive_task.cancel()
        return t
    finally:
        loop.close()


def test_one_write_per_response_pipelined_in_order():
    reqs = b"".join(b"GET /%s HTTP/1.1\r\nhost: x\r\n\r\n" % p for p in (b"json", b"slow", b"json", b"slow"))
    t = _drive(reqs)
    # /json: head and body in one write; /slow waits between them, so its head went out alone
    # at the next turn of the loop rather than waiting for the body.
    assert [w.count(b"HTTP/1.1") for w in t.writes] == [1, 1, 0, 1, 1, 0], t.writes
    assert t.writes[0].endswith(b"\r\n\r\n{}") and t.writes[3].endswith(b"\r\n\r\n{}")
    assert t.writes[1].endswith(b"\r\n\r\n") and t.writes[2] == b"slow"
    assert all(w.startswith(b"HTTP/1.1 200 OK\r\n") for w in t.writes if w != b"slow")
    assert not t.closed


def test_head_streaming_and_close_through_the_protocol():
    t = _drive(
        b"HEAD /json HTTP/1.1\r\nhost: x\r\n\r\nGET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    head, *stream = t.writes
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")  # no body for HEAD
    out = b"".join(stream)
    assert out.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in out
    assert out.endswith(b"1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n")
    assert t.closed  # connection: close


def test_bad_request_line_gets_400_and_close():
    t = _drive(b"NOT HTTP AT ALL\r\n\r\n")
    assert t.writes and t.writes[0].startswith(b"HTTP/1.1 400") and t.closed


# --- the service over real sockets, served by uvicorn with this protocol ---------------------


@pytest.fixture
def server(bm25_folder):
    r = ragfind.Retriever.load(bm25_folder)
    app = create_app(r, config=ServeConfig(read_only=True, max_body_bytes=300))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", http=http_protocol())
    srv = uvicorn.Server(config)
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and th.is_alive(), "the server did not start"
        time.sleep(0.02)
    yield port, r
    srv.should_exit = True
    th.join(30)


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(f, head: bool = False) -> tuple:
    """``(status, headers, body)`` of one response from a socket file (Content-Length bodies;
    ``head``: the answer to a HEAD, which has none)."""
    line = f.readline()
    assert line.startswith(b"HTTP/1.1 "), line
    status = int(line.split()[1])
    headers = {}
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        k, _, v = h.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers["content-length"])) if "content-length" in headers and not head else b""
    return status, headers, body


def post(body: bytes, extra: bytes = b"") -> bytes:
    head = b"POST /search HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    return head + b"content-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def test_keep_alive_and_pipelined_searches_match_in_process(server):
    port, r = server
    queries = ["cats hunt mice", "programming language", "domesticated dogs"]
    with connect(port) as s, s.makefile("rb") as f:
        for q in queries:  # one after another on one connection
            s.sendall(post(json.dumps({"query": q, "k": 3}).encode()))
            status, _, body = read_response(f)
            assert status == 200
            assert [x["doc_id"] for x in json.loads(body)["results"]] == [p.doc_id for p in r.search(q, k=3)]
        # All at once in one packet, with a /health between: answered in order.
        batch = b"".join(post(json.dumps({"query": q, "k": 3}).encode()) for q in queries)
        batch += b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n" + post(b'{"query": "rust"}')
        s.sendall(batch)
        answers = [read_response(f) for _ in range(len(queries) + 2)]
        for q, (status, _, body) in zip(queries, answers):
            assert status == 200
            assert [x["doc_id"] for x in json.loads(body)["results"]] == [p.doc_id for p in r.search(q, k=3)]
        assert json.loads(answers[3][2])["status"] == "ok"
        assert json.loads(answers[4][2])["results"][0]["doc_id"] == "rust"


def test_a_request_split_into_small_pieces(server):
    port, _ = server
    raw = post(b'{"query": "mice avoid cats", "k": 2}')
    with connect(port) as s, s.makefile("rb") as f:
        for i in range(0, len(raw), 7):  # partial reads: the head and the body arrive in pieces
            s.sendall(raw[i : i + 7])
            time.sleep(0.001)
        status, headers, body = read_response(f)
        assert status == 200 and headers["content-type"] == "application/json"
        assert len(json.loads(body)["results"]) == 2
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")  # the connection is still usable
        assert read_response(f)[0] == 200


def test_bad_input_over_the_socket(server):
    port, _ = server
    with connect(port) as s, s.makefile("rb") as f:
        s.sendall(post(b'{"query": '))  # malformed JSON: 400, the connection stays
        status, _, body = read_response(f)
        assert status == 400 and "invalid JSON" in json.loads(body)["error"]
        s.sendall(post(json.dumps({"query": "x" * 400}).encode()))  # over the 300-byte limit
        status, _, body = read_response(f)
        assert status == 413 and "300" in json.loads(body)["error"]
        # A Content-Length over the limit is refused before the body is read.
        s.sendall(b"POST /search HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n")
        status, _, body = read_response(f)
        assert status == 413
    with connect(port) as s, s.makefile("rb") as f:
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n")  # a broken head
        status, headers, _ = read_response(f)
        assert status == 400 and headers.get("connection") == "close"
        assert f.read() == b""  # and the server closed the connection


def test_connection_close_head_and_100_continue(server):
    port, _ = server
    with connect(port) as s, s.makefile("rb") as f:
        s.sendall(b"HEAD /health HTTP/1.1\r\nhost: x\r\n\r\n")
        status, headers, _ = read_response(f, head=True)
        assert status == 200 and int(headers["content-length"]) > 0  # the length of the GET's body
        # 100-continue: the interim answer comes before the client sends the body.
        body = b'{"query": "cats"}'
        s.sendall(
            b"POST /search HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\nexpect: 100-continue\r\n\r\n"
            % len(body)
        )
        assert f.readline() == b"HTTP/1.1 100 Continue\r\n" and f.readline() == b"\r\n"
        s.sendall(body)
        assert read_response(f)[0] == 200
        s.sendall(post(b'{"query": "dogs"}', b"connection: close\r\n"))
        status, headers, _ = read_response(f)
        assert status == 200 and headers["connection"] == "close"
        assert f.read() == b""
    with connect(port) as s, s.makefile("rb") as f:  # HTTP/1.0: answered, then closed
        s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        line = f.readline()
        assert line.startswith(b"HTTP/1.1 200")
        assert f.read().endswith(b"}")
