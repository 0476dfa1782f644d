"""A small thread-safe LRU cache with hit/miss counters, used for query embeddings and results.

Repeated questions are common in production RAG (a third or more of enterprise traffic), so the
Retriever keeps the embedding of recent query texts and the final passages of recent searches.
Results depend on the store, so that cache is cleared whenever the store changes; embeddings
depend only on the model and survive.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Callable

__all__ = ["LRUCache"]

_MISSING = object()


class LRUCache:
    """Least-recently-used mapping of at most ``max_entries`` items, safe across threads.

    Args:
        max_entries: capacity (>= 0; 0 disables caching: every ``get`` misses, ``put`` is a no-op).

    Attributes:
        hits, misses: counters since creation or the last :meth:`reset_stats`.
    """

    def __init__(self, max_entries: int = 1024):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise ValueError(f"max_entries = {max_entries!r}; expected an int >= 0")
        self.max_entries = max_entries
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.invalidations = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value for ``key`` (marking it recently used) or ``default``; counts a hit or miss."""
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                self.misses += 1
                return default
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """The value for ``key`` or ``default``, neither counted nor marked as used."""
        with self._lock:
            return self._data.get(key, default)

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key``, evicting the least recently used entry when full."""
        if self.max_entries == 0:
            return
        data = self._data
        with self._lock:
            if key in data:
                data.move_to_end(key)
            data[key] = value  # a new key goes last already
            while len(data) > self.max_entries:
                data.popitem(last=False)

    def resize(self, max_entries: int) -> None:
        """Holds at most ``max_entries`` from now on, dropping the least recently used beyond it
        (0 empties and disables the cache)."""
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise ValueError(f"max_entries = {max_entries!r}; expected an int >= 0")
        with self._lock:
            self.max_entries = max_entries
            while len(self._data) > max_entries:
                self._data.popitem(last=False)

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> tuple[Any, bool]:
        """``(value, was_hit)``; on a miss ``compute()`` runs outside the lock and is stored."""
        value = self.get(key, _MISSING)
        if value is not _MISSING:
            return value, True
        value = compute()
        self.put(key, value)
        return value, False

    def clear(self) -> None:
        """Drop every entry (the store changed); counters are kept, ``invalidations`` counts it."""
        with self._lock:
            self._data.clear()
            self.invalidations += 1

    def reset_stats(self) -> None:
        """Zero the hit/miss counters."""
        with self._lock:
            self.hits = self.misses = 0

    def stats(self) -> dict:
        """``{"entries", "max_entries", "hits", "misses", "hit_rate", "invalidations"}``."""
        with self._lock:
            total = self.hits + self.misses
            return {
                "entries": len(self._data),
                "max_entries": self.max_entries,
                "hits": self.hits,
                "misses": self.misses,
                "hit_rate": (self.hits / total) if total else 0.0,
                "invalidations": self.invalidations,
            }

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def __repr__(self) -> str:
        s = self.stats()
        return f"LRUCache(entries={s['entries']}/{s['max_entries']}, hits={s['hits']}, misses={s['misses']})"


def freeze(value: Any) -> Hashable | None:
    """A hashable, order-independent form of a filter dict (nested dicts/lists allowed)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return tuple(sorted(freeze(v) for v in value))
    hash(value)
    return (type(value).__name__, value)
