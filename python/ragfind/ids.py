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

from ragfind.errors import IdKindError

__all__ = ["IdFilter", "as_id_filter", "empty_ids", "id_kind"]


def id_kind(ids: list) -> str:
    """``"int"`` or ``"str"`` for a non-empty list of ids; IdKindError for anything else."""
    kinds = set()
    for x in ids:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer, str)):
            raise IdKindError(f"ids must be int or str, got {type(x).__name__} ({x!r})")
        kinds.add("str" if isinstance(x, str) else "int")
    if len(kinds) > 1:
        raise IdKindError("ids must be all int or all str, not a mix")
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
            self._ids, self._kind, self._set = ids._ids, ids._kind, ids._set
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
        self._cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

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

    def compiled(self, index: Any, generation: int, compile_fn: Callable[[IdFilter], Any]) -> Any:
        """The index's native form of this filter, compiled by ``compile_fn(self)`` at most once
        per (index, generation)."""
        with self._lock:
            hit = self._cache.get(index)
        if hit is not None and hit[0] == generation:
            return hit[1]
        native = compile_fn(self)
        with self._lock:
            self._cache[index] = (generation, native)
        return native

    def __repr__(self) -> str:
        return f"IdFilter({len(self)} {self._kind or ''} ids)"


def as_id_filter(filter: Any) -> IdFilter | None:  # noqa: A002 - the API's name
    """None stays None, an IdFilter stays itself, any other collection of ids becomes one."""
    if filter is None or isinstance(filter, IdFilter):
        return filter
    return IdFilter(filter)
