"""The error classes every index raises, and the argument checks they share, so the same
mistake gets the same error (class and message) everywhere.

Each is a subclass of the builtin a caller would catch anyway (ValueError, KeyError,
TypeError), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragfind import _core

__all__ = [
    "IndexFileError",
    "UnknownIdError",
    "DuplicateIdError",
    "IdKindError",
    "ModelMismatchError",
    "check_k",
    "describe_ids",
    "other_id_kind",
    "ids_needed",
    "repeated_id",
    "present_ids",
    "unknown_ids",
]

#: A missing, foreign, truncated or corrupt index file (a ValueError). The C++ loaders raise
#: this same class.
IndexFileError = _core.IndexFileError


class UnknownIdError(KeyError):
    """An id given to ``delete``, ``explain`` or a lookup is not in the index (nothing changed)."""

    def __str__(self) -> str:  # KeyError quotes its argument; the message is already a sentence
        return str(self.args[0]) if self.args else ""


class DuplicateIdError(ValueError):
    """An id is repeated in one call, or is already in the index (nothing was added)."""


class IdKindError(TypeError):
    """Ids are neither all int nor all str, or of the other kind than the index's ids."""


class ModelMismatchError(ValueError):
    """Vectors made by one model are about to be compared with vectors made by another."""


def check_k(k: Any, n: int | None = None) -> int:
    """``k`` as an int: TypeError unless an int (bools are not), ValueError unless >= 1.

    The one check of ``k`` in every index, the Retriever, the CLI and the service. With ``n``
    (the documents or chunks there are), a larger ``k`` is clamped to ``max(n, 1)``: asking
    for more results than exist is not a mistake, and the native code must never see a ``k``
    past int64 (nor size a buffer by it).
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be a positive int, got {type(k).__name__} ({k!r})")
    if k <= 0:
        raise ValueError(f"k must be a positive int, got {k!r}")
    k = int(k)
    return k if n is None or k <= n else max(int(n), 1)


# The id mistakes, worded once (the BM25 bindings build the same sentences in C++).


def describe_ids(items: list) -> str:
    """The first few ids of a list, as Python writes them."""
    return f"{items[:5]!r}{' ...' if len(items) > 5 else ''}"


def other_id_kind(index_kind: str, kind: str, what: str = "ids") -> IdKindError:
    return IdKindError(f"{what}: this index has {index_kind} ids, got {kind} ids")


def ids_needed() -> IdKindError:
    return IdKindError("ids: this index has str ids; pass ids= for the new items")


def repeated_id(dup: object) -> DuplicateIdError:
    return DuplicateIdError(f"ids: id {dup!r} is repeated")


def present_ids(present: list) -> DuplicateIdError:
    return DuplicateIdError(
        f"ids: {describe_ids(present)} already in the index (delete them first to replace them)"
    )


def unknown_ids(missing: list, what: str = "ids", deleting: bool = False) -> UnknownIdError:
    tail = "; nothing was deleted" if deleting else ""
    return UnknownIdError(f"{what}: {describe_ids(missing)} not in the index{tail}")
