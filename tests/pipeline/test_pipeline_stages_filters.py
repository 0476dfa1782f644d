"""The Retriever as an orchestrator of stages: filters inside every stage against brute force,
per-stage ranks and scores on passages, collapse by document, stage selection, timings, the
"sparse" -> "bm25" rename and version-1 folders, unknown document keys."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from test_pipeline_retriever import DOCS, HashEncoder, make
from test_pipeline_stages import FakeSplade

import ragfind
from ragfind.pipeline.retriever import RetrieverFolderError
from ragfind.pipeline.stages import BM25Stage, DenseStage

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()


def corpus(n=240, seed=0):
    rng = random.Random(seed)
    return [
        {
            "id": f"d{i}",
            "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))),
            "metadata": {"tenant": i % 7, "even": i % 2 == 0},
        }
        for i in range(n)
    ]


class KeywordStage:
    """A custom first stage: chunks containing the query's first word, score = its count."""

    name = "keyword"

    def __init__(self):
        self.texts = {}

    def add(self, ids, texts):
        self.texts.update(zip(ids.tolist(), texts))

    def delete(self, ids):
        for i in ids.tolist():
            self.texts.pop(i, None)

    def search(self, query, k, allowed):
        w = query.split()[0]
        hits = sorted(
            ((t.split().count(w), i) for i, t in self.texts.items() if w in t.split()),
            key=lambda x: (-x[0], x[1]),
        )
        hits = [(c, i) for c, i in hits if allowed is None or i in allowed][:k]
        return np.asarray([i for _, i in hits], np.int64), np.asarray([c for c, _ in hits], np.float32)


@pytest.fixture(scope="module")
def big():
    enc = HashEncoder(dim=32)
    r = ragfind.Retriever(
        encoder=enc,
        chunk_size=None,
        contextualize=False,
        stages=[ragfind.SpladeStage(FakeSplade()), KeywordStage()],
        candidates=40,
        cache_size=0,
    )
    docs = corpus()
    r.add_documents(docs)
    r.delete_documents(["d3", "d10"])  # deleted chunks must never come back, filtered or not
    return r, enc, [d for d in docs if d["id"] not in ("d3", "d10")]


def allowed_chunks(r, docs, pred):
    keep = {d["id"] for d in docs if pred(d["metadata"])}
    return {c for c, row in r.store.fetch(r.store.chunk_ids()).items() if row[1] in keep}


def brute_dense(r, enc, q):
    """Exact cosine ranking by numpy over every stored chunk (ties by chunk id)."""
    ids = r.store.chunk_ids()
    rows = r.store.fetch(ids)
    vecs = enc.encode([rows[int(i)][2] for i in ids])
    s = vecs @ enc.encode_query(q)
    order = np.lexsort((ids, -s))
    return ids[order], s[order]


FILTERS = [
    ({"tenant": 3}, lambda m: m["tenant"] == 3),
    ({"tenant": {"$in": [1, 5]}, "even": True}, lambda m: m["tenant"] in (1, 5) and m["even"]),
    ({"tenant": {"$gte": 6}}, lambda m: m["tenant"] >= 6),
    ({"tenant": 99}, lambda m: False),
]


@pytest.mark.parametrize("filters, pred", FILTERS)
@pytest.mark.parametrize("q", ["alpha beta", "theta iota kappa", "omicron"])
@pytest.mark.parametrize("k", [1, 5, 1000])
def test_every_stage_filters_inside_its_index(big, filters, pred, q, k):
    r, enc, docs = big
    allowed = allowed_chunks(r, docs, pred)
    flt = r.stage_runner.compile_filters(filters)
    assert set(flt.ids.tolist()) == allowed
    n = r.n_chunks
    for stage in r.first_stages:
        full_ids, full_scores = stage.search(q, n, None)
        keep = [j for j, i in enumerate(full_ids.tolist()) if i in allowed]
        ids, scores = stage.search(q, k, flt)
        # Exactly min(k, matching allowed), the unfiltered ranking restricted to the allowed.
        assert len(ids) == min(k, len(keep)), stage.name
        assert ids.tolist() == full_ids[keep][:k].tolist(), stage.name
        np.testing.assert_allclose(scores, full_scores[keep][:k], rtol=1e-6)
    # The dense stage against numpy brute force.
    ref_ids, ref_scores = brute_dense(r, enc, q)
    mask = np.isin(ref_ids, list(allowed))
    ids, scores = r.stage("dense").search(q, k, flt)
    np.testing.assert_allclose(scores, ref_scores[mask][:k], rtol=1e-5, atol=1e-6)
    assert set(ids.tolist()) <= allowed


@pytest.mark.parametrize("filters, pred", FILTERS)
def test_filtered_search_fuses_the_restricted_rankings(big, filters, pred):
    r, _, docs = big
    allowed = allowed_chunks(r, docs, pred)
    n = r.n_chunks
    for q in ("alpha beta", "pi mu nu"):
        for k in (3, 50):
            depth = max(r.candidates, k)  # each stage's list length
            lists = []
            for stage in r.first_stages:
                ids, _ = stage.search(q, n, None)
                lists.append(np.asarray([i for i in ids.tolist() if i in allowed][:depth], np.int64))
            matching = set().union(*[set(x.tolist()) for x in lists])
            res = r.search(q, k=k, filters=filters)
            assert len(res) == min(k, len(matching))
            if not matching:
                continue
            ref_ids, ref_scores = ragfind.rrf([x for x in lists if len(x)], k=60, top_k=k)
            assert [p.id for p in res] == ref_ids.tolist()
            np.testing.assert_allclose([p.score for p in res], ref_scores)


def test_a_selective_filter_still_finds_its_documents():
    # 1 allowed document in 400, behind 399 better BM25 matches: still found.
    docs = [
        {"id": f"d{i}", "text": "word " * (1 + i % 5) + f"n{i}", "metadata": {"keep": i == 7}}
        for i in range(400)
    ]
    r = ragfind.Retriever(encoder=None, candidates=5, chunk_size=None)
    r.add_documents(docs)
    res = r.search("word", k=5, filters={"keep": True})
    assert [p.doc_id for p in res] == ["d7"]
    assert r.search("word", k=5, filters={"doc_id": {"$in": []}}).passages == ()


def test_passages_carry_each_stages_rank_and_score(big):
    r, _, _ = big
    q = ["alpha beta", "beta gamma"]
    res = r.search(q, k=10)
    lists = {s.name: [s.search(p, r.candidates, None) for p in q] for s in r.first_stages}
    for p in res:
        assert p.scores["fused"] == p.score
        for name, per in lists.items():
            found = [
                (ids.tolist().index(p.id) + 1, -float(scores[ids.tolist().index(p.id)]))
                for ids, scores in per
                if p.id in ids.tolist()
            ]
            if not found:
                assert name not in p.ranks and name not in p.scores
                continue
            rank, neg_score = min(found)  # the best rank; a tie: the higher score
            assert p.ranks[name] == rank and p.scores[name] == pytest.approx(-neg_score)
    # The RRF score is the weighted sum of 1/(60 + rank) over the lists holding the chunk.
    single = r.search("alpha beta", k=5)
    for p in single:
        assert p.score == pytest.approx(sum(1 / (60 + rk) for rk in p.ranks.values()))


def test_rerank_scores_join_the_passage_scores():
    class Reverse:
        def rank(self, query, texts, top_k=None):
            order = sorted(range(len(texts)), key=lambda i: texts[i], reverse=True)
            return [{"corpus_id": i, "score": float(len(texts) - n)} for n, i in enumerate(order)]

    r = make(reranker=Reverse(), rerank_candidates=5)
    res = r.search("domesticated programming", k=3)
    for p in res:
        assert p.scores["cross_encoder"] == p.score and "fused" in p.scores and p.ranks
    assert "cross_encoder" in res.timings and "rerank" in res.timings


def test_collapse_document_returns_one_passage_per_document():
    # doc0 matches in every chunk, the others in one chunk each: doc0 fills every stage's list.
    docs = [{"id": "doc0", "text": " ".join(f"Shared topic words, part {j}." for j in range(60))}]
    docs += [
        {
            "id": f"doc{i}",
            "text": " ".join(f"Filler sentence {j} of number {i}." for j in range(30))
            + " Shared topic words.",
        }
        for i in range(1, 6)
    ]
    r = ragfind.Retriever(encoder=HashEncoder(), chunk_size=32, candidates=3, contextualize=False)
    r.add_documents(docs)
    assert r.n_chunks > 6 * 3
    plain = r.search("shared topic words", k=5)
    assert plain.doc_ids == ["doc0"]
    res = r.search("shared topic words", k=5, collapse="document")
    assert len(res) == 5 and len(set(res.doc_ids)) == 5 and res[0].id == plain[0].id
    many = r.search("shared topic words", k=50, collapse="document")
    assert sorted(many.doc_ids) == sorted(d["id"] for d in docs)  # every document, once
    assert all(p.doc_id == d for p, d in zip(many, many.doc_ids))
    one = r.search("shared topic words", k=2, collapse="document", filters={"doc_id": "doc3"})
    assert one.doc_ids == ["doc3"]
    with pytest.raises(ValueError, match="collapse = 'doc'"):
        r.search("x", collapse="doc")


def test_stage_selection_and_timings(big):
    r, _, _ = big
    res = r.search("alpha", k=3)
    names = [s.name for s in r.first_stages]
    assert names == ["bm25", "dense", "splade", "keyword"]
    for key in names + ["embed", "first_stage", "fusion", "store", "total"]:
        assert res.timings[key] >= 0, key
    assert set(res.concurrent) <= set(names)
    assert "sparse" not in res.timings
    only = r.search("alpha", k=3, stages=["bm25"])
    assert set(only[0].ranks) == {"bm25"} and "dense" not in only.timings and only.concurrent == ()
    with pytest.raises(ValueError, match="stages = \\['sparse'\\]"):
        r.search("alpha", stages=["sparse"])


def test_bm25_weight_is_named_bm25():
    r = make(weights={"bm25": 3.0})
    assert r.search("purr", k=1)[0].doc_id == "cats"
    with pytest.raises(ValueError, match="'sparse' is now 'bm25'"):
        make(weights={"sparse": 1.0})


def test_version_1_folder_loads_with_sparse_weights_renamed(tmp_path):
    enc = HashEncoder()
    r = make(encoder=enc, weights={"bm25": 2.0, "dense": 0.5})
    r.save(tmp_path / "kb")
    m = json.loads((tmp_path / "kb" / "manifest.json").read_text())
    assert m["version"] == 2 and m["config"]["weights"] == {"bm25": 2.0, "dense": 0.5}
    # A version-1 manifest: the same files, the BM25 weight under "sparse".
    m["version"] = 1
    m["config"]["weights"] = {"sparse": 2.0, "dense": 0.5}
    (tmp_path / "kb" / "manifest.json").write_text(json.dumps(m))
    old = ragfind.Retriever.load(tmp_path / "kb", encoder=enc)
    assert old.weights == {"bm25": 2.0, "dense": 0.5}
    q = "domesticated programming language"
    assert [(p.id, p.score) for p in old.search(q, k=5)] == [(p.id, p.score) for p in r.search(q, k=5)]
    old.save(tmp_path / "kb2")  # saved again as version 2
    assert json.loads((tmp_path / "kb2" / "manifest.json").read_text())["version"] == 2
    # "bm25" is not a version-1 name, "sparse" not a version-2 one.
    m["config"]["weights"] = {"bm25": 1.0}
    (tmp_path / "kb" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(RetrieverFolderError, match="weights"):
        ragfind.Retriever.load(tmp_path / "kb", encoder=enc)
    m["version"], m["config"]["weights"] = 3, {}
    (tmp_path / "kb" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(RetrieverFolderError, match="format version 3; this ragfind reads versions 1, 2"):
        ragfind.Retriever.load(tmp_path / "kb", encoder=enc)


def test_unknown_document_keys_are_an_error():
    r = make()
    before = (len(r), r.n_chunks)
    with pytest.raises(
        ValueError, match="documents\\[1\\] has key 'tags'; expected only id, title, text, metadata"
    ):
        r.add_documents([{"id": "a", "text": "x"}, {"id": "b", "text": "y", "tags": ["z"]}])
    assert (len(r), r.n_chunks) == before


def test_builtin_stages_are_ordinary_stages():
    enc = HashEncoder()
    r = make(encoder=enc)
    assert isinstance(r.first_stages[0], BM25Stage) and isinstance(r.first_stages[1], DenseStage)
    assert r.bm25 is r.stage("bm25").index and r.dense is r.stage("dense").index
    assert sorted(r.stage("dense").ids.tolist()) == sorted(r.stage("bm25").ids.tolist())
    assert np.array_equal(r.embed_query("cats"), enc.encode_query("cats"))
    with pytest.raises(KeyError, match="no stage 'nope'"):
        r.stage("nope")
    # A retriever of custom stages alone.
    only = ragfind.Retriever(encoder=None, bm25=None, stages=[KeywordStage()])
    only.add_documents(DOCS)
    assert only.search("programming", k=5).doc_ids == ["rust", "python"]


def test_filters_are_not_sql_indexes_of_the_saved_store(tmp_path):
    import sqlite3

    r = make()
    assert r.search("cats", k=5, filters={"lang": "fr"}).doc_ids == ["chats"]
    r.save(tmp_path / "kb")
    saved = sqlite3.connect(tmp_path / "kb" / "store.sqlite")
    assert not saved.execute("SELECT name FROM sqlite_master WHERE name LIKE 'filter_field_%'").fetchall()
    saved.close()
    loaded = ragfind.Retriever.load(tmp_path / "kb", encoder=r.encoder)
    assert loaded.search("cats", k=5, filters={"lang": "fr"}).doc_ids == ["chats"]


@pytest.mark.parametrize("seed", ["v1-seed-000", "v1-seed-006"])
def test_a_folder_written_by_format_1_code_loads(seed, tmp_path):
    # The fuzz seeds v1-seed-* are folders saved by the format-1 Retriever (its SQLite schema
    # text laid out differently, its BM25 stage called "sparse").
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "tools" / "fuzz"))
    try:
        from _common import _unpack_folder, hash_encoder
    finally:
        sys.path.pop(0)
    data = (root / "tools" / "fuzz" / "corpus" / "load_retriever" / seed).read_bytes()
    kb = tmp_path / "kb"
    kb.mkdir()
    for name, content in _unpack_folder(data[1:]).items():
        (kb / name).write_bytes(content)
    assert json.loads((kb / "manifest.json").read_text())["version"] == 1
    encoder = None if data[0] & 8 else hash_encoder()
    r = ragfind.Retriever.load(kb, encoder=encoder, reranker=None)
    assert r.search("cats purr", k=2)[0].doc_id == "cats"
    assert r.search("cats chats", k=2, filters={"lang": "fr"}).doc_ids == ["chats"]
    r.add_documents([{"id": "new", "text": "Otters float."}])
    r.save(tmp_path / "v2")
    again = ragfind.Retriever.load(tmp_path / "v2", encoder=encoder, reranker=None)
    assert json.loads((tmp_path / "v2" / "manifest.json").read_text())["version"] == 2
    assert again.search("otters", k=1).doc_ids == ["new"] and len(again) == 3


def test_stages_run_concurrently_and_say_so():
    import threading

    both = threading.Barrier(2, timeout=30)  # passes only while both stages are searching

    class Meeting(KeywordStage):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def search(self, query, k, allowed):
            both.wait()
            return super().search(query, k, allowed)

    r = ragfind.Retriever(encoder=None, bm25=None, stages=[Meeting("a"), Meeting("b")], threads=2)
    r.add_documents(DOCS)
    res = r.search("programming", k=2, use_cache=False)
    assert res.concurrent == ("a", "b") and res.doc_ids == ["rust", "python"]
    assert {"a", "b", "first_stage"} <= set(res.timings)
    r.close()
