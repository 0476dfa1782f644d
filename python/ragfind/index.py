"""The contract every ragfind index keeps, and the checks its implementations share.

``BM25Index``, ``BM25FIndex``, ``SparseVectorIndex``, ``DenseIndex`` (exact, HNSW, IVF) and
``LateInteractionIndex`` all satisfy :class:`Index`:

- ``add(items, ids=None) -> ids``: the ids given to the new items, as a numpy array (int64, or
  an object array of str). Ids are all int or all str; an id already present or repeated is a
  ``DuplicateIdError`` and nothing is added.
- ``delete(ids)``: ``UnknownIdError`` (one message everywhere) when any id is absent; nothing
  is deleted then.
- ``search(query, k=10, filter=None, *, threads=None, **kind_options) -> (ids, scores)``,
  best first; ``filter`` is an ``IdFilter``, an iterable of ids or (slow) a callable.
- ``search_batch(queries, k=10, filter=None, *, threads=None, **kind_options)``: a list whose
  item ``i`` equals ``search(queries[i], k, filter, **kind_options)``. The padded (nq, k)
  arrays some indexes compute natively are ``search_batch_padded`` (ids padded with -1 or
  None, scores with -inf).
- ``explain(query, id) -> Explanation``: what each part (term, field, token, vector) added.
- ``save(path)`` / ``load(path, mmap=...)``, ``len(index)``, ``index.ids``.

One spelling of each option: ``threads`` (None: the index's default; 0: one per core; n: n
workers) and ``nprobe``. Older spellings (``n_threads``, ``n_probe``) still work for one release
with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Index",
    "Explanation",
    "Contribution",
    "check_threads",
    "check_dim",
    "MAX_DIM",
    "renamed_option",
    "pairs_from_padded",
]


@dataclass(frozen=True)
class Contribution:
    """One part of a score: a query term, a field, a query token, a whole vector.

    ``value`` is what it added to the score (the values of an explanation sum to its score,
    up to float rounding); ``detail`` holds the kind's own figures (tf, idf, weights, the
    matched token ...), JSON-serialisable.
    """

    name: str
    value: float
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """Why one document scores what it does for one query, the same type from every index.

    ``kind`` names the scorer ("bm25", "bm25f", "splade", "dense", "late"), ``id`` the
    document, ``score`` the score ``search`` ranks it by, ``contributions`` its parts, and
    ``detail`` the document-wide figures (parameters, lengths, metric ...).
    """

    kind: str
    id: Any
    score: float
    contributions: tuple[Contribution, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)
    # What explain returned before this type (a dict, a list, a MaxSimExplanation): read
    # through it with a DeprecationWarning for one release, so old callers keep working.
    _legacy: Any = field(default=None, compare=False, repr=False)

    def _old(self, how: str) -> Any:
        legacy = self.__dict__.get("_legacy")
        if legacy is None:
            raise TypeError(f"Explanation does not support {how}; use .score, .detail and .contributions")
        warnings.warn(
            f"explain() returns an Explanation now; {how} on it reads the old {type(legacy).__name__} "
            "result, which is deprecated and will be removed in the next release: "
            "use .score, .detail and .contributions",
            DeprecationWarning,
            stacklevel=3,
        )
        return legacy

    def __getitem__(self, key: Any) -> Any:
        return self._old("indexing")[key]

    def __iter__(self) -> Any:
        return iter(self._old("iteration"))

    def __bool__(self) -> bool:
        return True

    def __str__(self) -> str:
        lines = [f"{self.kind} {self.id!r}: {self.score:.4f}"]
        lines += [f"  {c.name:>16} {c.value:+.4f}" for c in self.contributions]
        return "\n".join(lines)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the dataclass lacks (MaxSimExplanation's matches, dict's keys).
        legacy = self.__dict__.get("_legacy")
        if name.startswith("_") or legacy is None or not hasattr(legacy, name):
            raise AttributeError(f"'Explanation' object has no attribute {name!r}")
        return getattr(self._old(f"attribute {name!r}"), name)

    def to_dict(self) -> dict:
        """A JSON-serialisable dict: kind, id, score, detail and contributions as dicts."""
        return {
            "kind": self.kind,
            "id": self.id.item() if isinstance(self.id, np.generic) else self.id,
            "score": float(self.score),
            "detail": dict(self.detail),
            "contributions": [
                {"name": c.name, "value": float(c.value), "detail": dict(c.detail)}
                for c in self.contributions
            ],
        }


@runtime_checkable
class Index(Protocol):
    """The calls every index kind answers the same way (see the module docstring)."""

    def add(self, items: Any, ids: Any = None) -> np.ndarray: ...

    def delete(self, ids: Any) -> None: ...

    def search(
        self, query: Any, k: int = 10, filter: Any = None, *, threads: int | None = None, **options: Any
    ) -> tuple[np.ndarray, np.ndarray]: ...  # noqa: A002, E501

    def search_batch(
        self, queries: Any, k: int = 10, filter: Any = None, *, threads: int | None = None, **options: Any
    ) -> list[tuple[np.ndarray, np.ndarray]]: ...  # noqa: A002, E501

    def explain(self, query: Any, id: Any) -> Explanation: ...  # noqa: A002

    def save(self, path: Any) -> None: ...

    def __len__(self) -> int: ...

    @property
    def ids(self) -> np.ndarray: ...


def check_threads(threads: Any, default: int = 0) -> int:
    """``threads`` as an int >= 0 (0: one per core); ``None`` gives ``default``.

    The one check and message for a bad ``threads`` in every index: TypeError unless an int
    (bools are not), ValueError when negative.
    """
    if threads is None:
        return default
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise TypeError(
            f"threads: expected None or an int >= 0 (0 = one per core), got {type(threads).__name__}"
        )
    if threads < 0:
        raise ValueError(f"threads: expected None or an int >= 0 (0 = one per core), got {int(threads)}")
    return int(threads)


#: The largest vector dimension an index takes. Embedding models stay far below it (MiniLM 384,
#: BGE 1,024, OpenAI's text-embedding-3-large 3,072, 7B-parameter embedders 4,096; ColBERT's
#: token vectors 128); a dimension past it is a mistake (a vocabulary size, a count of
#: vectors) that would otherwise surface only at the first add, as a failed allocation.
MAX_DIM = 65_536


def check_dim(dim: Any) -> int:
    """``dim`` as an int in [1, MAX_DIM]: the one check of the dimension a dense or
    late-interaction index is built with (ValueError otherwise, bools included)."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not 0 < dim <= MAX_DIM:
        raise ValueError(f"dim must be a positive integer up to {MAX_DIM:,}, got {dim!r}")
    return int(dim)


def renamed_option(options: dict, old: str, new: str, value: Any, where: str) -> Any:
    """Pop the deprecated spelling ``old`` from ``options``; warn and return it in place of ``value``.

    ``value`` is what the caller got under the new name (None when not given). Both given is
    a TypeError. ``where`` names the call in the warning (``"DenseIndex.search"``).
    """
    if old not in options:
        return value
    old_value = options.pop(old)
    if value is not None:
        raise TypeError(f"{where}: got both {new}= and its old name {old}=; pass {new}= only")
    warnings.warn(
        f"{where}: {old}= is deprecated and will be removed in the next release; use {new}=",
        DeprecationWarning,
        stacklevel=3,
    )
    return old_value


def pairs_from_padded(ids: np.ndarray, scores: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(nq, k) padded arrays (scores -inf or NaN past each row's end) as a list of (ids, scores)."""
    out = []
    for row_ids, row_scores in zip(ids, scores):
        n = int(np.count_nonzero(np.isfinite(row_scores)))
        out.append((row_ids[:n].copy(), row_scores[:n].copy()))
    return out
