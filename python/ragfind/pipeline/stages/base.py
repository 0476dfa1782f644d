"""What the Retriever runs: the stage protocols.

A first-stage retriever (:class:`RetrievalStage`) returns a ranked list of chunk ids for a
phrasing; every list joins the rank fusion. A re-ranker (:class:`RerankStage`) reorders the
fused head. BM25 (:class:`BM25Stage`) and dense (:class:`DenseStage`) are ordinary first
stages; the Retriever builds them from its ``bm25=`` / ``encoder=`` arguments.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["RetrievalStage", "RerankStage"]


@runtime_checkable
class RetrievalStage(Protocol):
    """A first-stage retriever plugged into the fusion (BM25, dense, SPLADE, ...).

    ``name`` labels its timing, its RRF weight and its entry in ``Passage.ranks``. ``add``
    receives the chunk ids and the indexed texts (context included). ``search(query, k,
    filter)`` returns ``(ids, scores)`` best first for one phrasing: ``filter`` is None or an
    :class:`ragfind.IdFilter` of the allowed chunk ids (passed positionally), and the result is
    exactly ``min(k, allowed chunks that match)`` long, the unfiltered ranking restricted to
    the allowed chunks. An optional ``save(folder)`` persists it inside the retriever folder
    (a folder reserved for the stage, ``stage-<name>``).

    Optional hooks the Retriever uses when present:

    - ``prepare(texts, embeddings=None, batch_size=32, show_progress=False)``: the expensive,
      side-effect-free part of adding (encoding), run before anything is written, so that a
      failure changes nothing; its return value is passed to ``add(ids, texts, prepared)``.
      Precomputed ``embeddings`` given to ``add_documents`` go to the stage(s) having it.
    - ``embed(query)``: encodes a phrasing (timed as ``embed``); ``search`` then receives
      its result instead of the text.
    """

    name: str

    def add(self, ids: np.ndarray, texts: list) -> None: ...

    def delete(self, ids: np.ndarray) -> None: ...

    def search(self, query: str, k: int, filter: object) -> tuple: ...  # noqa: A002


@runtime_checkable
class RerankStage(Protocol):
    """A re-ranker over the fused candidates (e.g. late interaction / ColBERT MaxSim).

    ``rerank(query, ids, texts)`` returns ``(ids, scores)`` best first over the given chunks.
    """

    name: str

    def rerank(self, query: str, ids: np.ndarray, texts: list) -> tuple: ...
