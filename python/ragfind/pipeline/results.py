"""What a search returns: :class:`Passage` (one chunk, with every stage's rank and score) and
:class:`SearchResult` (the passages plus what the search cost)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import FrozenInstanceError, dataclass, field, fields
from types import MappingProxyType
from typing import Any

from ragfind import _core

__all__ = ["Passage", "SearchResult"]

_EMPTY: Mapping = MappingProxyType({})
#: ``Passage.metadata`` of a document without metadata (shared, read-only).
EMPTY_MAPPING = _EMPTY


class _LazySlot:
    """The ``highlights`` field: its slot holds a list, or a computation run on first read and
    replaced by its result: a :func:`pending` value, or a callable of the passage's text whose
    type sets ``of_passage_text`` (one highlighter shared by a whole list, no object per
    passage).

    Highlighting analyzes the whole passage text, which costs more than the search itself, so a
    search leaves it to the first reader; the result is the same as computing it eagerly.
    """

    def __init__(self, member: Any) -> None:
        self.member = member  # the slot's own descriptor

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        value = self.member.__get__(obj, owner)
        kind = type(value)
        if kind is list:
            return value
        if kind is _Pending:
            value = value.compute()
            self.member.__set__(obj, value)
        elif getattr(kind, "of_passage_text", False):
            value = value(obj.text)
            self.member.__set__(obj, value)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        self.member.__set__(obj, value)


class _Pending:
    __slots__ = ("fn", "arg")

    def __init__(self, fn: Any, arg: Any) -> None:
        self.fn, self.arg = fn, arg

    def compute(self) -> Any:
        return self.fn(self.arg)


def pending(fn: Any, arg: Any) -> _Pending:
    """A ``highlights`` value computed as ``fn(arg)`` when first read."""
    return _Pending(fn, arg)


@dataclass(frozen=True)
class Passage:
    """One retrieved chunk.

    Attributes:
        id: the chunk id (int, unique in the store).
        doc_id: the id of its document.
        text: the chunk text shown to the generator (no contextual prefix).
        title: the document title.
        source: where it comes from: the document's ``metadata["source"]`` (or ``"url"``) when
            set, else the document id.
        score: the final score (fused RRF score, or the last re-ranker's score when re-ranked).
        start, end: character offsets of the chunk in its document's text.
        metadata: the document metadata.
        context: the contextual-retrieval prefix it was indexed with.
        ranks: ``{first-stage name: 1-based rank}`` in each first-stage list that holds the
            chunk, for the phrasing that ranked it best (equal ranks: the higher score); a
            stage missing from it did not retrieve the chunk.
        scores: ``{first-stage name: that stage's score}`` at that rank, ``"fused"``: the RRF
            score, and when re-ranked each re-ranker's score under its name
            (``"cross_encoder"`` for the cross-encoder).
        highlights: ``[(start, end), ...]`` character offsets into ``text`` where an analyzed
            query term or phrase matched (sorted, non-overlapping; the surface form, so
            "Defibrillators" for the query "defibrillator"); see
            :func:`ragfind.pipeline.highlights.snippet`. Computed on first read (a search does
            not pay for highlights nobody reads).

    The fields live in slots (no per-instance ``__dict__``): a search builds one per result.
    The passages a search builds are not tracked by the cyclic garbage collector (they hold no
    reference cycle, and a results cache keeps thousands that every collection would walk
    again): a cycle made through one of their mutable values, such as a passage appended to its
    own ``highlights`` or ``metadata`` lists, is not collected.
    """

    id: int
    doc_id: str
    text: str
    title: str
    source: str
    score: float
    start: int
    end: int
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)
    context: str = ""
    ranks: Mapping[str, int] = field(default_factory=lambda: _EMPTY, compare=False)
    scores: Mapping[str, float] = field(default_factory=lambda: _EMPTY, compare=False)
    highlights: list = field(default_factory=list, compare=False)

    # Pickled with its read-only views as dicts (a mappingproxy does not pickle), and
    # highlights computed.
    def __getstate__(self) -> tuple:
        values = (getattr(self, f) for f in _FIELD_NAMES)
        return tuple(dict(v) if type(v) is MappingProxyType else v for v in values)

    def __setstate__(self, state: tuple) -> None:
        for slot, value in zip(SLOTS, state):
            slot.__set__(self, MappingProxyType(value) if type(value) is dict else value)


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _slotted(cls: type) -> type:
    """The dataclass ``cls`` made again with a slot per field, as ``dataclass(slots=True)``
    does (Python 3.10+; this runs on 3.9 too)."""
    names = tuple(f.name for f in fields(cls))
    body = {k: v for k, v in cls.__dict__.items() if k not in names + ("__dict__", "__weakref__")}
    body["__slots__"] = names
    # The frozen methods dataclass made name the old class; with no __dict__, every name is frozen.
    body["__setattr__"] = _frozen_setattr
    body["__delattr__"] = _frozen_delattr
    new = type(cls)(cls.__name__, cls.__bases__, body)
    new.__qualname__ = cls.__qualname__
    if "__setstate__" not in body:  # pickle writes slots through setattr, which is frozen
        members = tuple(new.__dict__[n] for n in names)

        def __getstate__(self: Any) -> tuple:
            return tuple(m.__get__(self) for m in members)

        def __setstate__(self: Any, state: tuple) -> None:
            for m, value in zip(members, state):
                m.__set__(self, value)

        new.__getstate__, new.__setstate__ = __getstate__, __setstate__
    return new


_FIELD_NAMES = tuple(f.name for f in fields(Passage))
Passage = _slotted(Passage)  # type: ignore[misc]
#: The slot descriptors of Passage's fields, in field order: what builders write through (past
#: the frozen ``__setattr__`` and the lazy ``highlights``).
SLOTS = tuple(Passage.__dict__[f] for f in _FIELD_NAMES)
Passage.highlights = _LazySlot(Passage.__dict__["highlights"])  # type: ignore[attr-defined]


@dataclass(frozen=True)
class SearchResult(Sequence):
    """Passages best first, plus what the search cost.

    Behaves as a read-only sequence of :class:`Passage`.

    Attributes:
        passages: the passages.
        timings: seconds, by key:

            - ``<stage>`` (``bm25``, ``dense``, ``splade``, ...): the wall time of each
              first-stage retriever over every phrasing, its query encoding included;
            - ``embed``: the part of those spent encoding queries (stages with an ``embed``
              step, e.g. dense; absent when no stage encodes);
            - ``first_stage``: the wall time of all first stages together (they run
              concurrently, so it is less than their sum when they overlap);
            - ``filter``: evaluating ``filters`` into the allowed chunks (only when given);
            - ``fusion``: reciprocal rank fusion; ``store``: fetching the passages;
            - ``<rerank stage>`` and ``cross_encoder``: each re-ranker, and ``rerank`` all of
              them (only when re-ranking ran);
            - ``total``: the whole search.

            A cache hit reports ``cache`` and ``total`` only.
        cached: True when served from the results cache.
        queries: the phrasings searched.
        concurrent: the first stages whose run overlapped another's in time (they run on the
            worker pool and the calling thread at once; a stage waiting for a free worker may
            not overlap); empty when one stage ran, or on a cache hit.
        missing: the parts of the collection a ``partial=True`` search left out (shard
            numbers of a sharded retriever); empty when it searched them all.
    """

    passages: tuple
    timings: Mapping[str, float]
    cached: bool = False
    queries: tuple = ()
    concurrent: tuple = ()
    missing: tuple = ()

    @property
    def partial(self) -> bool:
        """True when part of the collection was left out (see ``missing``)."""
        return bool(self.missing)

    def __len__(self) -> int:
        return len(self.passages)

    def __getitem__(self, i):
        return self.passages[i]

    def __iter__(self):
        return iter(self.passages)

    @property
    def doc_ids(self) -> list:
        """Document ids of the passages, in order, each once (first occurrence)."""
        seen: dict = {}
        for p in self.passages:
            seen.setdefault(p.doc_id, None)
        return list(seen)


SearchResult = _slotted(SearchResult)  # type: ignore[misc]
_RESULT_SLOTS = tuple(SearchResult.__dict__[f.name] for f in fields(SearchResult))


#: ``passage_from_fields(*values)``: a :class:`Passage` of every field's value in field order,
#: written straight into its slots (no frozen ``__setattr__``, no ``highlights`` computation;
#: native): a search builds one per result.
passage_from_fields = _core.slot_filler(Passage, SLOTS, untrack=True)


def set_highlights(p: Passage, value: Any) -> None:
    """Sets a passage's ``highlights`` (a list, or a :func:`pending` value) in place: only for
    a passage its builder has not shared yet."""
    SLOTS[-1].__set__(p, value)


def metadata_and_source(metadata: str, doc_id: str) -> tuple:
    """``(Passage.metadata, Passage.source)`` of a document's metadata JSON: a read-only view
    of it, and its ``"source"`` (or ``"url"``) when set, else the document id."""
    if metadata == "{}":
        return _EMPTY, doc_id
    md = MappingProxyType(json.loads(metadata))
    return md, str(md.get("source") or md.get("url") or doc_id)


_RANK_VIEWS: dict = {}


def rank_views(stage: str) -> tuple:
    """``Passage.ranks`` of the first 1,000 ranks in one stage, ``{stage: rank}`` (read-only
    views shared by every passage ranked by that stage alone)."""
    views = _RANK_VIEWS.get(stage)
    if views is None:
        views = tuple(MappingProxyType({stage: r}) for r in range(1, 1001))
        if len(_RANK_VIEWS) < 64:
            _RANK_VIEWS[stage] = views
    return views


#: ``result_from_fields(passages, timings, cached, queries, concurrent, missing)``: a
#: :class:`SearchResult` written straight into its slots, as :func:`passage_from_fields` builds
#: passages.
result_from_fields = _core.slot_filler(SearchResult, _RESULT_SLOTS)
