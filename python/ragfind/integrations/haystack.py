"""Haystack 2 over ragfind (needs ``haystack-ai``: the ``haystack`` extra).

>>> from ragfind.integrations.haystack import RagfindDocumentStore, RagfindBM25Retriever
>>> store = RagfindDocumentStore()
>>> store.write_documents([Document(content="Cats purr.", meta={"lang": "en"})])
>>> RagfindBM25Retriever(store, top_k=3).run(query="what purrs?")["documents"]

``RagfindDocumentStore`` keeps documents in a :class:`ragfind.Retriever` (BM25 over the
content, the SQLite store) and their embeddings in a :class:`ragfind.DenseIndex` (documents
without an embedding are found by BM25 only). ``filters`` use Haystack's syntax and are
evaluated with Haystack's own ``document_matches_filter``; the documents they allow then
restrict the searches inside the indexes.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy, FilterPolicy, apply_filter_policy
from haystack.utils.filters import document_matches_filter

from ragfind.integrations import all_documents, existing_ids

__all__ = [
    "RagfindBM25Retriever",
    "RagfindDocumentStore",
    "RagfindEmbeddingRetriever",
    "RagfindHybridRetriever",
]

_DOC_KEY = "_haystack"  # the Haystack document's own fields, kept beside its meta
_BM25_SCALE = 8.0  # Haystack's InMemoryDocumentStore scales BM25 scores by expit(s / 8)


def _expit(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


class RagfindDocumentStore:
    """A Haystack ``DocumentStore`` on ragfind: BM25, embedding and hybrid (RRF) retrieval.

    Args:
        bm25_method, k1, b: the BM25 variant (``"lucene"``, ``"robertson"``, ``"atire"``,
            ``"bm25l"``, ``"bm25+"``) and its parameters.
        embedding_similarity_function: ``"cosine"`` or ``"dot_product"``.
        dense_kind: ``"exact"``, ``"hnsw"`` or ``"ivf"`` for the embedding index.
        rrf_k: the RRF constant of hybrid retrieval.

    ``write_documents`` policies: ``NONE`` and ``FAIL`` raise ``DuplicateDocumentError`` for
    an id already stored (nothing is written), ``SKIP`` keeps the stored document,
    ``OVERWRITE`` replaces it. Metadata must be JSON-serialisable.
    """

    def __init__(
        self,
        bm25_method: str = "lucene",
        k1: float = 1.2,
        b: float = 0.75,
        embedding_similarity_function: str = "cosine",
        dense_kind: str = "exact",
        rrf_k: float = 60,
    ) -> None:
        from ragfind.pipeline.retriever import Retriever
        from ragfind.sparse.bm25 import BM25Index

        if embedding_similarity_function not in ("cosine", "dot_product"):
            raise ValueError(
                f"embedding_similarity_function = {embedding_similarity_function!r}; "
                "expected 'cosine' or 'dot_product'"
            )
        self.bm25_method = bm25_method
        self.k1 = k1
        self.b = b
        self.embedding_similarity_function = embedding_similarity_function
        self.dense_kind = dense_kind
        self.rrf_k = rrf_k
        self.retriever = Retriever(
            encoder=None,
            chunk_size=None,
            contextualize=False,
            bm25=BM25Index(method=bm25_method, k1=k1, b=b),
            rrf_k=rrf_k,
        )
        self.dense: Any = None  # the DenseIndex, made at the first embedding (its dimension)
        self._lock = threading.Lock()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            bm25_method=self.bm25_method,
            k1=self.k1,
            b=self.b,
            embedding_similarity_function=self.embedding_similarity_function,
            dense_kind=self.dense_kind,
            rrf_k=self.rrf_k,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RagfindDocumentStore:
        return default_from_dict(cls, data)

    # ----- the DocumentStore protocol

    def count_documents(self) -> int:
        """The number of documents stored."""
        return len(self.retriever)

    def _documents(self) -> list:
        return [_to_document(d, text, md) for d, _, text, md in all_documents(self.retriever)]

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """The stored documents ``filters`` (Haystack's syntax) allows, in insertion order.

        Raises:
            ValueError: a filter without ``operator`` / ``conditions`` at its top.
            haystack.errors.FilterError: a malformed condition.
        """
        docs = self._documents()
        if not filters:
            return docs
        _check_filters(filters)
        return [d for d in docs if document_matches_filter(filters=filters, document=d)]

    def write_documents(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE
    ) -> int:
        """Writes documents; returns how many were written (see the class for ``policy``).

        Raises:
            ValueError: not a list of Documents, an embedding of another dimension.
            DuplicateDocumentError: an id stored or repeated (``NONE``/``FAIL``); nothing written.
        """
        if (
            not isinstance(documents, list)
            or isinstance(documents, str)
            or any(not isinstance(d, Document) for d in documents)
        ):
            raise ValueError("write_documents: please provide a list of Documents")
        if policy == DuplicatePolicy.NONE:
            policy = DuplicatePolicy.FAIL
        with self._lock:
            stored = set(existing_ids(self.retriever, [d.id for d in documents]))
            batch: dict = {}
            for d in documents:
                if d.id in stored or d.id in batch:
                    if policy == DuplicatePolicy.FAIL:
                        raise DuplicateDocumentError(f"ID '{d.id}' already exists.")
                    if policy == DuplicatePolicy.SKIP:
                        continue
                batch[d.id] = d  # OVERWRITE: the last of repeated ids wins
            docs = list(batch.values())
            if not docs:
                return 0
            rows = [_to_row(d) for d in docs]
            embedded = [d for d in docs if d.embedding is not None]
            if embedded:
                dims = {len(d.embedding) for d in embedded}
                dim = self.dense.dim if self.dense is not None else next(iter(dims))
                if dims != {dim}:
                    raise ValueError(
                        f"write_documents: embeddings of dimension {sorted(dims)}; expected {dim}"
                    )
            replace_ids = [d.id for d in docs if d.id in stored]
            if replace_ids:
                self._delete(replace_ids)
            self.retriever.add_documents(rows)
            if embedded:
                if self.dense is None:
                    self.dense = self._new_dense(dim)
                vectors = np.asarray([d.embedding for d in embedded], dtype=np.float32)
                self.dense.add(vectors, [d.id for d in embedded])
            return len(docs)

    def _new_dense(self, dim: int) -> Any:
        from ragfind.dense.index import DenseIndex

        metric = "cosine" if self.embedding_similarity_function == "cosine" else "ip"
        return DenseIndex(dim, metric=metric, kind=self.dense_kind)

    def _delete(self, ids: list) -> None:
        self.retriever.delete_documents(ids)
        if self.dense is not None:
            held = set(np.asarray(self.dense.ids).tolist())
            gone = [i for i in ids if i in held]
            if gone:
                self.dense.delete(gone)

    def delete_documents(self, document_ids: list[str]) -> None:
        """Deletes documents by id; ids not stored are skipped."""
        with self._lock:
            ids = existing_ids(self.retriever, document_ids)
            if ids:
                self._delete(ids)

    def delete_all_documents(self) -> None:
        """Deletes every document."""
        with self._lock:
            ids = [d for d, *_ in all_documents(self.retriever)]
            if ids:
                self._delete(ids)

    # ----- retrieval (what the retriever components call)

    def _allowed(self, filters: dict[str, Any] | None) -> list | None:
        """The ids ``filters`` allows, or None for no filter."""
        if not filters:
            return None
        return [d.id for d in self.filter_documents(filters)]

    def bm25_retrieval(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int = 10, scale_score: bool = False
    ) -> list[Document]:
        """The ``top_k`` best documents for ``query`` by BM25, with their scores."""
        hits = self._bm25(query, self._allowed(filters), top_k)
        return self._scored(hits, lambda s: _expit(s / _BM25_SCALE) if scale_score else s)

    def _bm25(self, query: str, allowed: list | None, top_k: int) -> list:
        if top_k <= 0 or len(self.retriever) == 0 or allowed == []:
            return []
        flt = {"doc_id": {"$in": allowed}} if allowed is not None else None
        res = self.retriever.search(query, k=top_k, filters=flt, stages=["bm25"])
        return [(p.doc_id, float(p.scores["bm25"])) for p in res]

    def _embedding(self, query_embedding: list[float], allowed: list | None, top_k: int) -> list:
        if top_k <= 0 or self.dense is None or len(self.dense) == 0 or allowed == []:
            return []
        vec = np.asarray(query_embedding, dtype=np.float32)
        if vec.shape != (self.dense.dim,):
            raise ValueError(
                f"query_embedding has {vec.size} dimensions; the stored ones have {self.dense.dim}"
            )
        ids, scores = self.dense.search(vec, k=top_k, filter=allowed)
        return [(str(i), float(s)) for i, s in zip(ids, scores)]

    def embedding_retrieval(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """The ``top_k`` documents nearest ``query_embedding`` (documents with an embedding)."""
        hits = self._embedding(query_embedding, self._allowed(filters), top_k)
        if self.embedding_similarity_function == "cosine":
            scale = (lambda s: (s + 1.0) / 2.0) if scale_score else (lambda s: s)
        else:
            scale = (lambda s: _expit(s / 100.0)) if scale_score else (lambda s: s)
        return self._scored(hits, scale, return_embedding)

    def hybrid_retrieval(
        self,
        query: str,
        query_embedding: list[float] | None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        candidates: int = 100,
        weights: tuple[float, float] | None = None,
    ) -> list[Document]:
        """BM25 and embedding retrieval (``candidates`` each) fused by RRF; scores are the fused ones."""
        from ragfind.fusion import rrf

        allowed = self._allowed(filters)
        depth = max(candidates, top_k)
        lists = [[d for d, _ in self._bm25(query, allowed, depth)]]
        lists.append(
            [d for d, _ in self._embedding(query_embedding, allowed, depth)] if query_embedding else []
        )
        w = list(weights) if weights is not None else [1.0, 1.0]
        keep = [i for i, x in enumerate(lists) if x]
        if top_k <= 0 or not keep:
            return []
        ids, scores = rrf([lists[i] for i in keep], k=self.rrf_k, weights=[w[i] for i in keep], top_k=top_k)
        return self._scored([(str(i), float(s)) for i, s in zip(ids, scores)], lambda s: s)

    def _scored(self, hits: list, scale: Any, return_embedding: bool = True) -> list:
        out = []
        for doc_id, score in hits:
            d = self.retriever.get_document(doc_id)
            doc = _to_document(d["id"], d["text"], d["metadata"])
            doc = replace(doc, score=scale(score))
            if not return_embedding:
                doc = replace(doc, embedding=None)
            out.append(doc)
        return out


def _check_filters(filters: dict[str, Any]) -> None:
    if "operator" not in filters and "conditions" not in filters:
        raise ValueError(
            "Invalid filter syntax. See https://docs.haystack.deepset.ai/docs/metadata-filtering for details."
        )


def _to_row(d: Document) -> dict:
    fields = d.to_dict(flatten=False)
    meta = fields.pop("meta") or {}
    fields.pop("content", None)
    fields.pop("id", None)
    fields.pop("score", None)
    fields["has_content"] = d.content is not None
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"write_documents: meta of document {d.id!r} is not JSON-serialisable: {exc}"
        ) from exc
    if _DOC_KEY in meta:
        raise ValueError(f"write_documents: meta key {_DOC_KEY!r} is reserved by RagfindDocumentStore")
    return {"id": d.id, "text": d.content or "", "metadata": {**meta, _DOC_KEY: json.dumps(fields)}}


def _to_document(doc_id: str, text: str, metadata: dict) -> Document:
    meta = dict(metadata)
    fields = json.loads(meta.pop(_DOC_KEY, "{}"))
    has_content = fields.pop("has_content", True)
    return Document.from_dict(
        {**fields, "id": doc_id, "content": text if has_content else None, "meta": meta}
    )


def _check_top_k(top_k: int) -> None:
    if top_k <= 0:
        raise ValueError(f"top_k must be greater than 0, but got {top_k}")


class _RetrieverBase:
    def __init__(
        self,
        document_store: RagfindDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        if not isinstance(document_store, RagfindDocumentStore):
            raise TypeError("document_store must be an instance of RagfindDocumentStore")
        _check_top_k(top_k)
        self.document_store = document_store
        self.filters = filters
        self.top_k = top_k
        self.filter_policy = (
            FilterPolicy.from_str(filter_policy) if isinstance(filter_policy, str) else filter_policy
        )

    def _params(self) -> dict:
        return {
            "document_store": self.document_store,
            "filters": self.filters,
            "top_k": self.top_k,
            "filter_policy": self.filter_policy.value,
        }

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, **self._params())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        params = data.get("init_parameters", {})
        params["document_store"] = RagfindDocumentStore.from_dict(params["document_store"])
        return default_from_dict(cls, data)

    def _args(self, filters: Any, top_k: int | None) -> tuple:
        top_k = self.top_k if top_k is None else top_k
        if top_k < 0:
            raise ValueError(f"top_k must be greater than or equal to 0, but got {top_k}")
        return apply_filter_policy(self.filter_policy, self.filters, filters), top_k


@component
class RagfindBM25Retriever(_RetrieverBase):
    """Haystack retriever: the ``top_k`` documents by BM25 (``scale_score``: expit(s / 8), as
    Haystack's in-memory retriever)."""

    def __init__(
        self,
        document_store: RagfindDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        # @component rebuilds the class, which breaks a bare super().
        _RetrieverBase.__init__(self, document_store, filters, top_k, filter_policy)
        self.scale_score = scale_score

    def _params(self) -> dict:
        return {**_RetrieverBase._params(self), "scale_score": self.scale_score}

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
    ) -> dict[str, list[Document]]:
        flt, top_k = self._args(filters, top_k)
        scale = self.scale_score if scale_score is None else scale_score
        return {"documents": self.document_store.bm25_retrieval(query, flt, top_k, scale)}


@component
class RagfindEmbeddingRetriever(_RetrieverBase):
    """Haystack retriever: the ``top_k`` documents nearest a query embedding."""

    def __init__(
        self,
        document_store: RagfindDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        # @component rebuilds the class, which breaks a bare super().
        _RetrieverBase.__init__(self, document_store, filters, top_k, filter_policy)
        self.scale_score = scale_score
        self.return_embedding = return_embedding

    def _params(self) -> dict:
        return {
            **super()._params(),
            "scale_score": self.scale_score,
            "return_embedding": self.return_embedding,
        }

    @component.output_types(documents=list[Document])
    def run(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        flt, top_k = self._args(filters, top_k)
        return {
            "documents": self.document_store.embedding_retrieval(
                query_embedding,
                flt,
                top_k,
                self.scale_score if scale_score is None else scale_score,
                self.return_embedding if return_embedding is None else return_embedding,
            )
        }


@component
class RagfindHybridRetriever(_RetrieverBase):
    """Haystack retriever: BM25 on ``query`` and embedding search on ``query_embedding``,
    fused by RRF (``weights``: BM25, embedding)."""

    def __init__(
        self,
        document_store: RagfindDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        candidates: int = 100,
        weights: list[float] | None = None,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        # @component rebuilds the class, which breaks a bare super().
        _RetrieverBase.__init__(self, document_store, filters, top_k, filter_policy)
        self.candidates = candidates
        self.weights = weights

    def _params(self) -> dict:
        return {**_RetrieverBase._params(self), "candidates": self.candidates, "weights": self.weights}

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        query_embedding: list[float] | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
    ) -> dict[str, list[Document]]:
        flt, top_k = self._args(filters, top_k)
        w = tuple(self.weights) if self.weights else None
        return {
            "documents": self.document_store.hybrid_retrieval(
                query, query_embedding, flt, top_k, self.candidates, w
            )
        }
