"""A plain Python evaluator of ragfind's metadata filters (the documented semantics), the
reference the native metadata index is tested against (pipeline and reliability tests)."""

from __future__ import annotations

from collections.abc import Mapping

MISSING = object()


# ----------------------------------------------------------------------------- the reference


def kind(v):
    if v is MISSING or v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "num"
    return "str" if isinstance(v, str) else "other"


def eq(value, v):
    if v is None:
        return value is MISSING or value is None
    return kind(value) == kind(v) and value == v


def valued(value):
    return value is not MISSING and value is not None


def ref_field(value, cond):
    ops = cond if isinstance(cond, Mapping) else {"$in": cond} if isinstance(cond, list) else {"$eq": cond}
    for op, v in ops.items():
        if op == "$eq":
            ok = eq(value, v)
        elif op == "$ne":
            ok = valued(value) and (v is None or not eq(value, v))
        elif op == "$in":
            ok = any(eq(value, x) for x in v)
        elif op == "$nin":
            ok = not v or (valued(value) and not any(eq(value, x) for x in v))
        elif op == "$exists":
            ok = (value is not MISSING) == v
        elif op == "$not":
            ok = not ref_field(value, v)
        else:
            ok = (
                kind(value) == kind(v)
                and {
                    "$gt": value > v if kind(value) == kind(v) else False,
                    "$gte": value >= v if kind(value) == kind(v) else False,
                    "$lt": value < v if kind(value) == kind(v) else False,
                    "$lte": value <= v if kind(value) == kind(v) else False,
                }[op]
            )
        if not ok:
            return False
    return True


def ref(filters, doc):
    """Does ``doc`` ({"id", "title", "metadata"}) satisfy ``filters``?"""
    for key, cond in filters.items():
        if key == "$and":
            ok = all(ref(f, doc) for f in cond)
        elif key == "$or":
            ok = any(ref(f, doc) for f in cond)
        elif key == "$not":
            ok = not ref(cond, doc)
        elif key == "doc_id":
            ok = ref_field(doc["id"], cond)
        elif key == "title":
            ok = ref_field(doc.get("title") or "", cond)
        else:
            ok = ref_field(doc["metadata"].get(key, MISSING), cond)
        if not ok:
            return False
    return True


def doc_ids_as_stored(filters):
    """``filters`` with int values of ``doc_id`` as str (documents keep ``str(id)``)."""

    def conv(v):
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        if isinstance(v, list):
            return [conv(x) for x in v]
        if isinstance(v, Mapping):
            return {k: conv(x) for k, x in v.items()}
        return v

    out = {}
    for key, cond in filters.items():
        if key in ("$and", "$or"):
            out[key] = [doc_ids_as_stored(f) for f in cond]
        elif key == "$not":
            out[key] = doc_ids_as_stored(cond)
        else:
            out[key] = conv(cond) if key == "doc_id" else cond
    return out


def operands(filters):
    """(field, value) of every comparison in ``filters`` (for the type-mismatch rule)."""
    for key, cond in filters.items():
        if key in ("$and", "$or"):
            for f in cond:
                yield from operands(f)
        elif key == "$not":
            yield from operands(cond)
        else:
            yield from field_operands(key, cond)


def field_operands(name, cond):
    ops = cond if isinstance(cond, Mapping) else {"$in": cond} if isinstance(cond, list) else {"$eq": cond}
    for op, v in ops.items():
        if op in ("$in", "$nin"):
            yield from ((name, x) for x in v)
        elif op == "$not":
            yield from field_operands(name, v)
        elif op != "$exists":
            yield name, v


def mismatch(filters, held):
    """The rule: a value of a kind the field never held (nulls aside) is a TypeError."""
    for name, v in operands(filters):
        kinds = held.get(name, set()) - {"null"}
        if v is not None and kinds and kind(v) not in kinds:
            return True
    return False


def unknown_exists(filters, held):
    """A field in filters that no document ever held."""
    for key, cond in filters.items():
        if key in ("$and", "$or"):
            if any(unknown_exists(f, held) for f in cond):
                return True
        elif key == "$not":
            if unknown_exists(cond, held):
                return True
        elif key not in held:
            return True
    return False


def held_kinds(docs):
    held: dict = {}
    for d in docs:
        for k, v in d["metadata"].items():
            held.setdefault(k, set()).add(kind(v))
        held.setdefault("doc_id", set()).add("str")
        held.setdefault("title", set()).add("str")
    return held
