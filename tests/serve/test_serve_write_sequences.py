"""What is accepted is kept, through a real ``ragfind serve`` (one worker, and two workers over
one writer): a seeded random sequence of adds (well-formed and not), deletes, filtered searches
and ``kill -9`` + restart over HTTP, checked after every step against the plain Python model of
tests/reliability/test_write_properties.py (every acknowledged write found by id and by search,
every refused one a 4xx that left nothing, filters equal to the Python evaluator)."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

from serve_process import start_ragfind_serve  # noqa: E402
from test_write_properties import ALL, FIELDS, Refused, reference_check  # noqa: E402

import ragfind  # noqa: E402
from filter_reference import doc_ids_as_stored, mismatch, ref, unknown_exists  # noqa: E402

pytestmark = pytest.mark.slow

VALUES = [None, True, False, 0, 3, -2, 0.5, 2**60 + 1, "x", "é", "", [1, "a"], {"k": 1}, math.nan, math.inf]
IDS = ["a", "b", "c", "é", "zz 1", 7, 2**63, "", None, 4.5, True]


def random_documents(rng: random.Random) -> list:
    docs = []
    for _ in range(rng.randint(0, 3)):
        d: dict = {"id": rng.choice(IDS), "text": f"{ALL} " + rng.choice(["owl", "é cat", "", "x" * 3000])}
        if rng.random() < 0.6:
            d["metadata"] = {f: rng.choice(VALUES) for f in rng.sample(FIELDS, rng.randint(0, 3))}
        if rng.random() < 0.2:
            d["title"] = rng.choice(["t", 3, None])
        if rng.random() < 0.05:
            d["url"] = "u"
        if rng.random() < 0.05:
            del d["text"]
        docs.append(d)
    return docs


def random_filter(rng: random.Random, model: dict) -> dict:
    seen = [v for d in model.values() for v in d["metadata"].values() if isinstance(v, (str, int, float))]
    value = rng.choice(seen) if seen and rng.random() < 0.7 else rng.choice([0, "x", True])
    field = rng.choice([f for f in FIELDS if any(f in d["metadata"] for d in model.values())] or ["doc_id"])
    one = rng.choice(
        [
            {field: value},
            {field: {"$ne": value}},
            {field: {"$exists": rng.random() < 0.5}},
            {field: [value, "y"]},
        ]
    )
    return rng.choice([one, {"$not": one}, {"$or": [one, {"doc_id": "a"}]}])


def json_safe(v):
    """What the request can carry: NaN and infinities are not JSON (the client refuses them)."""
    try:
        json.dumps(v, allow_nan=False)
        return True
    except ValueError:
        return False


class Server:
    def __init__(self, folder: Path, workers: int) -> None:
        self.folder, self.workers = folder, workers
        self.start()

    def start(self) -> None:
        extra = ("--workers", str(self.workers)) if self.workers > 1 else ()
        self.proc, self.url = start_ragfind_serve(self.folder, "--checkpoint-bytes", "2000", *extra)

    def kill_and_restart(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.start()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def check_model(server: Server, model: dict) -> None:
    health = httpx.get(server.url + "/health").json()
    assert health["documents"] == len(model)
    for i, d in model.items():
        got = httpx.get(server.url + f"/documents/{i}")
        assert got.status_code == 200, (i, got.text)
        assert got.json() == d
    hits = httpx.post(server.url + "/search", json={"query": ALL, "k": 100}).json()["results"]
    assert {h["doc_id"] for h in hits} == set(model)  # every text holds the word ALL


@pytest.mark.parametrize("workers", [1, 2])
def test_random_writes_survive_kill_9(tmp_path, workers):
    r = ragfind.Retriever(encoder=None, chunk_size=None)
    r.save(tmp_path / "kb")
    r.close()
    rng = random.Random(20261207 + workers)
    server = Server(tmp_path / "kb", workers)
    model: dict = {}
    kinds: dict = {}
    try:
        for _step in range(70):
            op = rng.choices(["add", "delete", "search", "kill"], [6, 2, 2, 1])[0]
            if op == "add":
                batch = random_documents(rng)
                if not json_safe(batch):
                    continue  # never reaches a server: the client cannot write NaN as JSON
                try:
                    stored, new_kinds = reference_check(batch, set(model), kinds)
                    if not stored:
                        raise Refused
                except Refused:
                    resp = httpx.post(server.url + "/documents", json={"documents": batch})
                    assert 400 <= resp.status_code < 500, (batch, resp.text)
                    continue
                resp = httpx.post(server.url + "/documents", json={"documents": batch})
                assert resp.status_code == 201, (batch, resp.text)
                model.update({d["id"]: d for d in stored})
                kinds = new_kinds
            elif op == "delete":
                i = rng.choice(sorted(model) + ["nope"])
                resp = httpx.delete(server.url + f"/documents/{i}")
                assert resp.status_code == (200 if i in model else 404), resp.text
                model.pop(i, None)
            elif op == "search" and model:
                filters = random_filter(rng, model)
                resp = httpx.post(server.url + "/search", json={"query": ALL, "k": 100, "filters": filters})
                held = {**kinds, "doc_id": {"str"}, "title": {"str"}}
                filters = doc_ids_as_stored(filters)  # an int doc_id matches as str(id)
                if unknown_exists(filters, held) or mismatch(filters, held):
                    assert resp.status_code == 400, (filters, resp.text)
                    continue
                assert resp.status_code == 200, resp.text
                want = {i for i, d in model.items() if ref(filters, d)}
                assert {h["doc_id"] for h in resp.json()["results"]} == want, filters
            elif op == "kill":
                server.kill_and_restart()
            check_model(server, model)
    finally:
        server.stop()
    back = ragfind.Retriever.load(tmp_path / "kb")
    assert {i: back.get_document(i) for i in model} == model and len(back) == len(model)
