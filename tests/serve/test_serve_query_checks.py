"""The service checks a search as the library does (k: the same message; a filter nested too
deep: 400, not a RecursionError), gives a query too long for one its own message naming
``query``, and writes "an array" where a JSON type takes "an"."""

from __future__ import annotations

import pytest
from serve_fixtures import bm25_folder_fixture, encoder_fixture, hybrid_folder_fixture  # noqa: F401

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from ragfind.errors import check_k  # noqa: E402
from ragfind.serve import create_app  # noqa: E402
from ragfind.serve.service import MAX_QUERY_CHARS  # noqa: E402


@pytest.fixture
def client(hybrid_folder, encoder):
    with TestClient(create_app(folder=hybrid_folder, encoder=encoder)) as c:
        yield c


def error_of(client, body: dict) -> dict:
    resp = client.post("/search", json=body)
    assert resp.status_code == 400, resp.text
    return resp.json()


def test_k_gets_the_library_message(client):
    for k in (0, -1, 2.5, True, "3"):
        with pytest.raises((TypeError, ValueError)) as lib:
            check_k(k)
        for body in ({"query": "cats", "k": k}, {"query": "cats", "k": k, "rerank": True}):
            got = error_of(client, body)
            assert got["field"] == "k" and got["error"] == str(lib.value)
    got = error_of(client, {"query": "cats", "k": 2**63})
    assert got["field"] == "k" and "[1, 1000]" in got["error"]  # this server's --max-k


def test_a_long_query_is_refused_as_a_query(client):
    long = "word " * (900_000 // 5)  # 900 KB, under the 1 MB body limit
    for body in ({"query": long}, {"query": long, "k": 3, "rerank": True}, {"query": ["short", long]}):
        got = error_of(client, body)
        assert got["field"] == "query", got
        assert got["error"].startswith(
            f"'query' has 900,000 characters; expected at most {MAX_QUERY_CHARS:,}"
        )
        assert "documents" not in got["error"]
    ok = client.post("/search", json={"query": "x" * MAX_QUERY_CHARS})
    assert ok.status_code == 200, ok.text


def test_a_deeply_nested_filter_is_a_400(client):
    f: dict = {"lang": "en"}
    for _ in range(300):
        f = {"$and": [f]}
    got = error_of(client, {"query": "cats", "filters": f})
    assert got["field"] == "filters" and "nested 33 levels deep" in got["error"]


def test_json_types_take_their_article(client):
    assert error_of(client, {"query": "cats", "filters": ["lang"]})["error"].startswith(
        "'filters' is an array;"
    )
    assert error_of(client, {"query": "cats", "stages": {"a": 1}})["error"].startswith(
        "'stages' is an object;"
    )
    assert error_of(client, {"query": "cats", "stages": "bm25"})["error"].startswith("'stages' is a string;")
    # Objects where the gate reads names or flags: a 400 too, not a 500.
    for body in ({"stages": [{"a": 1}]}, {"rerank": [1]}, {"highlight": {"x": 1}}):
        assert error_of(client, {"query": "cats", **body})["status"] == 400
