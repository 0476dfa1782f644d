"""Writes are durable before they are acknowledged: the write log, its replay (idempotent, so a
crash between a checkpoint's save and the log's truncation loses and duplicates nothing), torn
tails, checkpoints, and a real ``kill -9`` of a ``ragfind serve`` process."""

from __future__ import annotations

import os
import signal

import pytest
from serve_fixtures import bm25_folder_fixture, encoder_fixture, hybrid_folder_fixture  # noqa: F401

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from serve_process import start_ragfind_serve  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import ragfind  # noqa: E402
from ragfind.persist.wal import WriteLog, WriteLogError  # noqa: E402
from ragfind.serve import ServeConfig, create_app  # noqa: E402
from ragfind.serve.service import LOG_FILE, replay  # noqa: E402


def state(r) -> dict:
    """Every stored document by id (what must survive)."""
    ids = sorted(
        {p.doc_id for p in r.search("the a cats dogs rust python mice owls bats", k=100, stages=["bm25"])}
    )
    out = {}
    for i in [
        *ids,
        "cats",
        "dogs",
        "chats",
        "rust",
        "python",
        "mice",
        "owls",
        "bats",
        "new0",
        "new1",
        "new2",
    ]:
        try:
            out[i] = r.get_document(i)
        except KeyError:
            pass
    return out


def test_acknowledged_writes_survive_without_a_clean_shutdown(hybrid_folder, encoder):
    r = ragfind.Retriever.load(hybrid_folder, encoder=encoder)
    crashed = create_app(r, folder=hybrid_folder)
    c = TestClient(crashed)  # no `with`: the shutdown never runs
    assert (
        c.post("/documents", json={"documents": [{"id": "owls", "text": "Owls hunt at night."}]}).status_code
        == 201
    )
    assert c.delete("/documents/dogs").status_code == 200
    assert (hybrid_folder / LOG_FILE).stat().st_size > 0
    expected = state(r)
    crashed.state.service.log.close()  # the descriptor only, as a dying process would
    again = ragfind.Retriever.load(hybrid_folder, encoder=encoder)  # the folder alone lacks them ...
    assert "owls" not in state(again)
    app = create_app(ragfind.Retriever.load(hybrid_folder, encoder=encoder), folder=hybrid_folder)
    replayed = app.state.service.retriever  # ... the service replays the log and folds it in
    assert state(replayed) == expected
    assert not (hybrid_folder / LOG_FILE).exists()  # the checkpoint's save replaced the folder
    assert state(ragfind.Retriever.load(hybrid_folder, encoder=encoder)) == expected
    hits = TestClient(app).post("/search", json={"query": "owls night", "k": 1}).json()["results"]
    assert hits[0]["doc_id"] == "owls"


def test_shutdown_folds_the_log_into_the_folder(bm25_folder):
    with TestClient(create_app(folder=bm25_folder)) as c:
        c.post(
            "/documents",
            json={"documents": [{"id": "bats", "text": "Bats fly at dusk.", "metadata": {"n": 1}}]},
        )
    assert not (bm25_folder / LOG_FILE).exists()
    assert ragfind.Retriever.load(bm25_folder).get_document("bats")["metadata"] == {"n": 1}


def test_checkpoint_when_the_log_grows(bm25_folder):
    app = create_app(folder=bm25_folder, config=ServeConfig(checkpoint_bytes=200))
    c = TestClient(app)
    for n in range(3):  # each record is over 200 bytes: every write is folded in at once
        c.post("/documents", json={"documents": [{"id": f"new{n}", "text": "word " * 40}]})
        assert app.state.service.log.size == 0
        assert not (bm25_folder / LOG_FILE).exists()
    assert "ragfind_checkpoints_total 3" in c.get("/metrics").text
    saved = ragfind.Retriever.load(bm25_folder)
    assert {"new0", "new1", "new2"} <= set(state(saved))


def test_cache_size_is_served_but_not_saved(bm25_folder):
    saved = ragfind.Retriever.load(bm25_folder).cache_stats()["results"]["max_entries"]
    app = create_app(folder=bm25_folder, config=ServeConfig(cache_size=0, checkpoint_bytes=1))
    c = TestClient(app)
    for _ in range(2):
        assert c.post("/search", json={"query": "cats"}).json()["cached"] is False
    c.post("/documents", json={"documents": [{"id": "new", "text": "cats again"}]})  # a checkpoint
    assert app.state.service.retriever.cache_stats()["results"]["max_entries"] == 0
    assert ragfind.Retriever.load(bm25_folder).cache_stats()["results"]["max_entries"] == saved > 0
    with pytest.raises(ValueError, match="cache_size = -2"):
        ServeConfig(cache_size=-2)


def test_replay_is_idempotent_over_a_folder_that_already_holds_the_records(bm25_folder):
    # A crash after the checkpoint's save but before the log is emptied: the saved folder holds
    # every record, and the log still lists them all.
    records = [
        {"op": "add", "documents": [{"id": "owls", "text": "Owls v1"}]},
        {"op": "delete", "ids": ["owls"]},
        {"op": "add", "documents": [{"id": "owls", "text": "Owls v2 hunt"}]},
        {"op": "delete", "ids": ["cats"]},
        {"op": "add", "documents": [{"id": "cats", "text": "Cats v2"}, {"id": "bats", "text": "Bats"}]},
        {"op": "delete", "ids": ["bats"]},
    ]
    truth = ragfind.Retriever.load(bm25_folder)
    replay(truth, records)  # the true history, from the start
    expected = state(truth)
    assert expected["owls"]["text"] == "Owls v2 hunt" and "bats" not in expected
    for prefix in range(len(records) + 1):  # the folder holds any prefix of the log
        r = ragfind.Retriever.load(bm25_folder)
        replay(r, records[:prefix])
        replay(r, records)
        assert state(r) == expected, prefix


def test_torn_tail_is_dropped_and_a_corrupt_record_refused(bm25_folder):
    log = WriteLog(bm25_folder / LOG_FILE)
    log.append({"op": "add", "documents": [{"id": "owls", "text": "Owls"}]})
    log.close()
    with open(log.path, "ab") as f:
        f.write(b'0badcafe {"op": "add", "docum')  # a crash mid-write: never acknowledged
    app = create_app(folder=bm25_folder)
    assert "owls" in state(app.state.service.retriever)
    log = WriteLog(bm25_folder / LOG_FILE)
    log.append({"op": "delete", "ids": ["owls"]})
    log.append({"op": "delete", "ids": ["cats"]})
    log.close()
    data = bytearray(log.path.read_bytes())
    data[12] ^= 1  # the first record, not the last: corruption, not a torn write
    log.path.write_bytes(bytes(data))
    with pytest.raises(WriteLogError, match="record 1 is corrupt"):
        create_app(folder=bm25_folder)


def test_kill_9_loses_nothing_acknowledged(bm25_folder):
    proc, url = start_ragfind_serve(bm25_folder, "--api-key", "k", "--workers", "4")
    auth = {"Authorization": "Bearer k"}
    try:
        for n in range(5):
            resp = httpx.post(
                url + "/documents",
                json={"documents": [{"id": f"doc{n}", "text": f"acknowledged write number {n} about owls"}]},
                headers=auth,
            )
            assert resp.status_code == 201
        assert httpx.delete(url + "/documents/cats", headers=auth).status_code == 200
        assert httpx.post(url + "/search", json={"query": "owls"}).status_code == 401
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    proc, url = start_ragfind_serve(bm25_folder, "--api-key", "k")
    try:
        for n in range(5):
            doc = httpx.get(url + f"/documents/doc{n}", headers=auth)
            assert doc.status_code == 200 and doc.json()["text"].endswith(f"{n} about owls")
        assert httpx.get(url + "/documents/cats", headers=auth).status_code == 404
        hits = httpx.post(url + "/search", json={"query": "acknowledged owls", "k": 10}, headers=auth).json()
        assert {h["doc_id"] for h in hits["results"]} == {f"doc{n}" for n in range(5)}
    finally:
        proc.send_signal(signal.SIGTERM)  # a clean stop folds the log into the folder
        proc.wait(30)
    saved = ragfind.Retriever.load(bm25_folder)
    assert saved.get_document("doc4")["id"] == "doc4"
    with pytest.raises(KeyError):
        saved.get_document("cats")


def test_searches_run_while_writes_are_serialised(bm25_folder):
    import threading

    app = create_app(folder=bm25_folder)
    c = TestClient(app)
    errors: list = []

    def searcher():
        for _ in range(20):
            resp = c.post("/search", json={"query": "cats mice owls", "k": 5})
            if resp.status_code != 200:
                errors.append(resp.text)

    def writer(n):
        for i in range(5):
            resp = c.post("/documents", json={"documents": [{"id": f"w{n}-{i}", "text": f"owls {n} {i}"}]})
            if resp.status_code != 201:
                errors.append(resp.text)

    threads = [threading.Thread(target=searcher) for _ in range(3)] + [
        threading.Thread(target=writer, args=(n,)) for n in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert c.get("/health").json()["documents"] == 6 + 15
    app.state.service.close()
    saved = ragfind.Retriever.load(bm25_folder)
    assert len(saved) == 21 and saved.get_document("w2-4")["text"] == "owls 2 4"


def test_a_failed_log_write_is_a_503_and_changes_nothing(bm25_folder, monkeypatch):
    app = create_app(folder=bm25_folder)
    c = TestClient(app)

    def full_disk(record):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(app.state.service.log, "append", full_disk)
    resp = c.post("/documents", json={"documents": [{"id": "owls", "text": "Owls"}]})
    assert resp.status_code == 503 and "No space left" in resp.json()["error"]
    assert c.get("/documents/owls").status_code == 404
    resp = c.delete("/documents/cats")
    assert resp.status_code == 503
    assert c.get("/documents/cats").json()["text"].startswith("Cats are small")
    hits = c.post("/search", json={"query": "cats purr", "k": 1}).json()["results"]
    assert hits[0]["doc_id"] == "cats"
    monkeypatch.undo()
    app.state.service.log.close()


def test_a_failed_checkpoint_keeps_the_log(bm25_folder, monkeypatch):
    app = create_app(folder=bm25_folder, config=ServeConfig(checkpoint_bytes=1))
    c = TestClient(app)
    r = app.state.service.retriever

    def no_save(path):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(r, "save", no_save)
    resp = c.post("/documents", json={"documents": [{"id": "owls", "text": "Owls hunt."}]})
    assert resp.status_code == 201  # durable in the log although the fold failed
    assert "ragfind_checkpoint_errors_total 1" in c.get("/metrics").text
    assert (bm25_folder / LOG_FILE).stat().st_size > 0
    app.state.service.log.close()
    again = create_app(folder=bm25_folder)
    assert again.state.service.retriever.get_document("owls")["text"] == "Owls hunt."
