"""Retrievers for RAG frameworks over a :class:`ragfind.Retriever`:
:mod:`ragfind.integrations.langchain` (the ``langchain`` extra, langchain-core) and
:mod:`ragfind.integrations.llama_index` (the ``llama-index`` extra, llama-index-core).
Each module imports its framework, so import the one you use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["passage_metadata", "check_search_args"]


def passage_metadata(p: Any) -> dict:
    """A passage's metadata for a framework document: the document's own metadata, then
    ``doc_id``, ``chunk_id``, ``title``, ``source``, ``score``, ``ranks`` and ``scores`` (which
    win over metadata keys of the same name)."""
    out = dict(p.metadata)
    out.update(
        {
            "doc_id": p.doc_id,
            "chunk_id": int(p.id),
            "title": p.title,
            "source": p.source,
            "score": float(p.score),
            "ranks": {k: int(v) for k, v in p.ranks.items()},
            "scores": {k: float(v) for k, v in p.scores.items()},
        }
    )
    return out


def check_search_args(retriever: Any, k: Any, filters: Any) -> None:
    """The framework retrievers' arguments, checked when they are built (not at the first query)."""
    from ragfind.errors import check_k

    if not callable(getattr(retriever, "search", None)):
        raise TypeError(f"retriever is a {type(retriever).__name__}; expected a ragfind.Retriever")
    check_k(k)
    if filters is not None and not isinstance(filters, Mapping):
        raise TypeError(f"filters is a {type(filters).__name__}; expected a dict of field -> condition")
