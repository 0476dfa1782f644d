"""RAG frameworks over a :class:`ragfind.Retriever`: retrievers and vector / document stores in
:mod:`ragfind.integrations.langchain` (the ``langchain`` extra, langchain-core),
:mod:`ragfind.integrations.llama_index` (the ``llama-index`` extra, llama-index-core) and
:mod:`ragfind.integrations.haystack` (the ``haystack`` extra, haystack-ai). Each module
imports its framework, so import the one you use; this one holds what they share."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from ragfind.errors import check_k

__all__ = [
    "Bounds",
    "FunctionEncoder",
    "all_documents",
    "check_kwargs",
    "check_search_args",
    "existing_ids",
    "passage_metadata",
    "search_filter",
    "select_documents",
]


def passage_metadata(p: Any) -> dict:
    """A passage's metadata for a framework document: the document's own metadata, then
    ``doc_id``, ``chunk_id``, ``title``, ``source``, ``score``, ``ranks`` and ``scores`` (which
    win over metadata keys of the same name)."""
    out = dict(p.metadata)
    out.update(
        {
            "doc_id": p.doc_id,
            "chunk_id": int(p.id),
            "title": p.title,
            "source": p.source,
            "score": float(p.score),
            "ranks": {k: int(v) for k, v in p.ranks.items()},
            "scores": {k: float(v) for k, v in p.scores.items()},
        }
    )
    return out


def check_search_args(retriever: Any, k: Any, filters: Any) -> None:
    """The framework retrievers' arguments, checked when they are built (not at the first query)."""
    if not callable(getattr(retriever, "search", None)):
        raise TypeError(f"retriever is a {type(retriever).__name__}; expected a ragfind.Retriever")
    check_k(k)
    if filters is not None and not isinstance(filters, Mapping):
        raise TypeError(f"filters is a {type(filters).__name__}; expected a dict of field -> condition")


def check_kwargs(kwargs: Mapping[str, Any], allowed: Any, where: str) -> None:
    """TypeError naming the first keyword argument ``where`` does not take."""
    unknown = [k for k in kwargs if k not in allowed]
    if unknown:
        raise TypeError(
            f"{where}: unexpected keyword argument {unknown[0]!r}; expected some of {sorted(allowed)}"
        )


def all_documents(retriever: Any) -> list:
    """Every stored document as ``(id, title, text, metadata dict)``, in insertion order.

    The Retriever has no listing call, and the frameworks need one (delete everything, count,
    filters its filter syntax cannot say), so this reads its document table.
    """
    store = retriever.store
    with store.lock:
        rows = store.db.execute(
            "SELECT doc_id, title, text, metadata FROM documents ORDER BY rowid"
        ).fetchall()
    return [(d, t, x, json.loads(m)) for d, t, x, m in rows]


def existing_ids(retriever: Any, ids: Any) -> list:
    """The ids of ``ids`` stored in the retriever (each once, in the order given)."""
    out: list = []
    seen: set = set()
    for i in ids:
        i = str(i)
        if i in seen:
            continue
        seen.add(i)
        try:
            retriever.get_document(i)
        except KeyError:
            continue
        out.append(i)
    return out


class FunctionEncoder:
    """A ragfind bi-encoder over a framework's embedding functions, for a Retriever whose
    vectors come from that framework's embedding model.

    Args:
        embed_documents: texts -> one vector per text.
        embed_query: text -> vector.
        dim: the vectors' dimension.
        name: what the model is (part of the fingerprint a saved Retriever is checked against).
    """

    def __init__(self, embed_documents: Any, embed_query: Any, dim: int, name: str) -> None:
        self._embed_documents = embed_documents
        self._embed_query = embed_query
        self.dim = int(dim)
        self.fingerprint = f"{name}:{self.dim}"
        self.tokenizer = None

    def encode(self, texts: Any, batch_size: int = 32, show_progress: bool = False, **_: Any) -> Any:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.asarray(self._embed_documents(texts), dtype=np.float32).reshape(len(texts), self.dim)

    def encode_query(self, text: str) -> Any:
        return np.asarray(self._embed_query(text), dtype=np.float32).reshape(self.dim)


def dense_search(retriever: Any, vector: Any, k: int, filters: Mapping[str, Any] | None = None) -> list:
    """The ``k`` chunks nearest ``vector`` (cosine, the dense stage's index) among those
    ``filters`` allow, as ``(chunk id, doc id, text, metadata dict, score)``, best first: the
    Retriever searches by text only, the frameworks also by vector.

    Raises:
        ValueError: the retriever has no dense stage, a bad filter or vector.
    """
    index = retriever.dense
    if index is None:
        raise ValueError("this retriever has no dense stage (it was built without an encoder)")
    flt = retriever.stage_runner.compile_filters(filters)
    if (flt is not None and len(flt) == 0) or len(index) == 0:
        return []
    ids, scores = index.search(np.asarray(vector, dtype=np.float32), k=k, filter=flt)
    rows = retriever.store.fetch(ids)
    out = []
    for i, s in zip(np.asarray(ids).tolist(), np.asarray(scores).tolist()):
        row = rows.get(int(i))
        if row is not None:
            out.append((int(i), row[1], row[2], json.loads(row[6]), float(s)))
    return out


def doc_ids_where(retriever: Any, filters: Mapping[str, Any]) -> list:
    """The ids of the chunked documents ``filters`` (the Retriever's filter syntax) allows, in
    store order."""
    flt = retriever.stage_runner.compile_filters(filters)
    rows = _all_rows(retriever, False) if flt is None else _doc_rows(retriever, flt.ids, False)
    return [r[1] for r in sorted(rows)]


# ---------------------------------------------------------------------------- framework filters
#
# A framework filter (Haystack's dict syntax, LlamaIndex's MetadataFilters) is translated into
# Retriever filters: ``under`` allows only documents the framework filter matches, ``over``
# every document it may match. Where each part maps exactly the two are one filter, evaluated
# by the metadata index like the Retriever's own; where a part has semantics that filter cannot
# say (dates compared as strings, substrings, list membership, values the framework compares
# across types), the framework's own evaluator decides the documents ``over`` allows and
# ``under`` does not, and nothing else. ``risky`` allows the documents on which the framework's
# evaluator may raise (Haystack's FilterError): it sees them too, so a filter raises when
# the framework's would.


class Bounds(NamedTuple):
    """A framework filter as Retriever filters (see above): ``True`` allows every document,
    ``False`` none, a dict is the Retriever's filter syntax. ``exact`` when they are one."""

    over: Any
    under: Any
    risky: Any = False

    @property
    def exact(self) -> bool:
        return self.over is self.under and self.risky is False

    @property
    def undecided(self) -> Any:
        """The documents the framework's evaluator must see."""
        return f_or([f_and([self.over, f_not(self.under)]), self.risky])


NOTHING: dict = {"doc_id": {"$in": []}}  # the Retriever filter allowing no document


def exact(f: Any) -> Bounds:
    return Bounds(f, f)


def f_and(parts: list) -> Any:
    out: list = []
    for p in parts:
        if p is False:
            return False
        if p is not True:
            out.extend(p["$and"] if len(p) == 1 and "$and" in p else [p])
    return True if not out else out[0] if len(out) == 1 else {"$and": out}


def f_or(parts: list) -> Any:
    out: list = []
    for p in parts:
        if p is True:
            return True
        if p is not False:
            out.extend(p["$or"] if len(p) == 1 and "$or" in p else [p])
    return False if not out else out[0] if len(out) == 1 else {"$or": out}


def f_not(f: Any) -> Any:
    if f is True or f is False:
        return not f
    if len(f) == 1 and "$not" in f:
        return f["$not"]
    return {"$not": f}


def bounds_and(parts: list) -> Bounds:
    if all(p.exact for p in parts):
        return exact(f_and([p.under for p in parts]))
    risky = f_or([p.risky for p in parts])
    return Bounds(f_and([p.over for p in parts]), f_and([p.under for p in parts]), risky)


def bounds_or(parts: list) -> Bounds:
    if all(p.exact for p in parts):
        return exact(f_or([p.under for p in parts]))
    risky = f_or([p.risky for p in parts])
    return Bounds(f_or([p.over for p in parts]), f_or([p.under for p in parts]), risky)


def bounds_not(b: Bounds) -> Bounds:
    if b.exact:
        return exact(f_not(b.under))
    return Bounds(f_not(b.under), f_not(b.over), b.risky)


UNDECIDED = Bounds(True, False, True)  # the framework's evaluator decides every document


def native_filter(f: Any) -> dict | None:
    """A formula as what ``Retriever.search(filters=...)`` takes (None: no filter)."""
    if f is True:
        return None
    return NOTHING if f is False else f


KIND_NULL, KIND_STR, KIND_NUM, KIND_BOOL, KIND_OTHER = 1, 2, 4, 8, 16  # MetadataIndex.kinds() bits
_EXACT_INT = 2.0**53  # numbers compare exactly in the index (doubles) below this magnitude


def field_kinds(retriever: Any, field: str) -> int | None:
    """The kinds of value metadata ``field`` has held (KIND_* bits), or None when the retriever
    cannot say (every condition on the field then goes to the framework's evaluator)."""
    fk = getattr(retriever, "field_kinds", None)
    if fk is not None:
        return int(fk(field))
    index = getattr(retriever, "metadata", None)
    if index is None:
        return None
    return int(index.kinds("m:" + field)) | int(getattr(retriever.store, "kinds", {}).get(field, 0))


def valued(key: str) -> dict:
    """Documents whose ``key`` holds a value other than null."""
    return {key: {"$ne": None}}


def any_str(key: str) -> dict:
    """Documents whose ``key`` holds a str (every str is >= "")."""
    return {key: {"$gte": ""}}


def exact_number(v: Any) -> bool:
    """True for an int or float the index compares as Python does (finite, below 2**53)."""
    return isinstance(v, (int, float)) and math.isfinite(v) and abs(v) < _EXACT_INT


def python_eq(key: str, v: Any, kinds: int) -> Any:
    """The documents whose ``key`` holds a value ``== v`` in Python, for a str, bool or exact
    number ``v``: bools equal the numbers 0 and 1 in Python, never in the index, so both are
    asked for; a kind the field never held cannot match (and the index would refuse it)."""
    if isinstance(v, str):
        return {key: {"$eq": v}} if kinds & KIND_STR else False
    parts = []
    if kinds & KIND_NUM:
        parts.append({key: {"$eq": int(v) if isinstance(v, bool) else v}})
    if kinds & KIND_BOOL and v in (0, 1):
        parts.append({key: {"$eq": bool(v)}})
    return f_or(parts)


_RANGE_OPS = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def python_range(key: str, op: str, v: Any, kinds: int) -> Any:
    """The documents whose ``key`` holds a number or bool ``x`` with ``x op v`` in Python, for
    an exact number or bool ``v`` (a bool is 0 or 1 on either side in Python)."""
    n = int(v) if isinstance(v, bool) else v
    parts = []
    if kinds & KIND_NUM:
        parts.append({key: {op: n}})
    if kinds & KIND_BOOL:
        parts += [{key: {"$eq": b}} for b in (False, True) if _RANGE_OPS[op](int(b), n)]
    return f_or(parts)


def _doc_rows(retriever: Any, chunk_ids: Any, full: bool) -> list:
    """``(rowid, doc_id, title, text, metadata JSON)`` of the documents of these chunks (only
    ``(rowid, doc_id)`` unless ``full``), each once, in no set order."""
    # The passage columns name each chunk's document without SQL; SQLite is read only for the
    # documents' own fields.
    doc_ids = list(dict.fromkeys(r[1] for r in retriever.store.fetch_list(chunk_ids)))
    return rows_of(retriever, doc_ids, full)


def rows_of(retriever: Any, doc_ids: list, full: bool = True) -> list:
    """``(rowid, doc_id, title, text, metadata JSON)`` of the stored documents of ``doc_ids``
    (only ``(rowid, doc_id)`` unless ``full``), in no set order."""
    store = retriever.store
    cols = "rowid, doc_id, title, text, metadata" if full else "rowid, doc_id"
    out: list = []
    step = 30_000  # under SQLite's bound on parameters per statement
    with store.lock:
        for lo in range(0, len(doc_ids), step):
            part = doc_ids[lo : lo + step]
            sql = f"SELECT {cols} FROM documents WHERE doc_id IN ({','.join('?' * len(part))})"
            out += store.db.execute(sql, part).fetchall()
    return out


def _all_rows(retriever: Any, full: bool) -> list:
    cols = "rowid, doc_id, title, text, metadata" if full else "rowid, doc_id"
    store = retriever.store
    with store.lock:
        return store.db.execute(f"SELECT {cols} FROM documents").fetchall()


def _chunk_ids(retriever: Any, f: Any) -> Any:
    if f is False:
        return []
    flt = retriever.stage_runner.compile_filters(native_filter(f))
    return retriever.store.chunk_ids() if flt is None else flt.ids


def select_documents(
    retriever: Any, bounds: Bounds, matches: Callable, chunkless: Iterable = (), full: bool = True
) -> list:
    """The documents a framework filter allows, in insertion order, as ``(doc_id, title, text,
    metadata dict)`` (``full``) or doc ids.

    The metadata index selects ``bounds.under`` and ``bounds.undecided``; ``matches(row)`` (the
    framework's evaluator on a ``(doc_id, title, text, metadata dict)`` row) decides the latter
    and the ``chunkless`` rows (``(rowid, doc_id, title, text, metadata JSON)`` of documents
    without chunks, which the metadata index never sees).
    """
    if bounds.under is True and bounds.risky is False:
        rows = sorted(_all_rows(retriever, full))
    else:
        rows = _doc_rows(retriever, _chunk_ids(retriever, bounds.under), full) if bounds.under else []
        maybe = [] if bounds.exact else _chunk_ids(retriever, bounds.undecided)
        decided = _parsed(_doc_rows(retriever, maybe, True)) if len(maybe) else []
        decided = [r for r in decided + _parsed(list(chunkless)) if matches(r[1:])]
        if decided:
            rows = (_parsed(rows) if full else rows) + decided
        seen: set = set()
        rows = [r for r in sorted(rows, key=lambda r: r[0]) if not (r[1] in seen or seen.add(r[1]))]
    if not full:
        return [r[1] for r in rows]
    return [r[1:] for r in _parsed(rows)]


def _parsed(rows: list) -> list:
    """SQL rows with their metadata JSON parsed (rows parsed already pass): one ``json.loads``
    for all, as most of its cost is per call."""
    raw = [r for r in rows if isinstance(r[4], str)]
    if not raw:
        return rows
    mds = iter(json.loads("[" + ",".join(r[4] for r in raw) + "]"))
    return [(r[0], r[1], r[2], r[3], next(mds)) if isinstance(r[4], str) else r for r in rows]


def search_filter(retriever: Any, bounds: Bounds, matches: Callable) -> dict | None:
    """A Retriever filter allowing exactly what a framework filter allows among the chunked
    documents (what a search can find): ``bounds.under``, or ids where the framework's evaluator
    had to decide."""
    if bounds.exact:
        return native_filter(bounds.under)
    maybe = _chunk_ids(retriever, bounds.undecided)
    found = [r[1] for r in _parsed(_doc_rows(retriever, maybe, True)) if matches(r[1:])] if len(maybe) else []
    return native_filter(f_or([bounds.under, {"doc_id": {"$in": sorted(found)}} if found else False]))
