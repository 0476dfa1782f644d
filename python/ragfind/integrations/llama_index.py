"""A LlamaIndex retriever over a :class:`ragfind.Retriever` (needs ``llama-index-core``: the
``llama-index`` extra).

>>> from ragfind.integrations.llama_index import RagfindRetriever
>>> nodes = RagfindRetriever(retriever=r, k=5).retrieve("what purrs?")

Each passage becomes a ``NodeWithScore`` over a ``TextNode`` (text = passage text, id
``"<doc_id>:<chunk_id>"``, its source relationship the document id) with the passage score and
the metadata of the LangChain retriever (``doc_id``, ``chunk_id``, ``title``, ``source``,
``score``, per-stage ``ranks`` and ``scores``, and the document's metadata). The ranking fields
are kept out of the text LlamaIndex shows the LLM and the embedder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode

from ragfind.integrations import check_search_args, passage_metadata

__all__ = ["RagfindRetriever"]

_HIDDEN = ["chunk_id", "score", "ranks", "scores"]


class RagfindRetriever(BaseRetriever):
    """LlamaIndex ``BaseRetriever`` over a ragfind Retriever (``retrieve`` and ``aretrieve``).

    Args:
        retriever: the :class:`ragfind.Retriever`.
        k: passages per query.
        filters: metadata filters passed to every search.
        stages: first stages to run (default all).
        collapse: ``"document"`` for at most one passage per document.
        callback_manager: LlamaIndex's callback manager.
    """

    def __init__(
        self,
        retriever: Any,
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        stages: Sequence[str] | None = None,
        collapse: str | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        check_search_args(retriever, k, filters)
        self.retriever = retriever
        self.k = int(k)
        self.filters = dict(filters) if filters is not None else None
        self.stages = stages
        self.collapse = collapse
        super().__init__(callback_manager=callback_manager)

    def _nodes(self, query: str) -> list:
        res = self.retriever.search(
            query, k=self.k, filters=self.filters, stages=self.stages, collapse=self.collapse
        )
        out = []
        for p in res:
            node = TextNode(
                id_=f"{p.doc_id}:{p.id}",
                text=p.text,
                metadata=passage_metadata(p),
                excluded_llm_metadata_keys=list(_HIDDEN),
                excluded_embed_metadata_keys=list(_HIDDEN),
            )
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=p.doc_id)
            out.append(NodeWithScore(node=node, score=float(p.score)))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list:
        return self._nodes(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list:
        return await asyncio.get_running_loop().run_in_executor(None, self._nodes, query_bundle.query_str)
