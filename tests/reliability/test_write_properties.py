"""What is accepted is kept: random sequences of adds (well-formed and not), deletes, filtered
searches, saves, loads and restarts, driven through a Retriever and through the service (in
process; a restart without a checkpoint replays the write log, as after ``kill -9``), and
checked after every step against a plain Python model:

- every acknowledged write is found by id (the document as JSON reads it back) and by search;
- every refused write raised a TypeError or ValueError (the service: a 4xx) and left nothing;
- every saved folder loads, and a restart finds what the model says it must;
- filters give what the plain Python evaluator (tests/filter_reference.py) gives, and a filter
  value of another kind than its field's is a TypeError.

Whether a write is accepted is decided by :func:`reference_check`, written from the documented
rules, not from ragfind's check. ``RAGFIND_PROPERTY_EXAMPLES`` sets the number of examples of
each machine (a long campaign: ``RAGFIND_PROPERTY_EXAMPLES=20000``).
"""

from __future__ import annotations

import copy
import math
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import ragfind
from filter_reference import doc_ids_as_stored, kind, mismatch, ref, unknown_exists
from hash_encoders import HashEncoder
from ragfind.serve.service import ApiError, Service

EXAMPLES = int(os.environ.get("RAGFIND_PROPERTY_EXAMPLES", "25"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
FIELDS = ["a", "b", "é"]
#: Every text holds this word, so one query finds every document.
ALL = "zzall"

# ----------------------------------------------------------------------------- strategies

chars = st.one_of(
    st.sampled_from(list("abc é中ß\x00\n\t\u200b\U0001f600")),
    st.characters(),
    st.just("\ud800"),  # a lone surrogate: not valid Unicode, refused
)
strings = st.text(chars, max_size=6)
ids = st.one_of(
    strings,
    st.integers(-3, 2**70),
    st.sampled_from([None, 4.5, True, b"x", ""]),
)
scalar_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([2**60 + 1, -(2**1100), 0.5, -0.0, 1e300, math.nan, math.inf, -math.inf]),
    st.floats(allow_nan=True, allow_infinity=True),
    strings,
    st.sampled_from([np.int64(3), np.float32(0.5), {1, 2}, b"raw", object()]),
)
json_values = st.recursive(
    scalar_values,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=2)),
    max_leaves=5,
)


def _deep(n):
    v: object = 1
    for _ in range(n):
        v = [v]
    return v


values = st.one_of(json_values, st.sampled_from([_deep(31), _deep(40), (1, "t")]))
metadatas = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=3),
    st.sampled_from([[1], "m", {1: "int key"}]),
)
texts = st.one_of(
    strings.map(lambda s: f"{ALL} {s}"),
    st.integers(2_000, 30_000).map(lambda n: f"{ALL} " + "long " * n),
    st.sampled_from([None, 7, "", "   "]),
)


@st.composite
def documents(draw):
    d = {"id": draw(ids), "text": draw(texts)}
    if draw(st.booleans()):
        d["title"] = draw(st.one_of(st.none(), strings, st.just(3)))
    md = draw(metadatas)
    if md is not None or draw(st.booleans()):
        d["metadata"] = md
    extra = draw(st.sampled_from([None, None, None, None, None, None, "drop id", "drop text", "url"]))
    if extra == "drop id":
        del d["id"]
    elif extra == "drop text":
        del d["text"]
    elif extra == "url":
        d["url"] = "u"
    return d if draw(st.integers(0, 30)) else "not a document"


batches = st.lists(documents(), max_size=4)
mostly_valid = st.lists(
    st.fixed_dictionaries(
        {"id": st.text("abcdef", min_size=1, max_size=3), "text": strings.map(lambda s: f"{ALL} {s}")},
        optional={
            "title": st.text("xy ", max_size=3),
            "metadata": st.dictionaries(
                st.sampled_from(FIELDS),
                st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.5, -1.5])),
                max_size=3,
            ),
        },
    ),
    min_size=1,
    max_size=4,
)

# ----------------------------------------------------------------------------- the reference


class Refused(Exception):
    pass


def _valid_string(s):
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_value(v, depth):
    """The value as JSON reads it back; Refused when a write may not hold it."""
    if v is None or isinstance(v, (bool, np.bool_)):
        return None if v is None else bool(v)
    if isinstance(v, (int, np.integer)):
        if abs(int(v)) >= 2**1023:
            raise Refused
        return int(v)
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            raise Refused
        return float(v)
    if isinstance(v, str):
        if not _valid_string(v):
            raise Refused
        return v
    if isinstance(v, (list, tuple)):
        if depth >= 32:
            raise Refused
        return [_json_value(x, depth + 1) for x in v]
    if isinstance(v, dict):
        if depth >= 32 or not all(isinstance(k, str) and _valid_string(k) for k in v):
            raise Refused
        return {k: _json_value(x, depth + 1) for k, x in v.items()}
    raise Refused


def reference_check(batch, present, held):
    """The documents as stored, or Refused: the documented rules of a write."""
    out, seen, kinds = [], set(), {f: set(k) for f, k in held.items()}
    for d in batch:
        if not isinstance(d, dict) or set(d) - {"id", "title", "text", "metadata"}:
            raise Refused
        if "id" not in d or "text" not in d:
            raise Refused
        i = d["id"]
        if isinstance(i, bool) or not isinstance(i, (str, int)) or i == "":
            raise Refused
        i = str(i)
        if not _valid_string(i) or i in seen or i in present:
            raise Refused
        seen.add(i)
        if not isinstance(d["text"], str) or not _valid_string(d["text"]):
            raise Refused
        title = d.get("title")
        if title is not None and (not isinstance(title, str) or not _valid_string(title)):
            raise Refused
        md = d.get("metadata")
        if md is not None and not isinstance(md, dict):
            raise Refused
        md = _json_value(md or {}, 0)
        for f, v in md.items():
            k = kind(v)
            if k != "null" and kinds.get(f, set()) - {"null"} and k not in kinds[f]:
                raise Refused
            kinds.setdefault(f, set()).add(k)
        out.append({"id": i, "title": title or "", "text": d["text"], "metadata": md})
    return out, kinds


def filters_for(model):
    """Filters over the model's fields, with values from its documents (hits) and others."""
    seen = [v for d in model.values() for v in d["metadata"].values() if kind(v) != "other"]
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.sampled_from([0.5, math.nan]),
        st.text("ab", max_size=2),
    )
    if seen:
        scalars = st.one_of(st.sampled_from(seen), scalars)
    op_value = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), scalars),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(scalars, max_size=3)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), scalars.filter(lambda v: v is not None)),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    cond = st.one_of(scalars, st.lists(op_value, min_size=1, max_size=2).map(dict))
    leaf = st.dictionaries(st.sampled_from(FIELDS + ["doc_id", "title"]), cond, min_size=1, max_size=2)

    def nest(inner):
        return st.one_of(
            inner,
            st.lists(inner, min_size=1, max_size=2).map(lambda fs: {"$or": fs}),
            st.lists(inner, min_size=1, max_size=2).map(lambda fs: {"$and": fs}),
            inner.map(lambda f: {"$not": f}),
        )

    return nest(nest(leaf))


def _has_nan(v):
    if isinstance(v, float):
        return v != v
    if isinstance(v, dict):
        return any(_has_nan(x) for x in v.values())
    return isinstance(v, list) and any(_has_nan(x) for x in v)


def _range_of_bool(v):
    """A range over a bool is a TypeError (ranges need an order)."""
    if isinstance(v, dict):
        return any(
            (op in ("$gt", "$gte", "$lt", "$lte") and isinstance(x, bool)) or _range_of_bool(x)
            for op, x in v.items()
        )
    return isinstance(v, list) and any(_range_of_bool(x) for x in v)


# ----------------------------------------------------------------------------- the machines


class RetrieverWrites(RuleBasedStateMachine):
    """Writes straight to a :class:`ragfind.Retriever`; a restart loads the last save."""

    def __init__(self):
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="ragfind-props-")
        self.folder = os.path.join(self.tmp, "kb")
        self.model: dict = {}
        self.kinds: dict = {}
        self.saved = None
        self.r = None

    def new_retriever(self, cache_size):
        return ragfind.Retriever(
            encoder=HashEncoder(dim=16), chunk_size=None, contextualize=False, cache_size=cache_size
        )

    @initialize(cache_size=st.sampled_from([0, 64]))
    def start(self, cache_size):
        self.r = self.new_retriever(cache_size)

    def teardown(self):
        self.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def close(self):
        if self.r is not None:
            self.r.close()

    # -- doors (the service machine writes through its own)

    def write(self, batch):
        self.r.add_documents(batch)

    def remove(self, ids):
        self.r.delete_documents(ids)

    def refusals(self):
        return (TypeError, ValueError)

    # -- rules

    def add(self, batch):
        try:
            stored, kinds = reference_check(batch, set(self.model), self.kinds)
            if not stored and self.empty_is_refused():
                raise Refused
        except Refused:
            before = self.snapshot()
            with pytest.raises(self.refusals()):
                self.write(batch)
            assert self.snapshot() == before, "a refused write left something behind"
            return
        self.write(batch)
        self.model.update({d["id"]: d for d in stored})
        self.kinds = kinds

    def empty_is_refused(self):
        return False

    @rule(batch=batches)
    def add_any(self, batch):
        self.add(batch)

    @rule(batch=mostly_valid)
    def add_plain(self, batch):
        self.add(batch)

    @rule(data=st.data())
    def delete(self, data):
        ids = data.draw(
            st.lists(st.sampled_from(sorted(self.model) + ["nope"]), min_size=1, max_size=2, unique=True)
        )
        if "nope" in ids and "nope" not in self.model:
            before = self.snapshot()
            with pytest.raises(self.missing_error()):
                self.remove(ids)
            assert self.snapshot() == before
            return
        self.remove(ids)
        for i in ids:
            del self.model[i]

    def missing_error(self):
        return KeyError

    @rule(data=st.data())
    def search_filtered(self, data):
        filters = data.draw(filters_for(self.model))
        held = dict(self.kinds)
        held.setdefault("doc_id", set()).add("str")
        held.setdefault("title", set()).add("str")
        stored = doc_ids_as_stored(filters)
        if (
            _has_nan(filters)
            or unknown_exists(stored, held)
            or mismatch(stored, held)
            or _range_of_bool(filters)
        ):
            with pytest.raises((TypeError, ValueError)):
                self.search(filters)
            return
        want = {i for i in self.searchable() if ref(stored, self.model[i])}
        assert set(self.search(filters)) == want, filters

    def search(self, filters=None):
        return self.r.search(ALL, k=len(self.model) + 5, filters=filters).doc_ids

    @rule()
    def save(self):
        self.r.save(self.folder)
        self.saved = (copy.deepcopy(self.model), copy.deepcopy(self.kinds))

    @precondition(lambda self: self.saved is not None)
    @rule(cache_size=st.sampled_from([0, 64]))
    def restart(self, cache_size):
        self.close()
        self.r = ragfind.Retriever.load(self.folder, encoder=HashEncoder(dim=16))
        self.r.set_cache_size(cache_size)
        self.model, self.kinds = copy.deepcopy(self.saved)

    # -- checks

    def snapshot(self):
        return (len(self.r), sorted(self.search()))

    def searchable(self):
        """Documents with a word to find: an empty or blank text makes no chunk."""
        return {i for i, d in self.model.items() if d["text"].startswith(ALL)}

    @invariant()
    def everything_acknowledged_is_there(self):
        if self.r is None:
            return
        assert len(self.r) == len(self.model)
        assert set(self.search()) == self.searchable()
        for i, d in self.model.items():
            assert self.r.get_document(i) == d


class ServiceWrites(RetrieverWrites):
    """Writes through the service (``POST /documents`` and ``DELETE``, in process); a restart
    opens the folder again without a checkpoint, so the write log is replayed."""

    def new_retriever(self, cache_size):
        r = super().new_retriever(cache_size)
        r.save(self.folder)
        self.service = Service(ragfind.Retriever.load(self.folder, encoder=HashEncoder(dim=16)), self.folder)
        self.saved = ({}, {})
        r.close()
        return self.service.retriever

    def write(self, batch):
        self.service.add({"documents": batch})

    def remove(self, ids):
        for i in ids:
            self.service.delete(i)

    def refusals(self):
        return ApiError

    def missing_error(self):
        return ApiError

    def empty_is_refused(self):
        return True

    @rule()
    def save(self):
        self.service.checkpoint()

    @rule(cache_size=st.sampled_from([0, 64]))
    def restart(self, cache_size):
        # As after kill -9: the log is not folded in first; the new service replays it.
        self.service.log.close()
        self.service.retriever.close()
        r = ragfind.Retriever.load(self.folder, encoder=HashEncoder(dim=16))
        r.set_cache_size(cache_size)
        self.service = Service(r, self.folder)
        self.r = r

    @rule(data=st.data())
    def delete(self, data):
        ids = data.draw(
            st.lists(st.sampled_from(sorted(self.model) + ["nope"]), min_size=1, max_size=2, unique=True)
        )
        for i in ids:
            if i not in self.model:
                before = self.snapshot()
                with pytest.raises(ApiError):
                    self.service.delete(i)
                assert self.snapshot() == before
                return
            self.service.delete(i)
            del self.model[i]

    def close(self):
        if getattr(self, "service", None) is not None:
            self.service.close()
            self.service.retriever.close()
            self.service = None


RetrieverWrites.TestCase.settings = SETTINGS
ServiceWrites.TestCase.settings = SETTINGS
test_retriever_keeps_what_it_accepts = RetrieverWrites.TestCase
test_service_keeps_what_it_accepts = ServiceWrites.TestCase
