"""Haystack 2 over ragfind (needs ``haystack-ai``: the ``haystack`` extra).

>>> from ragfind.integrations.haystack import RagfindDocumentStore, RagfindBM25Retriever
>>> store = RagfindDocumentStore()
>>> store.write_documents([Document(content="Cats purr.", meta={"lang": "en"})])
>>> RagfindBM25Retriever(store, top_k=3).run(query="what purrs?")["documents"]

``RagfindDocumentStore`` keeps documents in a :class:`ragfind.Retriever` (BM25 over the
content, the SQLite store) and their embeddings in a :class:`ragfind.DenseIndex` (documents
without an embedding are found by BM25 only).

``filters`` use Haystack's syntax, with the semantics of Haystack's ``document_matches_filter``.
They run in the Retriever's metadata index: ``== != > >= < <= in not in`` and ``AND OR NOT`` on
``meta.<key>`` (or a bare key) and ``id`` become its filter, the same documents Haystack would
match (a bool equals 0 or 1, a missing key compares as None). What that filter cannot say is
left to ``document_matches_filter``, on the documents the rest of the filter allows only:
strings that may be dates (Haystack compares them as dates, and orders strings only as dates),
lists and nested keys (``meta.a.b``), ``content`` and the other Document fields, a meta key
named ``title`` or ``doc_id`` (the Retriever's own fields), numbers beyond 2**53. A malformed
filter raises ``FilterError`` when Haystack's would: on a document that reaches its bad part.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy, FilterPolicy, apply_filter_policy
from haystack.utils.filters import document_matches_filter

from ragfind.dense.index import DenseIndex
from ragfind.fusion import rrf
from ragfind.integrations import (
    KIND_BOOL,
    KIND_NUM,
    KIND_OTHER,
    KIND_STR,
    NOTHING,
    UNDECIDED,
    Bounds,
    all_documents,
    any_str,
    bounds_and,
    bounds_not,
    bounds_or,
    exact,
    exact_number,
    existing_ids,
    field_kinds,
    python_eq,
    python_range,
    rows_of,
    search_filter,
    select_documents,
    valued,
)
from ragfind.pipeline.retriever import Retriever
from ragfind.sparse.bm25 import BM25Index

__all__ = [
    "RagfindBM25Retriever",
    "RagfindDocumentStore",
    "RagfindEmbeddingRetriever",
    "RagfindHybridRetriever",
]

_DOC_KEY = "_haystack"  # the Haystack document's own fields (embedding, ...), kept beside its meta
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
        self._chunkless: set = set()  # ids of the documents without chunks (_chunkless_rows)
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
        if not filters:
            return self._documents()
        _check_filters(filters)
        if len(self.retriever) == 0:
            return []  # Haystack evaluates a filter per document: none, nothing to raise
        made: dict = {}

        def matches(row: tuple) -> bool:
            d = made[row[0]] = _to_document(row[0], row[2], row[3])
            return document_matches_filter(filters=filters, document=d)

        rows = select_documents(self.retriever, self._bounds(filters), matches, self._chunkless_rows())
        return [made.get(r[0]) or _to_document(r[0], r[2], r[3]) for r in rows]

    def _bounds(self, filters: dict[str, Any]) -> Bounds:
        r = self.retriever
        return _Translation(set(r.fields), lambda f: field_kinds(r, f)).bounds(filters)

    def _chunkless_rows(self) -> list:
        """``(rowid, doc_id, title, text, metadata JSON)`` of the stored documents without chunks
        (blank content): the metadata index never sees them, so filters test them one by one."""
        with self._lock:  # a write may be changing the set
            ids = list(self._chunkless)
        return rows_of(self.retriever, ids) if ids else []

    def _note_chunkless(self, docs: list, n_chunks: int) -> None:
        blank = [d.id for d in docs if not (d.content or "").strip()]
        # Indexed whole (chunk_size=None), a document has one chunk unless its text is blank;
        # should the counts ever disagree, every document of the write is looked up.
        suspects = blank if n_chunks == len(docs) - len(blank) else [d.id for d in docs]
        store = self.retriever.store
        self._chunkless.update(i for i in suspects if not len(store.chunks_of([i])))

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
            self._note_chunkless(docs, self.retriever.add_documents(rows))
            if embedded:
                if self.dense is None:
                    self.dense = self._new_dense(dim)
                vectors = np.asarray([d.embedding for d in embedded], dtype=np.float32)
                self.dense.add(vectors, [d.id for d in embedded])
            return len(docs)

    def _new_dense(self, dim: int) -> Any:
        metric = "cosine" if self.embedding_similarity_function == "cosine" else "ip"
        return DenseIndex(dim, metric=metric, kind=self.dense_kind)

    def _delete(self, ids: list) -> None:
        self.retriever.delete_documents(ids)
        self._chunkless.difference_update(ids)
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

    def _search_filter(self, filters: dict[str, Any] | None) -> dict | None:
        """The Retriever filter of the chunks ``filters`` allows (None: no filter)."""
        if not filters:
            return None
        _check_filters(filters)
        return search_filter(self.retriever, self._bounds(filters), _matcher(filters))

    def _allowed(self, filters: dict[str, Any] | None) -> list | None:
        """The ids ``filters`` allows (documents without chunks included), or None for no filter."""
        if not filters:
            return None
        _check_filters(filters)
        bounds = self._bounds(filters)
        return select_documents(self.retriever, bounds, _matcher(filters), self._chunkless_rows(), full=False)

    def bm25_retrieval(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int = 10, scale_score: bool = False
    ) -> list[Document]:
        """The ``top_k`` best documents for ``query`` by BM25, with their scores."""
        if top_k <= 0 or len(self.retriever) == 0:
            return []
        hits = self._bm25(query, self._search_filter(filters), top_k)
        return self._scored(hits, lambda s: _expit(s / _BM25_SCALE) if scale_score else s)

    def _bm25(self, query: str, flt: dict | None, top_k: int) -> list:
        if top_k <= 0 or len(self.retriever) == 0 or flt is NOTHING:
            return []
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
        if len(self.retriever) == 0:
            return []
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
        if top_k <= 0 or len(self.retriever) == 0:
            return []
        depth = max(candidates, top_k)
        lists = [[d for d, _ in self._bm25(query, self._search_filter(filters), depth)]]
        dense = query_embedding and self.dense is not None and len(self.dense) > 0
        lists.append(
            [d for d, _ in self._embedding(query_embedding, self._allowed(filters), depth)] if dense else []
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


def _matcher(filters: dict[str, Any]) -> Any:
    """Haystack's evaluator on a stored ``(doc_id, title, text, metadata dict)`` row."""
    return lambda row: document_matches_filter(filters=filters, document=_to_document(row[0], row[2], row[3]))


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
    # Only what differs from a plain text document is kept (most documents: nothing).
    fields = {k: v for k, v in fields.items() if v is not None}
    if d.content is None:
        fields["has_content"] = False
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"write_documents: meta of document {d.id!r} is not JSON-serialisable: {exc}"
        ) from exc
    if _DOC_KEY in meta:
        raise ValueError(f"write_documents: meta key {_DOC_KEY!r} is reserved by RagfindDocumentStore")
    if fields:
        meta = {**meta, _DOC_KEY: json.dumps(fields)}
    return {"id": d.id, "text": d.content or "", "metadata": meta}


def _to_document(doc_id: str, text: str, metadata: dict) -> Document:
    """The Haystack document of a stored row (``metadata`` is the row's own dict: it is consumed)."""
    raw = metadata.pop(_DOC_KEY, None)
    if raw is None:  # a plain text document (_to_row)
        return _plain_document(doc_id, text, metadata)
    fields = json.loads(raw)
    has_content = fields.pop("has_content", True)
    content = text if has_content else None
    if fields.keys() <= _PLAIN_FIELDS and not fields.get("blob") and not fields.get("sparse_embedding"):
        # What Document.from_dict would build, without its per-field conversions (a search
        # or filter_documents builds one Document per result).
        return Document(id=doc_id, content=content, meta=metadata, embedding=fields.get("embedding"))
    return Document.from_dict({**fields, "id": doc_id, "content": content, "meta": metadata})


_PLAIN_FIELDS = frozenset(("blob", "embedding", "sparse_embedding"))
_DOCUMENT_LAYOUT = ("id", "content", "blob", "meta", "score", "embedding", "sparse_embedding")


# Whether Document is still the plain dataclass _plain_document builds directly.
_FAST_DOCUMENT = tuple(f.name for f in dataclasses.fields(Document)) == _DOCUMENT_LAYOUT and not hasattr(
    Document, "__slots__"
)


def _plain_document(doc_id: str, text: str, meta: dict) -> Document:
    """``Document(id=doc_id, content=text, meta=meta)``, built without Haystack's ``__init__``
    wrappers (legacy fields, in-place mutation tracking, an id hash it skips for a given id),
    which cost several times the rest of a ``filter_documents`` row. The same object as the
    constructor's, built so only while Document has exactly these fields in its ``__dict__``."""
    if not _FAST_DOCUMENT:
        return Document(id=doc_id, content=text, meta=meta)
    d = object.__new__(Document)
    d.__dict__.update(
        id=doc_id, content=text, blob=None, meta=meta, score=None, embedding=None, sparse_embedding=None
    )
    return d


# ---------------------------------------------------------------------------- filters

_LOGIC = ("AND", "OR", "NOT")
_COMPARISONS = ("==", "!=", ">", ">=", "<", "<=", "in", "not in")
_ORDER = {">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte"}
_DOCUMENT_FIELDS = frozenset(f.name for f in dataclasses.fields(Document))
# Metadata keys the Retriever's filter syntax cannot name: its own fields and operators.
_UNNAMEABLE = frozenset(("doc_id", "title", "$and", "$or", "$not"))
_PROBE = Document(id="probe", content=None, meta={})


def _maybe_date(s: str) -> bool:
    """True for a str Haystack may read as a date: ``==`` is also true for another spelling of
    the same instant. Wider than Haystack's own test (which wants ``YYYY-MM-DD``), so that a
    change there cannot make a date compare as a plain string here."""
    return len(s) >= 8 and s[:4].isdigit()


def _on_missing(op: str, value: Any) -> bool:
    """What Haystack's condition gives a document without the field (its value is None)."""
    return document_matches_filter({"field": "meta.x", "operator": op, "value": value}, _PROBE)


class _Translation:
    """A Haystack filter -> :class:`Bounds` over the Retriever's metadata index.

    Args:
        fields: the Retriever's filter fields (its metadata keys seen, ``doc_id``, ``title``).
        kinds: metadata key -> the kinds of value it held (KIND_* bits), or None.
    """

    def __init__(self, fields: set, kinds: Any) -> None:
        self.fields = fields
        self.kinds = kinds

    # A malformed part is UNDECIDED: Haystack raises FilterError for it on each document that
    # reaches it, so its evaluator sees every document (and raises where Haystack would).

    def bounds(self, flt: Any) -> Bounds:
        if not isinstance(flt, dict):
            return UNDECIDED
        if "field" in flt:
            return self.comparison(flt)
        op, conditions = flt.get("operator"), flt.get("conditions")
        if op not in _LOGIC or not isinstance(conditions, list):
            return UNDECIDED
        parts = [self.bounds(c) for c in conditions]
        if op == "OR":
            return bounds_or(parts)
        both = bounds_and(parts)
        return both if op == "AND" else bounds_not(both)

    def comparison(self, c: dict[str, Any]) -> Bounds:
        if "operator" not in c or "value" not in c or c["operator"] not in _COMPARISONS:
            return UNDECIDED
        field, op, value = c["field"], c["operator"], c["value"]
        if op in ("in", "not in") and not isinstance(value, list):
            return UNDECIDED
        ordering = op in _ORDER
        where, key = self.target(field)
        if where == "absent":
            return exact(_on_missing(op, value))
        if where == "unknown":
            return Bounds(True, False, ordering)  # an ordering may raise (strings are dates)
        if where == "id":
            key, kinds = "doc_id", KIND_STR
        else:
            kinds = self.kinds(key)
            if kinds is None:
                return Bounds(True, False, ordering)
            if where == "nested":
                # meta.a.b is None on every document whose "a" is not a dict.
                if not kinds & KIND_OTHER:
                    return exact(_on_missing(op, value))
                if _on_missing(op, value):
                    return Bounds(True, {key: None}, ordering and valued(key))
                return Bounds(valued(key), False, ordering and valued(key))
        is_id = where == "id"
        if op in ("==", "!="):
            b = self.eq(key, value, kinds, is_id)
            return b if op == "==" else bounds_not(b)
        if op in ("in", "not in"):
            b = bounds_or([self.eq(key, v, kinds, is_id) for v in value])
            return b if op == "in" else bounds_not(b)
        return self.order(key, _ORDER[op], value, kinds, is_id)

    def target(self, field: Any) -> tuple:
        """Where ``field`` lives: ``("meta", key)``, ``("id", None)``, ``("nested", root key)``
        (``meta.a.b``), ``("absent", None)`` (None on every document) or ``("unknown", None)``
        (the framework's evaluator decides)."""
        if not isinstance(field, str):
            return ("unknown", None)
        if "." in field:
            parts = field.split(".")
            if parts[0] != "meta":
                return ("unknown", None)
            key = parts[1]
            where = "meta" if len(parts) == 2 else "nested"
        elif field == "id":
            return ("id", None)
        elif field in _DOCUMENT_FIELDS:
            return ("unknown", None)
        else:
            key, where = field, "meta"  # a bare key is a meta key, as in Haystack's legacy filters
        if key == _DOC_KEY or key not in self.fields:
            return ("absent", None)  # the store refuses _DOC_KEY in meta; no document has the key
        if key in _UNNAMEABLE:
            return ("unknown", None)
        return (where, key)

    @staticmethod
    def eq(key: str, v: Any, kinds: int, is_id: bool) -> Bounds:
        """Haystack's ``==``: Python's ``==``, or two ISO dates of the same instant."""
        if v is None:
            return exact(False if is_id else {key: None})
        if isinstance(v, str):
            if not _maybe_date(v):
                return exact(python_eq(key, v, kinds))
            # The same string surely; another that starts with a digit may be the same date.
            maybe = True if is_id else {key: {"$gte": "0", "$lt": ":"}} if kinds & KIND_STR else False
            return Bounds(maybe, python_eq(key, v, kinds))
        if isinstance(v, bool) or exact_number(v):
            return exact(python_eq(key, v, kinds))
        if isinstance(v, float) and v != v:
            return exact(False)  # NaN equals nothing
        if isinstance(v, (int, float)):
            return Bounds(valued(key), False) if kinds & (KIND_NUM | KIND_BOOL) else exact(False)
        if isinstance(v, datetime):
            return Bounds(True if is_id else any_str(key) if kinds & KIND_STR else False, False)
        if isinstance(v, (list, dict)):
            return Bounds(valued(key), False) if kinds & KIND_OTHER else exact(False)
        return Bounds(valued(key), False)

    @staticmethod
    def order(key: str, op: str, v: Any, kinds: int, is_id: bool) -> Bounds:
        """Haystack's ``> >= < <=``: False for None; strings compare only as dates (another
        str raises FilterError), a list raises FilterError, values that do not compare a
        TypeError: the documents that may raise are ``risky``."""
        if v is None:
            return exact(False)
        if is_id:
            return UNDECIDED
        if isinstance(v, bool) or exact_number(v):
            numbers = python_range(key, op, v, kinds)
            if kinds & (KIND_STR | KIND_OTHER):
                return Bounds(valued(key), numbers, valued(key))
            return exact(numbers)
        return Bounds(valued(key), False, valued(key))


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
