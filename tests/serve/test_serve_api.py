"""The HTTP API through Starlette's TestClient: search, documents, explain, health, metrics, and
every kind of bad input getting a 4xx with a JSON body that names the problem."""

from __future__ import annotations

import json

import numpy as np
import pytest
from serve_fixtures import bm25_folder_fixture, encoder_fixture, hybrid_folder_fixture  # noqa: F401

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

import ragfind  # noqa: E402
from ragfind.serve import ServeConfig, create_app  # noqa: E402


@pytest.fixture
def served(hybrid_folder, encoder):
    def make(**config):
        r = ragfind.Retriever.load(hybrid_folder, encoder=encoder)
        app = create_app(r, folder=hybrid_folder, config=ServeConfig(**config))
        return TestClient(app), r

    return make


@pytest.fixture
def client(served):
    c, _ = served()
    with c:
        yield c


def test_search_matches_in_process_search(served):
    c, r = served()
    with c:
        body = c.post("/search", json={"query": "cats hunt mice", "k": 4}).json()
        ref = r.search("cats hunt mice", k=4, use_cache=False)
        assert [x["chunk_id"] for x in body["results"]] == [p.id for p in ref]
        for x, p in zip(body["results"], ref):
            assert x["doc_id"] == p.doc_id and x["text"] == p.text
            assert x["score"] == pytest.approx(p.score)
            assert x["ranks"] == dict(p.ranks)
            assert x["scores"] == pytest.approx(dict(p.scores))
            assert x["metadata"] == dict(p.metadata)
        assert body["results"][0]["doc_id"] == "mice"
        assert {"bm25", "dense", "fusion", "total"} <= set(body["timings"])
        assert body["timings_unit"] == "ms"


def test_search_filters_stages_and_phrasings(client):
    body = client.post("/search", json={"query": "domesticated", "k": 5, "filters": {"lang": "fr"}}).json()
    assert {x["doc_id"] for x in body["results"]} == {"chats"}
    body = client.post("/search", json={"query": "programming language", "stages": ["bm25"]}).json()
    assert body["results"] and all(set(x["ranks"]) == {"bm25"} for x in body["results"])
    body = client.post("/search", json={"query": ["rust memory", "python readability"], "k": 2}).json()
    assert {x["doc_id"] for x in body["results"]} == {"rust", "python"}
    again = client.post("/search", json={"query": ["rust memory", "python readability"], "k": 2}).json()
    assert again["cached"] is True


@pytest.mark.parametrize(
    "payload, field, words",
    [
        ({"k": 3}, "query", "required"),
        ({"query": 3}, "query", "number"),
        ({"query": "  "}, "query", "blank"),
        ({"query": []}, "query", "list of strings"),
        ({"query": "cats", "k": "3"}, "k", "k must be a positive int, got str ('3')"),
        ({"query": "cats", "k": 2.5}, "k", "k must be a positive int, got float (2.5)"),
        ({"query": "cats", "k": True}, "k", "k must be a positive int, got bool (True)"),
        ({"query": "cats", "k": 0}, "k", "k must be a positive int, got 0"),
        ({"query": "cats", "k": 1001}, "k", "[1, 1000]"),
        ({"query": "cats", "filters": {"colour": "red"}}, "filters", "unknown field 'colour'"),
        ({"query": "cats", "filters": {"lang": {"$regex": "e"}}}, "filters", "operator"),
        ({"query": "cats", "filters": ["lang"]}, "filters", "'filters' is an array"),
        ({"query": "cats", "stages": ["bm26"]}, "stages", "bm26"),
        ({"query": "cats", "stages": "bm25"}, "stages", "string"),
        ({"query": "cats", "limit": 3}, "limit", "unknown field 'limit'"),
    ],
)
def test_search_bad_input_is_a_400_naming_the_problem(client, payload, field, words):
    resp = client.post("/search", json=payload)
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["status"] == 400 and body.get("field") == field and words in body["error"]


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"{bad json", "invalid JSON"),
        (b"", "empty"),
        (b"[1, 2]", "array"),
        (b'{"query": NaN}', "NaN"),
        (b"\xff\xfe", "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_malformed_bodies(client, raw, words):
    resp = client.post("/search", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 400 and words in resp.json()["error"]


def test_body_limit_is_enforced_while_reading(served):
    c, _ = served(max_body_bytes=200)
    with c:
        big = json.dumps({"query": "cats " * 100}).encode()
        resp = c.post("/search", content=big)
        assert resp.status_code == 413 and "200" in resp.json()["error"]

        # No Content-Length (chunked): refused as soon as the stream passes the limit.
        def gen():
            for _ in range(1000):
                yield b" " * 100

        resp = c.post("/search", content=gen())
        assert resp.status_code == 413
        assert c.post("/search", json={"query": "cats"}).status_code == 200


def test_default_body_limit_is_one_megabyte(client):
    resp = client.post("/documents", content=b'{"documents": [' + b" " * (1 << 20) + b"]}")
    assert resp.status_code == 413 and str(1 << 20) in resp.json()["error"]


def test_api_key(served):
    c, _ = served(api_key="s3cret")
    with c:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic s3cret"}):
            resp = c.post("/search", json={"query": "cats"}, headers=headers)
            assert resp.status_code == 401 and "API key" in resp.json()["error"]
            assert resp.headers["www-authenticate"] == "Bearer"
        assert c.get("/metrics").status_code == 401
        assert c.post("/documents", json={"documents": [{"id": "z", "text": "z"}]}).status_code == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert c.post("/search", json={"query": "cats"}, headers=ok).status_code == 200
        assert c.get("/health").status_code == 200  # load balancers probe without a key
        assert c.get("/").status_code == 200  # the page asks for the key itself


def test_documents_add_get_delete(client):
    doc = {"id": "owls", "title": "Owls", "text": "Owls hunt mice at night.", "metadata": {"lang": "en"}}
    resp = client.post("/documents", json={"documents": [doc]})
    assert resp.status_code == 201 and resp.json() == {"added": 1, "chunks": 1, "ids": ["owls"]}
    assert client.get("/documents/owls").json() == doc
    hits = client.post("/search", json={"query": "owls night", "k": 1}).json()["results"]
    assert hits[0]["doc_id"] == "owls"
    dup = client.post("/documents", json={"documents": [doc]})
    assert dup.status_code == 409 and "owls" in dup.json()["error"]
    assert client.delete("/documents/owls").json() == {"deleted": "owls", "chunks": 1}
    assert client.get("/documents/owls").status_code == 404
    missing = client.delete("/documents/owls")
    assert missing.status_code == 404 and "owls" in missing.json()["error"]
    hits = client.post("/search", json={"query": "owls night", "k": 6}).json()["results"]
    assert "owls" not in {h["doc_id"] for h in hits}


@pytest.mark.parametrize(
    "payload, words",
    [
        ({"documents": []}, "empty"),
        ({"documents": {"id": "a"}}, "object"),
        ({"docs": []}, "unknown field 'docs'"),
        ({"documents": ["text"]}, "documents[0] is a string"),
        ({"documents": [{"id": "a"}]}, "'text' is required"),
        ({"documents": [{"id": True, "text": "t"}]}, "documents[0].id"),
        ({"documents": [{"id": "a", "text": 3}]}, "'text' is a number"),
        ({"documents": [{"id": "a", "text": "t", "url": "u"}]}, "unknown field 'url'"),
        ({"documents": [{"id": "a", "text": "t", "metadata": [1]}]}, "'metadata' is an array"),
        ({"documents": [{"id": "a", "text": "t"}, {"id": "a", "text": "u"}]}, "twice"),
    ],
)
def test_bad_documents_change_nothing(client, payload, words):
    before = client.get("/health").json()["documents"]
    resp = client.post("/documents", json=payload)
    assert resp.status_code == 400 and words in resp.json()["error"], resp.text
    assert client.get("/health").json()["documents"] == before


def test_unknown_routes_and_methods_are_json(client):
    resp = client.get("/nope")
    assert resp.status_code == 404 and "no such endpoint" in resp.json()["error"]
    resp = client.get("/search")
    assert resp.status_code == 405 and "method" in resp.json()["error"]


def test_health_info_and_metrics(client):
    assert client.get("/health").json()["documents"] == 6
    info = client.get("/info").json()
    assert info["stages"] == ["bm25", "dense"] and info["bm25"]["k1"] == pytest.approx(1.2)
    client.post("/search", json={"query": "cats"})
    client.post("/search", json={"query": "cats"})
    client.post("/search", json={"query": "cats", "k": 0})
    text = client.get("/metrics").text
    assert 'ragfind_http_requests_total{route="/search",method="POST",status="200"} 2' in text
    assert 'ragfind_http_requests_total{route="/search",method="POST",status="400"} 1' in text
    assert 'ragfind_search_stage_seconds_count{stage="bm25"} 1' in text
    assert 'ragfind_search_stage_seconds_bucket{stage="total",le="+Inf"} 2' in text
    assert "ragfind_search_cache_hits_total 1" in text and "ragfind_search_cache_misses_total 1" in text
    assert "ragfind_results_cache_hits 1" in text
    assert "ragfind_documents 6" in text
    # Every sample line is NAME{labels} VALUE with a numeric value.
    for line in text.splitlines():
        if line and not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def test_read_only_and_folderless_refuse_writes(hybrid_folder, encoder):
    r = ragfind.Retriever.load(hybrid_folder, encoder=encoder)
    for app in (create_app(r), create_app(r, folder=hybrid_folder, config=ServeConfig(read_only=True))):
        with TestClient(app) as c:
            resp = c.post("/documents", json={"documents": [{"id": "a", "text": "t"}]})
            assert resp.status_code == 405 and "disabled" in resp.json()["error"]
            assert c.post("/search", json={"query": "cats"}).status_code == 200


def test_explain_endpoint(client, encoder):
    res = client.post("/search", json={"query": "cats hunt mice", "k": 3}).json()["results"]
    top = res[1]
    ex = client.post("/explain", json={"query": "cats hunt mice", "chunk_id": top["chunk_id"]}).json()
    assert ex["doc_id"] == top["doc_id"] and ex["retrieved"]
    bm = ex["stages"]["bm25"]
    assert bm["score"] == pytest.approx(top["scores"]["bm25"], rel=1e-6)
    assert sum(t["contribution"] for t in bm["terms"]) == pytest.approx(bm["score"])
    assert bm["rank"] == top["ranks"]["bm25"]
    dense = ex["stages"]["dense"]
    ref = float(np.dot(encoder.encode_query("cats hunt mice"), encoder.encode([f"Cats\n{top['text']}"])[0]))
    assert dense["cosine"] == pytest.approx(ref, abs=1e-5)
    assert dense["cosine"] == pytest.approx(top["scores"]["dense"], abs=1e-6)
    assert ex["fusion"]["score"] == pytest.approx(top["score"])
    assert [t["term"] for t in ex["fusion"]["terms"]] == pytest.approx(
        [1 / (60 + top["ranks"][s]) for s in ("bm25", "dense")]
    )
    other = client.post(
        "/explain", json={"query": "cats hunt mice", "chunk_id": top["chunk_id"], "k1": 2, "b": 0.3}
    )
    assert other.json()["stages"]["bm25"]["rescored"]["k1"] == 2.0


@pytest.mark.parametrize(
    "payload, status, field",
    [
        ({"query": "cats", "chunk_id": 999}, 404, "chunk_id"),
        ({"query": "cats", "chunk_id": "0"}, 400, "chunk_id"),
        ({"query": "cats"}, 400, "chunk_id"),
        ({"query": "cats", "chunk_id": 0, "k1": -1}, 400, "k1"),
        ({"query": "cats", "chunk_id": 0, "b": 1.5}, 400, "b"),
        ({"query": "cats", "chunk_id": 0, "b": "x"}, 400, "b"),
    ],
)
def test_explain_bad_input(client, payload, status, field):
    resp = client.post("/explain", json=payload)
    assert resp.status_code == status and resp.json()["field"] == field, resp.text


def test_static_page_ships_in_the_package_and_loads_nothing_remote(client):
    import re
    from importlib.resources import files

    static = files("ragfind.serve") / "static"
    for name in ("index.html", "app.js", "style.css"):
        text = (static / name).read_text(encoding="utf-8")
        assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), name  # no CDN
        assert not re.search(r"@import|url\(\s*[\"']?https?:", text), name
        resp = client.get(f"/static/{name}")
        assert resp.status_code == 200 and resp.text == text
    page = client.get("/")
    assert page.headers["content-type"].startswith("text/html") and 'id="search-form"' in page.text


def test_search_results_carry_the_highlights_when_asked(client):
    body = {"query": "cats hunting mice", "k": 3, "highlight": True}
    res = client.post("/search", json=body).json()["results"]
    top = res[0]
    assert top["doc_id"] == "mice"
    marked = [top["text"][a:b].lower() for a, b in top["highlights"]]
    assert "cats" in marked and "mice" in marked and "hunt" in marked  # surface forms of the stems


@pytest.mark.parametrize(
    "query",
    [
        "cats hunting mice",
        ["rust memory", "python readability"],  # phrasings: the words of every one are marked
        '"hunt mice" cats',  # a phrase: its span where it matches, not its words elsewhere
        '"mice cats"~3',
        "zebra",  # nothing matches: an empty list, not an absent key
    ],
)
def test_highlights_on_equal_the_in_process_passage_highlights(served, query):
    c, r = served()
    with c:
        on = c.post("/search", json={"query": query, "k": 6, "highlight": True}).json()["results"]
        off = c.post("/search", json={"query": query, "k": 6, "highlight": False}).json()["results"]
        default = c.post("/search", json={"query": query, "k": 6}).json()["results"]
    ref = r.search(query, k=6, use_cache=False)
    assert [x["chunk_id"] for x in on] == [p.id for p in ref] == [x["chunk_id"] for x in off]
    assert [x["highlights"] for x in on] == [[list(h) for h in p.highlights] for p in ref]
    if query != "zebra":
        assert any(x["highlights"] for x in on)
    # Off (the default): the key is absent, everything else is the same answer.
    for a, b, d in zip(on, off, default):
        assert "highlights" not in b and "highlights" not in d
        assert {k: v for k, v in a.items() if k != "highlights"} == b == d


def test_highlights_of_a_cached_answer_are_the_same(client):
    body = {"query": "python programming", "k": 3}
    first = client.post("/search", json={**body, "highlight": True}).json()
    again = client.post("/search", json={**body, "highlight": True}).json()
    plain = client.post("/search", json=body).json()
    assert again["cached"] and plain["cached"]
    assert again["results"] == first["results"]
    assert all("highlights" not in x for x in plain["results"])


@pytest.mark.parametrize("value, words", [(1, "number"), ("yes", "string"), ({"fields": ["text"]}, "object")])
def test_highlight_must_be_a_boolean(client, value, words):
    resp = client.post("/search", json={"query": "cats", "highlight": value})
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["field"] == "highlight" and words in body["error"] and "boolean" in body["error"]


def test_histogram_buckets_match_a_linear_scan():
    from ragfind.serve.metrics import BUCKETS, _Histogram

    def reference(values: list) -> list:
        counts = [0] * len(BUCKETS)
        for v in values:
            for i, ub in enumerate(BUCKETS):
                if v <= ub:
                    counts[i] += 1
                    break
        return counts

    values = [*BUCKETS, *(b * 0.999 for b in BUCKETS), *(b * 1.001 for b in BUCKETS)]
    values += [0.0, -1.0, 1e-9, 7.5, 1e9, float("inf"), float("nan")]
    h = _Histogram()
    for v in values:
        h.observe(v)
    assert h.counts == reference(values) and h.n == len(values)


def test_a_plain_query_answers_as_the_full_checks_do(client):
    # {"query", "k"?} is taken by a short path; the same search with an optional field given
    # its default goes through every check: the answers are the same.
    for body in ({"query": "cats"}, {"query": "cats hunt mice", "k": 3}):
        short = client.post("/search", json=body).json()
        full = client.post("/search", json={**body, "rerank": True, "highlight": False}).json()
        assert [r["chunk_id"] for r in short["results"]] == [r["chunk_id"] for r in full["results"]]
        assert [r["score"] for r in short["results"]] == [r["score"] for r in full["results"]]
    # Bodies the short path leaves to the checks get their errors.
    for body, field in (
        ({"query": " \t"}, "query"),
        ({"query": ""}, "query"),
        ({"query": 5}, "query"),
        ({"query": "cats", "k": True}, "k"),
        ({"query": "cats", "k": 0}, "k"),
        ({"query": "cats", "k": 10**9}, "k"),
        ({"query": "cats", "kk": 3}, "kk"),
        ({"k": 3}, "query"),
    ):
        resp = client.post("/search", json=body)
        assert resp.status_code == 400 and resp.json().get("field") == field, (body, resp.json())
