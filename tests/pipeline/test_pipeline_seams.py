"""The Retriever's seams: a stage runner and a chunk-id policy given to the constructor (what a
sharded retriever builds on), the public chunking call, and ``partial`` as a call argument."""

from __future__ import annotations

import numpy as np
import pytest
from test_pipeline_retriever import DOCS, make

import ragfind
from hash_encoders import HashEncoder
from ragfind.pipeline.runner import LocalStages, StageLists, StageRunner


class LeavesOutPartTwo(LocalStages):
    """A local runner that pretends part 2 of the collection did not answer: with ``partial``
    it drops the chunks of the document "dogs" and names part 2; without, it raises."""

    def first_stage(self, stages, queries, depth, flt, timings, *, partial=False):
        if not partial:
            raise RuntimeError("part 2 is unavailable")
        found = super().first_stage(stages, queries, depth, flt, timings)
        dogs = set(self.store.chunks_of(["dogs"]).tolist())
        lists = [(ids[~np.isin(ids, list(dogs))], s[~np.isin(ids, list(dogs))]) for ids, s in found.lists]
        return StageLists(lists, found.names, found.concurrent, (2,))


def test_default_seams_are_local_and_sequential():
    r = make()
    assert isinstance(r.stage_runner, LocalStages) and isinstance(r.stage_runner, StageRunner)
    assert sorted(r.store.chunk_ids().tolist()) == list(range(r.n_chunks))
    res = r.search("cats purr", k=3)
    assert not res.partial and res.missing == ()


def test_chunk_id_policy_numbers_new_chunks():
    calls = []

    def by_thousands(store, chunks):
        calls.append([c.doc_id for c in chunks])
        return np.asarray([1000 * (len(calls)) + n for n in range(len(chunks))], np.int64)

    r = ragfind.Retriever(encoder=HashEncoder(), chunk_id_policy=by_thousands)
    r.add_documents(DOCS[:2])
    r.add_documents(DOCS[2:])
    assert calls == [["cats", "dogs"], ["chats", "rust", "python"]]
    assert sorted(r.store.chunk_ids().tolist()) == [1000, 1001, 2000, 2001, 2002]
    assert r.store.next_chunk_id == 2003
    best = r.search("cats purr mice", k=1)[0]
    assert best.doc_id == "cats" and best.id == 1000


def test_seams_are_checked():
    with pytest.raises(TypeError, match="stage_runner is a dict"):
        ragfind.Retriever(encoder=HashEncoder(), stage_runner={})
    with pytest.raises(TypeError, match="chunk_id_policy is a int"):
        ragfind.Retriever(encoder=HashEncoder(), chunk_id_policy=3)


def test_chunks_are_those_add_documents_indexes():
    r = ragfind.Retriever(encoder=HashEncoder(), chunk_size=32)
    docs = [dict(d, text=d["text"] * 6) for d in DOCS]
    chunks = r.chunks(docs)
    assert len(chunks) > len(docs)
    assert r.add_documents(docs) == len(chunks) == r.n_chunks
    with pytest.raises(ValueError, match="has key 'body'"):
        r.chunks([{"id": "x", "body": "y"}])


def test_partial_travels_as_an_argument_and_is_never_cached():
    r = make()
    r.stage_runner = LeavesOutPartTwo(r.store)
    with pytest.raises(RuntimeError, match="part 2 is unavailable"):
        r.search("dogs bark", k=5)
    res = r.search("dogs bark", k=5, partial=True)
    assert res.partial and res.missing == (2,)
    assert "dogs" not in res.doc_ids and len(res) > 0
    assert not r.search("dogs bark", k=5, partial=True).cached


class _Clock:
    """A stand-in for the runner's clock that only stages move: a stage "takes" exactly the time
    it says, however loaded the machine (a sleep measured by the real clock does not)."""

    def __init__(self) -> None:
        import threading

        self.t, self._lock = 0.0, threading.Lock()

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.t += seconds


class _TimedStage:
    """A first stage that takes ``seconds`` of ``clock`` per search and records its thread."""

    def __init__(self, name: str, seconds: float, clock: _Clock) -> None:
        self.name, self.seconds, self.clock, self.threads = name, seconds, clock, []

    def search(self, query, k, flt=None):
        import threading

        self.threads.append(threading.get_ident())
        self.clock.advance(self.seconds)
        return np.arange(3, dtype=np.int64), np.asarray([3.0, 2.0, 1.0])


def test_short_stages_run_one_after_another_on_the_calling_thread(monkeypatch):
    import threading

    from ragfind.pipeline import runner as runner_module

    clock = _Clock()
    monkeypatch.setattr(runner_module, "_now", clock)
    r = make()
    runner = r.stage_runner
    me = threading.get_ident()
    short = [_TimedStage("a", 0.0, clock), _TimedStage("b", 0.0, clock)]
    long = [_TimedStage("c", 0.005, clock), _TimedStage("d", 0.005, clock)]
    for stages in (short, long):
        for _ in range(30):
            timings: dict = {}
            got = runner.first_stage(stages, ("q",), 3, None, timings)
            assert got.names == [s.name for s in stages] and len(got.lists) == 2
    # The first search of a stage is overlapped (no times yet); once their moving averages say
    # they are short, they share a thread: every search after the first.
    assert short[1].threads[0] != me and short[1].threads[1:] == [me] * 29
    # All but the slowest still take longer than a hand-off: overlapped every time.
    assert all(t != me for t in long[1].threads)
    r.close()
