"""Framework filters in the Retriever's metadata index: Haystack's filter dicts and LlamaIndex's
MetadataFilters give the documents of the frameworks' own evaluators (Haystack's
``document_matches_filter``; LlamaIndex's ``build_metadata_filter_fn``, what its
SimpleVectorStore filters with), errors included, on random documents and random nested
filters; and the translation keeps what maps inside the index (no evaluator call)."""

from __future__ import annotations

import random
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("haystack")
pytest.importorskip("llama_index.core")

from haystack import Document  # noqa: E402
from haystack.errors import FilterError  # noqa: E402
from haystack.utils.filters import document_matches_filter  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn  # noqa: E402

import ragfind.integrations.haystack as hs  # noqa: E402
import ragfind.integrations.llama_index as li  # noqa: E402
from ragfind.integrations import Bounds  # noqa: E402
from ragfind.integrations.haystack import RagfindDocumentStore  # noqa: E402
from ragfind.integrations.llama_index import RagfindRetriever, RagfindVectorStore  # noqa: E402

WORDS = ["cats", "purr", "dogs", "bark", "mice"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ----------------------------------------------------------------------------- Haystack

NUMBERS = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 2.0, 2**53 + 1]))
NAMES = st.sampled_from(["", "a", "ab", "B", "é", "😀", "100", "name_1"])
DATES = st.sampled_from(
    ["1969-07-21T20:17:40", "1969-07-21 20:17:40", "1972-12-11T19:54:58", "2020-01-01", "2020-01-01T00:00:00"]
)
#: A metadata field keeps the kind of its first value, so each field holds one kind (or null).
HS_META = {
    "num": NUMBERS,
    "flag": st.booleans(),
    "name": NAMES,
    "date": DATES,
    "tags": st.lists(NAMES, max_size=2),
    "obj": st.fixed_dictionaries({"x": st.integers(0, 2)}),
    "nullable": st.one_of(st.none(), st.integers(0, 2)),
}
HS_FIELDS = ["meta.num", "meta.flag", "meta.name", "meta.date", "meta.tags", "meta.obj.x", "meta.nullable"]
HS_FIELDS += ["meta.missing", "num", "id", "content"]
#: Filter values: few, of every kind, so that each meets each field's kind often.
HS_SCALARS = st.sampled_from(
    [None, True, False, 0, 1, 2, -1.5, 2**53 + 1, float("nan"), "", "a", "é", "100", "d1", "cats purr"]
    + ["1969-07-21T20:17:40", "1969-07-21 20:17:40", "2020-01-01T00:00:00"]
)
HS_VALUES = st.one_of(
    HS_SCALARS, st.sampled_from([["a"], {"x": 1}, datetime(2020, 1, 1), datetime(1972, 12, 11, 19, 54, 58)])
)


@st.composite
def hs_documents(draw):
    n = draw(st.integers(1, 12))
    docs = []
    for i in range(n):
        keys = draw(st.lists(st.sampled_from(sorted(HS_META)), unique=True, max_size=len(HS_META)))
        meta = {k: draw(HS_META[k]) for k in keys}
        words = draw(st.lists(st.sampled_from(WORDS), max_size=3))
        content = " ".join(words) if words or draw(st.booleans()) else None  # "" and None: no chunk
        docs.append(Document(id=f"d{i}", content=content, meta=meta, embedding=[1.0, float(i % 3), 0.5]))
    return docs


def hs_leaf():
    ordering = st.fixed_dictionaries(
        {
            "field": st.sampled_from(HS_FIELDS),
            "operator": st.sampled_from([">", ">=", "<", "<="]),
            "value": st.sampled_from([None, True, 0, 1, -1.5, 2**53 + 1, "1972-12-11T19:54:58", "a", ["a"]]),
        }
    )
    equality = st.fixed_dictionaries(
        {"field": st.sampled_from(HS_FIELDS), "operator": st.sampled_from(["==", "!="]), "value": HS_VALUES}
    )
    member = st.fixed_dictionaries(
        {
            "field": st.sampled_from(HS_FIELDS),
            "operator": st.sampled_from(["in", "not in"]),
            "value": st.lists(HS_SCALARS, max_size=3),
        }
    )
    malformed = st.sampled_from(
        [
            {"field": "meta.num", "operator": "in", "value": 1},
            {"field": "meta.num", "operator": "~", "value": 1},
            {"field": "meta.num", "value": 1},
            {"operator": "AND"},
        ]
    )
    return st.one_of(ordering, equality, equality, member, malformed)


def hs_filters():
    def logic(children):
        return st.fixed_dictionaries(
            {"operator": st.sampled_from(["AND", "OR", "NOT"]), "conditions": st.lists(children, max_size=3)}
        )

    # A filter without an operator at its top is a ValueError of the store (as in Haystack's).
    return st.recursive(hs_leaf(), logic, max_leaves=6).filter(lambda f: "operator" in f)


def hs_reference(docs, flt):
    """The documents Haystack matches, or the exception classes its evaluator raises."""
    matched, raised = [], set()
    for d in docs:
        try:
            if document_matches_filter(flt, d):
                matched.append(d.id)
        except Exception as exc:  # noqa: BLE001 - FilterError or TypeError, compared below
            raised.add(type(exc))
    return matched, raised


HS_EVERY_VALUE = [None, True, False, 0, 1, 2, -1.5, 2**53 + 1, float("nan"), "", "a", "é", "100", "d1"]
HS_EVERY_VALUE += ["cats purr", "1969-07-21T20:17:40", "1969-07-21 20:17:40", "2020-01-01T00:00:00", ["a"]]
HS_EVERY_VALUE += [{"x": 1}, datetime(2020, 1, 1)]
HS_EVERY_LIST = [[], [1, "a"], [True, None], ["2020-01-01", 2.0, "é"]]


def hs_check(store, docs, flt):
    matched, raised = hs_reference(docs, flt)
    if raised:
        with pytest.raises(tuple(raised)):
            store.filter_documents(flt)
    else:
        assert [d.id for d in store.filter_documents(flt)] == matched, flt


#: Values of each Haystack meta field, for the seeded documents of the exhaustive tests.
HS_POOLS = {
    "num": [-3, 0, 1, 2, 0.5, -1.5, 2.0, 2**53 + 1],
    "flag": [True, False],
    "name": ["", "a", "ab", "B", "é", "😀", "100", "name_1"],
    "date": ["1969-07-21T20:17:40", "1969-07-21 20:17:40", "2020-01-01", "2020-01-01T00:00:00"],
    "tags": [[], ["a"], ["a", "é"]],
    "obj": [{"x": 0}, {"x": 1}, {}],
    "nullable": [None, 0, 2],
}


def seeded_documents(seed: int) -> list:
    rng = random.Random(seed)
    docs = []
    for i in range(16):
        meta = {k: rng.choice(pool) for k, pool in HS_POOLS.items() if rng.random() < 0.7}
        content = rng.choice(["cats purr", "dogs bark", "mice", "", None])
        docs.append(Document(id=f"d{i}", content=content, meta=meta, embedding=[1.0, float(i % 3), 0.5]))
    return docs


@pytest.mark.parametrize("seed", [0, 1])
def test_haystack_every_condition_equals_document_matches_filter(seed):
    """Each field, operator and value (of a small set of every kind) alone."""
    docs = seeded_documents(seed)
    store = RagfindDocumentStore()
    store.write_documents(docs)
    for field in HS_FIELDS:
        for op in ["==", "!=", ">", ">=", "<", "<="]:
            for v in HS_EVERY_VALUE:
                hs_check(store, docs, {"field": field, "operator": op, "value": v})
        for op in ["in", "not in"]:
            for v in HS_EVERY_LIST:
                hs_check(store, docs, {"field": field, "operator": op, "value": v})


@SETTINGS
@given(docs=hs_documents(), filters=st.lists(hs_filters(), min_size=1, max_size=8))
def test_haystack_filters_equal_document_matches_filter(docs, filters):
    store = RagfindDocumentStore()
    store.write_documents(docs)
    for flt in filters:
        matched, raised = hs_reference(docs, flt)
        if raised:
            with pytest.raises(tuple(raised)):
                store.filter_documents(flt)
            continue
        assert [d.id for d in store.filter_documents(flt)] == matched, flt
        assert [d for d in store.filter_documents(flt)] == [d for d in docs if d.id in matched]
        n = len(docs)
        every = {d.id for d in store.bm25_retrieval("cats purr dogs bark mice", top_k=n)}
        found = {d.id for d in store.bm25_retrieval("cats purr dogs bark mice", flt, top_k=n)}
        assert found == every & set(matched), flt
        near = {d.id for d in store.embedding_retrieval([1.0, 1.0, 0.0], flt, top_k=n)}
        assert near == set(matched), flt


def test_haystack_maps_inside_the_index(monkeypatch):
    """Comparisons on numbers, bools, plain strings, ids and None, nested AND / OR / NOT: one
    Retriever filter, no call to Haystack's evaluator."""
    store = RagfindDocumentStore()
    store.write_documents(
        [
            Document(id="a", content="cats", meta={"tenant": 7, "flag": True, "lang": "en"}),
            Document(id="b", content="dogs", meta={"tenant": 8, "flag": False}),
            Document(id="c", content="mice", meta={"tenant": 1}),
        ]
    )
    flt = {
        "operator": "OR",
        "conditions": [
            {"field": "meta.tenant", "operator": "in", "value": [7, 9]},
            {
                "operator": "NOT",
                "conditions": [
                    {"field": "meta.flag", "operator": "==", "value": 1},
                    {"field": "meta.lang", "operator": "!=", "value": None},
                ],
            },
            {"field": "id", "operator": "==", "value": "c"},
            {"field": "meta.tenant", "operator": ">=", "value": 8.5},
        ],
    }
    assert store._bounds(flt).exact

    def fail(*args, **kwargs):
        raise AssertionError("Haystack's evaluator was called")

    monkeypatch.setattr(hs, "document_matches_filter", fail)
    assert [d.id for d in store.filter_documents(flt)] == ["a", "b", "c"]
    one = {"field": "meta.tenant", "operator": "==", "value": 7}
    assert [d.id for d in store.bm25_retrieval("cats dogs mice", one)] == ["a"]
    either = {"operator": "OR", "conditions": [one, {"field": "meta.tenant", "operator": "==", "value": 8}]}
    assert sorted(d.id for d in store.bm25_retrieval("cats dogs mice", either)) == ["a", "b"]


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"field": "meta.flag", "operator": "==", "value": 1}, ["t"]),  # True == 1 in Python
        ({"field": "meta.flag", "operator": "!=", "value": 0}, ["t", "n", "x"]),
        ({"field": "meta.flag", "operator": ">", "value": 0}, ["t"]),
        ({"field": "meta.n", "operator": "in", "value": [True]}, ["n"]),
        ({"field": "meta.n", "operator": "<", "value": True}, []),
        ({"field": "meta.n", "operator": ">=", "value": False}, ["n"]),
    ],
)
def test_haystack_bools_are_numbers(flt, expected):
    store = RagfindDocumentStore()
    store.write_documents(
        [
            Document(id="t", content="x", meta={"flag": True}),
            Document(id="f", content="x", meta={"flag": False}),
            Document(id="n", content="x", meta={"n": 1.0}),
            Document(id="x", content="x"),
        ]
    )
    assert [d.id for d in store.filter_documents(flt)] == expected
    assert store._bounds(flt).exact


def test_haystack_raises_where_its_evaluator_would():
    """Haystack tests the first condition of an OR on every document, and raises on a string
    that is not a date; the second condition deciding the document natively changes nothing."""
    store = RagfindDocumentStore()
    store.write_documents([Document(id="a", content="x", meta={"name": "abc"})])
    ordered = {"field": "meta.name", "operator": ">", "value": 1}
    same = {"field": "meta.name", "operator": "==", "value": "abc"}
    with pytest.raises(FilterError):
        store.filter_documents({"operator": "OR", "conditions": [ordered, same]})
    with pytest.raises(FilterError):
        store.bm25_retrieval("x", {"operator": "OR", "conditions": [ordered, same]})
    # Reached by no document (the AND stops at its first condition): nothing raises.
    never = {"field": "meta.name", "operator": "==", "value": "other"}
    assert store.filter_documents({"operator": "AND", "conditions": [never, ordered]}) == []
    with pytest.raises(FilterError):
        store.filter_documents({"operator": "AND", "conditions": [same, {"field": "meta.name", "value": 1}]})


def test_haystack_falls_back_only_where_needed():
    store = RagfindDocumentStore()
    store.write_documents(
        [
            Document(id="a", content="x", meta={"date": "2020-01-01", "tenant": 1}),
            Document(id="b", content="x", meta={"date": "2020-01-01T00:00:00", "tenant": 2}),
            Document(id="c", content=None, meta={"date": "2020-01-01", "tenant": 3}),
        ]
    )
    same_day = {"field": "meta.date", "operator": "==", "value": "2020-01-01"}
    b = store._bounds(
        {"operator": "AND", "conditions": [same_day, {"field": "meta.tenant", "operator": "<", "value": 3}]}
    )
    assert isinstance(b, Bounds) and not b.exact
    assert b.under == {"$and": [{"date": {"$eq": "2020-01-01"}}, {"tenant": {"$lt": 3}}]}
    # Another spelling of the same instant matches, as in Haystack; "c" has no chunk.
    assert [d.id for d in store.filter_documents(same_day)] == ["a", "b", "c"]


# ----------------------------------------------------------------------------- LlamaIndex

LI_META = {
    "num": st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 2.0])),
    "flag": st.booleans(),
    "name": NAMES,
    "tags": st.lists(st.sampled_from(["a", "b", "é"]), max_size=2),
    "opt": st.one_of(st.none(), st.sampled_from(["", "a"])),
}
LI_KEYS = sorted(LI_META) + ["missing", "_node_type"]
#: Filter values (LlamaIndex takes int, float, str, lists of one of them, None): few, of every
#: kind, so that each meets each field's kind often.
LI_VALUES = st.sampled_from(
    [None, 0, 1, 2, -1.5, 0.5, "", "a", "ab", "A", "é", "é😀", [], [1, 2], [0, 0.5], ["a", "é"], ["", "B"]]
)


@st.composite
def li_nodes(draw):
    nodes = []
    for i in range(draw(st.integers(1, 12))):
        keys = draw(st.lists(st.sampled_from(sorted(LI_META)), unique=True, max_size=len(LI_META)))
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
        nodes.append(
            TextNode(
                id_=f"n{i}",
                text=" ".join(words),
                metadata={k: draw(LI_META[k]) for k in keys},
                embedding=[1.0, float(i % 3), 0.5],
            )
        )
    return nodes


def li_filters():
    leaf = st.builds(
        MetadataFilter,
        key=st.sampled_from(LI_KEYS),
        value=LI_VALUES,
        operator=st.sampled_from(list(FilterOperator)),
    )
    conditions = st.sampled_from(list(FilterCondition))

    def nest(children):
        return st.builds(
            MetadataFilters, filters=st.lists(children, min_size=1, max_size=3), condition=conditions
        )

    tree = st.recursive(leaf, nest, max_leaves=5)
    return st.one_of(
        tree.filter(lambda f: isinstance(f, MetadataFilters)),
        st.builds(MetadataFilters, filters=st.tuples(leaf).map(list), condition=conditions),
    )


def li_reference(filters, metadata):
    """LlamaIndex's own evaluator on each condition (it takes no nested filters), combined as
    FilterCondition says; a condition LlamaIndex raises TypeError for (values that do not
    compare) does not match, ragfind's documented choice."""

    def one(f):
        if isinstance(f, MetadataFilters):
            return li_reference(f, metadata)
        try:
            return build_metadata_filter_fn(lambda _: metadata, MetadataFilters(filters=[f]))("node")
        except TypeError:
            return False

    results = [one(f) for f in filters.filters]
    cond = filters.condition or FilterCondition.AND
    if cond == FilterCondition.AND:
        return all(results)
    return any(results) if cond == FilterCondition.OR else not any(results)


LI_EVERY_VALUE = [
    None,
    0,
    1,
    2,
    -1.5,
    0.5,
    "",
    "a",
    "ab",
    "A",
    "é",
    "é😀",
    [],
    [1, 2],
    [0, 0.5],
    ["a", "é"],
    ["", "B"],
]


LI_POOLS = {
    "num": [-3, 0, 1, 2, 0.5, -1.5, 2.0],
    "flag": [True, False],
    "name": ["", "a", "ab", "B", "A", "é", "é😀", "😀"],
    "tags": [[], ["a"], ["a", "é"], ["b"]],
    "opt": [None, "", "a"],
}


@pytest.mark.parametrize("seed", [0, 1])
def test_llama_index_every_condition_equals_its_evaluator(seed):
    """Each key, operator and value (of a small set of every kind) alone."""
    rng = random.Random(seed)
    nodes = [
        TextNode(
            id_=f"n{i}",
            text=rng.choice(WORDS),
            metadata={k: rng.choice(pool) for k, pool in LI_POOLS.items() if rng.random() < 0.7},
            embedding=[1.0, float(i % 3), 0.5],
        )
        for i in range(16)
    ]
    store = RagfindVectorStore()
    store.add(nodes)
    for key in LI_KEYS:
        for op in FilterOperator:
            for v in LI_EVERY_VALUE:
                flt = MetadataFilters(filters=[MetadataFilter(key=key, value=v, operator=op)])
                want = [x.node_id for x in nodes if li_reference(flt, x.metadata)]
                assert [x.node_id for x in store.get_nodes(filters=flt)] == want, flt


@SETTINGS
@given(nodes=li_nodes(), filters=st.lists(li_filters(), min_size=1, max_size=8))
def test_llama_index_filters_equal_its_evaluator(nodes, filters):
    store = RagfindVectorStore()
    store.add(nodes)
    n = len(nodes)
    for flt in filters:
        want = [x.node_id for x in nodes if li_reference(flt, x.metadata)]
        assert [x.node_id for x in store.get_nodes(filters=flt)] == want, flt
        q = VectorStoreQuery(query_embedding=[1.0, 1.0, 0.0], similarity_top_k=n, filters=flt)
        assert sorted(store.query(q).ids) == sorted(want), flt
        picked = [nodes[-1].node_id, "missing", nodes[0].node_id]
        assert [x.node_id for x in store.get_nodes(node_ids=picked, filters=flt)] == [
            i for i in dict.fromkeys(picked) if i in want
        ]
        # Every node holds one of the words: BM25 finds every node the filter allows.
        got = RagfindRetriever(store.client, k=n, filters=flt, stages=["bm25"]).retrieve(" ".join(WORDS))
        assert sorted(x.node.metadata["doc_id"] for x in got) == sorted(want), flt


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (MetadataFilter(key="flag", value=1), ["t"]),  # True == 1 in Python
        (MetadataFilter(key="flag", value=0, operator=FilterOperator.NE), ["t", "n", "x"]),
        (MetadataFilter(key="flag", value=0, operator=FilterOperator.GT), ["t"]),
        (MetadataFilter(key="flag", value=[1, 2], operator=FilterOperator.IN), ["t"]),
        (MetadataFilter(key="flag", value=[0], operator=FilterOperator.NIN), ["t", "n", "x"]),
        (MetadataFilter(key="n", value="a", operator=FilterOperator.LT), []),  # 1.0 < "a": no match
    ],
)
def test_llama_index_bools_are_numbers(flt, expected):
    store = RagfindVectorStore()
    store.add(
        [
            TextNode(id_=i, text="x", metadata=md, embedding=[1.0, 0.0])
            for i, md in [("t", {"flag": True}), ("f", {"flag": False}), ("n", {"n": 1.0}), ("x", {})]
        ]
    )
    filters = MetadataFilters(filters=[flt])
    assert [x.node_id for x in store.get_nodes(filters=filters)] == expected
    assert li._bounds(store.client, filters).exact


def test_llama_index_maps_inside_the_index(monkeypatch):
    store = RagfindVectorStore()
    store.add(
        [
            TextNode(
                id_=f"n{i}",
                text="cats",
                metadata={"tenant": i, "lang": "en" if i % 2 else ""},
                embedding=[1.0, 0.0],
            )
            for i in range(6)
        ]
    )
    F, Op = MetadataFilter, FilterOperator
    flt = MetadataFilters(
        filters=[
            F(key="tenant", value=1),
            F(key="tenant", value=[3, 4], operator=Op.IN),
            MetadataFilters(
                filters=[
                    F(key="lang", value=None, operator=Op.IS_EMPTY),
                    F(key="tenant", value=2, operator=Op.LTE),
                ],
                condition=FilterCondition.NOT,
            ),
        ],
        condition=FilterCondition.OR,
    )
    assert li._bounds(store.client, flt).exact

    def fail(*args, **kwargs):
        raise AssertionError("the Python evaluator was called")

    monkeypatch.setattr(li, "_evaluate", fail)
    assert [x.node_id for x in store.get_nodes(filters=flt)] == ["n1", "n3", "n4", "n5"]
    got = RagfindRetriever(store.client, k=6, filters=flt, stages=["bm25"]).retrieve("cats")
    assert sorted(x.node.metadata["doc_id"] for x in got) == ["n1", "n3", "n4", "n5"]
