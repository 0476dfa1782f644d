"""The search fan-out on a Ray Compiled Graph (``fanout="graph"``): the same results as one
Retriever and as ordinary calls, also right after writes and deletes and from several
threads at once; the shards a graph leaves (a copy busy with a write) or all of them (a
failed graph) asked by ordinary calls; a dead copy searched around and the graph rebuilt."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import sharded_helpers
from sharded_helpers import assert_same, load_collection

import ragfind
from ragfind.distributed import ShardedRetriever
from ragfind.distributed.fanout import GraphFailed

ray_session = sharded_helpers.ray_session  # the session's local Ray (a fixture)

pytestmark = pytest.mark.slow

READY = 120.0  # seconds a graph may take to compile and warm up on a loaded machine


@pytest.fixture(scope="module")
def scifact(ray_session):
    c = load_collection("scifact", limit=1200)
    return c["docs"], [q for _, q in c["queries"][:40]], c["encoder"]


def _opts(encoder) -> dict:
    return dict(encoder=encoder, chunk_size=None, contextualize=False, cache_size=0)


def _served(sharded) -> int:
    return sharded._graph.served


def test_graph_results_equal_one_retriever(ray_session, scifact) -> None:
    docs, queries, enc = scifact
    single = ragfind.Retriever(**_opts(enc))
    single.add_documents(docs[:1000])
    sharded = ShardedRetriever(3, fanout="graph", **_opts(enc))
    try:
        sharded.add_documents(docs[:1000])
        assert sharded._graph.wait_ready(READY)
        before = _served(sharded)
        for q in queries:
            assert_same(single, sharded, q, k=10)  # hybrid
            assert_same(single, sharded, q, k=10, stages=["bm25"])
            assert_same(single, sharded, q, k=5, filters={"bucket": 2})
        assert _served(sharded) - before >= 3 * len(queries)  # every one through the graph
        # Right after writes and deletes (the statistics the router sends move with them).
        for i in range(1000, 1200, 50):
            single.add_documents(docs[i : i + 50])
            sharded.add_documents(docs[i : i + 50])
            gone = [docs[i - 500]["id"], docs[i - 499]["id"]]
            single.delete_documents(gone)
            sharded.delete_documents(gone)
            for q in queries[:8]:
                assert_same(single, sharded, q, k=10, stages=["bm25"])
                assert_same(single, sharded, q, k=10)
        # Several threads at once: one is in the graph, the others make ordinary calls.
        with ThreadPoolExecutor(6) as pool:
            got = list(pool.map(lambda q: sharded.search(q, 10, stages=["bm25"]), queries * 3))
        for q, res in zip(queries * 3, got):
            want = single.search(q, 10, stages=["bm25"])
            np.testing.assert_allclose([p.score for p in res], [p.score for p in want], rtol=1e-6)
    finally:
        sharded.close()
    assert sharded._graph.ready is False


class _StubGraph:
    """Stands in for the compiled graph: replies from ordinary calls, or what the test says."""

    def __init__(self, sharded, busy=(), fail=False) -> None:
        self.sharded, self.busy, self.fail = sharded, set(busy), fail
        self.seen: list = []

    def call(self, request, shards):
        self.seen.append(list(shards))
        on = tuple(min(self.sharded._copies.in_sync[s]) for s in range(self.sharded.num_shards))
        if self.fail:
            return GraphFailed(on)
        actors = self.sharded._actors
        replies = self.sharded._ray.get([actors[s][on[s]].first_stage.remote(request) for s in shards])
        return [None if s in self.busy else r for s, r in zip(shards, replies)], on

    def close(self) -> None:
        pass


def test_shards_the_graph_leaves_are_asked_by_ordinary_calls(ray_session, scifact) -> None:
    docs, queries, enc = scifact
    single = ragfind.Retriever(**_opts(enc))
    single.add_documents(docs[:600])
    sharded = ShardedRetriever(3, replicas=2, placement="any", fanout="calls", **_opts(enc))
    try:
        sharded.add_documents(docs[:600])
        reads: list = []
        read = sharded._copies.read

        def counted(calls, *a, **kw):
            if any(c[0] == "first_stage" for c in calls.values()):
                reads.append((sorted(calls), kw.get("avoid")))
            return read(calls, *a, **kw)

        sharded._copies.read = counted
        end = time.monotonic() + 60  # both copies of each shard in sync
        while time.monotonic() < end and not all(len(c) == 2 for c in sharded._copies.in_sync):
            time.sleep(0.1)
        # A copy busy with a write answers None: only its shard goes by an ordinary call, to
        # the other copy.
        sharded._graph = _StubGraph(sharded, busy={1})
        for q in queries[:10]:
            assert_same(single, sharded, q, k=10)
        busy_copy = min(sharded._copies.in_sync[1])
        assert reads and all(shards == [1] and avoid == {1: busy_copy} for shards, avoid in reads)
        # A failed graph: every shard by ordinary calls, on the copies it did not call.
        reads.clear()
        sharded._graph = _StubGraph(sharded, fail=True)
        pins = []
        unpin_ = sharded._copies.unpin

        def unpin():
            pins.append(dict(sharded._copies._local.pins))
            unpin_()

        sharded._copies.unpin = unpin
        for q in queries[:10]:
            assert_same(single, sharded, q, k=10, stages=["bm25"])
        assert reads and all(shards == [0, 1, 2] and avoid for shards, avoid in reads)
        graph_copies = {s: min(sharded._copies.in_sync[s]) for s in range(3)}
        assert all(p[s] != graph_copies[s] for p in pins for s in p), (pins, sharded._copies.in_sync)
    finally:
        sharded._graph = None
        sharded.close()


def test_graph_over_a_dead_copy_is_searched_around_and_rebuilt(ray_session, scifact) -> None:
    ray = ray_session
    docs, queries, enc = scifact
    single = ragfind.Retriever(**_opts(enc))
    single.add_documents(docs[:600])
    sharded = ShardedRetriever(2, replicas=2, placement="any", fanout="graph", deadline=2.0, **_opts(enc))
    try:
        sharded.add_documents(docs[:600])
        graph = sharded._graph
        assert graph.wait_ready(READY)
        built = graph.built
        victim = graph._on[0]
        ray.kill(sharded._actors[0][victim], no_restart=False)  # Ray restarts it
        for q in queries[:10]:
            t = time.monotonic()
            assert_same(single, sharded, q, k=10, stages=["bm25"])
            assert time.monotonic() - t < 2.5 * sharded.deadline
        # The restarted copy replays the log and rejoins; a new graph is compiled.
        end = time.monotonic() + READY
        while time.monotonic() < end and not (graph.ready and graph.built > built):
            sharded.search(queries[0], 10, use_cache=False)
            time.sleep(0.2)
        assert graph.ready and graph.built > built
        before = _served(sharded)
        for q in queries[:10]:
            assert_same(single, sharded, q, k=10)
        assert _served(sharded) > before
    finally:
        sharded.close()


def test_graph_copy_busy_with_a_write_answers_none(tmp_path) -> None:
    """Without Ray: the graph's method does not wait for a write holding the copy."""
    import pickle

    from ragfind.distributed.shard import ShardActor

    actor = ShardActor(0, str(tmp_path), dict(encoder=None, chunk_size=None))
    actor.promote(1, [])
    actor.add(1, 1, 0, [{"id": "a", "text": "boundary layer flow"}], [0])
    stats = {"bm25": [(1, 3, {"boundari": 1})]}  # the analyzed term
    request = pickle.dumps(([("bm25", "bm25", ["boundary"])], stats, 10, None, 0, {}))
    assert actor.graph_first_stage(None) is None  # the warm-up request
    plain = pickle.loads(actor.first_stage(request))
    got = pickle.loads(actor.graph_first_stage(request))
    assert len(plain["lists"]["bm25"][0][0]) == 1
    for a, b in zip(got["lists"]["bm25"][0], plain["lists"]["bm25"][0]):
        np.testing.assert_array_equal(a, b)
    held = threading.Event()
    release = threading.Event()

    def writer():
        with actor._mutex:
            held.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    held.wait(10)
    try:
        assert actor.graph_first_stage(request) is None
    finally:
        release.set()
        t.join()
    assert actor.graph_first_stage(request) is not None
    actor.wal.close()


def test_fanout_option_errors(ray_session) -> None:
    with pytest.raises(ValueError, match="fanout"):
        ShardedRetriever(1, fanout="fast", encoder=None)
    with pytest.raises(ValueError, match="named collection"):
        ShardedRetriever(1, fanout="graph", name="fanout-named", encoder=None)


def test_stopped_graph_copy_costs_one_deadline(ray_session, scifact) -> None:
    import os
    import signal

    ray = ray_session
    docs, queries, enc = scifact
    single = ragfind.Retriever(**_opts(enc))
    single.add_documents(docs[:400])
    sharded = ShardedRetriever(1, replicas=2, placement="any", fanout="graph", deadline=1.0, **_opts(enc))
    pid = None
    try:
        sharded.add_documents(docs[:400])
        graph = sharded._graph
        assert graph.wait_ready(READY)
        end = time.monotonic() + 60
        while time.monotonic() < end and len(sharded._copies.in_sync[0]) < 2:
            time.sleep(0.1)
        pid = ray.get(sharded._actors[0][graph._on[0]].info.remote(), timeout=30)["pid"]
        os.kill(pid, signal.SIGSTOP)
        took = []
        for q in queries[:12]:
            t = time.monotonic()
            assert_same(single, sharded, q, k=10, stages=["bm25"])
            took.append(time.monotonic() - t)
        # One search waits out the graph's deadline (the first to reach the stopped copy), then
        # the other copy answers; later searches avoid the stopped copy (it stays in sync: a
        # search does not drop a copy) without waiting.
        slow = [t for t in took if t >= sharded.deadline / 2]
        assert len(slow) <= 1 and max(took) < 2.5 * sharded.deadline, took
        assert not graph.ready
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        sharded.close()


def test_idle_graph_is_torn_down_and_built_again(ray_session, scifact) -> None:
    docs, queries, enc = scifact
    sharded = ShardedRetriever(2, fanout="graph", **_opts(enc))
    try:
        sharded.add_documents(docs[:300])
        graph = sharded._graph
        graph._idle_after = 2.0
        assert graph.wait_ready(READY) and graph.built == 1
        sharded.search(queries[0], 10)
        end = time.monotonic() + 30
        while time.monotonic() < end and graph.ready:
            time.sleep(0.2)
        assert not graph.ready  # no search for idle_after seconds: its actors stop polling
        sharded.search(queries[1], 10)  # ordinary calls, and a new graph on its way
        assert graph.wait_ready(READY) and graph.built == 2
        before = _served(sharded)
        sharded.search(queries[2], 10)
        assert _served(sharded) == before + 1
    finally:
        sharded.close()
