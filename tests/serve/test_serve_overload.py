"""Overload: past the queue's depth or wait a request gets 503 with Retry-After, /health and
/metrics still answer, /metrics counts what was shed; fast searches skip the thread hop.

A search that blocks until the test releases it stands for a slow stage, so every outcome here
follows from the order of events, never from timing."""

from __future__ import annotations

import threading
import time

import pytest
from serve_fixtures import bm25_folder_fixture  # noqa: F401

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

import ragfind  # noqa: E402
from ragfind.serve import ServeConfig, create_app  # noqa: E402


@pytest.fixture
def blocking(bm25_folder):
    """``(app, release, started)``: searches for "slow" wait for ``release``."""
    release = threading.Event()

    def make(**config):
        r = ragfind.Retriever.load(bm25_folder)
        stage = r.first_stages[0]  # BM25: every way to search it goes through here
        search = stage.search

        def slow_search(query, *args, **kwargs):
            if query == "slow":
                assert release.wait(60), "the test never released the slow search"
            return search(query, *args, **kwargs)

        stage.search = slow_search
        return create_app(r, config=ServeConfig(**config))

    yield make, release
    release.set()


def wait_until(cond, what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def in_background(fn, *args, **kwargs) -> tuple:
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn(*args, **kwargs)))
    t.start()
    return t, out


def test_a_full_queue_sheds_with_503_and_retry_after(blocking):
    make, release = blocking
    app = make(threads=1, queue_depth=2, queue_wait_ms=60_000)
    gate = app.state.gate
    with TestClient(app) as c:
        a, a_out = in_background(c.post, "/search", json={"query": "slow"})
        wait_until(lambda: gate.running == 1, "the first search to take the thread")
        b, b_out = in_background(c.post, "/search", json={"query": "cats"})
        wait_until(lambda: gate.admitted == 2, "the second search to queue")

        resp = c.post("/search", json={"query": "dogs"})
        assert resp.status_code == 503 and resp.headers["retry-after"] == "60"
        assert resp.json()["status"] == 503 and "overloaded" in resp.json()["error"]
        assert c.post("/explain", json={"query": "cats", "chunk_id": 0}).status_code == 503
        assert c.get("/documents/cats").status_code == 503

        assert c.get("/health").status_code == 200  # never queued
        text = c.get("/metrics").text
        assert 'ragfind_requests_shed_total{route="/search",reason="queue_full"} 1' in text
        assert 'ragfind_requests_shed_total{route="/explain",reason="queue_full"} 1' in text
        assert "ragfind_queue_admitted 2" in text
        assert 'ragfind_http_requests_total{route="/search",method="POST",status="503"} 1' in text

        release.set()
        a.join()
        b.join()
        assert a_out[0].status_code == 200 and b_out[0].status_code == 200
        assert gate.admitted == 0 and gate.running == 0
        assert c.post("/search", json={"query": "dogs"}).status_code == 200


def test_a_request_waiting_past_its_bound_is_shed(blocking):
    make, release = blocking
    app = make(threads=1, queue_depth=10, queue_wait_ms=50)
    gate = app.state.gate
    with TestClient(app) as c:
        a, a_out = in_background(c.post, "/search", json={"query": "slow"})
        wait_until(lambda: gate.running == 1, "the slow search to take the thread")
        resp = c.post("/search", json={"query": "cats"})  # waits 50 ms behind it, then gives up
        assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
        assert "waited" in resp.json()["error"]
        assert 'reason="queue_wait"} 1' in c.get("/metrics").text
        assert a.is_alive()  # the slow one still holds the thread
        release.set()
        a.join()
        assert a_out[0].status_code == 200
        assert c.post("/search", json={"query": "cats"}).status_code == 200
        assert gate.admitted == 0 and gate.running == 0


def test_waiting_requests_take_the_thread_in_order(blocking):
    make, release = blocking
    app = make(threads=1, queue_depth=10, queue_wait_ms=60_000)
    gate = app.state.gate
    with TestClient(app) as c:
        a, a_out = in_background(c.post, "/search", json={"query": "slow"})
        wait_until(lambda: gate.running == 1, "the slow search to take the thread")
        waiting = []
        for n in range(4):
            waiting.append(in_background(c.post, "/search", json={"query": f"cats {n}"}))
            wait_until(lambda n=n: gate.admitted == n + 2, "the searches to queue")
        release.set()
        for t, _ in [(a, a_out), *waiting]:
            t.join()
        assert all(out[0].status_code == 200 for _, out in [(a, a_out), *waiting])
        assert gate.admitted == 0 and gate.running == 0


def test_fast_searches_run_on_the_loop_and_slow_ones_on_a_thread(bm25_folder):
    r = ragfind.Retriever.load(bm25_folder)
    app = create_app(r, config=ServeConfig(inline_ms=10_000))
    gate = app.state.gate
    with TestClient(app) as c:
        for n in range(5):
            assert c.post("/search", json={"query": f"cats {n}"}).status_code == 200
        assert gate.inline_runs == 4  # the first of its kind ran on a thread and was timed
        assert "ragfind_search_inline_total 4" in c.get("/metrics").text
        # Another kind (stages) is timed on a thread first.
        assert c.post("/search", json={"query": "dogs", "stages": ["bm25"]}).status_code == 200
        assert gate.inline_runs == 4

    never = create_app(r, config=ServeConfig(inline_ms=0))
    with TestClient(never) as c:
        for n in range(3):
            assert c.post("/search", json={"query": f"mice {n}"}).status_code == 200
        assert never.state.gate.inline_runs == 0


def test_a_slow_run_sends_its_kind_back_to_the_threads(bm25_folder):
    from ragfind.serve.admission import Gate

    gate = Gate(threads=1, queue_depth=4, queue_wait_s=1, inline_s=0.001)
    gate._learn("kind", 0.0001)
    assert gate.cost["kind"] < gate.inline_s
    gate._learn("kind", 0.5)  # one run far over the line
    assert gate.cost["kind"] == 0.5
    gate.close()


def test_time_spent_preempted_is_not_charged_to_the_run(monkeypatch):
    """A run's cost is its wall time less what its thread waited for a CPU: a preempted fast
    search stays on the loop, one that blocks (a lock, I/O) leaves it."""
    import types

    from ragfind.serve import admission

    gate = admission.Gate(threads=1, queue_depth=4, queue_wait_s=1, inline_s=0.005)
    gate._learn("kind", 0.0001)
    # A run of 50 ms wall time, 48 of them runnable but not running (the schedstat counter).
    wall = iter([10.0, 10.05, 20.0, 20.05])
    monkeypatch.setattr(admission, "time", types.SimpleNamespace(perf_counter=lambda: next(wall)))
    delay = iter([1.0, 1.048])
    monkeypatch.setattr(admission, "run_delay", lambda: next(delay))
    gate._timed("kind", int, ())
    assert gate.cost["kind"] == pytest.approx(0.8 * 0.0001 + 0.2 * 0.002)  # 2 ms of its own
    monkeypatch.setattr(admission, "run_delay", lambda: 1.0)  # never preempted: it blocked
    gate._timed("kind", int, ())
    assert gate.cost["kind"] == pytest.approx(0.05)  # far over the line: back to the threads
    gate.close()


def test_run_delay_reads_the_threads_schedstat():
    from ragfind.serve.admission import run_delay

    a = run_delay()
    sum(range(200_000))
    b = run_delay()
    assert 0.0 <= a <= b
    try:
        with open("/proc/thread-self/schedstat") as f:
            now = int(f.read().split()[1]) * 1e-9
    except OSError:
        assert a == b == 0.0  # no such statistics here: no correction
    else:
        assert b <= now <= run_delay()

        def own() -> float:
            with open("/proc/thread-self/schedstat") as f:
                return int(f.read().split()[1]) * 1e-9

        seen = []
        t = threading.Thread(target=lambda: seen.extend([own(), run_delay(), own()]))
        t.start()
        t.join()
        assert seen[0] <= seen[1] <= seen[2]  # another thread reads its own counter


@pytest.mark.parametrize(
    "config, words",
    [
        ({"threads": 0}, "threads"),
        ({"queue_depth": 0}, "queue_depth"),
        ({"queue_wait_ms": 0}, "queue_wait_ms"),
        ({"inline_ms": -1}, "inline_ms"),
        ({"queue_wait_ms": float("inf")}, "queue_wait_ms"),
    ],
)
def test_queue_settings_are_checked(config, words):
    with pytest.raises(ValueError, match=words):
        ServeConfig(**config)


def test_the_loaded_heap_is_frozen_and_a_replaced_one_still_collected(bm25_folder):
    """What is loaded when the server starts leaves the cycle collector's sight (a full
    collection would walk it every few hundred searches); settling again lets an object frozen
    before and dropped since be collected (a worker's old retriever after a reload)."""
    import gc
    import weakref

    from ragfind.serve.service import settle_heap

    class Node:
        pass

    old = Node()
    old.self = old  # a cycle: only the collector frees it
    gone = weakref.ref(old)
    with TestClient(create_app(ragfind.Retriever.load(bm25_folder))):
        assert gc.get_freeze_count() == 0  # off by default: it changes the whole process
    app = create_app(ragfind.Retriever.load(bm25_folder), config=ServeConfig(read_only=True, freeze_gc=True))
    try:
        with TestClient(app) as c:
            assert gc.get_freeze_count() > 0
            assert c.post("/search", json={"query": "cats"}).status_code == 200
            del old
            gc.collect()
            assert gone() is not None  # frozen: no collection sees it
            settle_heap()
            assert gone() is None
    finally:
        gc.unfreeze()
