"""The replication protocol under faults: a primary that dies right after logging a write, a
copy that dies mid-write, a stopped (SIGSTOP) copy or primary, a router replaced by another
or SIGKILLed (named, detached shards). Each asserts that nothing
acknowledged is lost, that a write reported failed is never committed later, that the copies
end up holding exactly the same documents, and that no call outlives its deadline by far."""

from __future__ import annotations

import os
import signal
import time

import pytest
import sharded_helpers
from sharded_helpers import load_collection

from ragfind.distributed import ShardedRetriever, ShardUnavailableError

ray_session = sharded_helpers.ray_session  # the session's local Ray (a fixture)

pytestmark = pytest.mark.slow

OPTS = dict(encoder=None, chunk_size=None, cache_size=0)
# A hang breaks this by far; a call that keeps its 1-2 s deadline (plus a retry) stays well inside.
BOUND = 15.0


@pytest.fixture(scope="module")
def docs(ray_session):
    return load_collection("cranfield")["docs"][:400]


def _settle(sharded, timeout: float = 60.0) -> None:
    """Waits (bounded) until every copy of every shard is back in the in-sync set."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(len(sharded._copies.in_sync[s]) == sharded.replicas for s in range(sharded.num_shards)):
            return
        time.sleep(0.2)
    raise AssertionError(f"copies not back in sync: {sharded._copies.in_sync}")


def _copies(ray, sharded) -> list:
    """Per shard, what each copy holds."""
    return [[ray.get(a.digest.remote(), timeout=30) for a in reps] for reps in sharded._actors]


def _assert_converged(ray, sharded, present: set, absent: set) -> None:
    held: set = set()
    for s, copies in enumerate(_copies(ray, sharded)):
        first = copies[0]
        for c in copies[1:]:
            assert c == first, f"shard {s}: copies diverge"
        held |= set(first["ids"])
    assert present <= held, f"acknowledged documents lost: {sorted(present - held)[:5]}"
    assert not (absent & held), f"failed writes committed: {sorted(absent & held)[:5]}"
    assert len(sharded) == len(held)


# Each fault also with the search graph up (its copies are among those the faults hit).
FANOUTS = pytest.mark.parametrize("fanout", ["auto", "graph"])


def _graph_up(sharded) -> None:
    if sharded._graph is not None and sharded._graph._countdown <= 0:
        assert sharded._graph.wait_ready(120.0)


def _timed(fn, *args, **kw):
    t = time.monotonic()
    try:
        return fn(*args, **kw), None
    except ShardUnavailableError as exc:
        return None, exc
    finally:
        assert time.monotonic() - t < BOUND, f"{fn.__name__} outlived its deadline"


@FANOUTS
def test_primary_killed_right_after_logging(ray_session, docs, tmp_path, fanout) -> None:
    ray = ray_session
    sharded = ShardedRetriever(
        1, replicas=2, placement="any", work_dir=tmp_path, deadline=2.0, fanout=fanout, **OPTS
    )
    try:
        acked = {d["id"] for d in docs[:100]}
        sharded.add_documents(docs[:100])
        _graph_up(sharded)
        p = sharded._copies.primary[0]
        ray.get(sharded._actors[0][p].inject_fault.remote("exit_after_log"), timeout=30)
        x = docs[100:110]
        with pytest.raises(ShardUnavailableError):
            sharded.add_documents(x)  # logged, then the primary died: reported failed
        y = docs[110:120]
        sharded.add_documents(y)  # a new primary, a new term, a new sequence number
        acked |= {d["id"] for d in y}
        assert sharded._copies.primary[0] != p and sharded._copies.term[0] >= 2
        _settle(sharded)  # the old primary restarted, replayed the log, rejoined
        failed = {d["id"] for d in x}
        _assert_converged(ray, sharded, acked, failed)
        for _ in range(4):  # every copy agrees, whichever is read
            with pytest.raises(KeyError):
                sharded.get_document(x[0]["id"])
            assert sharded.get_document(y[0]["id"])["text"] == y[0]["text"]
        # The ids of the failed write can be added again, and this time they stay.
        sharded.add_documents(x)
        _settle(sharded)
        _assert_converged(ray, sharded, acked | failed, set())
    finally:
        sharded.close()


@FANOUTS
def test_replica_killed_mid_write(ray_session, docs, tmp_path, fanout) -> None:
    ray = ray_session
    sharded = ShardedRetriever(
        2, replicas=2, placement="any", work_dir=tmp_path, deadline=2.0, fanout=fanout, **OPTS
    )
    try:
        sharded.add_documents(docs[:100])
        _graph_up(sharded)
        acked = {d["id"] for d in docs[:100]}
        for s in range(2):
            other = 1 - sharded._copies.primary[s]
            ray.get(sharded._actors[s][other].inject_fault.remote("exit_before_apply"), timeout=30)
        # Acknowledged by the primaries; the dying copies leave the in-sync set.
        sharded.add_documents(docs[100:200])
        acked |= {d["id"] for d in docs[100:200]}
        for i in range(200, 260, 10):  # more writes while they restart and replay
            sharded.add_documents(docs[i : i + 10])
            acked |= {d["id"] for d in docs[i : i + 10]}
        sharded.delete_documents([docs[0]["id"]])
        acked.discard(docs[0]["id"])
        _settle(sharded)
        _assert_converged(ray, sharded, acked, {docs[0]["id"]})
        for _ in range(4):
            assert len(sharded) == len(acked)
    finally:
        sharded.close()


@FANOUTS
def test_stopped_copy_and_stopped_primary(ray_session, docs, tmp_path, fanout) -> None:
    ray = ray_session
    q = "boundary layer flow"
    # The default deadline: at 1 s the surviving copy's answer to the failover's `info` missed it
    # on a loaded 2-CPU machine (the graph's actors poll their channels beside it).
    sharded = ShardedRetriever(
        1, replicas=2, placement="any", work_dir=tmp_path, deadline=2.0, fanout=fanout, **OPTS
    )
    stopped: list = []
    try:
        sharded.add_documents(docs[:150])
        _graph_up(sharded)
        acked = {d["id"] for d in docs[:150]}
        want = [(p.doc_id, p.score) for p in sharded.search(q, k=10)]
        p = sharded._copies.primary[0]
        pids = [ray.get(a.info.remote(), timeout=30)["pid"] for a in sharded._actors[0]]

        # A stopped follower: searches go to the other copy, the write leaves it behind.
        os.kill(pids[1 - p], signal.SIGSTOP)
        stopped.append(pids[1 - p])
        for _ in range(6):
            res, err = _timed(sharded.search, q, k=10, use_cache=False)
            assert err is None and [(x.doc_id, x.score) for x in res] == want
        _, err = _timed(sharded.add_documents, docs[150:160])
        assert err is None
        acked |= {d["id"] for d in docs[150:160]}
        os.kill(stopped.pop(), signal.SIGCONT)
        _settle(sharded)
        _assert_converged(ray, sharded, acked, set())

        # A stopped primary before a write: the write goes to a new primary.
        os.kill(pids[p], signal.SIGSTOP)
        stopped.append(pids[p])
        _, err = _timed(sharded.add_documents, docs[160:165])
        assert err is None and sharded._copies.primary[0] != p
        acked |= {d["id"] for d in docs[160:165]}
        os.kill(stopped.pop(), signal.SIGCONT)
        _settle(sharded)
        _assert_converged(ray, sharded, acked, set())

        # A primary that stalls mid-write (applied, not yet logged): the write fails within
        # the deadline and is never committed; the next one goes to a primary of a new term,
        # and what the stalled one appends when it wakes is fenced off.
        p = sharded._copies.primary[0]
        ray.get(sharded._actors[0][p].inject_fault.remote("stop_before_log"), timeout=30)
        stopped.append(pids[p])
        _, err = _timed(sharded.add_documents, docs[165:170])
        assert err is not None
        failed = {d["id"] for d in docs[165:170]}
        _, err = _timed(sharded.add_documents, docs[170:180])
        assert err is None
        acked |= {d["id"] for d in docs[170:180]}
        res, err = _timed(sharded.search, q, k=10, use_cache=False)
        assert err is None
        os.kill(stopped.pop(), signal.SIGCONT)  # it now logs the failed write, too late
        _settle(sharded)
        _assert_converged(ray, sharded, acked, failed)
        # A restart replays the log: the late record of the old term does not count.
        ray.kill(sharded._actors[0][p], no_restart=False)
        time.sleep(0.5)
        sharded.add_documents(docs[180:190])
        acked |= {d["id"] for d in docs[180:190]}
        _settle(sharded)
        _assert_converged(ray, sharded, acked, failed)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        sharded.close()


def test_a_stopped_copy_is_hedged_within_the_deadline(ray_session, docs, tmp_path) -> None:
    """A search whose copy is stopped asks another in-sync copy after a quarter of the
    deadline and answers within the deadline; with every copy of a shard stopped it fails
    after one deadline, not one per copy."""
    from ragfind.distributed.replication import HEDGE

    ray = ray_session
    q = "boundary layer flow"
    deadline = 2.0
    sharded = ShardedRetriever(
        1, replicas=3, placement="any", work_dir=tmp_path, deadline=deadline, fanout="calls", **OPTS
    )
    stopped: list = []
    try:
        sharded.add_documents(docs[:150])
        want = [(p.doc_id, p.score) for p in sharded.search(q, k=10, use_cache=False)]
        pids = [ray.get(a.info.remote(), timeout=30)["pid"] for a in sharded._actors[0]]
        os.kill(pids[0], signal.SIGSTOP)
        stopped.append(pids[0])
        took = []
        for _ in range(6):  # the copies are taken in turn: the stopped one comes up
            t = time.monotonic()
            res = sharded.search(q, k=10, use_cache=False)
            took.append(time.monotonic() - t)
            assert [(x.doc_id, x.score) for x in res] == want
        assert max(took) < deadline, took
        assert max(took) >= HEDGE * deadline, took  # one search did wait for the hedge
        assert (0, 0) in sharded._copies._busy  # the others are asked first from then on
        assert sorted(took)[-2] < HEDGE * deadline, took
        # Every copy stopped: one deadline in all, whatever the number of copies.
        for pid in pids[1:]:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        t = time.monotonic()
        with pytest.raises(ShardUnavailableError):
            sharded.search("supersonic wing", k=10, use_cache=False)
        assert time.monotonic() - t < 2 * deadline
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        sharded.close()


def test_a_graph_compile_holding_copies_up_fails_no_search_or_write(ray_session, docs, tmp_path) -> None:
    """Ray compiling the search graph holds up the copies' ordinary calls (seconds on busy
    cores): a search or a write overlapping a compile waits up to COMPILE_GRACE deadlines for
    its copy instead of failing; once the compile is over the deadline is one deadline."""
    import threading

    from ragfind.distributed.replication import COMPILE_GRACE

    ray = ray_session
    q = "boundary layer flow"
    deadline = 1.0
    sharded = ShardedRetriever(1, work_dir=tmp_path, deadline=deadline, fanout="calls", **OPTS)
    pid = ray.get(sharded._actors[0][0].info.remote(), timeout=30)["pid"]
    resumes: list = []

    def hold_up(seconds: float) -> None:
        os.kill(pid, signal.SIGSTOP)
        timer = threading.Timer(seconds, os.kill, (pid, signal.SIGCONT))
        timer.start()
        resumes.append(timer)

    try:
        sharded.add_documents(docs[:100])
        want = [(p.doc_id, p.score) for p in sharded.search(q, k=10)]
        with sharded._copies.compiling():
            hold_up(2.0 * deadline)
            t = time.monotonic()
            assert [(p.doc_id, p.score) for p in sharded.search(q, k=10)] == want
            assert 1.5 * deadline < time.monotonic() - t < COMPILE_GRACE * deadline
            hold_up(2.0 * deadline)
            assert sharded.add_documents(docs[100:110]) == 10
        assert len(sharded) == 110 and 0 in sharded._copies.in_sync[0]
        hold_up(3.0 * deadline)
        t = time.monotonic()
        with pytest.raises(ShardUnavailableError, match="within 1.0 s"):
            sharded.search("supersonic wing", k=10)
        assert time.monotonic() - t < 2.5 * deadline
        resumes[-1].join()
        assert [(p.doc_id, p.score) for p in sharded.search(q, k=10)][:1]
    finally:
        for timer in resumes:
            timer.join()
        os.kill(pid, signal.SIGCONT)
        sharded.close()


def test_log_plan_drops_aborted_and_fenced_writes() -> None:
    from ragfind.distributed.shard import plan_records

    log = [
        {"op": "term", "term": 1},
        {"op": "add", "term": 1, "seq": 1},
        {"op": "add", "term": 1, "seq": 2},  # reported failed: aborted below
        {"op": "abort", "term": 1, "seqs": [2]},
        {"op": "term", "term": 2},  # a new primary
        {"op": "add", "term": 2, "seq": 3},
        {"op": "add", "term": 1, "seq": 4},  # the old primary, appending late: fenced off
        {"op": "delete", "term": 2, "seq": 5},
    ]
    writes, term, max_seq = plan_records(log)
    assert [r["seq"] for r in writes] == [1, 3, 5]
    assert term == 2 and max_seq == 5


def test_log_plan_drops_an_aborted_write_of_one_term_only() -> None:
    from ragfind.distributed.shard import plan_records

    log = [
        {"op": "add", "term": 1, "seq": 1},
        {"op": "add", "term": 1, "seq": 2},  # this copy's write 2 of term 1: taken back
        {"op": "abort", "term": 2, "seqs": [2], "terms": [1]},
        {"op": "add", "term": 2, "seq": 2},  # the write 2 the primary counts
    ]
    writes, _, max_seq = plan_records(log)
    assert [(r["seq"], r["term"]) for r in writes] == [(1, 1), (2, 2)] and max_seq == 2
    # An abort record's numbers count as used (never handed out again).
    assert plan_records([{"op": "abort", "term": 1, "seqs": [7]}])[2] == 7


def test_history_tells_a_copy_what_to_take_back_and_what_it_lacks(docs, tmp_path) -> None:
    # Two copies in this process (no Ray), each with its own folder.
    from ragfind.distributed.shard import WAL, ShardActor

    a = ShardActor(0, str(tmp_path / "a"), dict(OPTS))
    b = ShardActor(0, str(tmp_path / "b"), dict(OPTS))
    try:
        assert isinstance(a.promote(1, []), dict) and isinstance(b.recover(1, []), dict)
        for c in (a, b):
            c.add(1, 1, 0, docs[:5], list(range(5)))
        b.add(1, 2, 1, docs[5:8], [5, 6, 7])  # the primary failed on write 2: b must give it back
        a.add(1, 3, 1, docs[8:10], [8, 9])
        # Every copy logs what it applied, in its own folder.
        assert [r.get("seq") for r in b.wal.records() if r["op"] == "add"] == [1, 2]
        assert (tmp_path / "a" / WAL).is_file() and (tmp_path / "b" / WAL).is_file()
        pairs = [(q, b.terms[q]) for q in b.applied]
        assert a.history(b.base, pairs, b.last) == {"take_back": [2]}
        # The same number under another term is another write: given back too.
        assert a.history(0, [(1, 1), (3, 7)], 3) == {"take_back": [3]}
        plan = a.history(0, [(1, 1)], 1)
        assert [r["seq"] for r in plan["records"]] == [3] and "files" not in plan
        # After a snapshot the log no longer reaches back: the snapshot's files come along.
        assert a.checkpoint() == 3
        assert [r for r in a.wal.records() if r["op"] in ("add", "delete")] == []
        plan = a.history(0, [(1, 1)], 1)
        assert plan["lsn"] == 3 and plan["records"] == [] and "manifest.json" in plan["files"]
        assert a.history(3, [], 3) == {"records": []}
        fresh = ShardActor(0, str(tmp_path / "c"), dict(OPTS))
        fresh._restart_from(plan)
        assert fresh.last == 3 and sorted(fresh.digest()["ids"]) == sorted(a.digest()["ids"])
        fresh.wal.close()
    finally:
        a.wal.close()
        b.wal.close()


@pytest.mark.parametrize("saved", [False, True])
def test_a_copy_whose_disk_is_lost_recovers_from_the_primary(ray_session, docs, tmp_path, saved) -> None:
    # Each copy keeps its own log and snapshots: a copy restarted with an empty folder (its
    # node's disk lost) gets the writes back from the primary's log, or its snapshot.
    import shutil

    ray = ray_session
    work = tmp_path / "work"
    sharded = ShardedRetriever(
        1, replicas=2, placement="any", work_dir=work, deadline=2.0, fanout="calls", **OPTS
    )
    try:
        sharded.add_documents(docs[:100])
        if saved:
            sharded.save(tmp_path / "saved")
        sharded.add_documents(docs[100:150])
        sharded.delete_documents([docs[1]["id"]])
        acked = {d["id"] for d in docs[:150]} - {docs[1]["id"]}
        homes = sorted((work / "shard-0000").iterdir())
        assert [h.name for h in homes] == ["copy-0", "copy-1"]
        for h in homes:  # both logged every write (and, once saved, hold a snapshot)
            assert (h / "wal.log").stat().st_size > 0
            assert ((h / "snapshots").is_dir() and len(list((h / "snapshots").iterdir())) == 1) == saved
        other = 1 - sharded._copies.primary[0]
        shutil.rmtree(homes[other])
        ray.kill(sharded._actors[0][other], no_restart=False)
        sharded.add_documents(docs[150:170])  # acknowledged by the primary alone meanwhile
        acked |= {d["id"] for d in docs[150:170]}
        _settle(sharded)
        _assert_converged(ray, sharded, acked, {docs[1]["id"]})
        assert ray.get(sharded._actors[0][other].info.remote(), timeout=30)["documents"] == len(acked)
        # The recovered copy logs in its own folder again, and takes writes as before.
        assert (homes[other] / "wal.log").stat().st_size > 0
        sharded.add_documents(docs[170:180])
        acked |= {d["id"] for d in docs[170:180]}
        _assert_converged(ray, sharded, acked, {docs[1]["id"]})
        for _ in range(4):
            assert sharded.get_document(docs[175]["id"])["text"] == docs[175]["text"]
    finally:
        sharded.close()


def test_a_loaded_collection_lives_on_its_copies_own_disks(ray_session, docs, tmp_path) -> None:
    # load() sends each saved shard to its copies (no shared file system); each keeps it as
    # its own snapshot, so a copy Ray restarts comes back from its own folder.
    ray = ray_session
    first = ShardedRetriever(2, placement="any", work_dir=tmp_path / "a", fanout="calls", **OPTS)
    try:
        first.add_documents(docs[:120])
        first.save(tmp_path / "saved")
    finally:
        first.close()
    work = tmp_path / "b"
    sharded = ShardedRetriever.load(
        tmp_path / "saved", replicas=2, placement="any", work_dir=work, fanout="calls", **OPTS
    )
    try:
        for home in sorted(work.glob("shard-*/copy-*")):
            assert (home / "state.json").is_file() and len(list((home / "snapshots").iterdir())) == 1
        sharded.add_documents(docs[120:140])
        acked = {d["id"] for d in docs[:140]}
        _settle(sharded)  # a follower may still be catching up after the start
        primaries = list(sharded._copies.primary)
        for s in range(2):  # the followers (a write racing its primary's death fails, by design)
            ray.kill(sharded._actors[s][1 - primaries[s]], no_restart=False)
        sharded.add_documents(docs[140:150])
        assert sharded._copies.primary == primaries
        acked |= {d["id"] for d in docs[140:150]}
        _settle(sharded)
        _assert_converged(ray, sharded, acked, set())
    finally:
        sharded.close()


def test_copies_of_a_shard_need_distinct_nodes(ray_session) -> None:
    # The session's Ray is one node: two copies of a shard cannot be spread.
    with pytest.raises(ValueError, match="needs 2 nodes .* the cluster has 1"):
        ShardedRetriever(1, replicas=2, **OPTS)
    with pytest.raises(ValueError, match="placement = 'x'"):
        ShardedRetriever(1, replicas=2, placement="x", **OPTS)


def test_named_collection_outlives_its_router_and_fences_it_off(ray_session, docs, tmp_path) -> None:
    import ragfind
    from ragfind.distributed import StalePrimaryError

    name = f"coll-{os.getpid()}"
    first = ShardedRetriever(2, name=name, work_dir=tmp_path, **OPTS)
    second = None
    try:
        first.add_documents(docs[:100])
        t = time.monotonic()
        second = ShardedRetriever.attach(name, 2, **OPTS)
        assert time.monotonic() - t < 30.0  # attaching is an election per shard, not a reload
        assert len(second) == 100
        single = ragfind.Retriever(**OPTS)
        single.add_documents(docs[:150])
        second.add_documents(docs[100:150])
        # The first router is fenced off for writes (a newer term), and can still search.
        with pytest.raises(StalePrimaryError):
            first.add_documents(docs[150:160])
        q = "boundary layer flow"
        want = [(p.doc_id, round(p.score, 5)) for p in single.search(q, k=10)]
        assert [(p.doc_id, round(p.score, 5)) for p in second.search(q, k=10)] == want
        first.close()  # a named collection's actors outlive their router
        assert len(second) == 150
        with pytest.raises(ValueError, match="no sharded collection"):
            ShardedRetriever.attach(name + "-nope", 2, **OPTS)
    finally:
        first.close()
        if second is not None:
            second.destroy()
        else:
            first.destroy()


_DRIVER = """
import json, os, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False, include_dashboard=False,
         runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
from ragfind.distributed import ShardedRetriever
docs = json.load(open(sys.argv[3]))
sr = ShardedRetriever(2, name=sys.argv[2], work_dir=sys.argv[4], encoder=None, chunk_size=None, cache_size=0)
for i in range(0, len(docs), 20):
    sr.add_documents(docs[i : i + 20])
    print("acked", i + 20, flush=True)
time.sleep(600)
"""


def test_driver_killed_a_new_router_attaches_and_loses_nothing(ray_session, docs, tmp_path) -> None:
    import json
    import subprocess
    import sys

    ray = ray_session
    name = f"driver-{os.getpid()}"
    (tmp_path / "docs.json").write_text(json.dumps(docs[:200]))
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            ray.get_runtime_context().gcs_address,
            name,
            str(tmp_path / "docs.json"),
            str(tmp_path / "work"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    acked = 0
    router = None
    try:
        end = time.monotonic() + 180
        while acked < 200 and time.monotonic() < end:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("acked"):
                acked = int(line.split()[1])
        assert acked == 200, "the driver did not get its writes acknowledged"
        proc.kill()  # SIGKILL: the router dies, its named, detached shards live on
        proc.wait(timeout=30)
        t = time.monotonic()
        router = ShardedRetriever.attach(name, 2, **OPTS)
        assert len(router) == 200
        assert time.monotonic() - t < 30.0
        held = {
            d
            for part in router._scatter(
                {s: ("existing", [x["id"] for x in docs[:200]]) for s in range(2)}
            ).values()
            for d in part
        }
        assert held == {d["id"] for d in docs[:200]}
        router.add_documents(docs[200:210])  # and it takes the writes
        assert len(router) == 210
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
        if router is not None:
            router.destroy()


def test_a_batch_left_half_written_by_a_dead_router_is_taken_back(ray_session, docs, tmp_path) -> None:
    # A router dies after one shard took its part of an add and before the other did (the
    # add was never acknowledged): the router that takes over gives that part back, so adds
    # stay all or nothing. A whole batch later deleted from on one shard only stays.
    from ragfind.distributed.partition import shard_of

    ray = ray_session
    name = f"torn-{os.getpid()}"
    first = ShardedRetriever(2, replicas=2, placement="any", name=name, work_dir=tmp_path, **OPTS)
    routers = [first]
    try:
        first.add_documents(docs[:100])
        first.add_documents(docs[100:140])
        gone = [d["id"] for d in docs[100:140] if shard_of(d["id"], 2) == 1][:3]
        first.delete_documents(gone)  # shard 0's last write is the batch, shard 1's a delete
        acked = {d["id"] for d in docs[:140]} - set(gone)
        second = ShardedRetriever.attach(name, 2, replicas=2, **OPTS)
        routers.append(second)
        assert len(second) == len(acked)  # nothing taken back: that batch was whole
        batch = docs[140:180]
        write = second._copies.write

        def dies_after_shard_0(calls, timeout=None):
            write({0: calls[0]}, timeout)  # shard 0 holds its part ...
            raise SystemExit("the router died")  # ... shard 1 never gets its own

        second._copies.write = dies_after_shard_0
        with pytest.raises(SystemExit):
            second.add_documents(batch)
        on_0 = [d["id"] for d in batch if shard_of(d["id"], 2) == 0]
        assert len(second._scatter({0: ("existing", on_0)})[0]) == len(on_0) > 0
        third = ShardedRetriever.attach(name, 2, replicas=2, **OPTS)
        routers.append(third)
        _settle(third)
        _assert_converged(ray, third, acked, {d["id"] for d in batch})
        assert len(third) == len(acked)
        third.add_documents(batch)  # the batch can be sent again, whole
        _settle(third)
        _assert_converged(ray, third, acked | {d["id"] for d in batch}, set())
    finally:
        for r in routers[:-1]:
            r.close()
        routers[-1].destroy()


def test_wait_for_active_shards(ray_session, docs, tmp_path) -> None:
    # "all": a write to a shard with a copy out of the in-sync set fails before anything is
    # written (on any shard); 1 (default): it goes on with the primary alone.
    ray = ray_session
    for bad in (0, 3, "most", True, 1.5):
        with pytest.raises(ValueError, match="wait_for_active_shards"):
            ShardedRetriever(1, replicas=2, placement="any", wait_for_active_shards=bad, **OPTS)
    strict = ShardedRetriever(
        2, replicas=2, placement="any", work_dir=tmp_path / "a", wait_for_active_shards="all", **OPTS
    )
    lenient = ShardedRetriever(2, replicas=2, placement="any", work_dir=tmp_path / "b", **OPTS)
    try:
        for sr in (strict, lenient):
            sr.add_documents(docs[:50])
            ray.kill(sr._actors[1][1], no_restart=True)  # shard 1 keeps one copy
        failed = []
        for i in range(50, 110, 20):  # the first write after the death may find it out
            try:
                strict.add_documents(docs[i : i + 20])
            except ShardUnavailableError as exc:
                assert "wait_for_active_shards = 'all' asks for 2" in str(exc)
                failed += [d["id"] for d in docs[i : i + 20]]
        assert len(failed) >= 40
        held = strict._scatter({s: ("existing", failed) for s in range(2)})
        assert held == {0: [], 1: []}  # shard 0 had all its copies: it took nothing either
        for i in range(50, 110, 20):
            lenient.add_documents(docs[i : i + 20])
        assert len(lenient) == 110
        strict.wait_for_active_shards = 1
        strict.add_documents(docs[110:120])
    finally:
        strict.close()
        lenient.close()


_GROUP_DRIVER = """
import sys
import ray
from ray.util.placement_group import placement_group
from ragfind.distributed.router import _group_name
ray.init(address=sys.argv[1], log_to_driver=False, include_dashboard=False)
pg = placement_group([{"CPU": 0.01}], name=_group_name(sys.argv[2], 0), lifetime="detached")
assert pg.wait(60)
print(pg.id.hex(), flush=True)
"""


def test_destroy_from_an_attached_router_removes_the_collections_placement_groups(
    ray_session, tmp_path
) -> None:
    import subprocess
    import sys

    from ray.util.placement_group import placement_group_table

    from ragfind.distributed.router import _group_name

    ray = ray_session
    name = f"groups-{os.getpid()}"
    first = ShardedRetriever(2, name=name, work_dir=tmp_path / "work", **OPTS)
    second = None
    try:
        # The session's Ray is one node, where a creator cannot spread copies into groups: another
        # driver (so another namespace, as a dead creator's) makes shard 0's group as the creator
        # does; shard 1's is missing, which is no error.
        script = tmp_path / "group.py"
        script.write_text(_GROUP_DRIVER)
        out = subprocess.run(
            [sys.executable, str(script), ray.get_runtime_context().gcs_address, name],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        group_id = out.stdout.split()[-1]
        assert placement_group_table()[group_id]["state"] == "CREATED"
        first.close()
        second = ShardedRetriever.attach(name, 2, **OPTS)
    finally:
        (second or first).destroy()
    assert placement_group_table().get(group_id, {"state": "REMOVED"})["state"] == "REMOVED"
    names = {_group_name(name, s) for s in range(2)}
    assert not [g for g in placement_group_table().values() if g["name"] in names and g["state"] != "REMOVED"]
