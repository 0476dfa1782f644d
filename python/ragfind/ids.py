"""The one id rule every index follows, and :class:`IdFilter`, the allowed set a search takes.

Ids are all ``int`` or all ``str`` within one index. Search results carry them as an int64
array (int ids, and an index that has no ids yet) or an object array of ``str`` (str ids),
empty or not.

A filter restricts a search to a set of ids. Passing an :class:`IdFilter` (rather than a
plain list) lets each index compile it once into its native allowed-set (a bitmap over the
index's internal document numbers) and reuse that for every later search until the index
changes; a plain iterable of ids is compiled for that one call.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ragfind.errors import (
    IdKindError,
    IndexFileError,
    ids_needed,
    other_id_kind,
    present_ids,
    repeated_id,
    unknown_ids,
)

__all__ = ["IdFilter", "IdMap", "as_id_filter", "check_filter_kind", "empty_ids", "id_kind"]


def id_kind(ids: list) -> str:
    """``"int"`` or ``"str"`` for a non-empty list of ids; IdKindError for anything else."""
    kinds = set()
    for x in ids:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer, str)):
            raise IdKindError(f"ids must be int or str, got {type(x).__name__} ({x!r})")
        kinds.add("str" if isinstance(x, str) else "int")
    if len(kinds) > 1:
        raise IdKindError("ids: mixes int and str ids; expected all int or all str")
    return kinds.pop()


def empty_ids(kind: str | None) -> np.ndarray:
    """An empty result id array of the index's id kind (int64 unless the index has str ids)."""
    return np.empty(0, dtype=object if kind == "str" else np.int64)


class IdFilter:
    """An allowed set of ids, compiled once per index state into that index's native mask.

    Args:
        ids: the allowed ids (all int or all str; any iterable, a numpy array included).
            Ids an index does not hold are ignored by it.

    An index compiles the filter with :meth:`compiled`, keyed by the index and its write
    generation, so a filter built once (the Retriever builds one per metadata condition and
    store state) costs one compilation per index, not one per search.
    """

    __slots__ = ("_ids", "_kind", "_set", "_cache", "_lock", "__weakref__")

    def __init__(self, ids: Iterable[Any]) -> None:
        if isinstance(ids, IdFilter):
            self._ids, self._kind, self._set = ids.ids, ids.kind, None
        else:
            if isinstance(ids, (str, bytes)):
                raise TypeError(f"filter is a single {type(ids).__name__}; expected a collection of ids")
            if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu":
                arr = np.unique(ids.astype(np.int64, copy=False).ravel())
                kind = "int" if arr.size else None
            else:
                items = list(ids)
                kind = id_kind(items) if items else None
                if kind == "str":
                    arr = np.asarray(sorted(set(items)), dtype=object)
                else:
                    arr = np.unique(np.asarray([int(x) for x in items], dtype=np.int64))
            self._ids, self._kind, self._set = arr, kind, None
        self._cache: dict = {}
        self._lock = threading.Lock()

    @classmethod
    def from_sorted(cls, ids: np.ndarray) -> IdFilter:
        """An IdFilter of int64 ids the caller guarantees sorted and unique (a metadata filter's
        result), taken as they are: no copy, no sort."""
        f = cls.__new__(cls)
        f._ids, f._kind, f._set = ids, ("int" if ids.shape[0] else None), None
        f._cache = {}
        f._lock = threading.Lock()
        return f

    @property
    def ids(self) -> np.ndarray:
        """The allowed ids: sorted int64, or an object array of str."""
        return self._ids

    @property
    def kind(self) -> str | None:
        """``"int"``, ``"str"``, or None for an empty filter."""
        return self._kind

    def __len__(self) -> int:
        return int(self._ids.shape[0])

    def __iter__(self):
        return iter(self._ids.tolist())

    def __contains__(self, x: object) -> bool:
        if self._set is None:
            self._set = frozenset(self._ids.tolist())
        return x in self._set

    def id_bits(self) -> Any:
        """The allowed ids as a :class:`ragfind._core.IdBitmap` (bit ``i``: int id ``i`` allowed)
        when the filter holds them so (a metadata filter, whose pages it shares), else None: an
        index may compile it without reading an id array."""
        return None

    def previous_native(self, index: Any) -> Any:
        """The native form ``index`` compiled of the filter this one updates (a metadata filter
        patched after a write), at most once, or None: the index may extend it instead of
        compiling this one whole."""
        return None

    def compiled(self, index: Any, generation: int, compile_fn: Callable[[IdFilter], Any]) -> Any:
        """The index's native form of this filter, compiled by ``compile_fn(self)`` at most once
        per (index, generation)."""
        key = weakref.ref(index)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] == generation:
            return hit[1]
        native = compile_fn(self)
        with self._lock:
            put_native(self._cache, key, (generation, native))
        return native

    def __repr__(self) -> str:
        return f"IdFilter({len(self)} {self._kind or ''} ids)"


def put_native(natives: dict, key: weakref.ref, entry: tuple) -> None:
    """``natives[key] = entry`` in a filter's natives (index weak reference -> (generation,
    native)), dropping those of indexes gone: a plain dict with weak keys, as a
    WeakKeyDictionary costs more to make than a search after a write can spare."""
    for gone in [k for k in natives if k() is None]:
        del natives[gone]
    natives[key] = entry


def as_id_filter(filter: Any) -> IdFilter | None:  # noqa: A002 - the API's name
    """None stays None, an IdFilter stays itself, any other collection of ids becomes one."""
    if filter is None or isinstance(filter, IdFilter):
        return filter
    return IdFilter(filter)


def check_filter_kind(flt: IdFilter | None, kind: str | None) -> None:
    """IdKindError when ``flt`` holds ids of the other kind than the index's ``kind``, as an add
    of such ids gets: every id is then unknown, so the filter is a mistake, not an empty set.
    An empty filter, and an index without ids yet, take either kind."""
    if flt is not None and flt.kind is not None and kind is not None and flt.kind != kind:
        raise other_id_kind(kind, flt.kind, "filter")


# ----------------------------------------------------------------------------- row-numbered indexes
# IdMap: the ids of an index whose storage numbers documents by row (0, 1, 2, ... in insertion
# order): the id of each row, which rows are live, and the id -> row map of the live ones.
# Shared by LateInteractionIndex and SparseVectorIndex. Adding is split in two (check_new, then
# commit_add once the storage took the items) so a rejected batch changes nothing. Not
# thread-safe by itself: the index calls the mutating methods under its write lock.

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _id_list(ids: Any, what: str) -> list:
    """ids as a list of Python ints / strs (a numpy array or any iterable; not a bare str)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{what} is a single {type(ids).__name__}; expected a list of ids")
    if isinstance(ids, np.ndarray):
        return ids.ravel().tolist()
    try:
        return list(ids)
    except TypeError:
        raise TypeError(f"{what} must be a list of int or str ids, got {type(ids).__name__}") from None


def _sorted_rows(row_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Rows of ``ids`` (sorted) in strictly increasing ``row_ids``: a slice for consecutive row
    ids, one vectorised search otherwise; no per-id lookup."""
    n = row_ids.shape[0]
    if n == 0 or ids.shape[0] == 0:
        return np.empty(0, np.int64)
    base = int(row_ids[0])
    if int(row_ids[-1]) - base == n - 1:
        a, b = np.searchsorted(ids, [base, base + n])
        return ids[a:b] - base
    pos = np.searchsorted(row_ids, ids)
    np.minimum(pos, n - 1, out=pos)
    return pos[row_ids[pos] == ids]


class IdMap:
    """Row ids, liveness and the id -> row map (see the module notes)."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.next_int = 0  # default ids continue after the largest int id ever added
        self.n_rows = 0
        self.n_live = 0
        self.row_of: dict = {}
        self.increasing = True  # int row ids strictly increasing over all rows, dead ones included
        self._row_ids = np.empty(0, np.int64)
        self._live = np.empty(0, bool)

    # ---------------------------------------------------------------- views
    @property
    def row_ids(self) -> np.ndarray:
        """The id of every row (deleted rows included)."""
        return self._row_ids[: self.n_rows]

    @property
    def live(self) -> np.ndarray:
        """bool per row: not deleted."""
        return self._live[: self.n_rows]

    def live_ids(self) -> np.ndarray:
        """The live ids in insertion order (a copy; int64, or object for str ids)."""
        return self.row_ids[self.live].copy() if self.n_live < self.n_rows else self.row_ids.copy()

    def __contains__(self, x: object) -> bool:
        return x in self.row_of

    # ---------------------------------------------------------------- adding
    def check_new(self, ids: Any, n: int, what: str = "ids") -> tuple[np.ndarray, str]:
        """The ids for n new items, validated against the index (nothing changes).

        Raises IdKindError (mixed kinds, the other kind than the index's, no ids for a
        str-id index), DuplicateIdError (repeated, or already present), ValueError (count).
        """
        if ids is None:
            if self.kind == "str":
                raise ids_needed()
            if self.next_int + n - 1 > _I64_MAX:
                raise ValueError("default ids would pass the int64 range; pass ids=")
            return np.arange(self.next_int, self.next_int + n, dtype=np.int64), "int"
        items = _id_list(ids, what)
        if len(items) != n:
            raise ValueError(f"{what} has {len(items)} entries for {n} items (expected one id per item)")
        if n == 0:
            return empty_ids(self.kind), self.kind or "int"
        kind = id_kind(items)
        if self.kind is not None and kind != self.kind:
            raise other_id_kind(self.kind, kind)
        if kind == "int":
            items = [int(x) for x in items]
            bad = next((x for x in items if not _I64_MIN <= x <= _I64_MAX), None)
            if bad is not None:
                raise ValueError(f"{what} contains {bad}, outside the int64 range")
            arr = np.asarray(items, dtype=np.int64)
        else:
            items = [str(x) for x in items]
            arr = np.empty(n, dtype=object)
            arr[:] = items
        if len(set(items)) != n:
            seen: set = set()
            dup = next(x for x in items if x in seen or seen.add(x))
            raise repeated_id(dup)
        present = [x for x in items if x in self.row_of]
        if present:
            raise present_ids(present)
        return arr, kind

    def commit_add(self, arr: np.ndarray, kind: str) -> None:
        """Records ids checked by :meth:`check_new` for the next len(arr) rows."""
        n = len(arr)
        if n == 0:
            return
        need = self.n_rows + n
        if need > len(self._row_ids) or self.kind is None:
            cap = max(need, 2 * len(self._row_ids), 16)
            grown = np.empty(cap, dtype=object if kind == "str" else np.int64)
            grown[: self.n_rows] = self.row_ids
            live = np.zeros(cap, bool)
            live[: self.n_rows] = self.live
            self._row_ids, self._live = grown, live
        if kind != "int":
            self.increasing = False
        elif self.increasing:
            last = self._row_ids[self.n_rows - 1] if self.n_rows else None
            self.increasing = (last is None or int(arr[0]) > int(last)) and bool(np.all(arr[1:] > arr[:-1]))
        self._row_ids[self.n_rows : need] = arr
        self._live[self.n_rows : need] = True
        self.row_of.update(zip(arr.tolist(), range(self.n_rows, need)))
        self.n_rows, self.n_live = need, self.n_live + n
        self.kind = kind
        if kind == "int":
            self.next_int = max(self.next_int, int(arr.max()) + 1)

    # ---------------------------------------------------------------- lookups
    def rows_of(self, ids: Any, what: str = "ids", *, unique: bool = False) -> tuple[np.ndarray, list]:
        """(rows int64, the ids as a list) of live ids; UnknownIdError for an id not held,
        DuplicateIdError for a repeat when ``unique``."""
        if isinstance(ids, (str, int, np.integer)) and not isinstance(ids, bool):
            items = [ids.item() if isinstance(ids, np.integer) else ids]
        else:
            items = _id_list(ids, what)
        if items:
            id_kind(items)  # int or str only (1.0 or True would equal an int id)
        rows = [self.row_of.get(x) for x in items]
        missing = [x for x, r in zip(items, rows) if r is None]
        if missing:
            raise unknown_ids(missing, what, deleting=unique)  # unique: a delete's ids
        if unique and len(set(rows)) != len(rows):
            seen: set = set()
            dup = next(x for x, r in zip(items, rows) if r in seen or seen.add(r))
            raise repeated_id(dup)
        return np.asarray(rows, dtype=np.int64), items

    def commit_delete(self, rows: np.ndarray, items: list) -> None:
        self._live[rows] = False
        for x in items:
            del self.row_of[x]
        self.n_live -= len(rows)

    def result_ids(self, rows: np.ndarray) -> np.ndarray:
        """Ids of result rows (any shape); -1 rows (padding) become -1 (int) or None (str)."""
        if rows.size == 0:
            return empty_ids(self.kind).reshape(rows.shape)
        if self.kind == "str":
            out = self.row_ids[np.maximum(rows, 0)]
            out[rows < 0] = None
            return out
        if self.kind is None:
            return np.full(rows.shape, -1, np.int64)
        return np.where(rows >= 0, self.row_ids[np.maximum(rows, 0)], -1)

    def compile_mask(self, flt: IdFilter) -> np.ndarray:
        """uint8 per row: 1 for a live row whose id the filter allows (ids the index does not
        hold are ignored; ids of the other kind are an IdKindError)."""
        check_filter_kind(flt, self.kind)
        mask = np.zeros(self.n_rows, np.uint8)
        if not len(flt) or flt.kind != self.kind:
            return mask
        if self.kind == "int" and self.increasing:
            mask[_sorted_rows(self.row_ids, flt.ids)] = 1
            if self.n_live < self.n_rows:
                mask &= self.live.view(np.uint8)
        elif self.kind == "int" and len(flt) > self.n_rows // 8:
            mask[np.isin(self.row_ids, flt.ids) & self.live] = 1
        else:
            get = self.row_of.get
            rows = [r for r in map(get, flt.ids.tolist()) if r is not None]
            mask[np.asarray(rows, dtype=np.int64)] = 1
        return mask

    def compact(self) -> None:
        """Drops the deleted rows, renumbering the live ones in order."""
        ids = self.live_ids()
        kind, next_int = self.kind, self.next_int
        self.__init__()
        if len(ids):
            self.commit_add(ids, kind)
        self.kind, self.next_int = kind, next_int

    # ---------------------------------------------------------------- persistence
    def header(self) -> dict:
        return {"id_kind": self.kind, "next_id": self.next_int}

    def sections(self) -> dict:
        """The live ids as arrays: ``ids`` (int64), or ``id_bytes`` + ``id_offsets`` (UTF-8)."""
        ids = self.live_ids()
        if self.kind != "str":
            return {"ids": ids.astype(np.int64)}
        encoded = [s.encode("utf-8") for s in ids.tolist()]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return {"id_bytes": np.frombuffer(b"".join(encoded), dtype=np.uint8), "id_offsets": offsets}

    @classmethod
    def from_file(cls, f: Any, n: int) -> IdMap:
        """The ids of a saved index of n documents (a ragfind.persist.sectioned.SectionedFile),
        checked: kind, count, UTF-8, uniqueness. IndexFileError otherwise."""
        kind = f.header.get("id_kind")
        next_id = f.field("next_id", int)
        if kind not in (None, "int", "str") or (kind is None and n):
            raise IndexFileError(f"{f.path}: corrupt header field 'id_kind' ({kind!r})")
        out = cls()
        if kind == "str":
            offsets = f.array("id_offsets", "<i8", (n + 1,), mmap=False, verify=True)
            if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
                raise IndexFileError(f"{f.path}: corrupt id offsets")
            raw = f.array("id_bytes", "|u1", (int(offsets[-1]),), mmap=False, verify=True).tobytes()
            try:
                items = [
                    raw[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())
                ]
            except UnicodeDecodeError as exc:
                raise IndexFileError(f"{f.path}: corrupt ids ({exc})") from None
            arr = np.empty(n, dtype=object)
            arr[:] = items
        else:
            arr = np.ascontiguousarray(f.array("ids", "<i8", (n,), mmap=False, verify=True), dtype=np.int64)
            items = arr.tolist()
        if len(set(items)) != n:
            raise IndexFileError(f"{f.path}: corrupt ids (repeated ids)")
        if kind == "int" and n and next_id <= int(arr.max()):
            raise IndexFileError(f"{f.path}: corrupt header field 'next_id' ({next_id})")
        if n:
            out.commit_add(arr, kind)
        out.next_int = max(out.next_int, next_id)
        return out
