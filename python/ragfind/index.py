"""The contract every ragfind index keeps, and the checks its implementations share.

``BM25Index``, ``BM25FIndex``, ``SparseVectorIndex``, ``DenseIndex`` (exact, HNSW, IVF) and
``LateInteractionIndex`` all satisfy :class:`Index`:

- ``add(items, ids=None) -> ids``: the ids given to the new items, as a numpy array (int64, or
  an object array of str). Ids are all int or all str; an id already present or repeated is a
  ``DuplicateIdError`` and nothing is added.
- ``delete(ids)``: ``UnknownIdError`` (one message everywhere) when any id is absent; nothing
  is deleted then.
- ``search(query, k=10, filter=None, *, threads=None, ...) -> (ids, scores)``, best first;
  ``filter`` is an ``IdFilter``, an iterable of ids or (slow) a callable. A kind's own options
  (``algorithm``, ``nprobe`` ...) follow ``threads``, keyword-only and named: no catch-all.
- ``search_batch(queries, k=10, filter=None, *, threads=None, ...)``: a list whose item ``i``
  equals ``search(queries[i], k, filter, ...)``. The padded (nq, k) arrays some indexes
  compute natively are ``search_batch_padded`` (ids padded with -1 or None, scores with -inf).
- ``explain(query, id) -> Explanation``: what each part (term, field, token, vector) added.
- ``save(path)``; classmethod ``load(path, *, mmap=True, verify=True)``; ``len(index)``,
  ``index.ids``.

One spelling of each name: ``query``, ``queries``, ``id``, ``threads`` (None: the index's
default; 0: one per core; n: n workers) and ``nprobe``. Older spellings (``q``, ``Q``,
``query_vectors``, ``doc_id``, ``n_threads``, ``n_probe``, ``threads`` or ``mmap`` by position)
still work for one release with a ``DeprecationWarning``: :func:`old_spellings`.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
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
    "old_spellings",
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
    """The calls every index kind answers the same way (see the module docstring).

    A kind may add its own options after ``threads`` (keyword-only, with defaults) and after
    ``verify``; every name and kind of parameter here is the same on all of them
    (tests/test_index_contract.py checks it with ``inspect.signature``).
    """

    def add(self, items: Any, ids: Any = None) -> np.ndarray: ...

    def delete(self, ids: Any) -> None: ...

    def search(
        self,
        query: Any,
        k: int = 10,
        filter: Any = None,  # noqa: A002
        *,
        threads: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def search_batch(
        self,
        queries: Any,
        k: int = 10,
        filter: Any = None,  # noqa: A002
        *,
        threads: int | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray]]: ...

    def explain(self, query: Any, id: Any) -> Explanation: ...  # noqa: A002

    def save(self, path: Any) -> None: ...

    @classmethod
    def load(cls, path: Any, *, mmap: bool = True, verify: bool = True) -> Index: ...

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


def old_spellings(*, renamed: Mapping[str, str] | None = None, positional: tuple = ()) -> Callable:
    """Decorator: the deprecated spellings of a call's arguments, kept one release.

    ``renamed`` maps an old keyword to its new name (``{"q": "query"}``); ``positional`` names
    the keyword-only parameters that older versions took by position, in that order
    (``("threads",)``). Either spelling warns (DeprecationWarning naming the new one) and is
    passed on under the new name; both given is a TypeError. The signature stays the new one
    (``inspect.signature`` follows ``__wrapped__``).
    """
    renamed = dict(renamed or {})

    def wrap(fn: Callable) -> Callable:
        params = inspect.signature(fn).parameters.values()
        positional_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        at = {p.name: i for i, p in enumerate(params) if p.kind in positional_kinds}
        n_pos = len(at)
        where = fn.__qualname__

        def use(args: tuple, kwargs: dict, new: str, value: Any, how: str) -> None:
            if new in kwargs or at.get(new, n_pos) < len(args):
                both = f"its old name {how}" if how.endswith("=") else how
                raise TypeError(f"{where}: got both {new}= and {both}; pass {new}= only")
            warnings.warn(
                f"{where}: {how} is deprecated and will be removed in the next release; use {new}=",
                DeprecationWarning,
                stacklevel=3,
            )
            kwargs[new] = value

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if len(args) > n_pos and len(args) - n_pos <= len(positional):
                for name, value in zip(positional, args[n_pos:]):
                    use((), kwargs, name, value, f"{name} by position")
                args = args[:n_pos]
            if kwargs and renamed:
                for old in renamed.keys() & kwargs.keys():
                    use(args, kwargs, renamed[old], kwargs.pop(old), f"{old}=")
            return fn(*args, **kwargs)

        return call

    return wrap


def pairs_from_padded(ids: np.ndarray, scores: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(nq, k) padded arrays (scores -inf or NaN past each row's end) as a list of (ids, scores)."""
    out = []
    for row_ids, row_scores in zip(ids, scores):
        n = int(np.count_nonzero(np.isfinite(row_scores)))
        out.append((row_ids[:n].copy(), row_scores[:n].copy()))
    return out
