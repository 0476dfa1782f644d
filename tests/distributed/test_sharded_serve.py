"""`ragfind serve` over a sharded folder (shards.json): the service loads it with
ShardedRetriever and answers /search like the service over one Retriever with the same
documents; writes go through the sharded retriever and are found afterwards."""

from __future__ import annotations

import pytest
import sharded_helpers

import ragfind
from ragfind.distributed import ShardedRetriever

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from ragfind.serve import create_app  # noqa: E402

ray_session = sharded_helpers.ray_session  # the session's local Ray (a fixture)

pytestmark = pytest.mark.slow

OPTS = dict(encoder=None, chunk_size=None, cache_size=0)
DOCS = [
    {
        "id": f"d{i}",
        "text": f"note {i}: the pump {w} fails when the valve {v} is closed",
        "metadata": {"n": i % 3},
    }
    for i, (w, v) in enumerate(
        [
            ("alpha", "red"),
            ("beta", "blue"),
            ("gamma", "red"),
            ("delta", "green"),
            ("alpha", "blue"),
            ("beta", "red"),
        ]
        * 4
    )
]


def test_serve_a_sharded_folder_like_one_retriever(ray_session, tmp_path) -> None:
    sharded = ShardedRetriever(2, **OPTS)
    sharded.add_documents(DOCS)
    folder = tmp_path / "sharded"
    sharded.save(folder)
    sharded.close()
    single = ragfind.Retriever(**OPTS)
    single.add_documents(DOCS)
    single_folder = tmp_path / "single"
    single.save(single_folder)
    with TestClient(create_app(folder=folder)) as c, TestClient(create_app(folder=single_folder)) as s:
        for body in (
            {"query": "alpha pump red valve", "k": 8},
            {"query": "beta blue", "k": 5, "filters": {"n": 1}},
        ):
            got, want = c.post("/search", json=body), s.post("/search", json=body)
            assert got.status_code == want.status_code == 200, got.text
            g, w = got.json()["results"], want.json()["results"]
            assert [r["doc_id"] for r in g] == [r["doc_id"] for r in w]
            assert [r["score"] for r in g] == pytest.approx([r["score"] for r in w], rel=1e-6)
        add = c.post("/documents", json={"documents": [{"id": "new", "text": "the zeta pump hums"}]})
        assert add.status_code == 201, add.text
        assert c.get("/documents/new").json()["text"] == "the zeta pump hums"
        top = c.post("/search", json={"query": "zeta", "k": 3}).json()["results"][0]
        assert top["doc_id"] == "new"
        explain = c.post("/explain", json={"query": "zeta", "chunk_id": top["chunk_id"]})
        assert explain.status_code == 501 and "unsharded" in explain.json()["error"], explain.text
