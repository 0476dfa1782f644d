"""LangChain over ragfind (needs ``langchain-core``: the ``langchain`` extra).

``RagfindRetriever``, a retriever over a :class:`ragfind.Retriever`:

>>> from ragfind.integrations.langchain import RagfindRetriever
>>> docs = RagfindRetriever(retriever=r, k=5, filters={"lang": "en"}).invoke("what purrs?", k=2)

Each passage becomes a ``Document`` whose ``page_content`` is the passage text and whose
metadata holds the document's metadata plus ``doc_id``, ``chunk_id``, ``title``, ``source``,
``score`` and the per-stage ``ranks`` and ``scores``. ``k``, ``filters``, ``stages`` and
``collapse`` may also be given to ``invoke``/``ainvoke``/``batch``.

``RagfindVectorStore``, a LangChain ``VectorStore`` (BM25 + dense in one store, hybrid search):

>>> store = RagfindVectorStore(embeddings)          # any LangChain Embeddings
>>> store.add_texts(["cats purr"], metadatas=[{"lang": "en"}], ids=["cats"])
>>> store.similarity_search("what purrs?", k=1, filter={"lang": "en"})
>>> store.as_retriever(search_type="hybrid").invoke("what purrs?")
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever
from langchain_core.vectorstores.utils import maximal_marginal_relevance
from pydantic import ConfigDict, model_validator

from ragfind.integrations import (
    FunctionEncoder,
    all_documents,
    check_kwargs,
    check_search_args,
    dense_search,
    existing_ids,
    passage_metadata,
)
from ragfind.models import ModelMismatchError
from ragfind.pipeline.retriever import Retriever

__all__ = ["RagfindRetriever", "RagfindVectorStore", "RagfindVectorStoreRetriever"]

_INVOKE_KWARGS = ("k", "filters", "stages", "collapse")


class RagfindRetriever(BaseRetriever):
    """LangChain ``BaseRetriever`` over a ragfind Retriever (sync and async).

    Attributes:
        retriever: the :class:`ragfind.Retriever` (searches may run concurrently).
        k: passages per query.
        filters: metadata filters passed to every search (the Retriever's filter syntax).
        stages: first stages to run (default all), e.g. ``["bm25"]``.
        collapse: ``"document"`` for at most one passage per document.

    ``invoke(query, k=..., filters=..., stages=..., collapse=...)`` (and ``ainvoke``,
    ``batch``) override these for one call; any other keyword raises TypeError.
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

    def _search(self, query: str, **kwargs: Any) -> list:
        check_kwargs(kwargs, _INVOKE_KWARGS, "RagfindRetriever.invoke")
        k = kwargs.get("k", self.k)
        filters = kwargs.get("filters", self.filters)
        check_search_args(self.retriever, k, filters)
        res = self.retriever.search(
            query,
            k=k,
            filters=filters,
            stages=kwargs.get("stages", self.stages),
            collapse=kwargs.get("collapse", self.collapse),
        )
        return [
            Document(page_content=p.text, metadata=passage_metadata(p), id=f"{p.doc_id}:{p.id}") for p in res
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list:
        return self._search(query, **kwargs)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list:
        # The search releases the GIL in its indexes: a worker thread keeps the event loop free.
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(self._search, query, **kwargs)
        )


def _embeddings_encoder(embedding: Embeddings, dim: int) -> FunctionEncoder:
    cls = type(embedding)
    return FunctionEncoder(
        embedding.embed_documents,
        embedding.embed_query,
        dim,
        f"langchain:{cls.__module__}.{cls.__qualname__}",
    )


class _EncoderEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over a ragfind Retriever's own encoder."""

    def __init__(self, retriever: Any) -> None:
        self.retriever = retriever

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return np.asarray(self.retriever.encoder.encode(list(texts))).tolist()

    def embed_query(self, text: str) -> list[float]:
        return np.asarray(self.retriever.embed_query(text)).tolist()


class RagfindVectorStore(VectorStore):
    """A LangChain ``VectorStore`` on a :class:`ragfind.Retriever`: dense (cosine) similarity,
    BM25, and hybrid BM25 + dense fused by RRF, with metadata filters and persistence.

    Args:
        embedding: a LangChain ``Embeddings``; the store builds its Retriever over it (one
            chunk per text, BM25 beside the vectors) at the first add. Optional with
            ``retriever`` (queries are then embedded by the Retriever's own encoder).
        retriever: an existing :class:`ragfind.Retriever` to wrap instead (its chunking,
            stages and documents are kept; search results are its passages).
        **retriever_options: more :class:`ragfind.Retriever` arguments for the one built here,
            e.g. ``dense_kind="hnsw"``, ``bm25=ragfind.BM25Index(method="bm25+")``, ``rrf_k``.

    Ids are the documents' ids (str); ``metadata`` must be JSON-serialisable, and ``filter``
    uses the Retriever's syntax: ``{"lang": "en", "year": {"$gte": 2020}, "tag": ["a", "b"]}``
    (operators ``$eq $ne $in $nin $gt $gte $lt $lte``, all conditions must hold). Scores of
    ``similarity_search_with_score`` are cosine similarities (higher is better); relevance
    scores map them to [0, 1].

    Search types of :meth:`as_retriever`: ``"similarity"``, ``"similarity_score_threshold"``,
    ``"mmr"``, ``"bm25"`` and ``"hybrid"``. Thread safety: searches run concurrently; writes are
    serialised. Async methods run the work on a worker thread.

    Raises:
        ValueError: neither ``embedding`` nor ``retriever``, or options with a ``retriever``.
    """

    def __init__(
        self, embedding: Embeddings | None = None, *, retriever: Any = None, **retriever_options: Any
    ) -> None:
        if embedding is None and retriever is None:
            raise ValueError("RagfindVectorStore needs an embedding (LangChain Embeddings) or a retriever")
        if retriever is not None:
            check_search_args(retriever, 1, None)
            if retriever_options:
                raise ValueError(
                    f"retriever options {sorted(retriever_options)} apply to a Retriever built here, "
                    "not to the one given"
                )
        if embedding is not None and not isinstance(embedding, Embeddings):
            raise TypeError(f"embedding is a {type(embedding).__name__}; expected a LangChain Embeddings")
        self.embedding = embedding
        self._retriever = retriever
        self._options = retriever_options
        self._lock = threading.Lock()

    # ----- the underlying Retriever

    @property
    def retriever(self) -> Any:
        """The :class:`ragfind.Retriever` (None until the first add for a store built empty)."""
        return self._retriever

    @property
    def embeddings(self) -> Embeddings | None:
        if self.embedding is not None:
            return self.embedding
        if self._retriever is not None and self._retriever.dense is not None:
            return _EncoderEmbeddings(self._retriever)
        return None

    def _build(self, dim: int) -> Any:
        opts = {"chunk_size": None, "contextualize": False, **self._options}
        return Retriever(encoder=_embeddings_encoder(self.embedding, dim), **opts)

    def _embed_query(self, query: str) -> list:
        if self.embedding is not None:
            return self.embedding.embed_query(query)
        return self._retriever.embed_query(query)

    def _embed_texts(self, texts: list) -> Any:
        if self.embedding is not None:
            return np.asarray(self.embedding.embed_documents(texts), dtype=np.float32)
        return np.asarray(self._retriever.encoder.encode(texts), dtype=np.float32)

    # ----- writes

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embeds and indexes texts; an id already stored is replaced (so adding again is
        idempotent), a missing id (None) gets a new UUID. Returns the ids.

        Raises:
            ValueError: metadatas or ids not one per text, metadata JSON cannot encode.
        """
        check_kwargs(kwargs, (), "add_texts")
        texts = list(texts)
        metadatas = list(metadatas) if metadatas is not None else [{} for _ in texts]
        ids = list(ids) if ids is not None else [None] * len(texts)
        if len(metadatas) != len(texts) or len(ids) != len(texts):
            raise ValueError(
                f"add_texts: {len(texts)} texts, {len(metadatas)} metadatas and {len(ids)} ids; "
                "expected one of each per text"
            )
        ids = [str(i) if i is not None else str(uuid.uuid4()) for i in ids]
        if not texts:
            return ids
        # The last of repeated ids wins, as successive adds would.
        last = {i: n for n, i in enumerate(ids)}
        keep = sorted(last.values())
        docs = [{"id": ids[n], "text": texts[n], "metadata": dict(metadatas[n] or {})} for n in keep]
        for d in docs:
            # Checked before any stored document is replaced.
            try:
                json.dumps(d["metadata"])
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"add_texts: metadata of id {d['id']!r} is not JSON-serialisable: {exc}"
                ) from exc
        with self._lock:
            if self._retriever is not None and self._retriever.dense is None:
                self._retriever.add_documents(docs)  # a BM25-only retriever: nothing to embed
                return ids
            vectors = self._embed_texts([d["text"] for d in docs])
            if self._retriever is None:
                self._retriever = self._build(vectors.shape[1])
            r = self._retriever
            embeddings = vectors if r.chunk_size is None else None
            old = existing_ids(r, [d["id"] for d in docs])
            if old:
                r.delete_documents(old)
            if embeddings is None:
                # A chunking retriever embeds its chunks itself (with its own encoder).
                r.add_documents(docs)
            else:
                r.add_documents(docs, embeddings=embeddings)
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Deletes documents by id (ids not stored are skipped); ``ids=None`` deletes all."""
        check_kwargs(kwargs, (), "delete")
        with self._lock:
            r = self._retriever
            if r is None:
                return True
            found = [d for d, *_ in all_documents(r)] if ids is None else existing_ids(r, ids)
            if found:
                r.delete_documents(found)
        return True

    # ----- reads

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents of ``ids``, in that order, each once; missing ids are skipped."""
        if self._retriever is None:
            return []
        out = []
        for i in existing_ids(self._retriever, ids):
            d = self._retriever.get_document(i)
            out.append(Document(id=d["id"], page_content=d["text"], metadata=d["metadata"]))
        return out

    def _passages(self, query: str, k: int, filter: Any, stage: str | None) -> list:  # noqa: A002
        """``(document, score)`` by one stage's ranking and score, or fused (``stage`` None)."""
        r = self._retriever
        if r is None or len(r) == 0:
            return []
        res = r.search(query, k=k, filters=filter, stages=[stage] if stage else None)
        return [
            (
                Document(id=p.doc_id, page_content=p.text, metadata=dict(p.metadata)),
                float(p.scores[stage] if stage else p.score),
            )
            for p in res
        ]

    def similarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: dict | None = None,  # noqa: A002 - LangChain's name
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents nearest ``query`` with their cosine similarity, best first."""
        check_kwargs(kwargs, (), "similarity_search")
        r = self._retriever
        if r is None or len(r) == 0:
            return []
        if r.dense is None:
            raise ValueError("this store's retriever has no dense stage; use bm25_search()")
        return self._passages(query, k, filter, "dense")

    def similarity_search(
        self,
        query: str,
        k: int = 4,
        filter: dict | None = None,  # noqa: A002
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` documents nearest ``query`` (dense, cosine), best first."""
        return [d for d, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict | None = None,  # noqa: A002
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` documents nearest the vector ``embedding``, best first."""
        return [d for d, _ in self.similarity_search_with_score_by_vector(embedding, k, filter, **kwargs)]

    def similarity_search_with_score_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict | None = None,  # noqa: A002
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """:meth:`similarity_search_by_vector` with cosine similarities."""
        check_kwargs(kwargs, (), "similarity_search_by_vector")
        r = self._retriever
        if r is None or len(r) == 0:
            return []
        return [
            (Document(id=doc_id, page_content=text, metadata=md), score)
            for _, doc_id, text, md, score in dense_search(r, embedding, k, filter)
        ]

    def bm25_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: dict | None = None,  # noqa: A002
    ) -> list[tuple[Document, float]]:
        """The ``k`` best documents by BM25 alone, with their BM25 scores."""
        return self._passages(query, k, filter, "bm25")

    def bm25_search(self, query: str, k: int = 4, filter: dict | None = None) -> list[Document]:  # noqa: A002
        """The ``k`` best documents by BM25 alone."""
        return [d for d, _ in self.bm25_search_with_score(query, k, filter)]

    def hybrid_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: dict | None = None,  # noqa: A002
    ) -> list[tuple[Document, float]]:
        """The ``k`` best documents by every stage (BM25 and dense) fused with RRF, with the
        fused scores."""
        return self._passages(query, k, filter, None)

    def hybrid_search(self, query: str, k: int = 4, filter: dict | None = None) -> list[Document]:  # noqa: A002
        """The ``k`` best documents by BM25 and dense fused with RRF."""
        return [d for d, _ in self.hybrid_search_with_score(query, k, filter)]

    async def abm25_search(self, query: str, k: int = 4, filter: dict | None = None) -> list[Document]:  # noqa: A002
        return await _in_thread(self.bm25_search, query, k, filter)

    async def ahybrid_search(self, query: str, k: int = 4, filter: dict | None = None) -> list[Document]:  # noqa: A002
        return await _in_thread(self.hybrid_search, query, k, filter)

    def search(self, query: str, search_type: str, **kwargs: Any) -> list[Document]:
        """LangChain's ``search`` with the search types ``"bm25"`` and ``"hybrid"`` too."""
        if search_type == "hybrid":
            return self.hybrid_search(query, **kwargs)
        if search_type == "bm25":
            return self.bm25_search(query, **kwargs)
        return super().search(query, search_type, **kwargs)

    async def asearch(self, query: str, search_type: str, **kwargs: Any) -> list[Document]:
        return await _in_thread(self.search, query, search_type, **kwargs)

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        # Cosine similarity in [-1, 1] -> [0, 1].
        return lambda s: (1.0 + s) / 2.0

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,  # noqa: A002
        **kwargs: Any,
    ) -> list[Document]:
        """``k`` documents among the ``fetch_k`` nearest, chosen for relevance and diversity
        (``lambda_mult`` 1: relevance only, 0: diversity only)."""
        if self._retriever is None or len(self._retriever) == 0:
            return []
        return self.max_marginal_relevance_search_by_vector(
            self._embed_query(query), k, fetch_k, lambda_mult, filter, **kwargs
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,  # noqa: A002
        **kwargs: Any,
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search` from a query vector. The candidates' vectors
        are embedded again (the dense index does not hand stored vectors back)."""
        check_kwargs(kwargs, (), "max_marginal_relevance_search")
        r = self._retriever
        if r is None or len(r) == 0:
            return []
        hits = dense_search(r, embedding, fetch_k, filter)
        if not hits:
            return []
        vectors = self._embed_texts([text for _, _, text, _, _ in hits])
        chosen = maximal_marginal_relevance(
            np.asarray(embedding, dtype=np.float32), vectors, lambda_mult=lambda_mult, k=k
        )
        return [Document(id=hits[i][1], page_content=hits[i][2], metadata=hits[i][3]) for i in chosen]

    # ----- async twins (the base class's run the sync ones on a worker thread too)

    async def asimilarity_search_with_score(self, *args: Any, **kwargs: Any) -> list[tuple[Document, float]]:
        return await _in_thread(self.similarity_search_with_score, *args, **kwargs)

    async def asimilarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list:
        return await _in_thread(self.similarity_search_by_vector, embedding, k, **kwargs)

    async def amax_marginal_relevance_search_by_vector(self, embedding: list[float], *args: Any, **kw: Any):
        return await _in_thread(self.max_marginal_relevance_search_by_vector, embedding, *args, **kw)

    # ----- construction, persistence, retrievers

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> RagfindVectorStore:
        """A new store over ``embedding`` (``kwargs``: Retriever options) holding ``texts``."""
        store = cls(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def save(self, path: Any) -> None:
        """Writes the store (its Retriever's folder) to ``path``, atomically.

        Raises:
            ValueError: nothing was ever added (no Retriever to save yet).
        """
        if self._retriever is None:
            raise ValueError("this store is empty and has no Retriever yet; add documents before save()")
        self._retriever.save(path)

    @classmethod
    def load(cls, path: Any, embedding: Embeddings | None = None, **load_options: Any) -> RagfindVectorStore:
        """Opens a folder written by :meth:`save`. Pass the same ``embedding`` the store was
        built with (its class and dimension are checked); without it, the folder must hold a
        Retriever with its own encoder (``load_options`` go to :meth:`ragfind.Retriever.load`).

        Raises:
            ragfind.ModelMismatchError: another embedding class or dimension than the saved one.
        """
        if embedding is None:
            return cls(retriever=Retriever.load(path, **load_options))
        manifest = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
        info = manifest.get("encoder") or {}
        if "dim" not in info:
            raise ModelMismatchError(
                f"{str(path)!r} was saved without dense vectors; load it without embedding"
            )
        enc = _embeddings_encoder(embedding, int(info["dim"]))
        store = cls(embedding)
        store._retriever = Retriever.load(path, encoder=enc, **load_options)
        return store

    def as_retriever(self, **kwargs: Any) -> RagfindVectorStoreRetriever:
        """A retriever over this store; ``search_type`` also ``"bm25"`` and ``"hybrid"``
        (BM25 + dense, RRF), with ``search_kwargs`` ``k`` and ``filter``."""
        tags = kwargs.pop("tags", None) or [*self._get_retriever_tags()]
        return RagfindVectorStoreRetriever(vectorstore=self, tags=tags, **kwargs)


class RagfindVectorStoreRetriever(VectorStoreRetriever):
    """LangChain's ``VectorStoreRetriever`` with the search types ``"bm25"`` and ``"hybrid"``."""

    allowed_search_types: ClassVar[Sequence[str]] = (
        "similarity",
        "similarity_score_threshold",
        "mmr",
        "bm25",
        "hybrid",
    )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        if self.search_type == "hybrid":
            return self.vectorstore.hybrid_search(query, **(self.search_kwargs | kwargs))
        if self.search_type == "bm25":
            return self.vectorstore.bm25_search(query, **(self.search_kwargs | kwargs))
        return super()._get_relevant_documents(query, run_manager=run_manager, **kwargs)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        if self.search_type == "hybrid":
            return await self.vectorstore.ahybrid_search(query, **(self.search_kwargs | kwargs))
        if self.search_type == "bm25":
            return await self.vectorstore.abm25_search(query, **(self.search_kwargs | kwargs))
        return await super()._aget_relevant_documents(query, run_manager=run_manager, **kwargs)


async def _in_thread(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))
