"""What the Retriever runs: the stage protocols.

A first-stage retriever (:class:`RetrievalStage`) returns a ranked list of chunk ids for a
phrasing; every list joins the rank fusion. A re-ranker (:class:`RerankStage`) reorders the
fused head.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["RetrievalStage", "RerankStage"]


@runtime_checkable
class RetrievalStage(Protocol):
    """A first-stage retriever plugged into the fusion (SPLADE, another dense model, ...).

    ``name`` labels its timing. ``add`` receives the chunk ids and the indexed texts (context
    included); ``search`` returns ``(ids, scores)`` best first for one phrasing, restricted to
    ``allowed`` chunk ids when that is not None. An optional ``save(folder)`` persists it inside
    the retriever folder (a folder reserved for the stage, ``stage-<name>``).
    """

    name: str

    def add(self, ids: np.ndarray, texts: list) -> None: ...

    def delete(self, ids: np.ndarray) -> None: ...

    def search(self, query: str, k: int, allowed: set | None) -> tuple: ...


@runtime_checkable
class RerankStage(Protocol):
    """A re-ranker over the fused candidates (e.g. late interaction / ColBERT MaxSim).

    ``rerank(query, ids, texts)`` returns ``(ids, scores)`` best first over the given chunks.
    """

    name: str

    def rerank(self, query: str, ids: np.ndarray, texts: list) -> tuple: ...
