"""Metadata filters: a filter dict compiles to a tree that the native metadata index
(:class:`ragfind._core.MetadataIndex`, postings per field value kept up to date on every add and
delete) evaluates into the allowed chunks; every stage gets them as an :class:`ragfind.IdFilter`.
No SQL and no Python loop over documents: a filter costs the postings it reads.

A filter evaluated once is kept (:class:`FilterCompiler`) and patched after each write: only the
chunks written since are tested again, so a search right after a one-document write does not
evaluate the filter again. The result is a bitmap over chunk ids, which the BM25 index turns
into its allowed-set a word at a time (no id array); other indexes read the ids, listed once.

Syntax (Mongo / Chroma style)::

    {"lang": "en"}                                  # equality ($eq)
    {"tenant": [1, 5]}                              # a list: $in
    {"year": {"$gte": 2020, "$lt": 2024}}           # ranges: $gt $gte $lt $lte (numbers or str)
    {"lang": {"$ne": "en"}}, {"lang": {"$nin": ["en", "fr"]}}
    {"draft": False}                                # booleans
    {"tags": {"$exists": True}}                     # the key is present (null included)
    {"year": {"$not": {"$gte": 2020}}}              # negates a field's conditions
    {"$and": [{...}, {...}]}, {"$or": [{...}, {...}]}, {"$not": {...}}   # nested up to 32 levels

Several fields in one dict, or several operators on one field, must all hold. ``doc_id`` and
``title`` (:data:`BUILTIN_FIELDS`) are fields too (an int ``doc_id`` matches as ``str(id)``, as
``add_documents`` stores it). Values are str, numbers (ints and floats
compare as numbers; ints beyond 2**53 as their nearest float), bools (never equal to a number)
or None: ``{"f": None}`` matches a null or missing ``f``, ``{"f": {"$ne": None}}`` a non-null one.
``$ne`` and ``$nin`` match only documents holding a non-null value (``$nin: []`` matches all).
"""

from __future__ import annotations

import json
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ragfind import _core
from ragfind.errors import IndexFileError
from ragfind.ids import IdFilter
from ragfind.persist.sectioned import SectionedFile, write_sectioned
from ragfind.pipeline.cache import LRUCache, freeze

__all__ = [
    "BUILTIN_FIELDS",
    "OPERATORS",
    "LOGICAL_OPERATORS",
    "MetadataFilters",
    "FilterCompiler",
    "SelectionFilter",
    "MAX_FILTER_DEPTH",
]

#: Document fields every filter may use besides the metadata keys.
BUILTIN_FIELDS = ("doc_id", "title")
OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$not")
LOGICAL_OPERATORS = ("$and", "$or", "$not")
_RANGE = {"$gt": (True, False), "$gte": (True, True), "$lt": (False, False), "$lte": (False, True)}
#: Bits of MetadataIndex.kinds(): null, str, number, bool, other (a list or an object).
KIND_NULL, KIND_STR, KIND_NUM, KIND_BOOL, KIND_OTHER = 1, 2, 4, 8, 16
_KIND_NAMES = ((KIND_STR, "str"), (KIND_NUM, "number"), (KIND_BOOL, "bool"), (KIND_OTHER, "list/object"))
#: The deepest a filter may nest: dicts inside dicts (through $and, $or, $not or a field's
#: operators) count a level each, as does a list inside a list. Real filters use a few levels;
#: the bound keeps every recursive walk of a filter far from Python's recursion limit.
MAX_FILTER_DEPTH = 32
_SCALARS = frozenset((str, int, float, bool, type(None)))
METADATA_MAGIC = b"RFMETA\x00\x01"
METADATA_VERSION = 1


def check_filters(filters: Any) -> None:
    """TypeError unless None or a dict; ValueError past :data:`MAX_FILTER_DEPTH` levels.

    The first check of every filter, before anything walks it recursively (the results cache
    key, the compiler), so a filter nested a thousand levels deep is a ValueError naming its
    depth, not a RecursionError."""
    if filters is None:
        return
    if not isinstance(filters, Mapping):
        raise TypeError(f"filters is a {type(filters).__name__}; expected a dict of field -> condition")
    stack = [(filters, 1)]  # iterative: the point is not to recurse
    while stack:
        node, depth = stack.pop()
        if depth > MAX_FILTER_DEPTH:
            raise ValueError(
                f"filters are nested {depth} levels deep; at most {MAX_FILTER_DEPTH} are allowed "
                "(a level is a dict, or a list inside a list)"
            )
        in_dict = isinstance(node, Mapping)
        for v in node.values() if in_dict else node:
            if type(v) in _SCALARS:
                continue  # most values of a long $in list: no ABC check for them
            if isinstance(v, Mapping):
                stack.append((v, depth + 1))
            elif isinstance(v, (list, tuple, set)):
                stack.append((v, depth if in_dict else depth + 1))


def _internal(name: str) -> str:
    return "b:" + name if name in BUILTIN_FIELDS else "m:" + name


def value_kind(v: Any) -> int:
    """The kind bit of a metadata value, as the metadata index and the filters see it."""
    if v is None:
        return KIND_NULL
    if isinstance(v, bool):
        return KIND_BOOL
    if isinstance(v, str):
        return KIND_STR
    if isinstance(v, (int, float)):
        return KIND_NUM
    return KIND_OTHER


def kind_names(bits: int) -> str:
    """The kinds of value in ``bits`` of :meth:`MetadataIndex.kinds`, in words."""
    return " and ".join(n for b, n in _KIND_NAMES if bits & b)


class _Compiler:
    """Filter dict -> the tuple tree MetadataIndex.select takes (checks every part)."""

    def __init__(self, known: set, kinds: Callable[[str], int]) -> None:
        self.known = known
        self.kinds = kinds

    def filter(self, filters: Any, where: str) -> tuple:
        if not isinstance(filters, Mapping):
            raise TypeError(f"{where} is a {type(filters).__name__}; expected a dict of field -> condition")
        nodes = []
        for key, cond in filters.items():
            if key in ("$and", "$or"):
                if not isinstance(cond, (list, tuple)) or not cond:
                    raise ValueError(
                        f"{where}[{key!r}] = {cond!r}; expected a non-empty list of filter dicts"
                    )
                kids = [self.filter(c, f"{where}[{key!r}][{i}]") for i, c in enumerate(cond)]
                nodes.append((key[1:], kids))
            elif key == "$not":
                nodes.append(("not", self.filter(cond, f"{where}['$not']")))
            elif key in self.known:
                nodes.append(self.field(key, cond))
            elif isinstance(key, str) and key.startswith("$"):
                raise ValueError(
                    f"{where}: unknown operator {key!r}; expected one of {LOGICAL_OPERATORS} or a field"
                )
            else:
                raise ValueError(f"{where}: unknown field {key!r}; known fields: {sorted(self.known)}")
        return _all_of(nodes)

    def field(self, name: str, cond: Any) -> tuple:
        where = f"filters[{name!r}]"
        if isinstance(cond, Mapping):
            ops = cond
        elif isinstance(cond, (list, tuple, set)):
            ops = {"$in": cond}
        else:
            ops = {"$eq": cond}
        if name == "doc_id":
            ops = {op: _as_doc_id(v) for op, v in ops.items()}
        f = _internal(name)
        nodes, lower, upper = [], [], []
        for op, val in ops.items():
            here = f"{where}[{op!r}]"
            if op == "$eq":
                nodes.append(self.eq(f, name, op, val))
            elif op == "$ne":
                self.check_value(name, op, val)
                nodes.append(
                    ("valued", f) if val is None else ("and", [("valued", f), ("not", ("eq", f, val))])
                )
            elif op in ("$in", "$nin"):
                if not isinstance(val, (list, tuple, set)):
                    raise ValueError(f"{here} = {val!r}; expected a list")
                vals = list(val)
                any_of = ("or", [self.eq(f, name, op, v) for v in vals]) if vals else ("none",)
                if op == "$in":
                    nodes.append(any_of)
                elif vals:
                    nodes.append(("and", [("valued", f), ("not", any_of)]))
            elif op in _RANGE:
                if val is None or isinstance(val, bool):
                    raise TypeError(f"{here} = {val!r}; expected a number or a str (a range needs an order)")
                self.check_value(name, op, val)
                (lower if _RANGE[op][0] else upper).append((val, _RANGE[op][1]))
            elif op == "$exists":
                if not isinstance(val, bool):
                    raise TypeError(f"{here} = {val!r}; expected True or False")
                nodes.append(("present", f) if val else ("not", ("present", f)))
            elif op == "$not":
                if not isinstance(val, Mapping):
                    raise ValueError(f"{here} = {val!r}; expected a dict of operators, e.g. {{'$gt': 5}}")
                nodes.append(("not", self.field(name, val)))
            else:
                raise ValueError(f"{where}: unknown operator {op!r}; expected one of {OPERATORS}")
        if (
            len(lower) <= 1
            and len(upper) <= 1
            and (not (lower and upper) or isinstance(lower[0][0], str) == isinstance(upper[0][0], str))
        ):
            if lower or upper:  # one range node for a bounded interval: one pass over the values
                lo, lo_inc = lower[0] if lower else (None, True)
                hi, hi_inc = upper[0] if upper else (None, True)
                nodes.append(("range", f, lo, lo_inc, hi, hi_inc))
        else:
            nodes += [("range", f, v, inc, None, True) for v, inc in lower]
            nodes += [("range", f, None, True, v, inc) for v, inc in upper]
        return _all_of(nodes)

    def eq(self, f: str, name: str, op: str, val: Any) -> tuple:
        self.check_value(name, op, val)
        return ("not", ("valued", f)) if val is None else ("eq", f, val)

    def check_value(self, name: str, op: str, v: Any) -> None:
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise TypeError(
                f"filters[{name!r}][{op!r}]: value {v!r} is a {type(v).__name__}; "
                "expected str, number, bool or None"
            )
        if v is None:
            return
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"filters[{name!r}][{op!r}] = {v!r}; expected a finite number")
        held = self.kinds(_internal(name)) & ~KIND_NULL
        bit = value_kind(v)
        if held and not held & bit:
            raise TypeError(
                f"filters[{name!r}][{op!r}]: {v!r} is a {kind_names(bit)} but field {name!r} holds "
                f"{kind_names(held)} values"
            )


def _as_doc_id(v: Any) -> Any:
    """Document ids are stored as str (``add_documents`` takes int ids as ``str(id)``)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if isinstance(v, (list, tuple, set)):
        return [_as_doc_id(x) for x in v]
    if isinstance(v, Mapping):
        return {op: _as_doc_id(x) for op, x in v.items()}
    return v


def _all_of(nodes: list) -> tuple:
    if not nodes:
        return ("all",)
    return nodes[0] if len(nodes) == 1 else ("and", nodes)


def filter_tree(
    filters: Mapping[str, Any], fields: Iterable, kinds: Callable[[str], int] = lambda f: 0
) -> tuple:
    """The tree :meth:`ragfind._core.MetadataIndex.select` evaluates for ``filters``.

    ``fields`` are the metadata keys the store has seen (``doc_id`` and ``title`` are always
    known); ``kinds(internal field name)`` the kinds of value a field holds, for type checks.

    Raises:
        ValueError: an unknown field or operator, ``$in``/``$nin`` without a list, an empty
            ``$and``/``$or``.
        TypeError: a filter that is not a dict, a value of another type than the field's, a
            range over a bool or None, ``$exists`` without a bool.
    """
    check_filters(filters)
    return _Compiler(set(BUILTIN_FIELDS) | set(fields), kinds).filter(filters, "filters")


class MetadataFilters:
    """The metadata index of a retriever's chunks (their document's metadata, ``doc_id`` and
    ``title``), updated on every add and delete, and saved with the folder."""

    def __init__(self, core: Any = None) -> None:
        self.core = core if core is not None else _core.MetadataIndex()

    def __len__(self) -> int:
        return len(self.core)

    def add(self, chunk_ids: np.ndarray, doc_ids: list, titles: list, metadata: list) -> None:
        """One row per chunk: its document's id, title and metadata dict (str keys)."""
        self.core.add(np.asarray(chunk_ids, np.int64), metadata, {"b:doc_id": doc_ids, "b:title": titles})

    def remove(self, chunk_ids: np.ndarray) -> int:
        return self.core.remove(np.asarray(chunk_ids, np.int64))

    def kinds(self, field: str) -> int:
        return self.core.kinds(field)

    @property
    def kinds_version(self) -> int:
        """Changes whenever a field holds a kind of value it never held."""
        return self.core.kinds_version

    def select(self, tree: tuple) -> IdFilter:
        return IdFilter.from_sorted(self.core.select(tree))

    def compile(self, tree: tuple) -> SelectionFilter:
        """The filter tree evaluated, as an IdFilter that :meth:`refresh` keeps up to date."""
        return SelectionFilter(self.core, self.core.compile(tree))

    def refresh(self, allowed: SelectionFilter) -> SelectionFilter:
        """``allowed`` at the index's current state: itself when nothing was written since, else
        a new one with only the chunks written since tested again."""
        sel = self.core.refresh(allowed.selection)
        return allowed if sel is allowed.selection else SelectionFilter(self.core, sel, allowed)

    def live_ids(self) -> np.ndarray:
        return self.core.live_ids()

    @classmethod
    def from_rows(cls, rows: Iterable[tuple], batch: int = 50_000) -> MetadataFilters:
        """Built from ``(chunk id, doc_id, title, metadata JSON)`` rows (a store written before
        folders held the index)."""
        out = cls()
        part: list = []
        for row in rows:
            part.append(row)
            if len(part) >= batch:
                out._add_rows(part)
                part = []
        if part:
            out._add_rows(part)
        return out

    def _add_rows(self, rows: list) -> None:
        cache: dict = {}
        metadata = []
        for r in rows:
            md = cache.get(r[1])
            if md is None:
                md = cache[r[1]] = json.loads(r[3])
            metadata.append(md)
        self.add(
            np.asarray([r[0] for r in rows], np.int64), [r[1] for r in rows], [r[2] for r in rows], metadata
        )

    def save(self, path: Path) -> None:
        data = np.frombuffer(self.core.dump(), dtype=np.uint8)
        write_sectioned(path, METADATA_MAGIC, METADATA_VERSION, {"n_chunks": len(self)}, {"index": data})

    @classmethod
    def load(cls, path: Path, verify: bool = True) -> MetadataFilters:
        """IndexFileError (a ValueError) for a file that is not a valid metadata index."""
        f = SectionedFile(path, METADATA_MAGIC, METADATA_VERSION, "metadata index")
        (n,) = f.shape_of("index", 1)
        data = f.array("index", np.uint8, (n,), mmap=False, verify=verify)
        try:
            return cls(_core.MetadataIndex.load(data.tobytes()))
        except ValueError as exc:
            raise IndexFileError(f"{path}: {exc}") from None


class SelectionFilter(IdFilter):
    """The :class:`IdFilter` of a metadata filter, as the metadata index evaluated it: a bitmap
    over chunk ids (:meth:`id_bits`) that the BM25 index compiles a word at a time; the sorted
    ids (:attr:`ids`) are listed on first use, for the indexes that read them."""

    __slots__ = ("selection", "_core", "_previous")

    def __init__(self, core: Any, selection: Any, previous: SelectionFilter | None = None) -> None:
        self._core = core
        self.selection = selection
        # Only the natives the previous one compiled (not the filter itself: no chain).
        self._previous = previous._cache if previous is not None else None
        self._ids = None
        self._kind = "int" if len(selection) else None
        self._set = None
        self._cache: dict = {}
        self._lock = threading.Lock()

    @property
    def ids(self) -> np.ndarray:
        """The allowed chunk ids, sorted int64 (listed once, on first use)."""
        if self._ids is None:
            self._ids = self._core.selection_ids(self.selection)
        return self._ids

    def __len__(self) -> int:
        return len(self.selection)

    def __iter__(self):
        return iter(self.ids.tolist())

    def __contains__(self, x: object) -> bool:
        if self._set is None:
            self._set = frozenset(self.ids.tolist())
        return x in self._set

    def id_bits(self) -> Any:
        return self._core.id_words(self.selection)

    def previous_native(self, index: Any) -> Any:
        previous, self._previous = self._previous, None
        if previous is None:
            return None
        hit = previous.get(weakref.ref(index))
        return hit[1] if hit is not None else None


def metadata_of(d: Mapping, meta_json: str) -> dict:
    """A document's metadata as the store keeps it (JSON round trip only when a key is not str)."""
    md = d.get("metadata")
    if not md:
        return {}
    if type(md) is dict and all(type(k) is str for k in md):
        return md
    return json.loads(meta_json)


class FilterCompiler:
    """Filter dict -> :class:`IdFilter` of the allowed chunk ids, by the metadata index.

    Args:
        index: the retriever's :class:`MetadataFilters`.
        store: the document store (its ``fields``, the metadata keys seen, its write
            ``generation``, and its ``kinds`` with their ``kinds_version``: a filter is checked
            again against the fields' kinds only after a write gave a field a new kind).
        max_entries: filters kept evaluated (0: evaluate every time). After a write a kept
            filter is patched, not evaluated again: only the chunks written since are tested.
    """

    def __init__(self, index: MetadataFilters, store: Any, max_entries: int = 256) -> None:
        self.index = index
        self.store = store
        self.cache = LRUCache(max_entries)

    def __call__(self, filters: Mapping[str, Any] | None) -> IdFilter | None:
        """None for no filter (``None`` or ``{}``), else the IdFilter of the chunks it allows."""
        check_filters(filters)
        if not filters:
            return None
        generation = self.store.generation
        try:
            key = freeze(dict(filters))
        except TypeError:
            key = None  # an unhashable value: filter_tree names it below
        hit = self.cache.get(key) if key is not None else None
        if hit is not None and hit[0] == generation:
            return hit[1]
        versions = (self.index.kinds_version, self.store.kinds_version)
        # After a write the filter is checked again only if a field it names took a new kind of
        # value (fields are only ever added, so a known field stays known): none did while the
        # kinds versions stay the same.
        stale = hit is not None and hit[3] != versions
        if hit is None or (stale and any(self.kinds(name) != bits for name, bits in hit[2].items())):
            read: dict = {}

            def kinds(name: str) -> int:
                read[name] = bits = self.kinds(name)
                return bits

            tree = filter_tree(filters, self.store.fields, kinds)
        else:
            tree, read = None, hit[2]
        allowed = self.index.refresh(hit[1]) if hit is not None else self.index.compile(tree)
        if key is not None and generation == self.store.generation:
            self.cache.put(key, (generation, allowed, read, versions))
        return allowed

    def kinds(self, name: str) -> int:
        """Kinds of value field ``name`` (internal name) holds: the index's, and the store's
        record of documents without chunks, which the index never sees; ``doc_id`` and
        ``title`` are str, also before the first document."""
        held = self.store.kinds.get(name[2:], 0) if name.startswith("m:") else KIND_STR
        return self.index.kinds(name) | held

    def clear(self) -> None:
        self.cache.clear()
