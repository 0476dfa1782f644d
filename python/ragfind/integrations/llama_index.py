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
import functools
import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from ragfind.fusion import rrf
from ragfind.integrations import (
    KIND_BOOL,
    KIND_NUM,
    KIND_OTHER,
    KIND_STR,
    NOTHING,
    Bounds,
    FunctionEncoder,
    all_documents,
    any_str,
    bounds_and,
    bounds_not,
    bounds_or,
    check_kwargs,
    check_search_args,
    dense_search,
    doc_ids_where,
    exact,
    exact_number,
    existing_ids,
    f_and,
    f_or,
    field_kinds,
    passage_metadata,
    python_eq,
    python_range,
    search_filter,
    select_documents,
    valued,
)
from ragfind.pipeline.retriever import Retriever

__all__ = ["RagfindRetriever", "RagfindVectorStore", "to_ragfind_filters"]

_HIDDEN = ["chunk_id", "score", "ranks", "scores"]


class RagfindRetriever(BaseRetriever):
    """LlamaIndex ``BaseRetriever`` over a ragfind Retriever (``retrieve`` and ``aretrieve``).

    Args:
        retriever: the :class:`ragfind.Retriever`.
        k: passages per query (``similarity_top_k``, LlamaIndex's name, wins when given).
        filters: metadata filters for every search: the Retriever's dict syntax or LlamaIndex
            ``MetadataFilters`` (see :func:`to_ragfind_filters`).
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
        similarity_top_k: int | None = None,
    ) -> None:
        if similarity_top_k is not None:
            k = similarity_top_k
        llama_filters = isinstance(filters, MetadataFilters)
        check_search_args(retriever, k, None if llama_filters else filters)
        self.retriever = retriever
        self.k = int(k)
        self.filters = filters if llama_filters else dict(filters) if filters is not None else None
        self.stages = stages
        self.collapse = collapse
        super().__init__(callback_manager=callback_manager)

    @property
    def similarity_top_k(self) -> int:
        return self.k

    def _nodes(self, query: str) -> list:
        res = self.retriever.search(
            query,
            k=self.k,
            filters=to_ragfind_filters(self.retriever, self.filters),
            stages=self.stages,
            collapse=self.collapse,
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


# ---------------------------------------------------------------------------- vector store

_ORDER = {
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
}
_HIDDEN_KEYS = ("_node_content", "_node_type")  # the stored node itself, not its metadata
# Metadata keys the Retriever's filter syntax cannot name: its own fields and operators.
_UNNAMEABLE = frozenset(("doc_id", "title", "$and", "$or", "$not"))


class _Translation:
    """LlamaIndex ``MetadataFilters`` -> :class:`Bounds` over the Retriever's metadata index,
    with the semantics of :func:`_evaluate` (LlamaIndex's in-memory filters).

    Args:
        fields: the Retriever's filter fields (its metadata keys seen, ``doc_id``, ``title``).
        kinds: metadata key -> the kinds of value it held (KIND_* bits), or None.
    """

    def __init__(self, fields: set, kinds: Any) -> None:
        self.fields = fields
        self.kinds = kinds

    def bounds(self, filters: MetadataFilters) -> Bounds:
        parts = [self.bounds(f) if isinstance(f, MetadataFilters) else self.leaf(f) for f in filters.filters]
        cond = filters.condition or FilterCondition.AND
        if cond == FilterCondition.AND:
            return bounds_and(parts)
        if cond == FilterCondition.OR:
            return bounds_or(parts)
        if cond == FilterCondition.NOT:
            return bounds_not(bounds_or(parts))
        raise ValueError(f"filters: condition {cond!r} is not supported")

    def leaf(self, f: MetadataFilter) -> Bounds:
        op, v = f.operator, f.value
        # LlamaIndex's stores keep the source document's id under "doc_id" (and "ref_doc_id").
        key = "ref_doc_id" if f.key == "doc_id" else f.key
        if key in _HIDDEN_KEYS or key not in self.fields:
            return exact(_match(op, v, None))  # no document has the key
        kinds = self.kinds(key) if key not in _UNNAMEABLE else None
        if kinds is None:
            return Bounds(True, False)
        if op in (FilterOperator.EQ, FilterOperator.NE):
            b = _eq(key, v, kinds)
            return b if op == FilterOperator.EQ else bounds_not(b)
        if op in _ORDER:
            return _order(key, _ORDER[op], v, kinds)
        if op in (FilterOperator.IN, FilterOperator.NIN):
            if isinstance(v, list):
                b = bounds_or([_eq(key, x, kinds) for x in v])
                return b if op == FilterOperator.IN else bounds_not(b)
            if isinstance(v, str):  # `x in "..."`: a substring of a str value, else a TypeError
                strs = any_str(key) if kinds & KIND_STR else False
                if op == FilterOperator.IN:
                    return Bounds(strs, False)
                return Bounds(f_or([{key: None}, strs]), {key: None})
            if v is None or isinstance(v, (int, float)):  # `x in 5`: a TypeError, no match
                return exact(False if op == FilterOperator.IN else {key: None})
            return Bounds(True, False)
        if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
            if not isinstance(v, str) or not kinds & KIND_STR:
                return exact(False)
            return exact(any_str(key)) if v == "" else Bounds(any_str(key), False)
        if op == FilterOperator.IS_EMPTY:
            empty = f_or([{key: None}, {key: ""} if kinds & KIND_STR else False])
            return Bounds(True, empty) if kinds & KIND_OTHER else exact(empty)  # [] is empty too
        if op in (FilterOperator.CONTAINS, FilterOperator.ANY, FilterOperator.ALL):
            return Bounds(valued(key), False)  # list membership, substrings
        return Bounds(valued(key), False, valued(key))  # _match raises for an operator it lacks


def _eq(key: str, v: Any, kinds: int) -> Bounds:
    """LlamaIndex's ``==`` on a document holding a value (Python's ``==``)."""
    if isinstance(v, (str, bool)) or exact_number(v):
        return exact(python_eq(key, v, kinds))
    if v is None:
        return exact(False)
    if isinstance(v, float) and v != v:
        return exact(False)  # NaN equals nothing
    if isinstance(v, (int, float)):
        return Bounds(valued(key), False) if kinds & (KIND_NUM | KIND_BOOL) else exact(False)
    if isinstance(v, (list, dict)):
        return Bounds(valued(key), False) if kinds & KIND_OTHER else exact(False)
    return Bounds(valued(key), False)


def _order(key: str, op: str, v: Any, kinds: int) -> Bounds:
    """LlamaIndex's ``> >= < <=``: Python's, values that do not compare never matching."""
    if isinstance(v, bool) or exact_number(v):
        return exact(python_range(key, op, v, kinds))
    if isinstance(v, str):  # str against str only; Python and the index both order code points
        return exact({key: {op: v}} if kinds & KIND_STR else False)
    if v is None:
        return exact(False)
    if isinstance(v, list):
        return Bounds(valued(key), False) if kinds & KIND_OTHER else exact(False)
    return Bounds(valued(key), False)


def _match(op: FilterOperator, value: Any, have: Any) -> bool:
    """One LlamaIndex condition on a stored value, with the semantics of LlamaIndex's own
    in-memory store (``llama_index.core.vector_stores.utils.build_metadata_filter_fn``)."""
    if op == FilterOperator.IS_EMPTY:
        return have is None or have == "" or have == []
    if have is None:
        return op in (FilterOperator.NE, FilterOperator.NIN)
    try:
        if op == FilterOperator.EQ:
            return have == value
        if op == FilterOperator.NE:
            return have != value
        if op == FilterOperator.GT:
            return have > value
        if op == FilterOperator.GTE:
            return have >= value
        if op == FilterOperator.LT:
            return have < value
        if op == FilterOperator.LTE:
            return have <= value
        if op == FilterOperator.IN:
            return have in value
        if op == FilterOperator.NIN:
            return have not in value
        if op == FilterOperator.CONTAINS:
            return value in have
        if op == FilterOperator.ANY:
            return any(v in have for v in value)
        if op == FilterOperator.ALL:
            return all(v in have for v in value)
    except TypeError:
        return False  # values of kinds that do not compare (e.g. str and int) never match
    if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
        if not isinstance(value, str) or not isinstance(have, str):
            return False
        if op == FilterOperator.TEXT_MATCH:
            return value in have
        return value.lower() in have.lower()
    raise ValueError(f"filters: operator {op!r} is not supported")


def _evaluate(filters: MetadataFilters, metadata: Mapping[str, Any]) -> bool:
    """``filters`` (nested AND / OR / NOT) on one node's metadata."""
    results = (
        _evaluate(f, metadata)
        if isinstance(f, MetadataFilters)
        else _match(f.operator, f.value, metadata.get(f.key))
        for f in filters.filters
    )
    cond = filters.condition or FilterCondition.AND
    if cond == FilterCondition.AND:
        return all(results)
    if cond == FilterCondition.OR:
        return any(results)
    if cond == FilterCondition.NOT:
        return not any(results)
    raise ValueError(f"filters: condition {cond!r} is not supported")


def to_ragfind_filters(retriever: Any, filters: Any) -> dict | None:
    """A Retriever filter for LlamaIndex ``MetadataFilters`` (a dict passes through as the
    Retriever's own syntax), with the semantics of LlamaIndex's in-memory filters (values
    that do not compare, e.g. a str and an int, never match).

    Runs in the Retriever's metadata index: ``== != > >= < <= in nin`` on str, number and bool
    values, ``is_empty``, ``text_match`` of "" and AND / OR / NOT nested to any depth become
    its filter. The rest (``contains any all text_match text_match_insensitive``, list values,
    ``in``/``nin`` of a str, a key named ``title``, numbers beyond 2**53) is evaluated over the
    stored metadata, on the documents the rest of the filter allows only, and the ids it allows
    join the filter."""
    if filters is None or isinstance(filters, Mapping):
        return dict(filters) if filters else None
    if not isinstance(filters, MetadataFilters):
        raise TypeError(f"filters is a {type(filters).__name__}; expected MetadataFilters or a dict")
    if not filters.filters:
        return None
    return search_filter(retriever, _bounds(retriever, filters), _matcher(filters))


def _bounds(retriever: Any, filters: MetadataFilters) -> Bounds:
    return _Translation(set(retriever.fields), lambda f: field_kinds(retriever, f)).bounds(filters)


def _matcher(filters: MetadataFilters) -> Any:
    return lambda row: _evaluate(filters, _user_metadata(row[3]))


def _user_metadata(md: Mapping[str, Any]) -> dict:
    """A stored node's metadata as LlamaIndex's filters see it (``doc_id``: the source document,
    stored as ``ref_doc_id``)."""
    out = {k: v for k, v in md.items() if k not in _HIDDEN_KEYS and k != "doc_id"}
    if "ref_doc_id" in out:
        out["doc_id"] = out["ref_doc_id"]
    return out


def _no_model(*_: Any) -> Any:
    raise ValueError(
        "RagfindVectorStore embeds nothing itself: LlamaIndex passes node embeddings to add() and "
        "the query embedding in VectorStoreQuery.query_embedding"
    )


class RagfindVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store on a :class:`ragfind.Retriever` (BM25 + dense, one chunk per node).

    Nodes keep their ids, text, metadata and relationships (stored as LlamaIndex's vector
    stores store them); ``stores_text`` is True. Query modes: ``DEFAULT`` (dense, cosine, by
    ``query_embedding``), ``SPARSE`` and ``TEXT_SEARCH`` (BM25 on ``query_str``), ``HYBRID``
    (both fused by RRF; ``alpha`` weights dense against BM25). ``MetadataFilters`` of any
    depth and every LlamaIndex operator (see :func:`to_ragfind_filters`), ``doc_ids`` and
    ``node_ids`` restrict every mode. Async methods run on a worker thread.

    Args:
        retriever_options: more :class:`ragfind.Retriever` arguments for the Retriever built at
            the first add (e.g. ``{"dense_kind": "hnsw"}``, ``{"rrf_k": 20}``).
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False

    _retriever: Any = PrivateAttr(default=None)
    _options: dict = PrivateAttr(default_factory=dict)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, retriever_options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._options = dict(retriever_options or {})

    @classmethod
    def class_name(cls) -> str:
        return "RagfindVectorStore"

    @property
    def client(self) -> Any:
        """The :class:`ragfind.Retriever` (None before the first add)."""
        return self._retriever

    def _build(self, dim: int) -> Any:
        opts = {"chunk_size": None, "contextualize": False, **self._options}
        return Retriever(encoder=_encoder(dim), **opts)

    # ----- writes

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Adds nodes (each with its embedding); a node id already stored is replaced.

        Raises:
            ValueError: a node without an embedding, embeddings of different dimensions.
        """
        check_kwargs(add_kwargs, (), "add")
        nodes = list(nodes)
        if not nodes:
            return []
        last = {n.node_id: i for i, n in enumerate(nodes)}
        nodes = [nodes[i] for i in sorted(last.values())]
        docs, vectors = [], []
        for n in nodes:
            if n.embedding is None:
                raise ValueError(f"node {n.node_id!r} has no embedding; embed the nodes before add()")
            md = node_to_metadata_dict(n, remove_text=True, flat_metadata=self.flat_metadata)
            md.pop("doc_id", None)  # the Retriever's own name for the node id
            docs.append(
                {"id": n.node_id, "text": n.get_content(metadata_mode=MetadataMode.NONE), "metadata": md}
            )
            vectors.append(n.get_embedding())
        vectors = np.asarray(vectors, dtype=np.float32)
        with self._lock:
            if self._retriever is None:
                self._retriever = self._build(vectors.shape[1])
            r = self._retriever
            old = existing_ids(r, [d["id"] for d in docs])
            if old:
                r.delete_documents(old)
            r.add_documents(docs, embeddings=vectors)
        return [d["id"] for d in docs]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Deletes every node of the source document ``ref_doc_id`` (none: nothing happens)."""
        check_kwargs(delete_kwargs, (), "delete")
        with self._lock:
            r = self._retriever
            if r is None or "ref_doc_id" not in r.fields:
                return
            ids = doc_ids_where(r, {"ref_doc_id": str(ref_doc_id)})
            if ids:
                r.delete_documents(ids)

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Deletes the nodes of ``node_ids`` that ``filters`` allows (ids not stored are skipped)."""
        check_kwargs(delete_kwargs, (), "delete_nodes")
        with self._lock:
            ids = self._select(node_ids, filters)
            if ids:
                self._retriever.delete_documents(ids)

    def clear(self) -> None:
        """Deletes every node."""
        with self._lock:
            r = self._retriever
            if r is not None and len(r):
                r.delete_documents([d for d, *_ in all_documents(r)])

    # ----- reads

    def _select(
        self, node_ids: list[str] | None, filters: MetadataFilters | None, full: bool = False
    ) -> list:
        """The stored nodes of ``node_ids`` (in that order; all when None, in store order) that
        ``filters`` allows: ids, or ``(id, title, text, metadata)`` rows when ``full``."""
        r = self._retriever
        if r is None:
            return []
        wanted = None if node_ids is None else existing_ids(r, node_ids)
        if filters is None or not filters.filters:
            if wanted is None:
                return all_documents(r) if full else [d for d, *_ in all_documents(r)]
            if not full:
                return wanted
            docs = (r.get_document(i) for i in wanted)
            return [(d["id"], d["title"], d["text"], d["metadata"]) for d in docs]
        b = _bounds(r, filters)
        if wanted is not None:
            ids = exact({"doc_id": {"$in": wanted}})
            b = bounds_and([ids, b])
        rows = select_documents(r, b, _matcher(filters), full=full)
        if wanted is None:
            return rows
        at = {(x[0] if full else x): x for x in rows}
        return [at[i] for i in wanted if i in at]

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list:
        """The stored nodes of ``node_ids`` (in that order; all when None) that ``filters`` allows."""
        return [
            metadata_dict_to_node(md, text=text) for _, _, text, md in self._select(node_ids, filters, True)
        ]

    def _query_filters(self, query: VectorStoreQuery) -> dict | None:
        r = self._retriever
        parts = [to_ragfind_filters(r, query.filters) or True]
        # Empty lists restrict nothing (VectorIndexRetriever passes node_ids=[]), as in
        # LlamaIndex's own SimpleVectorStore.
        if query.node_ids:
            parts.append({"doc_id": {"$in": [str(i) for i in query.node_ids]}})
        if query.doc_ids:
            refs = [str(d) for d in query.doc_ids]
            parts.append({"ref_doc_id": {"$in": refs}} if "ref_doc_id" in r.fields else False)
        both = f_and(parts)
        return None if both is True else NOTHING if both is False else both

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Runs a ``VectorStoreQuery`` (see the class docstring for the modes).

        Raises:
            ValueError: a mode without what it needs (``query_embedding`` / ``query_str``).
            NotImplementedError: another query mode (MMR, SVM, ...).
        """
        check_kwargs(kwargs, (), "query")
        r = self._retriever
        mode = query.mode
        if mode not in _MODES:
            raise NotImplementedError(
                f"query mode {mode.value!r}: RagfindVectorStore runs 'default' (dense), 'sparse' / "
                "'text_search' (BM25) and 'hybrid' (BM25 + dense, RRF)"
            )
        if mode != VectorStoreQueryMode.DEFAULT and not query.query_str:
            raise ValueError(f"query mode {mode.value!r} needs query_str (BM25 searches the text)")
        if (
            mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID)
            and query.query_embedding is None
        ):
            raise ValueError(f"query mode {mode.value!r} needs query_embedding")
        if r is None or len(r) == 0:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        flt = self._query_filters(query)
        k = query.similarity_top_k
        if mode == VectorStoreQueryMode.DEFAULT:
            hits = [(d, s) for _, d, _, _, s in dense_search(r, query.query_embedding, k, flt)]
        elif mode in (VectorStoreQueryMode.SPARSE, VectorStoreQueryMode.TEXT_SEARCH):
            k = query.sparse_top_k or k
            res = r.search(query.query_str, k=k, filters=flt, stages=["bm25"])
            hits = [(p.doc_id, float(p.scores["bm25"])) for p in res]
        else:
            hits = self._hybrid(query, flt)
        nodes = []
        for doc_id, _ in hits:
            d = r.get_document(doc_id)
            nodes.append(metadata_dict_to_node(d["metadata"], text=d["text"]))
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[s for _, s in hits], ids=[d for d, _ in hits]
        )

    def _hybrid(self, query: VectorStoreQuery, flt: dict | None) -> list:
        r = self._retriever
        top = query.hybrid_top_k or query.similarity_top_k
        depth = max(r.candidates, top, query.sparse_top_k or 0)
        dense = [d for _, d, _, _, _ in dense_search(r, query.query_embedding, depth, flt)]
        bm25 = [p.doc_id for p in r.search(query.query_str, k=depth, filters=flt, stages=["bm25"])]
        lists = [x for x in (bm25, dense) if x]
        if not lists:
            return []
        if query.alpha is not None:
            weights = [w for w, x in ((1.0 - query.alpha, bm25), (query.alpha, dense)) if x]
        else:
            weights = [float(r.weights.get(n, 1.0)) for n, x in (("bm25", bm25), ("dense", dense)) if x]
        ids, scores = rrf(lists, k=r.rrf_k, weights=weights, top_k=top)
        return [(str(i), float(s)) for i, s in zip(ids, scores)]

    # ----- async (a worker thread: the searches release the GIL, the event loop stays free)

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        return await _in_thread(self.add, nodes, **kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await _in_thread(self.delete, ref_doc_id, **delete_kwargs)

    async def adelete_nodes(self, node_ids=None, filters=None, **delete_kwargs: Any) -> None:
        await _in_thread(self.delete_nodes, node_ids, filters, **delete_kwargs)

    async def aget_nodes(self, node_ids=None, filters=None) -> list:
        return await _in_thread(self.get_nodes, node_ids, filters)

    async def aclear(self) -> None:
        await _in_thread(self.clear)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return await _in_thread(self.query, query, **kwargs)

    # ----- persistence

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Saves the store's Retriever folder at ``persist_path`` (local paths only).

        Raises:
            NotImplementedError: an fsspec filesystem other than the local one.
            ValueError: nothing was ever added.
        """
        if fs is not None and getattr(fs, "protocol", "file") not in ("file", ("file", "local")):
            raise NotImplementedError("RagfindVectorStore persists to local folders only (fs=None)")
        if self._retriever is None:
            raise ValueError("this store is empty and has no Retriever yet; add nodes before persist()")
        self._retriever.save(persist_path)

    @classmethod
    def from_persist_path(cls, persist_path: str, fs: Any = None) -> RagfindVectorStore:
        """Opens a folder written by :meth:`persist`."""
        if fs is not None and getattr(fs, "protocol", "file") not in ("file", ("file", "local")):
            raise NotImplementedError("RagfindVectorStore persists to local folders only (fs=None)")
        manifest = json.loads((Path(persist_path) / "manifest.json").read_text(encoding="utf-8"))
        store = cls()
        store._retriever = Retriever.load(persist_path, encoder=_encoder(int(manifest["encoder"]["dim"])))
        return store


_MODES = (
    VectorStoreQueryMode.DEFAULT,
    VectorStoreQueryMode.SPARSE,
    VectorStoreQueryMode.TEXT_SEARCH,
    VectorStoreQueryMode.HYBRID,
)


def _encoder(dim: int) -> FunctionEncoder:
    # The vectors come from LlamaIndex's embedding model, which the store never calls.
    return FunctionEncoder(_no_model, _no_model, dim, "llama_index:node-embeddings")


async def _in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))
