"""``ragfind serve --workers N``: N worker processes on one port over a folder one writer process
owns. Every acknowledged write is seen by the next request whichever worker takes it, survives
checkpoints (the workers reload the replaced folder) and a ``kill -9`` of the command, which
takes its workers with it."""

from __future__ import annotations

import os
import signal
import time

import pytest
from serve_fixtures import bm25_folder_fixture  # noqa: F401

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")
psutil = pytest.importorskip("psutil")

from serve_process import start_ragfind_serve  # noqa: E402

import ragfind  # noqa: E402


def workers_of(pid: int) -> list:
    out = []
    for p in psutil.Process(pid).children():
        try:
            if "--worker-of" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:  # exited (a zombie until the writer reaps it)
            pass
    return out


def search_ids(url: str, query: str, auth: dict) -> set:
    # A fresh connection each time, so the kernel spreads them over the workers.
    resp = httpx.post(url + "/search", json={"query": query, "k": 10}, headers=auth)
    assert resp.status_code == 200, resp.text
    return {h["doc_id"] for h in resp.json()["results"]}


def test_workers_see_every_acknowledged_write_and_die_with_the_writer(bm25_folder):
    proc, url = start_ragfind_serve(
        bm25_folder, "--workers", "2", "--api-key", "k", "--checkpoint-bytes", "300"
    )
    auth = {"Authorization": "Bearer k"}
    try:
        workers = workers_of(proc.pid)
        assert len(workers) == 2
        pids = set()
        for n in range(6):
            doc = {"id": f"owl{n}", "text": f"owls hunt voles at night {n} " + "word " * (n * 10)}
            resp = httpx.post(url + "/documents", json={"documents": [doc]}, headers=auth)
            assert resp.status_code == 201, resp.text
            for _ in range(4):  # whichever worker answers has applied it
                assert f"owl{n}" in search_ids(url, "owls voles", auth)
                got = httpx.get(url + f"/documents/owl{n}", headers=auth)
                assert got.status_code == 200 and got.json()["id"] == f"owl{n}"
            for _ in range(4):  # the routes that never queue follow the writer too
                assert httpx.get(url + "/health").json()["documents"] == 6 + n + 1
                assert httpx.get(url + "/info", headers=auth).json()["documents"] == 6 + n + 1
        assert (
            httpx.post(
                url + "/documents", json={"documents": [{"id": "owl0", "text": "x"}]}, headers=auth
            ).status_code
            == 409
        )
        assert httpx.delete(url + "/documents/cats", headers=auth).status_code == 200
        assert httpx.delete(url + "/documents/cats", headers=auth).status_code == 404
        assert httpx.delete(url + "/documents/cats").status_code == 401
        for _ in range(4):
            assert "cats" not in search_ids(url, "cats purr", auth)
        for _ in range(8):
            pids.add(httpx.get(url + "/metrics", headers=auth).status_code)
        assert pids == {200}
        assert httpx.get(url + "/info", headers=auth).json()["writable"] is True
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + 30
    while any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers):
        assert time.monotonic() < deadline, "the workers outlived the writer"
        time.sleep(0.05)

    proc, url = start_ragfind_serve(bm25_folder, "--api-key", "k")
    try:
        assert search_ids(url, "owls voles", auth) == {f"owl{n}" for n in range(6)}
        assert httpx.get(url + "/documents/cats", headers=auth).status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    saved = ragfind.Retriever.load(bm25_folder)
    assert saved.get_document("owl5")["id"] == "owl5"


def test_a_dead_worker_is_replaced_and_sigterm_stops_them_all(bm25_folder):
    proc, url = start_ragfind_serve(bm25_folder, "--workers", "2")
    try:
        first = workers_of(proc.pid)
        first[0].kill()
        deadline = time.monotonic() + 60
        while True:
            now = workers_of(proc.pid)
            if len(now) == 2 and first[0].pid not in {w.pid for w in now}:
                break
            assert time.monotonic() < deadline, "no worker replaced the dead one"
            time.sleep(0.1)
        assert (
            httpx.post(
                url + "/documents", json={"documents": [{"id": "bats", "text": "Bats fly at dusk"}]}
            ).status_code
            == 201
        )
        for _ in range(4):
            assert "bats" in search_ids(url, "bats dusk", {})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert not [w for w in now if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    # The clean stop folded the log into the folder (a load alone replays nothing).
    assert ragfind.Retriever.load(bm25_folder).get_document("bats")["text"] == "Bats fly at dusk"


def test_a_follower_applies_the_log_reloads_after_checkpoints_and_rewinds(bm25_folder):
    from ragfind.serve.service import Service
    from ragfind.serve.workers import Follower

    writer = Service(ragfind.Retriever.load(bm25_folder), bm25_folder)
    follower = Follower(Service(None, None), bm25_folder, writer_socket="unused")
    seen = follower.service

    def ids() -> set:
        return {p.doc_id for p in seen.retriever.search("owls voles bats", k=20, stages=["bm25"])}

    writer.add({"documents": [{"id": "owl", "text": "owls hunt voles"}]})
    assert "owl" not in ids()
    follower.catch_up()
    assert "owl" in ids() and follower.applied == 1
    before = seen.retriever
    follower.catch_up()  # nothing new: nothing reloaded, nothing replayed twice
    assert seen.retriever is before and follower.applied == 1

    writer.checkpoint()  # the folder is replaced and the log emptied
    writer.add({"documents": [{"id": "bat", "text": "bats eat voles"}]})
    follower.catch_up()
    assert seen.retriever is not before and {"owl", "bat"} <= ids() and follower.applied == 1

    size = writer.log.size
    writer.delete("owl")
    follower.catch_up()
    assert "owl" not in ids()
    writer.log.rewind(size)  # a record the writer could not keep: the follower starts over
    writer.retriever.add_documents([{"id": "owl", "text": "owls hunt voles"}])
    follower.catch_up()
    assert {"owl", "bat"} <= ids()
    writer.close()


def test_every_route_of_a_worker_follows_the_writer(bm25_folder):
    """The routes that never queue (/health, /info, /metrics) apply the writer's log first too:
    a worker that took none of the requests since a write reports it all the same."""
    from starlette.testclient import TestClient

    from ragfind.serve.app import create_app
    from ragfind.serve.service import Service
    from ragfind.serve.workers import Follower

    writer = Service(ragfind.Retriever.load(bm25_folder), bm25_folder)
    n = len(writer.retriever)
    follower = Follower(Service(None, None), bm25_folder, writer_socket="unused")
    try:
        with TestClient(create_app(service=follower.service, follower=follower)) as client:
            for i, route in enumerate(["/health", "/info", "/metrics", "/health"]):
                writer.add({"documents": [{"id": f"owl{i}", "text": "owls hunt voles"}]})
                if i == 3:
                    writer.checkpoint()  # a reload, not a replay
                resp = client.get(route)
                assert resp.status_code == 200
                if route == "/metrics":
                    assert f"ragfind_documents {n + i + 1}" in resp.text
                else:
                    assert resp.json()["documents"] == n + i + 1
    finally:
        writer.close()
