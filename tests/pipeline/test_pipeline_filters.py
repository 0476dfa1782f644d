"""Metadata filters in the native metadata index: exact against a plain Python evaluator over the
stored metadata (random nested filters, random metadata), filtered search equal to the
unfiltered ranking restricted by the predicate, upkeep on add and delete, save and load (and
folders saved before the index existed), and the errors."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragfind
from filter_reference import doc_ids_as_stored, held_kinds, mismatch, ref, unknown_exists
from ragfind.pipeline.retriever import RetrieverFolderError

FIELDS = ["a", "b", "c"]
WORDS = "alpha beta gamma delta epsilon zeta eta theta".split()


# ----------------------------------------------------------------------------- strategies

numbers = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 2.0, 1e300]))
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text("xyz", max_size=2))
#: A field keeps the kind of its first value (null fits any), so each field draws one kind.
KIND_VALUES = {
    "bool": st.booleans(),
    "num": numbers,
    "str": st.text("xyz", max_size=2),
    "other": st.just([1, 2]),
}


@st.composite
def metadata_lists(draw, min_size=1, max_size=30):
    kinds = {f: draw(st.sampled_from(sorted(KIND_VALUES))) for f in FIELDS}
    values = {f: st.one_of(st.none(), KIND_VALUES[k]) for f, k in kinds.items()}
    metadatas = st.dictionaries(st.sampled_from(FIELDS), st.none()).flatmap(
        lambda keys: st.fixed_dictionaries({f: values[f] for f in keys})
    )
    return draw(st.lists(metadatas, min_size=min_size, max_size=max_size))


orderable = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5]), st.text("xyz", max_size=2))


def field_cond():
    op_value = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), scalars),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(scalars, max_size=3)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), orderable),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    plain = st.lists(op_value, min_size=1, max_size=2).map(dict)
    return st.one_of(scalars, st.lists(scalars, max_size=3), plain, plain.map(lambda d: {"$not": d}))


def filters_strategy():
    leaf = st.dictionaries(
        st.sampled_from(FIELDS + ["doc_id", "title"]), field_cond(), min_size=1, max_size=2
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, min_size=1, max_size=3).map(lambda fs: {"$and": fs}),
            st.lists(inner, min_size=1, max_size=3).map(lambda fs: {"$or": fs}),
            inner.map(lambda f: {"$not": f}),
        ),
        max_leaves=6,
    )


def make_docs(metas, titles=None):
    return [
        {
            "id": f"d{i}",
            "title": (titles or ["", "x", "y", "xy"])[i % 4],
            "text": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(1 + i % 5)),
            "metadata": md,
        }
        for i, md in enumerate(metas)
    ]


def allowed_docs(r, filters):
    flt = r.stage_runner.compile_filters(filters)
    ids = r.store.chunk_ids() if flt is None else flt.ids
    return {row[1] for row in r.store.fetch(ids).values()}


def retriever(docs):
    r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False, cache_size=0)
    r.add_documents(docs)
    return r


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    metadata_lists(),
    st.lists(filters_strategy(), min_size=1, max_size=5),
    st.randoms(use_true_random=False),
)
def test_filters_equal_the_python_reference(metas, filters_list, rnd):
    docs = make_docs(metas)
    r = retriever(docs)
    gone = [d["id"] for d in docs if rnd.random() < 0.2]
    if gone:
        r.delete_documents(gone)
    live = [d for d in docs if d["id"] not in gone]
    held = held_kinds(docs)  # kinds a field ever held, deleted documents included
    for filters in filters_list:
        unknown = unknown_exists(filters, held)
        wrong_kind = mismatch(doc_ids_as_stored(filters), held)
        if unknown or wrong_kind:  # both: the first met in the dict's order is raised
            errors = ((ValueError,) if unknown else ()) + ((TypeError,) if wrong_kind else ())
            with pytest.raises(errors, match="unknown field|but field"):
                r.stage_runner.compile_filters(filters)
            continue
        want = {d["id"] for d in live if ref(doc_ids_as_stored(filters), d)}
        assert allowed_docs(r, filters) == want, filters


# ----------------------------------------------------------------------------- the Retriever


def corpus(n=300, seed=1):
    rng = random.Random(seed)
    return [
        {
            "id": f"d{i}",
            "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 10))),
            "metadata": {
                "tenant": i % 10,
                "score": rng.random(),
                "lang": rng.choice(["en", "fr", "de"]),
                "draft": i % 3 == 0,
                **({"tag": rng.choice(["a", "b"])} if i % 4 else {}),
            },
        }
        for i in range(n)
    ]


MIXES = [
    {"tenant": 3},
    {"score": {"$gte": 0.2, "$lt": 0.4}},
    {"lang": {"$in": ["en", "fr"]}},
    {"$and": [{"$or": [{"tenant": {"$lt": 3}}, {"lang": "de"}]}, {"draft": False}, {"$not": {"tag": "a"}}]},
    {"tag": {"$exists": False}, "score": {"$not": {"$gt": 0.5}}},
    {"doc_id": {"$nin": ["d1", "d2"]}, "tenant": {"$ne": 4}},
]


@pytest.fixture(scope="module")
def big():
    docs = corpus()
    r = retriever(docs)
    r.delete_documents(["d5", "d6"])
    return r, [d for d in docs if d["id"] not in ("d5", "d6")]


@pytest.mark.parametrize("filters", MIXES)
@pytest.mark.parametrize("q", ["alpha beta", "zeta", "theta eta gamma"])
def test_filtered_search_is_the_full_ranking_restricted(big, filters, q):
    r, docs = big
    keep = {d["id"] for d in docs if ref(filters, d)}
    full = r.search(q, k=len(docs), filters=None)
    want = [p.doc_id for p in full.passages if p.doc_id in keep]
    for k in (1, 10, 1000):
        got = r.search(q, k=k, filters=filters)
        assert got.doc_ids == want[:k]


def test_adds_and_deletes_keep_the_index_current():
    docs = corpus(120, seed=2)
    r = retriever(docs[:60])
    live = list(docs[:60])
    for step in range(6):
        new = docs[60 + step * 10 : 70 + step * 10]
        r.add_documents(new)
        live += new
        gone = [d["id"] for d in live[step::7]]
        r.delete_documents(gone)
        live = [d for d in live if d["id"] not in gone]
        for filters in MIXES:
            assert allowed_docs(r, filters) == {d["id"] for d in live if ref(filters, d)}
    # A document deleted and added back is filtered by its new metadata.
    d = dict(live[0], metadata={"tenant": 77})
    r.delete_documents([d["id"]])
    r.add_documents([d])
    assert allowed_docs(r, {"tenant": 77}) == {d["id"]}


def test_a_failed_add_leaves_no_rows(monkeypatch):
    r = retriever(corpus(20))
    bad = {"id": "x", "text": "alpha", "metadata": {"tenant": 5}}

    def boom(*a, **kw):
        raise RuntimeError("stage failed")

    monkeypatch.setattr(r.first_stages[0], "add", boom)
    with pytest.raises(RuntimeError):
        r.add_documents([bad])
    monkeypatch.undo()
    assert "x" not in allowed_docs(r, {"tenant": 5})
    r.add_documents([bad])
    assert "x" in allowed_docs(r, {"tenant": 5})


def test_filters_run_no_sql(big):
    r, docs = big

    class NoSQL:
        def execute(self, *a, **kw):
            raise AssertionError("a filter ran SQL")

    db, r.store.db = r.store.db, NoSQL()
    try:
        r.stage_runner.filters.clear()
        for filters in MIXES:
            assert len(r.stage_runner.compile_filters(filters)) == sum(ref(filters, d) for d in docs)
    finally:
        r.store.db = db


def test_saved_and_loaded_with_the_folder(tmp_path):
    docs = corpus(80)
    r = retriever(docs)
    r.delete_documents(["d1"])
    r.save(tmp_path / "kb")
    manifest = json.loads((tmp_path / "kb" / "manifest.json").read_text())
    assert "metadata.idx" in manifest["files"]
    loaded = ragfind.Retriever.load(tmp_path / "kb")
    for filters in MIXES:
        assert allowed_docs(loaded, filters) == allowed_docs(r, filters)
    loaded.add_documents([{"id": "n", "text": "alpha", "metadata": {"tenant": 3}}])
    assert "n" in allowed_docs(loaded, {"tenant": 3})


def test_a_folder_without_the_index_rebuilds_it(tmp_path):
    docs = corpus(80)
    r = retriever(docs)
    r.delete_documents(["d2"])
    kb = tmp_path / "kb"
    r.save(kb)
    manifest = json.loads((kb / "manifest.json").read_text())
    del manifest["files"]["metadata.idx"]
    (kb / "metadata.idx").unlink()
    (kb / "manifest.json").write_text(json.dumps(manifest))
    old = ragfind.Retriever.load(kb)
    for filters in MIXES:
        assert allowed_docs(old, filters) == allowed_docs(r, filters)


def test_a_corrupt_or_foreign_index_file_is_refused(tmp_path):
    import hashlib

    r = retriever(corpus(40))
    kb = tmp_path / "kb"
    r.save(kb)
    path = kb / "metadata.idx"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RetrieverFolderError):
        ragfind.Retriever.load(kb)
    # Valid bytes of another retriever: checksums pass, the chunk ids do not.
    other = retriever(corpus(41))
    other.save(tmp_path / "other")
    path.write_bytes((tmp_path / "other" / "metadata.idx").read_bytes())
    manifest = json.loads((kb / "manifest.json").read_text())
    manifest["files"]["metadata.idx"] = {
        "size": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    (kb / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RetrieverFolderError, match="metadata index holds other chunk ids"):
        ragfind.Retriever.load(kb)


@pytest.mark.parametrize(
    "filters, error, match",
    [
        ({"$or": [{"tenant": 1}, {"colour": "red"}]}, ValueError, "unknown field 'colour'"),
        ({"$and": []}, ValueError, r"filters\['\$and'\] = \[\]; expected a non-empty list"),
        ({"$or": {"tenant": 1}}, ValueError, "expected a non-empty list"),
        ({"$nor": [{"tenant": 1}]}, ValueError, "unknown operator '\\$nor'"),
        ({"tenant": {"$regex": "1"}}, ValueError, "filters\\['tenant'\\]: unknown operator '\\$regex'"),
        ({"tenant": {"$in": 3}}, ValueError, "filters\\['tenant'\\]\\['\\$in'\\] = 3; expected a list"),
        (
            {"tenant": "3"},
            TypeError,
            "filters\\['tenant'\\]\\['\\$eq'\\]: '3' is a str but field 'tenant' holds number",
        ),
        ({"lang": {"$gt": 3}}, TypeError, "'lang'.*holds str values"),
        ({"draft": 1}, TypeError, "1 is a number but field 'draft' holds bool"),
        ({"score": {"$gt": True}}, TypeError, "a range needs an order"),
        ({"score": {"$lt": None}}, TypeError, "a range needs an order"),
        (
            {"tag": {"$exists": "yes"}},
            TypeError,
            "filters\\['tag'\\]\\['\\$exists'\\] = 'yes'; expected True or False",
        ),
        ({"tag": {"$not": "a"}}, ValueError, "expected a dict of operators"),
        ({"$not": [{"tag": "a"}]}, TypeError, "filters\\['\\$not'\\] is a list; expected a dict"),
        ({"tag": {"$eq": [1]}}, TypeError, "expected str, number, bool or None"),
    ],
)
def test_errors_name_the_field_and_operator(big, filters, error, match):
    r, _ = big
    with pytest.raises(error, match=match):
        r.search("alpha", k=3, filters=filters)


def test_int_document_ids_filter_as_stored():
    r = retriever([{"id": i, "text": f"alpha {w}", "metadata": {"n": i}} for i, w in enumerate(WORDS)])
    assert allowed_docs(r, {"doc_id": 3}) == {"3"}
    assert allowed_docs(r, {"doc_id": {"$in": [1, "2"]}}) == {"1", "2"}
    assert allowed_docs(r, {"doc_id": {"$not": {"$nin": [4]}}}) == {"4"}


def test_filters_and_store_do_not_import_each_other():
    root = Path(__file__).resolve().parents[2] / "python" / "ragfind" / "pipeline"

    def imports(name):
        tree = ast.parse((root / name).read_text())
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
        return out

    assert "ragfind.pipeline.filters" not in imports("store.py")
    assert "ragfind.pipeline.store" not in imports("filters.py")


def test_native_index_round_trip_and_refusals():
    idx = ragfind._core.MetadataIndex()
    idx.add(np.arange(3), [{"x": 1}, {"x": "a"}, None], {"b:doc_id": ["p", "q", "r"]})
    assert idx.select(("eq", "m:x", 1)).tolist() == [0]
    back = ragfind._core.MetadataIndex.load(idx.dump())
    assert back.select(("or", [("eq", "m:x", "a"), ("eq", "b:doc_id", "r")])).tolist() == [1, 2]
    with pytest.raises(ValueError, match="already indexed"):
        idx.add(np.asarray([1]), [None], {})
    with pytest.raises(ValueError, match="repeated"):
        idx.add(np.asarray([5, 5]), [None, None], {})
    with pytest.raises(ValueError, match="metadata index"):
        ragfind._core.MetadataIndex.load(idx.dump()[:-2])
