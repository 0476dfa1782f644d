"""ragfind.Retriever: indexing, hybrid search, filters, cache, RAG-Fusion, save/load, bad input.

Most tests use a tiny deterministic hashing encoder so they run in milliseconds; one test runs the
real MiniLM encoder end to end.
"""

from __future__ import annotations

import hashlib
import json
import threading

import numpy as np
import pytest

import ragfind
from hash_encoders import HashEncoder
from ragfind.pipeline.retriever import RetrieverFolderError

DOCS = [
    {
        "id": "cats",
        "title": "Cats",
        "text": "Cats are small domesticated felines. They purr and hunt mice.",
        "metadata": {"lang": "en", "year": 2020, "source": "https://pets.example/cats"},
    },
    {
        "id": "dogs",
        "title": "Dogs",
        "text": "Dogs are loyal domesticated canines. They bark and fetch sticks.",
        "metadata": {"lang": "en", "year": 2021},
    },
    {
        "id": "chats",
        "title": "Chats",
        "text": "Les chats sont des felins domestiques. Ils ronronnent.",
        "metadata": {"lang": "fr", "year": 2019},
    },
    {
        "id": "rust",
        "title": "Rust",
        "text": "Rust is a systems programming language focused on memory safety.",
        "metadata": {"lang": "en", "year": 2015, "tags": "code"},
    },
    {
        "id": "python",
        "title": "Python",
        "text": "Python is a programming language loved for readability.",
        "metadata": {"lang": "en", "year": 1991, "tags": "code"},
    },
]


def make(**kw):
    kw.setdefault("encoder", HashEncoder())
    r = ragfind.Retriever(**kw)
    r.add_documents(DOCS)
    return r


def test_add_and_hybrid_search():
    r = make()
    assert len(r) == 5 and r.n_chunks == 5
    res = r.search("which pets purr", k=3)
    assert isinstance(res, ragfind.SearchResult) and len(res) == 3
    top = res[0]
    assert top.doc_id == "cats" and top.title == "Cats" and top.source == "https://pets.example/cats"
    assert top.text == DOCS[0]["text"][top.start : top.end]
    assert top.context == "Cats" and top.metadata["year"] == 2020
    assert res[1].source == res[1].doc_id or res[1].metadata.get("source")
    for stage in ("embed", "bm25", "dense", "first_stage", "fusion", "store", "total"):
        assert res.timings[stage] >= 0
    assert not res.cached and res.doc_ids[0] == "cats"
    scores = [p.score for p in res]
    assert scores == sorted(scores, reverse=True)


def test_fusion_matches_manual_rrf_of_both_stages():
    enc = HashEncoder()
    r = make(encoder=enc, candidates=10)
    q = "domesticated programming language"
    sparse = r.bm25.search(q, 5)
    dense = r.dense.search(enc.encode_query(q), 5)
    ids, scores = ragfind.rrf([sparse[0], dense[0]], k=60, top_k=4)
    res = r.search(q, k=4)
    assert [p.id for p in res] == ids.tolist()
    np.testing.assert_allclose([p.score for p in res], scores)


def test_rag_fusion_of_several_phrasings():
    r = make()
    one = r.search("purring pets", k=5)
    many = r.search(["purring pets", "felines that hunt mice", "cats"], k=5)
    assert many.queries == ("purring pets", "felines that hunt mice", "cats")
    assert many[0].doc_id == "cats"
    assert [p.id for p in one] != [] and len(many) == 5
    # Each phrasing contributes one sparse and one dense list: the top score is their RRF sum.
    assert many[0].score > one[0].score


def test_chunking_and_contexts_are_indexed_apart_from_text():
    long_doc = {
        "id": "guide",
        "title": "Guide",
        "text": "# Setup\n\n"
        + " ".join(f"Step {i} installs package{i}." for i in range(60))
        + "\n\n# Usage\n\n"
        + " ".join(f"Call function{i} to run." for i in range(60)),
    }
    r = ragfind.Retriever(encoder=HashEncoder(), chunk_size=64)
    n = r.add_documents([long_doc])
    assert n == r.n_chunks > 4
    res = r.search("function42", k=1)
    assert "function42" in res[0].text and res[0].context == "Guide > Usage"
    assert not res[0].text.startswith("Guide")
    # The heading path is indexed: BM25 finds every Usage chunk (and only those) for "usage".
    ids, _ = r.bm25.search("usage", 50)
    usage = {int(i) for i in ids}
    rows = r.store.fetch(np.asarray(sorted(usage)))
    assert all("Usage" in rows[i][7] or "Usage" in rows[i][2] for i in usage)
    with r.store.lock:
        in_usage = {c for (c,) in r.store.db.execute("SELECT id FROM chunks WHERE context = 'Guide > Usage'")}
    assert in_usage and in_usage <= usage  # found through their context alone
    whole = ragfind.Retriever(encoder=HashEncoder(), chunk_size=None)
    assert whole.add_documents([long_doc]) == 1


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({"lang": "fr"}, {"chats"}),
        ({"lang": ["fr", "en"], "year": {"$gte": 2020}}, {"cats", "dogs"}),
        ({"year": {"$lt": 2000}}, {"python"}),
        ({"tags": "code"}, {"rust", "python"}),
        ({"tags": None}, {"cats", "dogs", "chats"}),
        ({"lang": {"$ne": "en"}}, {"chats"}),
        ({"doc_id": {"$in": ["dogs", "rust"]}}, {"dogs", "rust"}),
        ({"title": "Cats"}, {"cats"}),
        ({"lang": {"$in": []}}, set()),
        ({"year": {"$nin": [2020, 2021]}, "lang": "en"}, {"rust", "python"}),
    ],
)
def test_filters(filters, expected):
    r = make()
    res = r.search("domesticated felines programming language cats dogs", k=10, filters=filters)
    assert set(res.doc_ids) == expected


def test_filter_errors():
    r = make()
    with pytest.raises(ValueError, match="unknown field 'colour'; known fields: .*'lang'"):
        r.search("cats", filters={"colour": "red"})
    with pytest.raises(ValueError, match="unknown operator '\\$regex'"):
        r.search("cats", filters={"lang": {"$regex": "e"}})
    with pytest.raises(TypeError, match="expected a dict"):
        r.search("cats", filters=["lang"])
    with pytest.raises(TypeError, match="expected str, number, bool or None"):
        r.search("cats", filters={"lang": {"$eq": {"a": 1}}})
    with pytest.raises(ValueError, match="expected a list"):
        r.search("cats", filters={"lang": {"$in": "en"}})


def test_filters_on_field_names_with_quotes_and_dots():
    # SQLite's JSON path cannot escape '"' inside a quoted label; such keys are looked up by name.
    docs = [
        {
            "id": "a",
            "text": "shared words here",
            "metadata": {'say "hi"': 1, "x.y": "p", "c\\d": 5, "it's": 1},
        },
        {
            "id": "b",
            "text": "shared words there",
            "metadata": {'say "hi"': 2, "x.y": "q", "c\\d": 6, "it's": 2},
        },
    ]
    r = ragfind.Retriever(encoder=None)
    r.add_documents(docs)
    assert r.search("shared words", k=5, filters={'say "hi"': 2}).doc_ids == ["b"]
    assert len(r.search("shared words", k=5, filters={'say "hi"': {"$gte": 1}}).doc_ids) == 2
    assert r.search("shared words", k=5, filters={"x.y": "p"}).doc_ids == ["a"]
    assert r.search("shared words", k=5, filters={"c\\d": {"$in": [6]}}).doc_ids == ["b"]
    assert r.search("shared words", k=5, filters={"it's": {"$lt": 2}}).doc_ids == ["a"]  # a quoted literal


def test_bm25_post_filter_fetches_deep_enough():
    docs = [
        {"id": f"d{i}", "text": f"common word number {i}", "metadata": {"keep": i % 50 == 0}}
        for i in range(400)
    ]
    r = ragfind.Retriever(encoder=None, candidates=5)
    r.add_documents(docs)
    res = r.search("common word", k=5, filters={"keep": True})
    assert len(res) == 5 and all(p.metadata["keep"] for p in res)


def test_cache_hits_and_invalidation():
    enc = HashEncoder()
    r = make(encoder=enc)
    first = r.search("cats purr", k=3)
    calls = enc.calls
    again = r.search("cats purr", k=3)
    assert again.cached and [p.id for p in again] == [p.id for p in first]
    assert set(again.timings) == {"cache", "total"} and enc.calls == calls
    assert r.cache_stats()["results"]["hits"] == 1
    r.search("cats purr", k=4)  # another k: a result miss, but the embedding is cached
    assert enc.calls == calls and r.cache_stats()["embeddings"]["hits"] >= 1
    r.add_documents([{"id": "lion", "title": "Lion", "text": "Lions are big cats that purr loudly."}])
    after = r.search("cats purr", k=3)
    assert not after.cached and "lion" in after.doc_ids  # the store changed: results recomputed
    r.delete_documents(["lion"])
    assert "lion" not in r.search("cats purr", k=3).doc_ids
    assert not r.search("cats purr", k=3, use_cache=False).cached


def test_set_cache_size_is_a_setting_of_the_process(tmp_path):
    r = make(cache_size=8)
    r.search("cats purr", k=3)
    r.set_cache_size(0)  # disables both caches, dropping what they held
    assert not r.search("cats purr", k=3).cached and not r.search("cats purr", k=3).cached
    assert r.cache_stats()["results"]["entries"] == 0
    r.set_cache_size(2)
    r.search("cats purr", k=3)
    assert r.search("cats purr", k=3).cached
    r.save(tmp_path / "r")
    loaded = ragfind.Retriever.load(tmp_path / "r", encoder=HashEncoder())
    assert loaded.cache_stats()["results"]["max_entries"] == 8
    with pytest.raises(ValueError, match="max_entries = -1"):
        r.set_cache_size(-1)


def test_delete_documents():
    r = make()
    assert r.delete_documents(["cats"]) == 1
    assert len(r) == 4 and r.n_chunks == 4
    assert "cats" not in r.search("cats purr mice", k=5).doc_ids
    with pytest.raises(KeyError, match="'nope' is not in the store"):
        r.delete_documents(["nope"])
    with pytest.raises(KeyError):
        r.get_document("cats")
    assert r.get_document("dogs")["metadata"]["year"] == 2021


def test_empty_store_and_bad_queries():
    r = ragfind.Retriever(encoder=HashEncoder())
    res = r.search("anything", k=5)
    assert len(res) == 0 and res.passages == ()
    assert r.add_documents([]) == 0
    with pytest.raises(ValueError, match="blank"):
        r.search("   ")
    with pytest.raises(ValueError, match="empty list"):
        r.search([])
    with pytest.raises(TypeError, match="query is a int"):
        r.search(3)
    with pytest.raises(TypeError, match=r"query\[1\] is a NoneType"):
        r.search(["a", None])
    with pytest.raises(ValueError, match=r"^k must be a positive int, got 0$"):
        r.search("a", k=0)


def test_duplicate_document_ids_change_nothing():
    r = make()
    before = (len(r), r.n_chunks, len(r.bm25), len(r.dense))
    with pytest.raises(ValueError, match="'cats' is already in the store"):
        r.add_documents([{"id": "new", "text": "fresh text"}, {"id": "cats", "text": "again"}])
    with pytest.raises(ValueError, match="repeats id 'x'"):
        r.add_documents([{"id": "x", "text": "a"}, {"id": "x", "text": "b"}])
    with pytest.raises(TypeError, match="metadata'\\] is a list"):
        r.add_documents([{"id": "y", "text": "a", "metadata": [1]}])
    with pytest.raises(TypeError, match="expected a JSON value"):
        r.add_documents([{"id": "y", "text": "a", "metadata": {"f": object()}}])
    assert (len(r), r.n_chunks, len(r.bm25), len(r.dense)) == before
    assert r.search("fresh text", k=5).doc_ids != ["new"]


def test_failed_index_write_rolls_back():
    class Exploding(HashEncoder):
        pass

    r = make(encoder=Exploding())
    before = (len(r), r.n_chunks, len(r.bm25), len(r.dense))
    with pytest.raises(ValueError, match="embeddings have shape"):
        r.add_documents([{"id": "z", "text": "zzz"}], embeddings=np.zeros((2, 64), np.float32))
    bad = np.full((1, 64), np.nan, np.float32)
    with pytest.raises(ValueError, match="NaN"):
        r.add_documents([{"id": "z", "text": "zzz"}], embeddings=bad)
    assert (len(r), r.n_chunks, len(r.bm25), len(r.dense)) == before


def test_precomputed_embeddings():
    enc = HashEncoder()
    r = ragfind.Retriever(encoder=enc, chunk_size=None, contextualize=False)
    vecs = enc.encode([d["text"] for d in DOCS])
    calls = enc.calls
    r.add_documents(DOCS, embeddings=vecs)
    assert enc.calls == calls
    assert r.search("memory safety", k=1)[0].doc_id == "rust"


def test_lexical_only_and_dense_only():
    lex = make(encoder=None)
    res = lex.search("purr", k=2)
    assert res[0].doc_id == "cats" and "dense" not in res.timings
    dense = make(bm25=None)
    res = dense.search("cats purr", k=2)
    assert "bm25" not in res.timings and len(res) == 2
    with pytest.raises(ValueError, match="at least one of bm25 and encoder"):
        ragfind.Retriever(encoder=None, bm25=None)


def test_reranker_reorders_the_head():
    class ReverseAlphabetical:
        """A 'cross-encoder' that ranks passages by doc text, descending: easy to predict."""

        def rank(self, query, texts, top_k=None):
            order = sorted(range(len(texts)), key=lambda i: texts[i], reverse=True)
            return [{"corpus_id": i, "score": float(len(texts) - r)} for r, i in enumerate(order)]

    r = make(reranker=ReverseAlphabetical(), rerank_candidates=5)
    res = r.search("domesticated programming language", k=3)
    assert "rerank" in res.timings
    texts = [r._indexed_text(p) for p in res]
    assert texts == sorted(texts, reverse=True)
    deep = r.search("domesticated programming language", k=5)  # k beyond rerank_candidates=5? equal
    assert len(deep) == 5
    r.rerank_candidates = 2
    more = r.search("cats dogs rust python chats", k=4, use_cache=False)
    assert len(more) == 4 and [p.score for p in more] == [4.0, 3.0, 2.0, 1.0]  # all re-scored
    plain = r.search("domesticated programming language", k=3, rerank=False)
    assert "rerank" not in plain.timings


def test_custom_stage_joins_the_fusion():
    class KeywordStage:
        name = "keyword"

        def __init__(self):
            self.texts = {}

        def add(self, ids, texts):
            self.texts.update(zip(ids.tolist(), texts))

        def delete(self, ids):
            for i in ids.tolist():
                self.texts.pop(i, None)

        def search(self, query, k, allowed):
            hits = [i for i, t in self.texts.items() if "safety" in t and (allowed is None or i in allowed)]
            return np.asarray(hits[:k], np.int64), np.ones(min(k, len(hits)), np.float32)

    stage = KeywordStage()
    r = make(stages=[stage], weights={"keyword": 5.0})
    res = r.search("cats", k=2)
    assert "keyword" in res.timings and res[0].doc_id == "rust"  # weight 5 beats a double match
    with pytest.raises(ValueError, match="weights name unknown stages"):
        ragfind.Retriever(encoder=HashEncoder(), weights={"nope": 1.0})
    with pytest.raises(TypeError, match="neither RetrievalStage nor RerankStage"):
        ragfind.Retriever(encoder=HashEncoder(), stages=[object()])


def test_concurrent_searches_agree():
    r = make(cache_size=0)
    queries = ["cats purr", "programming language", "loyal dogs", "felins domestiques"]
    expected = {q: [p.id for p in r.search(q, k=3)] for q in queries}
    errors = []

    def work():
        for _ in range(20):
            for q in queries:
                if [p.id for p in r.search(q, k=3)] != expected[q]:
                    errors.append(q)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r.close()
    assert errors == []


# --- persistence --------------------------------------------------------------------------------


def test_save_load_round_trip_identical(tmp_path):
    enc = HashEncoder()
    r = make(encoder=enc)
    queries = ["cats purr", "programming language safety", "chats"]
    before = [r.search(q, k=5, filters=f) for q in queries for f in (None, {"lang": "en"})]
    r.save(tmp_path / "kb")
    assert (tmp_path / "kb" / "manifest.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left
    loaded = ragfind.Retriever.load(tmp_path / "kb", encoder=enc)
    after = [loaded.search(q, k=5, filters=f) for q in queries for f in (None, {"lang": "en"})]
    for a, b in zip(before, after):
        assert [(p.id, p.doc_id, p.text, p.score, p.start, p.end, p.metadata) for p in a] == [
            (p.id, p.doc_id, p.text, p.score, p.start, p.end, p.metadata) for p in b
        ]
    assert loaded.fields == r.fields and len(loaded) == len(r)
    # Still writable, with fresh chunk ids; saving over the folder replaces it atomically.
    loaded.add_documents([{"id": "new", "text": "Brand new document about otters."}])
    loaded.save(tmp_path / "kb")
    again = ragfind.Retriever.load(tmp_path / "kb", encoder=enc)
    assert len(again) == 6 and again.search("otters", k=1)[0].doc_id == "new"
    ids = [p.id for p in again.search("document cats dogs otters rust python chats", k=10)]
    assert len(ids) == len(set(ids))


def test_load_refuses_another_embedding_model(tmp_path):
    r = make(encoder=HashEncoder(salt="a"))
    r.save(tmp_path / "kb")
    with pytest.raises(ragfind.ModelMismatchError, match="hash-64-a"):
        ragfind.Retriever.load(tmp_path / "kb", encoder=HashEncoder(salt="b"))
    with pytest.raises(ValueError, match="pass encoder="):
        ragfind.Retriever.load(tmp_path / "kb")  # an encoder object without a path was saved


def test_load_missing_or_corrupted_folder(tmp_path):
    with pytest.raises(RetrieverFolderError, match="not a folder"):
        ragfind.Retriever.load(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RetrieverFolderError, match="no manifest.json"):
        ragfind.Retriever.load(tmp_path / "empty")
    enc = HashEncoder()
    r = make(encoder=enc)
    r.save(tmp_path / "kb")
    kb = tmp_path / "kb"
    # A flipped byte in the store.
    store = kb / "store.sqlite"
    data = bytearray(store.read_bytes())
    data[len(data) // 2] ^= 0xFF
    store.write_bytes(bytes(data))
    with pytest.raises(RetrieverFolderError, match="store.sqlite.*checksum"):
        ragfind.Retriever.load(kb, encoder=enc)
    r.save(kb)
    # A truncated index.
    idx = kb / "dense.idx"
    idx.write_bytes(idx.read_bytes()[:100])
    with pytest.raises(RetrieverFolderError, match="truncated"):
        ragfind.Retriever.load(kb, encoder=enc)
    r.save(kb)
    (kb / "bm25.idx").unlink()
    with pytest.raises(RetrieverFolderError, match="missing bm25.idx"):
        ragfind.Retriever.load(kb, encoder=enc)
    r.save(kb)
    manifest = json.loads((kb / "manifest.json").read_text())
    (kb / "manifest.json").write_text(json.dumps(dict(manifest, version=99)))
    with pytest.raises(RetrieverFolderError, match="version 99"):
        ragfind.Retriever.load(kb, encoder=enc)
    (kb / "manifest.json").write_text("{not json")
    with pytest.raises(RetrieverFolderError, match="not a valid manifest"):
        ragfind.Retriever.load(kb, encoder=enc)
    # Without checksum verification, a corrupt index is still caught by its own loader.
    r.save(kb)
    idx = kb / "bm25.idx"
    data = bytearray(idx.read_bytes())
    data[-20] ^= 0xFF
    idx.write_bytes(bytes(data))
    with pytest.raises(RetrieverFolderError):
        ragfind.Retriever.load(kb, encoder=enc, verify=False)


def _rehash(kb):
    """Rewrites the manifest's sizes and SHA-256s, as a tampering tool (or a fuzzer) would."""
    manifest = json.loads((kb / "manifest.json").read_text())
    for name, info in manifest["files"].items():
        if (kb / name).is_file():
            data = (kb / name).read_bytes()
            info["size"], info["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    (kb / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _edit_manifest(kb, **changes):
    manifest = json.loads((kb / "manifest.json").read_text())
    manifest.update(changes)
    (kb / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_load_corrupt_or_foreign_store(tmp_path):
    import sqlite3

    enc = HashEncoder()
    r = make(encoder=enc)
    kb = tmp_path / "kb"
    # Garbage in place of the SQLite file (checksums recomputed, so only the store's own checks see it).
    r.save(kb)
    (kb / "store.sqlite").write_bytes(b"not a database at all" * 100)
    _rehash(kb)
    with pytest.raises(RetrieverFolderError, match="document store .*not a valid SQLite"):
        ragfind.Retriever.load(kb, encoder=enc)
    # A page of the store overwritten: integrity_check finds it at load, not a later search.
    r.save(kb)
    data = bytearray((kb / "store.sqlite").read_bytes())
    data[4096 + 8 : 4096 + 64] = b"\xff" * 56
    (kb / "store.sqlite").write_bytes(bytes(data))
    _rehash(kb)
    with pytest.raises(RetrieverFolderError, match="document store"):
        ragfind.Retriever.load(kb, encoder=enc)
    # A valid SQLite file of another application.
    r.save(kb)
    (kb / "store.sqlite").unlink()
    db = sqlite3.connect(kb / "store.sqlite")
    db.execute("CREATE TABLE documents (x)")
    db.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY, y)")
    db.commit()
    db.close()
    _rehash(kb)
    with pytest.raises(RetrieverFolderError, match="another schema"):
        ragfind.Retriever.load(kb, encoder=enc)
    # The right schema plus a trigger that would run on every add_documents.
    r.save(kb)
    db = sqlite3.connect(kb / "store.sqlite")
    db.execute("CREATE TRIGGER t AFTER INSERT ON documents BEGIN DELETE FROM chunks; END")
    db.commit()
    db.close()
    _rehash(kb)
    with pytest.raises(RetrieverFolderError, match="another schema"):
        ragfind.Retriever.load(kb, encoder=enc)
    # Rows of the wrong type, metadata that is not a JSON object, chunk ids past next_chunk_id.
    for sql in (
        "UPDATE documents SET metadata = '[1, 2]' WHERE doc_id = 'cats'",
        "UPDATE documents SET metadata = '{bad' WHERE doc_id = 'cats'",
        "UPDATE chunks SET text = x'00ff' WHERE id = 0",
        "UPDATE chunks SET doc_id = 'nobody' WHERE id = 0",
    ):
        r.save(kb)
        db = sqlite3.connect(kb / "store.sqlite")
        db.execute(sql)
        db.commit()
        db.close()
        _rehash(kb)
        with pytest.raises(RetrieverFolderError, match="document store"):
            ragfind.Retriever.load(kb, encoder=enc)
    r.save(kb)
    _edit_manifest(kb, next_chunk_id=2)  # would make add_documents reuse chunk ids
    with pytest.raises(RetrieverFolderError, match="next_chunk_id"):
        ragfind.Retriever.load(kb, encoder=enc)
    # A store whose chunk ids are not the indexes' (same count): the gap left by a deleted
    # document is filled by moving another chunk there.
    gone = r.get_document("dogs")
    r.delete_documents(["dogs"])
    r.save(kb)
    r.add_documents([gone])
    db = sqlite3.connect(kb / "store.sqlite")
    db.execute("UPDATE chunks SET id = 1 WHERE id = 0")
    db.commit()
    db.close()
    _rehash(kb)
    with pytest.raises(RetrieverFolderError, match="bm25 index holds other chunk ids"):
        ragfind.Retriever.load(kb, encoder=enc)


def test_load_manifest_naming_missing_or_odd_files(tmp_path):
    enc = HashEncoder()
    r = make(encoder=enc)
    kb = tmp_path / "kb"
    r.save(kb)
    manifest = json.loads((kb / "manifest.json").read_text())
    files = manifest["files"]
    cases = [
        ({"files": dict(files, **{"extra.idx": {"size": 1, "sha256": "0"}})}, "extra.idx"),
        ({"files": dict(files, **{"stage-x/../../escape": {"size": 1, "sha256": "0"}})}, "escape"),
        ({"files": {k: v for k, v in files.items() if k != "store.sqlite"}}, "store.sqlite"),
        ({"files": {"store.sqlite": files["store.sqlite"]}}, "neither bm25.idx nor dense.idx"),
        ({"files": {k: v for k, v in files.items() if k != "dense.idx"}}, "dense.idx must be present"),
        ({"files": list(files)}, "'files' must be an object"),
        ({"files": dict(files, **{"bm25.idx": {"size": "12"}})}, "size"),
        ({"encoder": {"ref": None, "dim": 64}}, "'encoder' must be"),
        ({"encoder": "hash"}, "'encoder' must be"),
        ({"next_chunk_id": 1e300}, "next_chunk_id"),
        ({"fields": "lang"}, "'fields' must be a list"),
        ({"config": dict(manifest["config"], candidates=float("inf"))}, "candidates"),
        ({"config": dict(manifest["config"], rrf_k=-1)}, "rrf_k"),
        ({"config": dict(manifest["config"], chunk_size="big")}, "chunk_size"),
        ({"config": dict(manifest["config"], chunk_overlap=0.9)}, "overlap"),
        ({"config": dict(manifest["config"], weights={"nope": 1})}, "weights"),
        ({"config": {"chunk_size": 10}}, "lacks"),
    ]
    for changes, match in cases:
        r.save(kb)
        _edit_manifest(kb, **changes)
        with pytest.raises(RetrieverFolderError, match=match):
            ragfind.Retriever.load(kb, encoder=enc)
    # Present in the manifest, gone from the folder.
    for name in ("store.sqlite", "dense.idx"):
        r.save(kb)
        (kb / name).unlink()
        with pytest.raises(RetrieverFolderError, match=f"missing {name}"):
            ragfind.Retriever.load(kb, encoder=enc)
    r.save(kb)
    (kb / "manifest.json").write_text("[" * 100_000)  # deeper than json's recursion limit
    with pytest.raises(RetrieverFolderError, match="not a valid manifest"):
        ragfind.Retriever.load(kb, encoder=enc)


def test_load_folder_with_uri_characters_in_its_name(tmp_path):
    enc = HashEncoder()
    r = make(encoder=enc)
    kb = tmp_path / "kb?mode=rwc#1 %20"
    r.save(kb)
    loaded = ragfind.Retriever.load(kb, encoder=enc)
    assert len(loaded) == len(r) and loaded.search("cats purr", k=1)[0].doc_id == "cats"


def test_save_refuses_to_replace_a_foreign_folder(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "precious.txt").write_text("keep me")
    r = make()
    with pytest.raises(FileExistsError, match="not a saved retriever"):
        r.save(tmp_path / "mine")
    assert (tmp_path / "mine" / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_assemble_context_from_search_results():
    r = make()
    res = r.search("cats purr", k=3)
    ctx = ragfind.assemble_context(res, budget_tokens=400, question="Do cats purr?")
    assert ctx.passages[0].doc_id == "cats" and "Source: https://pets.example/cats" in ctx.prompt


def test_real_minilm_end_to_end(minilm, tmp_path):
    r = ragfind.Retriever(encoder=minilm)
    r.add_documents(DOCS)
    res = r.search("Which animal purrs?", k=2)
    assert res[0].doc_id in ("cats", "chats")
    r.save(tmp_path / "kb")
    loaded = ragfind.Retriever.load(tmp_path / "kb", encoder=minilm)
    again = loaded.search("Which animal purrs?", k=2)
    assert [(p.id, p.score) for p in again] == [(p.id, p.score) for p in res]


def test_ivf_dense_kind_hybrid_search_save_load_and_growth(tmp_path):
    enc = HashEncoder()
    r = make(encoder=enc, dense_kind="ivf")
    exact = make(encoder=enc)
    assert r.dense.kind == "ivf" and r.dense.nlist == 1  # a tiny store: one list, an exact scan
    queries = ["which pets purr", "programming language safety", "chats"]
    for q in queries:
        a, b = r.search(q, k=5), exact.search(q, k=5)
        assert [(p.id, p.score) for p in a] == [(p.id, p.score) for p in b]
    assert r.search("which pets purr", k=3)[0].doc_id == "cats"
    r.save(tmp_path / "kb")
    back = ragfind.Retriever.load(tmp_path / "kb", encoder=enc)
    assert back.dense.kind == "ivf"
    for q in queries:
        assert [(p.id, p.score) for p in back.search(q, k=5)] == [(p.id, p.score) for p in r.search(q, k=5)]
    # Growing past the training size retrains the lists; results still match the exact store.
    more = [{"id": f"d{i}", "text": f"note {i} about topic {i % 13} and item {i % 7}"} for i in range(400)]
    for i in range(0, 400, 20):
        back.add_documents(more[i : i + 20])
        exact.add_documents(more[i : i + 20])
    assert back.dense.nlist > 1
    back.dense.nprobe = 10**6  # every list: equal to the exact index (up to the order of ties)
    for q in queries + ["topic 3 item 5"]:
        va, vb = back.dense.search(enc.encode_query(q), 20), exact.dense.search(enc.encode_query(q), 20)
        np.testing.assert_array_equal(va[1], vb[1])
        last = va[1][-1]  # rows tied with the 20th may differ; all better ones may not
        assert set(va[0][va[1] > last].tolist()) == set(vb[0][vb[1] > last].tolist())
    assert back.search("which pets purr", k=3)[0].doc_id == "cats"
    back.save(tmp_path / "kb")
    again = ragfind.Retriever.load(tmp_path / "kb", encoder=enc)
    assert (again.dense.kind, again.dense.nlist, again.dense.nprobe) == ("ivf", back.dense.nlist, 10**6)


def test_dense_options_reach_the_index_and_are_checked():
    r = make(dense_kind="ivf", dense_options={"nprobe": 3, "dtype": "f16"})
    assert (r.dense.nprobe, r.dense.dtype) == (3, "f16")
    h = make(dense_kind="hnsw", dense_options={"ef": 99})
    assert h.dense.ef == 99
    with pytest.raises(ValueError, match="dense_kind"):
        ragfind.Retriever(encoder=HashEncoder(), dense_kind="flat")
    with pytest.raises(ValueError, match="may not set 'metric'"):
        ragfind.Retriever(encoder=HashEncoder(), dense_options={"metric": "l2"})
    with pytest.raises(TypeError, match="dense_options"):
        ragfind.Retriever(encoder=HashEncoder(), dense_options=[("ef", 3)])
