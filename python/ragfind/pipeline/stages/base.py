"""What the Retriever runs: the stage protocols.

A first-stage retriever (:class:`RetrievalStage`) returns a ranked list of chunk ids for a
phrasing; every list joins the rank fusion. A re-ranker (:class:`RerankStage`) reorders the
fused head. BM25 (:class:`BM25Stage`) and dense (:class:`DenseStage`) are ordinary first
stages; the Retriever builds them from its ``bm25=`` / ``encoder=`` arguments.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["RetrievalStage", "RerankStage", "load_stage_index"]


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
    - ``explain(query, chunk_id, text=None) -> ragfind.Explanation``: why the stage scores
      the chunk what it does (``text``: the chunk's indexed text, for stages that label
      tokens); ``ragfind.UnknownIdError`` when the stage does not hold the chunk. The
      service's ``/explain`` asks every stage that has it.
    - ``kind``: what the stage is (``"bm25"``, ``"dense"``, ``"splade"``, ``"late"``; the
      built-in stages set it), so that callers ask the stage instead of testing its class.
    """

    name: str

    def add(self, ids: np.ndarray, texts: list) -> None: ...

    def delete(self, ids: np.ndarray) -> None: ...

    def search(self, query: str, k: int, filter: object) -> tuple: ...  # noqa: A002


@runtime_checkable
class RerankStage(Protocol):
    """A re-ranker over the fused candidates (e.g. late interaction / ColBERT MaxSim).

    ``rerank(query, ids, texts)`` returns ``(ids, scores)`` best first over the given chunks.
    The optional ``explain`` and ``kind`` are those of :class:`RetrievalStage`.
    """

    name: str

    def rerank(self, query: str, ids: np.ndarray, texts: list) -> tuple: ...


def load_stage_index(path: os.PathLike, index_cls: Any, index_file: str, old_layout: str, what: str) -> Any:
    """The index a stage saved into its folder as ``index_file`` (an empty one when the stage
    held no documents: it still records the index settings).

    Raises:
        ValueError: the folder is of the layout before the index kept the chunk ids (it holds
            ``old_layout``), its index is missing or malformed, or it has str ids.
    """
    folder = Path(path)
    if (folder / old_layout).exists():
        raise ValueError(
            f"{str(path)!r}: a {what} stage saved by an older ragfind ({old_layout} id map); "
            f"this version keeps the chunk ids in the index: rebuild the retriever's {what} stage"
        )
    try:
        index = index_cls.load(folder / index_file)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{str(path)!r}: not a saved {what} stage ({exc})") from exc
    if index.id_kind == "str":
        raise ValueError(f"{str(path)!r}: the {what} stage's index has str ids; chunk ids are ints")
    return index
