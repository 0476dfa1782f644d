"""Filters the Retriever keeps (FilterCompiler) are patched after each write, not evaluated
again: after every add, delete and update, each kept filter's search equals the unfiltered full
ranking restricted by a Python reference of the predicate, for every operator; and the kept
filter was patched (MetadataFilters.compile ran once per filter)."""

from __future__ import annotations

import random

import numpy as np

import ragfind
from ragfind.pipeline.filters import FilterCompiler, MetadataFilters, SelectionFilter

WORDS = "alpha beta gamma delta epsilon zeta eta theta".split()
MISSING = object()


def doc(i: int, rng: random.Random) -> dict:
    md = {"tenant": i % 7, "score": round(rng.random(), 3), "lang": rng.choice(["en", "fr", "de"])}
    if i % 3:
        md["draft"] = i % 2 == 0
    if i % 5 == 0:
        md["tag"] = None
    return {
        "id": f"d{i}",
        "title": ["", "x", "y"][i % 3],
        "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))),
        "metadata": md,
    }


def value(d: dict, field: str):
    if field == "doc_id":
        return d["id"]
    if field == "title":
        return d["title"]
    return d["metadata"].get(field, MISSING)


def num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# (filter, reference predicate over a document): every operator, and nested logic.
CASES = [
    ({"tenant": 3}, lambda d: value(d, "tenant") == 3),
    ({"lang": {"$eq": "fr"}}, lambda d: value(d, "lang") == "fr"),
    ({"lang": {"$ne": "fr"}}, lambda d: value(d, "lang") != "fr"),
    ({"lang": {"$in": ["en", "de"]}}, lambda d: value(d, "lang") in ("en", "de")),
    ({"tenant": {"$nin": [1, 2]}}, lambda d: value(d, "tenant") not in (1, 2)),
    ({"score": {"$gt": 0.5}}, lambda d: value(d, "score") > 0.5),
    ({"score": {"$gte": 0.2, "$lt": 0.4}}, lambda d: 0.2 <= value(d, "score") < 0.4),
    ({"score": {"$lte": 0.3}}, lambda d: value(d, "score") <= 0.3),
    ({"draft": False}, lambda d: value(d, "draft") is False),
    ({"draft": {"$exists": False}}, lambda d: value(d, "draft") is MISSING),
    ({"tag": None}, lambda d: value(d, "tag") in (None, MISSING)),
    ({"tag": {"$exists": True}}, lambda d: value(d, "tag") is not MISSING),
    ({"score": {"$not": {"$gt": 0.7}}}, lambda d: not value(d, "score") > 0.7),
    ({"title": {"$gte": "x"}}, lambda d: value(d, "title") >= "x"),
    ({"doc_id": {"$in": ["d1", "d4", "d250"]}}, lambda d: d["id"] in ("d1", "d4", "d250")),
    (
        {
            "$and": [
                {"$or": [{"lang": "en"}, {"tenant": {"$lt": 2}}]},
                {"score": {"$gte": 0.3}},
                {"$not": {"tenant": 0}},
            ]
        },
        lambda d: (
            (value(d, "lang") == "en" or value(d, "tenant") < 2)
            and value(d, "score") >= 0.3
            and value(d, "tenant") != 0
        ),
    ),
    (
        {"$or": [{"draft": True}, {"tag": {"$exists": True}}]},
        lambda d: value(d, "draft") is True or "tag" in d["metadata"],
    ),
]


def check(r: ragfind.Retriever, live: dict, q: str) -> None:
    full = r.search(q, k=len(live) + 10, use_cache=False).doc_ids
    for filters, pred in CASES:
        keep = {i for i, d in live.items() if pred(d)}
        want = [i for i in full if i in keep]
        for k in (3, len(live) + 10):
            got = r.search(q, k=k, filters=filters, use_cache=False).doc_ids
            assert got == want[:k], (filters, k)
        flt = r.stage_runner.compile_filters(filters)
        assert isinstance(flt, SelectionFilter)
        got_ids = {row[1] for row in r.store.fetch(flt.ids).values()}
        assert got_ids == keep, filters
        assert len(flt) == len(keep)


def test_kept_filters_are_patched_exactly_after_each_write(monkeypatch):
    rng = random.Random(5)
    docs = [doc(i, rng) for i in range(240)]
    r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False)
    r.add_documents(docs)
    live = {d["id"]: d for d in docs}
    check(r, live, "alpha beta")
    compiles = []
    real = MetadataFilters.compile
    monkeypatch.setattr(
        MetadataFilters, "compile", lambda self, tree: compiles.append(tree) or real(self, tree)
    )
    next_id = 240
    for step in range(12):
        what = step % 3
        if what == 0:  # add one
            d = doc(next_id, rng)
            next_id += 1
            r.add_documents([d])
            live[d["id"]] = d
        elif what == 1:  # delete one
            gone = rng.choice(sorted(live))
            r.delete_documents([gone])
            del live[gone]
        else:  # update one: delete it and add it back with other metadata and text
            old = rng.choice(sorted(live))
            d = dict(doc(next_id, rng), id=old)
            next_id += 1
            r.delete_documents([old])
            r.add_documents([d])
            live[old] = d
        check(r, live, rng.choice(["alpha beta", "zeta", "theta eta gamma"]))
    assert compiles == []  # every search after a write patched its kept filter


def test_many_writes_between_searches_fall_back_to_a_whole_evaluation():
    rng = random.Random(6)
    docs = [doc(i, rng) for i in range(300)]
    r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False)
    r.add_documents(docs[:50])
    live = {d["id"]: d for d in docs[:50]}
    check(r, live, "alpha")
    r.add_documents(docs[50:])  # more rows than a patch tests one by one
    live.update({d["id"]: d for d in docs[50:]})
    check(r, live, "alpha")


def test_selection_filter_without_rows_as_ids_has_no_bitmap():
    meta = MetadataFilters()
    meta.add(
        np.arange(5, 25, dtype=np.int64),
        [f"d{i}" for i in range(20)],
        [""] * 20,
        [{"t": i % 4} for i in range(20)],
    )
    store = type("S", (), {"fields": {"t"}, "kinds": {}, "kinds_version": 0, "generation": 0})()
    flt = FilterCompiler(meta, store)({"t": 1})
    assert flt.id_bits() is None  # chunk ids are not row numbers: the ids are listed instead
    assert flt.ids.tolist() == [6, 10, 14, 18, 22]
    assert 10 in flt and 11 not in flt and len(flt) == 5 and list(flt) == flt.ids.tolist()
    assert ragfind.IdFilter(flt).ids.tolist() == flt.ids.tolist()
    bm25 = ragfind.BM25Index()
    bm25.add(["word"] * 20, ids=list(range(5, 25)))
    assert sorted(bm25.search("word", k=20, filter=flt)[0].tolist()) == flt.ids.tolist()


def test_selection_filter_bitmap_matches_ids():
    meta = MetadataFilters()
    meta.add(
        np.arange(0, 200, dtype=np.int64),
        [f"d{i}" for i in range(200)],
        [""] * 200,
        [{"t": i % 4} for i in range(200)],
    )
    store = type("S", (), {"fields": {"t"}, "kinds": {}, "kinds_version": 0, "generation": 0})()
    flt = FilterCompiler(meta, store)({"t": {"$in": [1, 2]}})
    bitmap = flt.id_bits()
    assert len(bitmap) == 200
    words = bitmap.words()
    assert words.dtype == np.uint64
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    assert np.flatnonzero(bits).tolist() == flt.ids.tolist() == [i for i in range(200) if i % 4 in (1, 2)]
    words[0] = 0  # a copy: the filter keeps its bits
    again = np.unpackbits(flt.id_bits().words().view(np.uint8), bitorder="little")
    assert np.flatnonzero(again).tolist() == flt.ids.tolist()


def test_kept_filter_checks_kinds_again_only_after_a_new_kind(monkeypatch):
    r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False)
    r.add_documents([{"id": f"d{i}", "text": "alpha", "metadata": {"tenant": i % 3}} for i in range(30)])
    flt = {"tenant": {"$in": [1, 2]}}
    r.search("alpha", k=5, filters=flt, use_cache=False)
    reads: list = []
    real = FilterCompiler.kinds
    monkeypatch.setattr(FilterCompiler, "kinds", lambda self, name: reads.append(name) or real(self, name))
    r.add_documents([{"id": "e1", "text": "alpha", "metadata": {"tenant": 1}}])  # a kind it held
    assert "e1" in r.search("alpha", k=50, filters=flt, use_cache=False).doc_ids
    assert reads == []
    version = r.store.kinds_version, r.metadata.kinds_version
    r.add_documents([{"id": "e2", "text": "alpha", "metadata": {"tenant": None}}])  # a new kind: null
    assert (r.store.kinds_version, r.metadata.kinds_version) > version
    got = r.search("alpha", k=50, filters=flt, use_cache=False).doc_ids
    assert set(reads) == {"m:tenant"} and "e1" in got and "e2" not in got


def test_id_bitmap_rows_mask_and_count_equal_numpy():
    rng = np.random.default_rng(3)
    n = 70_000  # more than one page of the bitmap
    meta = MetadataFilters()
    meta.add(np.arange(n, dtype=np.int64), [""] * n, [""] * n, [{"t": int(v)} for v in rng.integers(0, 7, n)])
    store = type("S", (), {"fields": {"t"}, "kinds": {}, "kinds_version": 0, "generation": 0})()
    flt = FilterCompiler(meta, store)({"t": {"$in": [2, 5]}})
    bitmap = flt.id_bits()
    on = np.zeros(n, bool)
    on[flt.ids] = True
    for first, count in [(0, n), (37, 1000), (-20, 100), (n - 10, 50), (65_530, 64), (n + 5, 10), (3, 0)]:
        ids = np.arange(first, first + count)
        want = np.zeros(count, bool)
        inside = (ids >= 0) & (ids < n)
        want[inside] = on[ids[inside]]
        assert bitmap.rows(first, count).tolist() == np.flatnonzero(want).tolist()
        assert bitmap.mask(first, count).tolist() == want.astype(np.uint8).tolist()
        assert bitmap.count(first, count) == int(want.sum())
