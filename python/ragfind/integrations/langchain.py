"""A LangChain retriever over a :class:`ragfind.Retriever` (needs ``langchain-core``: the
``langchain`` extra).

>>> from ragfind.integrations.langchain import RagfindRetriever
>>> docs = RagfindRetriever(retriever=r, k=5, filters={"lang": "en"}).invoke("what purrs?")

Each passage becomes a ``Document`` whose ``page_content`` is the passage text and whose
metadata holds the document's metadata plus ``doc_id``, ``chunk_id``, ``title``, ``source``,
``score`` and the per-stage ``ranks`` and ``scores``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Optional

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, model_validator

from ragfind.integrations import check_search_args, passage_metadata

__all__ = ["RagfindRetriever"]


class RagfindRetriever(BaseRetriever):
    """LangChain ``BaseRetriever`` over a ragfind Retriever (sync and async).

    Attributes:
        retriever: the :class:`ragfind.Retriever` (searches may run concurrently).
        k: passages per query.
        filters: metadata filters passed to every search (the Retriever's filter syntax).
        stages: first stages to run (default all), e.g. ``["bm25"]``.
        collapse: ``"document"`` for at most one passage per document.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any
    k: int = 4
    filters: Optional[dict] = None  # noqa: UP045 - pydantic evaluates it on Python 3.9
    stages: Optional[Sequence[str]] = None  # noqa: UP045
    collapse: Optional[str] = None  # noqa: UP045

    @model_validator(mode="after")
    def _check(self) -> RagfindRetriever:
        check_search_args(self.retriever, self.k, self.filters)
        return self

    def _search(self, query: str) -> list:
        res = self.retriever.search(
            query, k=self.k, filters=self.filters, stages=self.stages, collapse=self.collapse
        )
        return [
            Document(page_content=p.text, metadata=passage_metadata(p), id=f"{p.doc_id}:{p.id}") for p in res
        ]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list:
        return self._search(query)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list:
        # The search releases the GIL in its indexes: a worker thread keeps the event loop free.
        return await asyncio.get_running_loop().run_in_executor(None, self._search, query)
