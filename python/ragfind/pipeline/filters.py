"""Metadata filters: a filter dict compiles to SQL over the document store, and the chunks it
selects become an :class:`ragfind.IdFilter` that every stage passes to its index.

The SQL runs once per filter and store generation (:class:`FilterCompiler` caches the IdFilter);
each index then compiles that IdFilter once into its own native allowed-set, so a repeated
filter costs no SQL and no per-id Python work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragfind.ids import IdFilter
from ragfind.pipeline.cache import LRUCache, freeze
from ragfind.pipeline.store import DocumentStore

__all__ = ["BUILTIN_FIELDS", "OPERATORS", "filter_sql", "FilterCompiler"]

#: Document fields every filter may use besides the metadata keys.
BUILTIN_FIELDS = ("doc_id", "title")
OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte")
_SQL_OPS = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def check_filters(filters: Any) -> None:
    if filters is not None and not isinstance(filters, Mapping):
        raise TypeError(f"filters is a {type(filters).__name__}; expected a dict of field -> condition")


def _check_value(name: str, v: Any) -> None:
    if v is not None and not isinstance(v, (str, int, float, bool)):
        raise TypeError(
            f"filters[{name!r}]: value {v!r} is a {type(v).__name__}; expected str, number, bool or None"
        )


def _sql_value(v: Any) -> Any:
    return int(v) if isinstance(v, bool) else v


def json_path_literal(name: str) -> str | None:
    """The SQL string literal of the JSON path of metadata key ``name``, or None for a key the
    path syntax cannot spell (those are looked up with ``json_each``). A literal (not a bound
    parameter) lets SQLite use the store's expression index on the field."""
    if '"' in name or "\\" in name or "\0" in name:
        return None
    return "'" + f'$."{name}"'.replace("'", "''") + "'"


def filter_sql(filters: Mapping[str, Any], fields: set) -> tuple:
    """``(where, params)``: SQL over the documents table ``d`` true where every condition holds.

    ``fields`` are the metadata keys the store has seen; ``doc_id`` and ``title`` are always
    known. Conditions: a value (``$eq``), a list (``$in``) or ``{operator: value}``.
    """
    check_filters(filters)
    known = set(BUILTIN_FIELDS) | set(fields)
    clauses, params = [], []
    for name, cond in filters.items():
        if name not in known:
            raise ValueError(f"filters: unknown field {name!r}; known fields: {sorted(known)}")
        literal = json_path_literal(name)
        by_key = literal is None
        if name == "doc_id":
            col = "d.doc_id"
        elif name == "title":
            col = "d.title"
        elif by_key:
            # SQLite's JSON path mishandles '"' and '\\' in a quoted label: look the key up.
            col = "(SELECT value FROM json_each(d.metadata) WHERE key = ?)"
        else:
            col = f"json_extract(d.metadata, {literal})"
        conds = (
            cond
            if isinstance(cond, Mapping)
            else ({"$in": cond} if isinstance(cond, (list, tuple, set)) else {"$eq": cond})
        )
        for op, val in conds.items():
            if op not in OPERATORS:
                raise ValueError(f"filters[{name!r}]: unknown operator {op!r}; expected one of {OPERATORS}")
            col_params = [name] if by_key and name not in BUILTIN_FIELDS else []
            if op in ("$in", "$nin"):
                vals = list(val) if isinstance(val, (list, tuple, set)) else None
                if vals is None:
                    raise ValueError(f"filters[{name!r}][{op!r}] = {val!r}; expected a list")
                if not vals:
                    clauses.append("0" if op == "$in" else "1")
                    continue
                for v in vals:
                    _check_value(name, v)
                sql_op = "IN" if op == "$in" else "NOT IN"
                clauses.append(f"{col} {sql_op} ({','.join('?' * len(vals))})")
                params += col_params + [_sql_value(v) for v in vals]
            else:
                _check_value(name, val)
                if val is None and op in ("$eq", "$ne"):
                    clauses.append(f"{col} IS {'NOT ' if op == '$ne' else ''}NULL")
                    params += col_params
                else:
                    clauses.append(f"{col} {_SQL_OPS[op]} ?")
                    params += col_params + [_sql_value(val)]
    return " AND ".join(clauses) or "1", params


class FilterCompiler:
    """Filter dict -> :class:`IdFilter` of the allowed chunk ids, cached per store generation.

    Args:
        store: the document store.
        max_entries: cached filters (0: compile every time).
    """

    def __init__(self, store: DocumentStore, max_entries: int = 256) -> None:
        self.store = store
        self.cache = LRUCache(max_entries)

    def __call__(self, filters: Mapping[str, Any] | None) -> IdFilter | None:
        """None for no filter (``None`` or ``{}``), else the IdFilter of the chunks it allows."""
        check_filters(filters)
        if not filters:
            return None
        generation = self.store.generation
        try:
            key = (generation, freeze(dict(filters)))
        except TypeError:
            key = None  # an unhashable value: filter_sql names it below
        hit = self.cache.get(key) if key is not None else None
        if hit is not None:
            return hit
        where, params = filter_sql(filters, self.store.fields)
        for name in filters:
            if name not in BUILTIN_FIELDS:
                self.store.index_field(name)
        allowed = IdFilter(self.store.select_chunks(where, params))
        if key is not None and generation == self.store.generation:
            self.cache.put(key, allowed)
        return allowed

    def clear(self) -> None:
        self.cache.clear()
