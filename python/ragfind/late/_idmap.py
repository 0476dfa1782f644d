"""The ids of an index whose storage numbers documents by row (0, 1, 2, ... in insertion
order): the id of each row, which rows are live, and the id -> row map of the live ones.

Shared by :class:`ragfind.LateInteractionIndex` and :class:`ragfind.SparseVectorIndex`. Adding
is split in two (:meth:`IdMap.check_new`, then :meth:`IdMap.commit_add` once the storage took
the items) so a rejected batch changes nothing. Not thread-safe by itself: the index calls the
mutating methods under its write lock.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragfind.errors import DuplicateIdError, IdKindError, IndexFileError, UnknownIdError
from ragfind.ids import IdFilter, empty_ids, id_kind

__all__ = ["IdMap"]

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


def _describe(items: list) -> str:
    return f"{items[:5]!r}{' ...' if len(items) > 5 else ''}"


class IdMap:
    """Row ids, liveness and the id -> row map (see the module notes)."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.next_int = 0  # default ids continue after the largest int id ever added
        self.n_rows = 0
        self.n_live = 0
        self.row_of: dict = {}
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
                raise IdKindError(f"this index has str ids: pass {what}= for the {n} new items")
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
            raise IdKindError(f"this index has {self.kind} ids; {what} are {kind} ids")
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
            raise DuplicateIdError(f"id {dup!r} is repeated in {what}")
        present = [x for x in items if x in self.row_of]
        if present:
            raise DuplicateIdError(
                f"{what} {_describe(present)} already in the index (delete them first to replace them)"
            )
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
            raise UnknownIdError(f"{what}: {_describe(missing)} not in the index")
        if unique and len(set(rows)) != len(rows):
            seen: set = set()
            dup = next(x for x, r in zip(items, rows) if r in seen or seen.add(r))
            raise DuplicateIdError(f"id {dup!r} is repeated in {what}")
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
        """uint8 per row: 1 for a live row whose id the filter allows (other ids are ignored)."""
        mask = np.zeros(self.n_rows, np.uint8)
        if not len(flt) or flt.kind != self.kind:
            return mask
        if self.kind == "int" and len(flt) > self.n_rows // 8:
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
