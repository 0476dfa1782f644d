"""The error classes every index raises, so the same mistake gets the same error everywhere.

Each is a subclass of the builtin a caller would catch anyway (ValueError, KeyError,
TypeError), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

from ragfind import _core

__all__ = [
    "IndexFileError",
    "UnknownIdError",
    "DuplicateIdError",
    "IdKindError",
    "ModelMismatchError",
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
