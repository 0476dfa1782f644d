"""What a write may hold: the one check of a batch of documents, used by every door that writes
(:meth:`ragfind.Retriever.add_documents`, ``ragfind index``, ``POST /documents`` and the
service's log replay, the sharded router, the framework adapters).

A document is a dict with ``id`` (a non-empty str, or an int, stored as ``str(id)``), ``text``
(str), and optionally ``title`` (str or None) and ``metadata`` (a dict with str keys). Metadata
values are what JSON can hold and read back: None, bool, str, finite numbers (numpy scalars are
taken as the Python number they hold), lists and dicts of those, nested at most
:data:`MAX_METADATA_DEPTH` deep. NaN and infinities are refused: JSON has no spelling for them,
so a store holding one could be saved but never loaded again.

Each metadata field keeps the kind of its first value (str, number, bool, or list/object; ints
and floats are both numbers, and null fits every field), so that a filter checked against a
field's kind stays right: a value of another kind is a :class:`DocumentTypeError` naming the
field, its kind and the document. Strings must be encodable as UTF-8 (no lone surrogates).

The check runs before anything is written, so a refused document leaves nothing behind.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ragfind.pipeline.filters import KIND_BOOL, KIND_NULL, KIND_NUM, KIND_STR, kind_names, value_kind

__all__ = [
    "DOCUMENT_KEYS",
    "MAX_METADATA_DEPTH",
    "DocumentError",
    "DocumentTypeError",
    "DocumentValueError",
    "check_documents",
    "check_field_kinds",
    "json_type",
    "a_json_type",
]

DOCUMENT_KEYS = ("id", "title", "text", "metadata")
_KEYS = frozenset(DOCUMENT_KEYS)
#: Lists and dicts nested inside one metadata value, at most (a deeper value is refused).
MAX_METADATA_DEPTH = 32


class DocumentError(Exception):
    """A document a write may not hold; nothing of the write was kept. ``field`` names the
    part at fault, e.g. ``documents[3].metadata.price``."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class DocumentTypeError(DocumentError, TypeError):
    """A document, or a part of it, of the wrong type (also a metadata value whose kind differs
    from its field's)."""


class DocumentValueError(DocumentError, ValueError):
    """A document with a value it may not hold (a missing key, a repeated id, NaN, ...)."""


_KIND_OF_TYPE = {type(None): KIND_NULL, bool: KIND_BOOL, str: KIND_STR, int: KIND_NUM, float: KIND_NUM}


def json_type(v: Any) -> str:
    """The JSON type of a parsed value ("null", "boolean", "number", "string", "array",
    "object"); the Python type's name for anything else."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object" if isinstance(v, dict) else type(v).__name__


def a_json_type(v: Any) -> str:
    """:func:`json_type` with its article, as a message reads it: "an array", "null"."""
    t = json_type(v)
    return t if t == "null" else f"an {t}" if t[0] in "aeiou" else f"a {t}"


def _type_name(v: Any) -> str:
    return type(v).__name__


def _string(s: str, where: str) -> str:
    # isascii is a flag check: only non-ASCII text pays for the encoding test.
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DocumentValueError(
                f"{where} holds {s[exc.start : exc.end]!r} at offset {exc.start}, which is not "
                "valid Unicode (a lone surrogate); it cannot be stored as UTF-8",
                where,
            ) from None
    return s


def _value(v: Any, where: str, depth: int) -> Any:
    """``v`` as it will be stored (the same object unless a numpy scalar or tuple was in it)."""
    if v is None or v is True or v is False:
        return v
    t = type(v)
    if t is str:
        return _string(v, where)
    if t is int:
        if not -_FLOAT_MAX < v < _FLOAT_MAX:  # the index compares numbers as float64
            raise DocumentValueError(f"{where} = {v}; a number must fit a float64", where)
        return v
    if t is float:
        if not math.isfinite(v):
            raise DocumentValueError(
                f"{where} = {v!r}; expected a finite number (JSON has no NaN or Infinity)", where
            )
        return v
    if t is dict or isinstance(v, Mapping):
        _check_depth(depth, where)
        out, changed = {}, t is not dict
        for key, x in v.items():
            if type(key) is not str:
                raise DocumentTypeError(
                    f"{where} has key {key!r}, a {_type_name(key)}; metadata keys must be str", where
                )
            _string(key, where)
            y = _value(x, f"{where}.{key}", depth + 1)
            changed |= y is not x
            out[key] = y
        return out if changed else v
    if t is list or t is tuple:
        _check_depth(depth, where)
        items = [_value(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v)]
        if t is tuple or any(y is not x for x, y in zip(v, items)):
            return items
        return v
    if isinstance(v, bool):  # numpy.bool_ and the like
        return bool(v)
    if isinstance(v, numbers.Integral):
        return _value(int(v), where, depth)
    if isinstance(v, numbers.Real):
        return _value(float(v), where, depth)
    if isinstance(v, str):
        return _value(str(v), where, depth)
    raise DocumentTypeError(
        f"{where} is a {_type_name(v)} ({v!r:.60}); expected a JSON value "
        "(str, number, bool, None, list or dict)",
        where,
    )


_FLOAT_MAX = 2**1023


def _plain(md: dict) -> bool:
    """A dict of ASCII str keys and plain values (None, bool, str, ints and finite floats): the
    common case, checked without building the names of its parts."""
    for key, x in md.items():
        if type(key) is not str or not key.isascii():
            return False
        t = type(x)
        if t is str:
            if not x.isascii():
                return False
        elif t is float:
            if x - x != 0.0:  # NaN and the infinities
                return False
        elif t is int:
            if not -_FLOAT_MAX < x < _FLOAT_MAX:
                return False
        elif x is not None and t is not bool:
            return False
    return True


def _check_depth(depth: int, where: str) -> None:
    if depth >= MAX_METADATA_DEPTH:
        raise DocumentValueError(
            f"{where} nests lists/dicts more than {MAX_METADATA_DEPTH} deep; flatten it", where
        )


def _doc_id(i: Any, where: str) -> str:
    if type(i) is str:
        if not i:
            raise DocumentValueError(
                f"{where}['id'] is empty; expected a non-empty str or an int", f"{where}.id"
            )
        return _string(i, f"{where}.id")
    if isinstance(i, numbers.Integral) and not isinstance(i, bool):
        return str(int(i))
    if isinstance(i, str):
        return _doc_id(str(i), where)
    raise DocumentTypeError(
        f"{where}['id'] is {i!r}, a {_type_name(i)}; expected a non-empty str or an int", f"{where}.id"
    )


def check_documents(
    documents: Iterable[Mapping[str, Any]],
    kinds: Callable[[str], int] | None = None,
    *,
    check_kinds: bool = True,
) -> list:
    """The documents of a write, checked, as they will be stored: new dicts with ``id`` as str,
    ``text``, and ``title`` and ``metadata`` when given (metadata values as JSON reads them back).

    Args:
        documents: the batch.
        kinds: ``kinds(field)``, the kind bits the store already holds for a metadata field
            (:meth:`ragfind._core.MetadataIndex.kinds`); None for an empty store.
        check_kinds: False leaves the kinds to a later :func:`check_field_kinds` (a caller
            that checks them again under its write lock).

    Raises:
        DocumentTypeError (a TypeError): a document that is not a dict, an id that is neither
            a str nor an int, a text or title that is not a str, metadata that is not a dict or
            holds a value JSON cannot (a set, an object), a value of another kind than its
            field's.
        DocumentValueError (a ValueError): a key other than id/title/text/metadata, a missing
            ``id`` or ``text``, an empty id, an id repeated in the batch, NaN or an infinity,
            metadata nested too deep, a string that is not valid Unicode.
    """
    out = []
    seen: set = set()
    for n, d in enumerate(documents):
        if type(d) is not dict and not isinstance(d, Mapping):
            raise DocumentTypeError(
                f"documents[{n}] is a {_type_name(d)}; expected a dict with 'id' and 'text'",
                f"documents[{n}]",
            )
        if not _KEYS.issuperset(d):
            extra = next(key for key in d if key not in _KEYS)
            raise DocumentValueError(
                f"documents[{n}] has key {extra!r}; expected only {', '.join(DOCUMENT_KEYS)} "
                "(put other fields in 'metadata' to store and filter on them)",
                f"documents[{n}]",
            )
        if "id" not in d or "text" not in d:
            lacks = "id" if "id" not in d else "text"
            raise DocumentValueError(
                f"documents[{n}] lacks {lacks!r}; expected keys 'id' and 'text'", f"documents[{n}]"
            )
        doc_id = d["id"]
        if type(doc_id) is not str or not doc_id or not doc_id.isascii():
            doc_id = _doc_id(doc_id, f"documents[{n}]")
        if doc_id in seen:
            raise DocumentValueError(
                f"documents[{n}] repeats id {doc_id!r}; document ids must be unique", f"documents[{n}].id"
            )
        seen.add(doc_id)
        text = d["text"]
        if type(text) is not str:
            raise DocumentTypeError(
                f"documents[{n}]['text'] is a {_type_name(text)}; expected str", f"documents[{n}].text"
            )
        clean = {"id": doc_id, "text": _string(text, f"documents[{n}].text") if not text.isascii() else text}
        title = d.get("title")
        if title is not None:
            if type(title) is not str:
                raise DocumentTypeError(
                    f"documents[{n}]['title'] is a {_type_name(title)}; expected str", f"documents[{n}].title"
                )
            clean["title"] = title if title.isascii() else _string(title, f"documents[{n}].title")
        md = d.get("metadata")
        if md is not None:
            if type(md) is not dict or not _plain(md):
                if not isinstance(md, Mapping):
                    raise DocumentTypeError(
                        f"documents[{n}]['metadata'] is a {_type_name(md)}; expected a dict",
                        f"documents[{n}].metadata",
                    )
                md = dict(_value(md, f"documents[{n}].metadata", 0))
            clean["metadata"] = md
        out.append(clean)
    if check_kinds:
        check_field_kinds(out, kinds)
    return out


def check_field_kinds(docs: list, kinds: Callable[[str], int] | None = None) -> dict:
    """Raises the :class:`DocumentTypeError` of a metadata value whose kind differs from its
    field's (the store's, ``kinds(field)``, or the first one in ``docs``), for documents that
    passed :func:`check_documents`; returns ``{field: kind bits}`` of the batch."""
    seen: dict = {}
    for d in docs:
        md = d.get("metadata")
        if md:
            for field, v in md.items():
                seen[field] = seen.get(field, 0) | (_KIND_OF_TYPE.get(type(v)) or value_kind(v))
    for field, bits in seen.items():
        mine = bits & ~KIND_NULL
        held = (kinds(field) if kinds is not None else 0) & ~KIND_NULL
        if (mine & ~held if held else mine & (mine - 1)) != 0:
            _raise_kind_error(docs, field, held)
    return seen


def _raise_kind_error(docs: list, field: str, held: int) -> None:
    """The error naming the first document whose value of ``field`` breaks its kind."""
    first = None
    for n, d in enumerate(docs):
        v = (d.get("metadata") or {}).get(field)
        bit = value_kind(v)
        if bit == KIND_NULL:
            continue
        if held and not held & bit:
            source = "the store"
        elif not held and first is not None and value_kind(docs[first]["metadata"][field]) != bit:
            held, source = value_kind(docs[first]["metadata"][field]), f"documents[{first}]"
        else:
            first = n if first is None else first
            continue
        raise DocumentTypeError(
            f"documents[{n}]: metadata field {field!r} holds {kind_names(held)} values "
            f"(first written by {source}) but document {d['id']!r} gives it {v!r:.60}, "
            f"a {kind_names(bit)}; a field keeps the kind of its first value",
            f"documents[{n}].metadata.{field}",
        )
    raise DocumentTypeError(f"metadata field {field!r} is given values of several kinds", f"metadata.{field}")
