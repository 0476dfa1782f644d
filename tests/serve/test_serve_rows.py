"""The ``/search`` answer's bytes against the rendering it replaced: the result rows
(:func:`ragfind.serve.service.passage_json`) and :meth:`Service.search`'s answer, for SciFact
queries (BM25, and BM25 + a hashing encoder), with and without highlights, and for passages
holding NumPy numbers, NaN and infinities; the rows read natively (:func:`passage_rows`) against
the same reference, and against its Python path."""

from __future__ import annotations

import json
import math
from types import MappingProxyType, SimpleNamespace

import numpy as np
import pytest

import ragfind
from hash_encoders import HashEncoder
from ragfind import _core
from ragfind.pipeline.results import Passage
from ragfind.serve import service as service_module
from ragfind.serve.app import render_json
from ragfind.serve.service import ROW_KEYS, Service, passage_json, passage_rows


def old_passage_json(p, highlight=False):
    """The row as it was built before the one-call field read (the reference)."""

    def finite(v):
        f = float(v)
        return f if math.isfinite(f) else None

    out = {
        "doc_id": p.doc_id,
        "chunk_id": int(p.id),
        "title": p.title,
        "text": p.text,
        "score": finite(p.score),
        "ranks": {k: int(v) for k, v in p.ranks.items()},
        "scores": {k: finite(v) for k, v in p.scores.items()},
        "metadata": dict(p.metadata),
        "source": p.source,
        "start": p.start,
        "end": p.end,
    }
    if highlight:
        out["highlights"] = [[int(a), int(b)] for a, b in getattr(p, "highlights", ())]
    return out


def old_answer(res, highlight):
    timings = dict(res.timings)
    return {
        "results": [old_passage_json(p, highlight) for p in res],
        "timings": {k: v * 1e3 for k, v in timings.items()},
        "timings_unit": "ms",
        "cached": bool(res.cached),
    }


class Recording:
    """A retriever whose last search result is kept, to render it the old way too."""

    def __init__(self, retriever):
        self.retriever, self.last = retriever, None

    def search(self, *args, **kwargs):
        self.last = self.retriever.search(*args, **kwargs)
        return self.last

    def __len__(self):
        return len(self.retriever)


def scifact(data_dir, n=None):
    lines = (data_dir / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    docs = [json.loads(x) for x in lines[:n] if x]
    docs = [{"id": d["_id"], "title": d.get("title", ""), "text": d["text"]} for d in docs]
    queries = (data_dir / "scifact" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return docs, [json.loads(q)["text"] for q in queries if q]


def same_bytes(service, recording, body):
    new = render_json(service.search(body))
    old = render_json(old_answer(recording.last, body.get("highlight") is True))
    assert new == old
    # the stdlib codec (no orjson) gives the same JSON too
    assert json.loads(new) == json.loads(old)


@pytest.fixture(params=["native", "python"])
def rows_path(request, monkeypatch):
    """Both ways of building rows: natively (the default) and the Python fallback alone."""
    assert service_module._json_rows is not None  # this _core has the native rows
    if request.param == "python":
        monkeypatch.setattr(service_module, "_json_rows", None)
    return request.param


@pytest.mark.parametrize("encoder", [None, "hash"])
def test_scifact_answers_render_as_before(data_dir, encoder, rows_path):
    docs, queries = scifact(data_dir, None if encoder is None else 800)
    r = ragfind.Retriever(encoder=HashEncoder() if encoder else None, chunk_size=None, cache_size=0)
    r.add_documents(docs)
    rec = Recording(r)
    s = Service(rec, None)
    for n, q in enumerate(queries[:60]):
        same_bytes(s, rec, {"query": q, "k": 10})
        if n % 4 == 0:
            same_bytes(s, rec, {"query": q, "k": 25, "highlight": True})
        if n % 7 == 0:
            same_bytes(s, rec, {"query": [q, q.lower()], "k": 5, "highlight": False, "collapse": "document"})
    r.close()


def fake(score, ranks, scores, chunk_id=3, highlights=()):
    return SimpleNamespace(
        doc_id="d",
        id=chunk_id,
        title="T",
        text="caf\u00e9 \u2014 text",
        score=score,
        ranks=MappingProxyType(ranks),
        scores=MappingProxyType(scores),
        metadata=MappingProxyType({"year": 2020, "tags": ["a"]}),
        source="s",
        start=0,
        end=11,
        highlights=highlights,
    )


@pytest.mark.parametrize(
    "p",
    [
        fake(0.5, {"bm25": 1}, {"bm25": 2.5, "fused": 0.5}),
        fake(np.float32(0.1), {"bm25": np.int64(2)}, {"bm25": np.float32(0.3)}, chunk_id=np.int64(9)),
        fake(math.nan, {"bm25": True}, {"bm25": math.inf, "dense": -math.inf, "fused": math.nan}),
        fake(np.float64("nan"), {}, {"x": np.float64("inf"), "y": np.float64(1e-300)}, highlights=[(0, 4)]),
        fake(True, {"a": 1, "b": 2}, {"a": 1, "b": False}, highlights=[(np.int64(1), np.int32(3))]),
        fake(-0.0, {"bm25": 1}, {"bm25": 1e308, "fused": 5e-324}),
    ],
)
@pytest.mark.parametrize("highlight", [False, True])
def test_rows_with_odd_numbers_as_before(p, highlight):
    new, old = passage_json(p, highlight), old_passage_json(p, highlight)
    assert render_json(new) == render_json(old)
    assert json.dumps(new, allow_nan=False) == json.dumps(old, allow_nan=False)  # no NaN left
    assert [type(v) for v in new["scores"].values()] == [type(v) for v in old["scores"].values()]
    assert type(new["score"]) is type(old["score"]) and type(new["chunk_id"]) is int


def passage(score, ranks, scores, chunk_id=3, metadata=None, highlights=(), cls=Passage):
    """A real Passage (as a search builds one, ranks/scores/metadata read-only views)."""
    return cls(
        id=chunk_id,
        doc_id="d\u00e9",
        text='caf\u00e9 \u2014 "text"\n',
        title="T",
        source="s",
        score=score,
        start=0,
        end=11,
        metadata=MappingProxyType({"year": 2020, "tags": ["a"]}) if metadata is None else metadata,
        ranks=MappingProxyType(ranks) if type(ranks) is dict else ranks,
        scores=MappingProxyType(scores) if type(scores) is dict else scores,
        highlights=list(highlights),
    )


class SubPassage(Passage):
    __slots__ = ()


class Meta(dict):
    pass


ODD_PASSAGES = [
    passage(0.5, {"bm25": 1}, {"bm25": 2.5, "fused": 0.5}),
    passage(0.5, {"bm25": 1, "dense": 4}, {"bm25": 2.5, "fused": 0.5}, metadata={"plain": "dict"}),
    passage(math.nan, {"bm25": 2}, {"bm25": math.inf, "dense": -math.inf, "fused": math.nan}),
    passage(math.inf, {}, {}, metadata=MappingProxyType({})),
    passage(-0.0, {"bm25": 1}, {"bm25": 1e308, "fused": 5e-324}, highlights=[(0, 4), (5, 6)]),
    passage(1e-7, {"bm25": 1}, {"bm25": 1.5e-7}),
    # left to passage_json: NumPy numbers, bool, another class, another mapping type
    passage(np.float32(0.1), {"bm25": np.int64(2)}, {"bm25": np.float32(0.3)}, chunk_id=np.int64(9)),
    passage(0.25, {"bm25": True}, {"bm25": 1.0}),
    passage(0.25, {"bm25": 1}, {"bm25": False}),
    passage(True, {"bm25": 1}, {"bm25": 1.0}),
    passage(0.25, {"bm25": 1}, {"bm25": np.float64("nan")}),
    passage(0.25, {"bm25": 1}, {"bm25": 1.0}, metadata=Meta(a=1)),
    passage(0.25, {"bm25": 1}, {"bm25": 1.0}, metadata=MappingProxyType(Meta(a=1))),
    passage(0.25, {1: 1}, {"bm25": 1.0}),
    passage(0.25, {"bm25": 1}, {"bm25": 1.0}, cls=SubPassage),
    fake(0.5, {"bm25": 1}, {"bm25": 2.5, "fused": 0.5}, highlights=[(np.int64(1), np.int32(3))]),
]


@pytest.mark.parametrize("highlight", [False, True])
def test_rows_read_natively_as_before(rows_path, highlight):
    """One list mixing rows the native reader builds and rows it leaves to passage_json."""
    new = passage_rows(tuple(ODD_PASSAGES), highlight)
    old = [old_passage_json(p, highlight) for p in ODD_PASSAGES]
    assert render_json(new) == render_json(old)
    assert json.dumps(new, allow_nan=False) == json.dumps(old, allow_nan=False)
    for a, b in zip(new, old):
        assert list(a) == list(b)  # the key order
        assert [type(v) for v in a.values()] == [type(v) for v in b.values()]
        assert [type(v) for v in a["scores"].values()] == [type(v) for v in b["scores"].values()]
    # the rows are copies: changing one leaves the passage alone
    new[0]["metadata"]["year"] = 0
    new[0]["ranks"]["bm25"] = 0
    assert ODD_PASSAGES[0].metadata["year"] == 2020 and ODD_PASSAGES[0].ranks["bm25"] == 1


def test_rows_of_any_sequence(rows_path):
    ps = ODD_PASSAGES[:3]
    assert passage_rows(ps) == passage_rows(tuple(ps)) == [old_passage_json(p) for p in ps]
    assert passage_rows(()) == []


def test_rows_of_an_unset_field_raise_as_before(rows_path):
    bare = object.__new__(Passage)  # no slot written
    with pytest.raises(AttributeError):
        passage_json(bare)
    with pytest.raises(AttributeError):
        passage_rows([ODD_PASSAGES[0], bare])


def test_row_maker_arguments():
    fields = tuple(Passage.__dict__[name] for name in ("doc_id", "id", "title", "text", "score"))
    with pytest.raises(ValueError, match="expected 11"):
        _core.json_row_maker(Passage, fields, ROW_KEYS)
    slots = tuple(Passage.__dict__["doc_id"] for _ in ROW_KEYS)
    with pytest.raises(TypeError, match="names"):
        _core.json_row_maker(Passage, slots, (*ROW_KEYS[:-1], 5))
    with pytest.raises(TypeError, match="slot"):
        _core.json_row_maker(Passage, (*slots[:-1], Passage.highlights), ROW_KEYS)
    rows = _core.json_row_maker(Passage, slots, ROW_KEYS)
    with pytest.raises(TypeError, match="expected"):
        rows(ODD_PASSAGES)
    with pytest.raises(TypeError, match="iterable"):
        rows(5, passage_json)
    # a fallback that raises: its error, nothing half-built
    with pytest.raises(KeyError):
        rows([fake(0.5, {}, {})], lambda p: {}["x"])


def test_which_rows_are_read_natively(data_dir):
    """The native reader takes a search's passages and the plain-typed ones above, and leaves
    each of the others to the fallback (so the tests above exercise both)."""
    native = service_module._json_rows
    called = []

    def fallback(p):
        called.append(p)
        return passage_json(p)

    docs, queries = scifact(data_dir, 300)
    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    r.add_documents(docs)
    for q in queries[:20]:
        native(r.search(q, k=10).passages, fallback)
    r.close()
    native(ODD_PASSAGES[:6], fallback)
    assert called == []
    native(ODD_PASSAGES[6:], fallback)
    assert called == ODD_PASSAGES[6:]


def test_rows_when_the_fallback_empties_the_list():
    """The fallback is Python code: a list it changes is read as it was when the call began."""
    ps = list(ODD_PASSAGES)

    def fallback(p):
        ps.clear()
        return passage_json(p)

    rows = service_module._json_rows(ps, fallback)
    assert rows == [old_passage_json(p) for p in ODD_PASSAGES]


# ----- the answer's JSON text written natively (results_json, Service.search_json)


def parsed_alike(a, b):
    """Equal once parsed, floats staying floats and ints ints (1.0 is not 1)."""

    def typed(v):
        if isinstance(v, dict):
            return {k: typed(x) for k, x in v.items()}, list(v)
        if isinstance(v, list):
            return [typed(x) for x in v]
        return type(v), v

    return typed(json.loads(a)) == typed(json.loads(b))


def native_text(passages):
    text = service_module._json_text(passages)
    return None if text is None else bytes(text)


@pytest.mark.parametrize("encoder", [None, "hash"])
def test_search_json_answers_as_search_renders(data_dir, encoder):
    docs, queries = scifact(data_dir, None if encoder is None else 800)
    r = ragfind.Retriever(encoder=HashEncoder() if encoder else None, chunk_size=None, cache_size=0)
    r.add_documents(docs)
    rec = Recording(r)
    s = Service(rec, None)
    bodies = []
    for n, q in enumerate(queries[:80]):
        bodies.append({"query": q, "k": 10})
        if n % 4 == 0:
            bodies.append({"query": q, "k": 25, "highlight": True})
        if n % 7 == 0:
            bodies.append({"query": [q, q.lower()], "k": 5, "collapse": "document"})
    for body in bodies:
        new = s.search_json(body)
        old = render_json(old_answer(rec.last, body.get("highlight") is True))
        new_answer, old_answer_ = json.loads(new), json.loads(old)
        new_answer.pop("timings"), old_answer_.pop("timings")
        assert parsed_alike(json.dumps(new_answer), json.dumps(old_answer_))
        assert list(json.loads(new)) == ["results", "timings", "timings_unit", "cached"]
    # written natively: a search's passages all take the native text
    res = r.search(queries[0], k=10)
    assert native_text(res.passages) is not None
    r.close()


@pytest.mark.parametrize("p", ODD_PASSAGES, ids=range(len(ODD_PASSAGES)))
def test_native_text_of_each_odd_passage(p):
    """The text is the rows' JSON where the native rows are built, None where they fall back."""
    called = []

    def fallback(x):
        called.append(x)
        return passage_json(x)

    rows = service_module._json_rows((p,), fallback)
    text = native_text((p,))
    if called:
        assert text is None
    else:
        assert text is not None and parsed_alike(text, render_json(rows))


STRINGS = [
    "",
    "plain ascii, longer than sixteen bytes for the wide scan",
    'quote " backslash \\ slash / tab \t newline \n cr \r bell \x07 nul \x00 esc \x1b del \x7f',
    "".join(chr(c) for c in range(0x20)) * 3,
    "caf\u00e9 na\u00efve \u00ff",  # one byte per code point, past ASCII
    "\u2014 dash \u03b2-amyloid \u4e2d\u6587 \ufeff",  # two bytes
    "emoji \U0001f600 and \U00010348 gothic",  # four bytes
    "x" * 15 + '"' + "y" * 40 + "\\" + "z" * 17 + "\n",
    "\u00e9" * 15 + '"' + "\u00e9" * 40,
    "\u03b2" * 31 + "\x01" + "a" * 31 + "\u03b2",
]


@pytest.mark.parametrize("value", STRINGS, ids=range(len(STRINGS)))
def test_native_text_of_strings(value):
    p = passage(0.5, {"bm25": 1}, {"bm25": 2.5}, metadata={value: value, "list": [value, (value,)]})
    text = native_text((p,))
    assert text is not None
    assert parsed_alike(text, render_json(passage_rows((p,))))
    assert json.loads(text)[0]["metadata"][value] == value
    text.decode("utf-8")  # valid UTF-8 throughout


def test_native_text_of_random_strings():
    rng = np.random.default_rng(7)
    alphabet = [*"abc XYZ09", '"', "\\", "\n", "\x00", "\x1f", "\x7f", "\u00e9", "\u00ff", "\u0100", "\u2028"]
    alphabet += ["\uffff", "\U0001f600", "\U0010ffff"]
    for _ in range(300):
        s = "".join(rng.choice(alphabet, size=int(rng.integers(0, 80))))
        p = passage(0.5, {"bm25": 1}, {"bm25": 2.5}, metadata={"s": s})
        text = native_text((p,))
        assert json.loads(text)[0]["metadata"]["s"] == s
        assert parsed_alike(text, render_json(passage_rows((p,))))


NUMBERS = [0, -1, 2**63 - 1, -(2**63), 1.0, -0.0, 0.1, 1e-7, 1.5e300, 5e-324, 1e308, 123456789.125, 2.0**60]


def test_native_text_of_numbers_and_constants():
    meta = {"n": NUMBERS, "t": True, "f": False, "none": None, "nested": {"a": [{"b": (1, 2.5)}], "c": {}}}
    p = passage(0.5, {"bm25": 1}, {"bm25": 2.5}, metadata=meta)
    text = native_text((p,))
    assert parsed_alike(text, render_json(passage_rows((p,))))
    got = json.loads(text)[0]["metadata"]
    assert got["n"] == NUMBERS and [type(v) for v in got["n"]] == [type(v) for v in NUMBERS]
    assert got["t"] is True and got["f"] is False and got["none"] is None
    # NaN and the infinities are null, as orjson writes them
    p = passage(0.5, {"bm25": 1}, {"bm25": 2.5}, metadata={"x": [math.nan, math.inf, -math.inf]})
    assert json.loads(native_text((p,)))[0]["metadata"]["x"] == [None, None, None]


class Text(str):
    pass


@pytest.mark.parametrize(
    "metadata",
    [
        {"big": 2**64},  # past 64 bits
        {"key": {1: "a"}},  # a key that is not a str
        {"s": "lone \ud800 surrogate"},
        {"s": Text("a str subclass")},
        {"np": np.float32(1.5)},
        {"set": {1, 2}},
        {"deep": json.loads("[" * 70 + "]" * 70)},
    ],
    ids=["int", "key", "surrogate", "subclass", "numpy", "set", "deep"],
)
def test_native_text_leaves_other_values_to_the_general_path(metadata):
    p = passage(0.5, {"bm25": 1}, {"bm25": 2.5}, metadata=metadata)
    assert native_text((p,)) is None
    assert native_text((ODD_PASSAGES[0], p)) is None  # one such passage: the whole list


def test_native_text_nests_up_to_its_depth():
    p = passage(0.5, {"bm25": 1}, {"bm25": 2.5}, metadata={"deep": json.loads("[" * 60 + "]" * 60)})
    assert parsed_alike(native_text((p,)), render_json(passage_rows((p,))))


def test_native_text_of_a_large_answer_and_after():
    long = "w\u00e9" * 3_000_000  # over the kept buffer's bound: written, then let go
    p = passage(0.5, {"bm25": 1}, {"bm25": 2.5}, metadata={"long": long})
    assert json.loads(native_text((p,)))[0]["metadata"]["long"] == long
    assert native_text(()) == b"[]"
    assert parsed_alike(native_text(ODD_PASSAGES[:2]), render_json(passage_rows(ODD_PASSAGES[:2])))


def test_native_text_arguments():
    with pytest.raises(TypeError, match="sequence"):
        service_module._json_text(5)
    assert (
        _core.json_row_maker(
            Passage, tuple(Passage.__dict__[n] for n in service_module._ROW_SLOTS), ROW_KEYS, True
        )(())
        == b"[]"
    )


# ----- rows written straight from the store (Retriever.search_rows_json)

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma"]
ODD_TEXT = [
    'quote " here',
    "back\\slash",
    "tab\tand\nnewline\x01",
    "caf\u00e9",
    "\u03b2-amyloid \u2014",
    "\U0001f600",
]


def every_kind_of_document(i):
    """Documents with metadata of every shape, titles and texts that need escapes, code points
    of every width; "bigint" alone carries an int JSON's writer leaves to the passages."""
    md = [{}, {"source": f"src-{i}"}, {"url": f"http://x/{i}"}, {"lang": "en", "n": i, "f": 0.5}][i % 4]
    if i % 10 == 7:
        md = {"nested": {"a": [1, 2.5, None, True, "\u00e9"]}, "source": "s\u00e9"}
    text = (
        " ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 30 + i % 20))
        + " "
        + ODD_TEXT[i % len(ODD_TEXT)]
    )
    return {
        "id": f"d{i}",
        "title": f'Title "{i}" {ODD_TEXT[(i + 1) % len(ODD_TEXT)]}',
        "text": text,
        "metadata": md,
    }


@pytest.mark.parametrize("chunk_size", [None, 16])
def test_rows_json_equal_the_rendered_passages(chunk_size):
    docs = [every_kind_of_document(i) for i in range(80)]
    docs.append({"id": "bigint", "text": "zebra alpha", "metadata": {"n": 2**70}})
    r = ragfind.Retriever(encoder=None, cache_size=0, chunk_size=chunk_size)
    r.add_documents(docs)
    r.delete_documents([f"d{i}" for i in range(0, 80, 9)])
    for q in [
        "alpha",
        "beta gamma",
        "omega kappa sigma",
        "caf\u00e9",
        "delta",
        "\U0001f600",
        "nothingmatches",
    ]:
        for k in (1, 5, 40, 1500):
            got = r.search_rows_json(q, k)
            passages = r.search(q, k=k, use_cache=False).passages
            if any(p.doc_id == "bigint" for p in passages):
                assert got is None  # the passages show what the writer leaves
                continue
            text, timings, cached = got
            assert not cached and set(timings) >= {"bm25", "first_stage", "store", "total"}
            assert parsed_alike(text, render_json(passage_rows(passages)))
            assert [list(row) for row in json.loads(text)] == [list(ROW_KEYS)] * len(passages)
    assert r.search_rows_json("nothingmatches", 3)[0] == b"[]"
    assert r.search_rows_json("zebra", 3) is None
    r.close()


def test_rows_json_through_the_results_cache():
    r = ragfind.Retriever(encoder=None, chunk_size=None)
    r.add_documents([every_kind_of_document(i) for i in range(40)])
    text, _, cached = r.search_rows_json("alpha", 5)
    assert not cached
    again, timings, cached = r.search_rows_json("alpha", 5)
    assert cached and again == text and "cache" in timings
    # search() answers from the same entry, passages equal to a fresh search's
    res = r.search("alpha", k=5)
    assert res.cached
    assert [_fields(p) for p in res] == [_fields(p) for p in r.search("alpha", k=5, use_cache=False)]
    assert res[0].highlights == r.search("alpha", k=5, use_cache=False)[0].highlights
    stats = r.cache_stats()["results"]
    assert (stats["hits"], stats["misses"]) == (2, 1)
    # an entry of passages (a search() first) is left to search()
    r.search("beta", k=5)
    assert r.search_rows_json("beta", 5) is None
    # a write empties the cache
    r.add_documents([{"id": "new", "text": "alpha alpha alpha"}])
    text, _, cached = r.search_rows_json("alpha", 5)
    assert not cached
    assert "new" in [row["doc_id"] for row in json.loads(r.search_rows_json("alpha", 100)[0])]
    r.close()


def _fields(p):
    return (p.id, p.doc_id, p.text, p.title, p.source, p.score, p.start, p.end, dict(p.metadata))


def test_rows_json_only_for_one_ranked_list(data_dir):
    docs, _ = scifact(data_dir, 200)
    hybrid = ragfind.Retriever(encoder=HashEncoder(), chunk_size=None, cache_size=0)
    hybrid.add_documents(docs)
    assert hybrid.search_rows_json("cells", 5) is None  # two stages: fused
    hybrid.close()
    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    r.add_documents(docs)
    for query, k in [
        ("", 5),
        ("   ", 5),
        (5, 5),
        (["cells"], 5),
        ("cells", 0),
        ("cells", "5"),
        ("cells", True),
    ]:
        assert r.search_rows_json(query, k) is None  # search() says what is wrong
    assert r.search_rows_json("cells", 5) is not None
    r.close()


def test_rows_json_of_text_that_is_not_utf8():
    """A mapped file's arena is checked for bounds, not UTF-8: such a row is left to the
    passages, which show U+FFFD where the bytes are not UTF-8."""
    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    r.add_documents([{"id": "a", "text": "alpha zzqqmark omega"}, {"id": "b", "text": "alpha beta"}])
    arena = r.store.columns._arena.buf
    at = bytes(arena).find(b"zzqqmark")
    arena[at + 2] = 0xFF
    assert r.search_rows_json("omega", 5) is None
    assert "\ufffd" in r.search("omega", k=5)[0].text
    assert r.search_rows_json("beta", 5) is not None  # the other document's rows are fine
    s = Service(r, None)
    assert "\ufffd" in json.loads(s.search_json({"query": "omega", "k": 5}))["results"][0]["text"]
    r.close()


@pytest.mark.parametrize("cache_size", [0, 1024])
def test_service_search_json_from_the_store_as_search_renders(data_dir, cache_size):
    docs, queries = scifact(data_dir, 1500)
    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=cache_size)
    r.add_documents(docs)
    s = Service(r, None)
    for q in list(dict.fromkeys(queries))[:60]:  # each once: the first search is not cached
        body = {"query": q, "k": 10}
        new = json.loads(s.search_json(body))
        old = json.loads(render_json(s.search(body)))
        assert parsed_alike(json.dumps(new["results"]), json.dumps(old["results"]))
        assert new["cached"] is False and old["cached"] is (cache_size > 0)
        assert list(new["timings"]) == list(old["timings"]) or cache_size
    if cache_size:
        assert json.loads(s.search_json({"query": "fresh query text", "k": 3}))["cached"] is False
        assert json.loads(s.search_json({"query": "fresh query text", "k": 3}))["cached"] is True
    r.close()
