"""``ragfind.Retriever``: the hybrid retrieval pipeline in one object.

Documents go in (chunked, optionally with a contextual-retrieval prefix), questions come out as
passages. Under the hood:

- a SQLite document store (stdlib ``sqlite3``) holds documents, chunk text, offsets and metadata,
  and answers metadata filters;
- a :class:`ragfind.BM25Index` (lexical) and a :class:`ragfind.DenseIndex` fed by an
  :class:`ragfind.Encoder` (semantic) retrieve candidates, concurrently (both release the GIL);
- further first-stage retrievers (:class:`RetrievalStage`, e.g. SPLADE) add their lists;
- reciprocal rank fusion (C++) merges every list, from every phrasing of the question when a
  list of phrasings is given (RAG-Fusion);
- an optional :class:`ragfind.CrossEncoder` and/or late-interaction re-ranker reorders the top;
- an LRU cache of query embeddings and of results answers repeated questions in microseconds;
  the results cache is invalidated whenever the store changes.

Everything is saved as one folder (``save`` / ``Retriever.load``), written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from ragfind.persist.atomic import fsync_dir
from ragfind.pipeline.cache import LRUCache, freeze
from ragfind.pipeline.chunking import Chunk, chunk_documents, default_context, load_tokenizer
from ragfind.pipeline.stages import RerankStage, RetrievalStage

__all__ = [
    "Retriever",
    "Passage",
    "SearchResult",
    "RetrievalStage",
    "RerankStage",
    "RetrieverFolderError",
    "FORMAT_VERSION",
]

FORMAT_NAME = "ragfind-retriever"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
STORE_FILE = "store.sqlite"
BM25_FILE = "bm25.idx"
DENSE_FILE = "dense.idx"

#: Document fields every filter may use besides the metadata keys.
BUILTIN_FIELDS = ("doc_id", "title")
_OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte")


class RetrieverFolderError(ValueError):
    """A saved retriever folder is missing, incomplete, corrupt or of another format/version."""


@dataclass(frozen=True)
class Passage:
    """One retrieved chunk.

    Attributes:
        id: the chunk id (int, unique in the store).
        doc_id: the id of its document.
        text: the chunk text shown to the generator (no contextual prefix).
        title: the document title.
        source: where it comes from: the document's ``metadata["source"]`` (or ``"url"``) when
            set, else the document id.
        score: the final score (fused RRF score, or the re-ranker's score when re-ranked).
        start, end: character offsets of the chunk in its document's text.
        metadata: the document metadata.
        context: the contextual-retrieval prefix it was indexed with.
    """

    id: int
    doc_id: str
    text: str
    title: str
    source: str
    score: float
    start: int
    end: int
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)
    context: str = ""


@dataclass(frozen=True)
class SearchResult(Sequence):
    """Passages best first, plus what the search cost.

    Behaves as a read-only sequence of :class:`Passage`.

    Attributes:
        passages: the passages.
        timings: seconds per stage: ``embed``, ``sparse``, ``dense``, ``fusion``, ``rerank``,
            ``store`` (fetching passages), ``total`` (wall time of the search); extra stages
            appear under their names. A cache hit reports ``cache`` and ``total`` only.
        cached: True when served from the results cache.
        queries: the phrasings searched.
    """

    passages: tuple
    timings: Mapping[str, float]
    cached: bool = False
    queries: tuple = ()

    def __len__(self) -> int:
        return len(self.passages)

    def __getitem__(self, i):
        return self.passages[i]

    def __iter__(self):
        return iter(self.passages)

    @property
    def doc_ids(self) -> list:
        """Document ids of the passages, in order, each once (first occurrence)."""
        seen: dict = {}
        for p in self.passages:
            seen.setdefault(p.doc_id, None)
        return list(seen)


def _now() -> float:
    return time.perf_counter()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_queries(query: str | Sequence[str]) -> tuple:
    if isinstance(query, str):
        queries = (query,)
    elif isinstance(query, (list, tuple)):
        queries = tuple(query)
        if not queries:
            raise ValueError("query is an empty list; expected a str or a non-empty list of phrasings")
    else:
        raise TypeError(f"query is a {type(query).__name__}; expected a str or a list of str (phrasings)")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise TypeError(f"query[{i}] is a {type(q).__name__}; expected str")
        if not q.strip():
            raise ValueError(
                f"query[{i}] is blank; expected a non-empty question"
                if len(queries) > 1
                else "query is blank; expected a non-empty question"
            )
    return queries


def _positive_int(value: Any, name: str, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} = {value!r}; expected a positive int")
    return int(value)


class Retriever:
    """Hybrid retrieval over a document store: BM25 + dense (+ stages), fused, re-ranked, cached.

    Args:
        encoder: an :class:`ragfind.Encoder`, a model folder / default model name (loaded with
            :func:`ragfind.load_model`), or None for a lexical-only retriever.
        reranker: an optional :class:`ragfind.CrossEncoder` (or a folder / name) re-scoring the
            best ``rerank_candidates`` fused passages.
        chunk_size: tokens per chunk; ``"auto"`` (default) picks the encoder's window minus room
            for the context prefix, at most 384; ``None`` indexes every document whole.
        chunk_overlap: overlap between chunks (fraction of ``chunk_size`` or tokens).
        contextualize: True (default) indexes each chunk with :func:`ragfind.default_context`
            (title and heading path), False for none, or a callable ``(document, chunk) -> str``
            (an LLM in production). The context is indexed, never shown as passage text.
        tokenizer: the chunking tokenizer (default: the encoder's, else MiniLM's).
        bm25: a fresh :class:`ragfind.BM25Index` to use (default: ``BM25Index()``: Lucene BM25,
            k1=1.2, b=0.75, English stemming), or None with ``encoder`` set for dense only.
        dense_kind: ``"exact"`` (SIMD brute force, default) or ``"hnsw"``.
        stages: extra :class:`RetrievalStage` objects whose lists join the fusion, and
            :class:`RerankStage` objects applied after fusion (before the cross-encoder).
        rrf_k: the RRF constant.
        weights: optional RRF weights by stage name, e.g. ``{"sparse": 1.0, "dense": 1.5}``.
        candidates: how many results each first-stage retriever returns per phrasing.
        rerank_candidates: how many fused passages the re-rankers see.
        cache_size: entries in each of the embedding and result caches (0 disables them).
        threads: worker threads for concurrent stages (default 2).
        show_progress: tqdm progress bars during :meth:`add_documents`.

    Thread safety: searches may run concurrently with each other and with writes; writes are
    serialised.
    """

    def __init__(
        self,
        encoder: Any = "all-MiniLM-L6-v2",
        reranker: Any = None,
        *,
        chunk_size: int | str | None = "auto",
        chunk_overlap: float | int = 0.15,
        contextualize: bool | Callable[[Mapping[str, Any], Chunk], str] = True,
        tokenizer: Any = None,
        bm25: Any = "default",
        dense_kind: str = "exact",
        stages: Sequence[Any] = (),
        rrf_k: float = 60,
        weights: Mapping[str, float] | None = None,
        candidates: int = 100,
        rerank_candidates: int = 30,
        cache_size: int = 1024,
        threads: int = 2,
        show_progress: bool = False,
    ) -> None:
        from ragfind.dense.index import DenseIndex
        from ragfind.sparse.bm25 import BM25Index

        self.encoder = self._load_encoder(encoder)
        self.encoder_ref = (
            encoder if isinstance(encoder, (str, os.PathLike)) or encoder is None else _path_of(self.encoder)
        )
        if isinstance(self.encoder_ref, os.PathLike):
            self.encoder_ref = os.fspath(self.encoder_ref)
        self.reranker = self._load_reranker(reranker)
        self.reranker_ref = (
            reranker
            if isinstance(reranker, (str, os.PathLike)) or reranker is None
            else str(getattr(self.reranker, "path", "")) or None
        )
        if isinstance(self.reranker_ref, os.PathLike):
            self.reranker_ref = os.fspath(self.reranker_ref)
        if bm25 == "default":
            bm25 = BM25Index()
        if bm25 is not None and not isinstance(bm25, BM25Index):
            raise TypeError(
                f"bm25 is a {type(bm25).__name__}; expected a ragfind.BM25Index, 'default' or None"
            )
        if bm25 is not None and len(bm25) > 0:
            raise ValueError(
                "bm25 already holds documents; pass an empty BM25Index (the Retriever owns its ids)"
            )
        if bm25 is None and self.encoder is None:
            raise ValueError("a Retriever needs at least one of bm25 and encoder")
        self.bm25 = bm25
        if dense_kind not in ("exact", "hnsw"):
            raise ValueError(f"dense_kind = {dense_kind!r}; expected 'exact' or 'hnsw'")
        self.dense = (
            DenseIndex(
                self.encoder.dim, metric="cosine", kind=dense_kind, fingerprint=self.encoder.fingerprint
            )
            if self.encoder is not None
            else None
        )
        self.chunk_size = self._resolve_chunk_size(chunk_size, contextualize)
        self.chunk_overlap = chunk_overlap
        if contextualize is True:
            contextualize = default_context
        if contextualize is not False and contextualize is not None and not callable(contextualize):
            raise TypeError(
                f"contextualize is a {type(contextualize).__name__}; expected a bool or a callable"
            )
        self.contextualize = contextualize or None
        self.tokenizer = (
            tokenizer
            if tokenizer is not None
            else (self.encoder.tokenizer if self.encoder is not None else None)
        )
        # Resolved once (a copy without truncation), not on every add_documents call.
        self.tokenizer = load_tokenizer(self.tokenizer)
        self.stages = [s for s in stages if isinstance(s, RetrievalStage)]
        self.rerank_stages = [
            s for s in stages if isinstance(s, RerankStage) and not isinstance(s, RetrievalStage)
        ]
        for s in stages:
            if not isinstance(s, (RetrievalStage, RerankStage)):
                raise TypeError(f"stage {s!r} implements neither RetrievalStage nor RerankStage")
        names = ["sparse", "dense"] + [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique and not 'sparse'/'dense'; got {names}")
        self.rrf_k = float(rrf_k)
        self.weights = dict(weights or {})
        unknown = set(self.weights) - set(names)
        if unknown:
            raise ValueError(f"weights name unknown stages {sorted(unknown)}; expected some of {names}")
        self.candidates = _positive_int(candidates, "candidates")
        self.rerank_candidates = _positive_int(rerank_candidates, "rerank_candidates")
        self.embedding_cache = LRUCache(cache_size)
        self.result_cache = LRUCache(cache_size)
        self._filter_cache = LRUCache(256 if cache_size else 0)
        self.show_progress = show_progress
        self._threads = _positive_int(threads, "threads")
        self._pool: ThreadPoolExecutor | None = None
        self._write_lock = threading.RLock()
        self._store_lock = threading.Lock()
        self._generation = 0
        self._next_chunk_id = 0
        self._fields: set = set()
        self._db = self._new_store()

    # ------------------------------------------------------------------ construction helpers

    @staticmethod
    def _load_encoder(encoder: Any):
        if encoder is None:
            return None
        if isinstance(encoder, (str, os.PathLike)):
            from ragfind.models import load_model

            model = load_model(encoder)
            if not hasattr(model, "encode_query"):
                raise ValueError(f"encoder = {encoder!r} is not a bi-encoder (got {type(model).__name__})")
            return model
        for attr in ("encode", "encode_query", "dim", "fingerprint"):
            if not hasattr(encoder, attr):
                raise TypeError(
                    f"encoder is a {type(encoder).__name__} without .{attr}; expected a ragfind.Encoder"
                )
        return encoder

    @staticmethod
    def _load_reranker(reranker: Any):
        if reranker is None:
            return None
        if isinstance(reranker, (str, os.PathLike)):
            from ragfind.models.cross_encoder import CrossEncoder

            return CrossEncoder(reranker)
        if not hasattr(reranker, "rank"):
            raise TypeError(
                f"reranker is a {type(reranker).__name__} without .rank; expected a ragfind.CrossEncoder"
            )
        return reranker

    def _resolve_chunk_size(self, chunk_size: Any, contextualize: Any) -> int | None:
        if chunk_size is None:
            return None
        if chunk_size == "auto":
            window = getattr(self.encoder, "max_length", 512) if self.encoder is not None else 512
            room = 2 + (48 if contextualize else 0)  # [CLS]/[SEP] and the context prefix
            return max(32, min(384, int(window) - room))
        return _positive_int(chunk_size, "chunk_size")

    @staticmethod
    def _new_store() -> sqlite3.Connection:
        db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        db.executescript(
            """
            CREATE TABLE documents (doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL,
                                    metadata TEXT NOT NULL);
            CREATE TABLE chunks (id INTEGER PRIMARY KEY, doc_id TEXT NOT NULL REFERENCES documents(doc_id),
                                 idx INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
                                 n_tokens INTEGER NOT NULL, text TEXT NOT NULL, context TEXT NOT NULL);
            CREATE INDEX chunks_doc ON chunks(doc_id);
            CREATE TABLE fields (name TEXT PRIMARY KEY);
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """
        )
        return db

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="ragfind-retriever")
        return self._pool

    def close(self) -> None:
        """Stops the worker threads (the object stays usable; they restart on demand)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            if getattr(self, "_pool", None) is not None:
                self._pool.shutdown(wait=False)
        except Exception:
            pass

    # ------------------------------------------------------------------ documents

    def __len__(self) -> int:
        """Number of documents in the store."""
        with self._store_lock:
            return self._db.execute("SELECT COUNT(*) FROM documents").fetchone()[0]

    @property
    def n_chunks(self) -> int:
        """Number of chunks (passages) indexed."""
        with self._store_lock:
            return self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]

    @property
    def fields(self) -> list:
        """Fields filters may use: ``doc_id``, ``title`` and every metadata key seen."""
        return sorted(set(BUILTIN_FIELDS) | self._fields)

    def add_documents(
        self,
        documents: Iterable[Mapping[str, Any]],
        *,
        embeddings: np.ndarray | None = None,
        batch_size: int = 32,
    ) -> int:
        """Chunks, embeds and indexes documents; all or nothing.

        Args:
            documents: dicts with ``id`` (str or int; stored as str) and ``text`` (str), and
                optionally ``title`` (str) and ``metadata`` (a JSON-serialisable dict whose
                keys become filterable fields).
            embeddings: precomputed chunk embeddings, one row per chunk in order (float,
                (n_chunks, dim)); typically with ``chunk_size=None`` (one chunk per document).
            batch_size: encoder batch size.

        Returns:
            The number of chunks added.

        Raises:
            ValueError: an id already in the store or repeated in the batch, a document without
                ``id``/``text``, non-JSON metadata, embeddings of the wrong shape.
            TypeError: a malformed document.
            Nothing is added when an error is raised.
        """
        docs = list(documents)
        if not docs:
            return 0
        for n, d in enumerate(docs):
            if not isinstance(d, Mapping):
                raise TypeError(
                    f"documents[{n}] is a {type(d).__name__}; expected a dict with 'id' and 'text'"
                )
            md = d.get("metadata")
            if md is not None and not isinstance(md, Mapping):
                raise TypeError(f"documents[{n}]['metadata'] is a {type(md).__name__}; expected a dict")
            title = d.get("title")
            if title is not None and not isinstance(title, str):
                raise TypeError(f"documents[{n}]['title'] is a {type(title).__name__}; expected str")
        size = self.chunk_size
        if size is None:
            # One chunk per document: a budget no document exceeds.
            size = 1 << 30
        chunks = chunk_documents(
            docs,
            size=size,
            overlap=self.chunk_overlap if self.chunk_size else 0,
            tokenizer=self.tokenizer,
            contextualize=self.contextualize,
        )
        meta_json = []
        for n, d in enumerate(docs):
            try:
                meta_json.append(
                    json.dumps(dict(d.get("metadata") or {}), sort_keys=True, ensure_ascii=False)
                )
            except (TypeError, ValueError) as exc:
                raise ValueError(f"documents[{n}]['metadata'] is not JSON-serialisable: {exc}") from exc
        with self._write_lock:
            ids_in = [str(d["id"]) for d in docs]
            with self._store_lock:
                existing = []
                for start in range(0, len(ids_in), 500):
                    part = ids_in[start : start + 500]
                    q = f"SELECT doc_id FROM documents WHERE doc_id IN ({','.join('?' * len(part))})"
                    existing += [r[0] for r in self._db.execute(q, part)]
            if existing:
                raise ValueError(
                    f"document id {existing[0]!r} is already in the store "
                    f"({len(existing)} of the batch are); "
                    "delete_documents() it first to replace it"
                )
            n_chunks = len(chunks)
            chunk_ids = np.arange(self._next_chunk_id, self._next_chunk_id + n_chunks, dtype=np.int64)
            indexed = [c.indexed_text() for c in chunks]
            vectors = None
            if self.dense is not None and n_chunks:
                if embeddings is not None:
                    vectors = np.asarray(embeddings)
                    if vectors.dtype.kind != "f":
                        raise TypeError(f"embeddings have dtype {vectors.dtype}; expected floats")
                    if vectors.shape != (n_chunks, self.dense.dim):
                        raise ValueError(
                            f"embeddings have shape {vectors.shape}; expected ({n_chunks}, {self.dense.dim}) "
                            "(one row per chunk; use chunk_size=None for one chunk per document)"
                        )
                    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
                    if not np.isfinite(vectors).all():
                        raise ValueError("embeddings contain NaN or inf")
                else:
                    vectors = self.encoder.encode(
                        indexed, batch_size=batch_size, show_progress=self.show_progress
                    )
            elif embeddings is not None:
                raise ValueError("embeddings were given but this retriever has no encoder")
            done: list = []
            try:
                with self._store_lock:
                    self._db.execute("BEGIN")
                    try:
                        self._db.executemany(
                            "INSERT INTO documents VALUES (?, ?, ?, ?)",
                            [
                                (i, d.get("title") or "", d["text"], m)
                                for i, d, m in zip(ids_in, docs, meta_json)
                            ],
                        )
                        self._db.executemany(
                            "INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            [
                                (int(cid), c.doc_id, c.index, c.start, c.end, c.n_tokens, c.text, c.context)
                                for cid, c in zip(chunk_ids, chunks)
                            ],
                        )
                        new_fields = {k for d in docs for k in (d.get("metadata") or {})} - self._fields
                        self._db.executemany(
                            "INSERT OR IGNORE INTO fields VALUES (?)", [(f,) for f in sorted(new_fields)]
                        )
                    except BaseException:
                        self._db.execute("ROLLBACK")
                        raise
                if n_chunks:
                    if self.bm25 is not None:
                        self.bm25.add(indexed, chunk_ids)
                        done.append(self.bm25)
                    if self.dense is not None:
                        self.dense.add(vectors, chunk_ids)
                        done.append(self.dense)
                    for stage in self.stages:
                        stage.add(chunk_ids, indexed)
                        done.append(stage)
                    for stage in self.rerank_stages:
                        if hasattr(stage, "add"):
                            stage.add(chunk_ids, indexed)
                            done.append(stage)
                with self._store_lock:
                    self._db.execute("COMMIT")
            except BaseException:
                for part in done:
                    try:
                        part.delete(chunk_ids)
                    except Exception:
                        pass
                with self._store_lock:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                raise
            self._fields |= {k for d in docs for k in (d.get("metadata") or {})}
            self._next_chunk_id += n_chunks
            self._store_changed()
            return n_chunks

    def delete_documents(self, doc_ids: Iterable[Any]) -> int:
        """Removes documents and their chunks; returns the number of chunks removed.

        Raises:
            KeyError: an id is not in the store (nothing is removed).
        """
        ids = [str(d) for d in ([doc_ids] if isinstance(doc_ids, (str, int)) else doc_ids)]
        with self._write_lock:
            with self._store_lock:
                rows = []
                for d in ids:
                    if self._db.execute("SELECT 1 FROM documents WHERE doc_id = ?", (d,)).fetchone() is None:
                        raise KeyError(f"document id {d!r} is not in the store")
                    rows += [r[0] for r in self._db.execute("SELECT id FROM chunks WHERE doc_id = ?", (d,))]
            chunk_ids = np.asarray(rows, dtype=np.int64)
            if len(chunk_ids):
                if self.bm25 is not None:
                    self.bm25.delete(chunk_ids)
                if self.dense is not None:
                    self.dense.delete(chunk_ids)
                for stage in self.stages + [s for s in self.rerank_stages if hasattr(s, "delete")]:
                    stage.delete(chunk_ids)
            with self._store_lock:
                self._db.execute("BEGIN")
                self._db.executemany("DELETE FROM chunks WHERE doc_id = ?", [(d,) for d in ids])
                self._db.executemany("DELETE FROM documents WHERE doc_id = ?", [(d,) for d in ids])
                self._db.execute("COMMIT")
            self._store_changed()
            return len(chunk_ids)

    def get_document(self, doc_id: Any) -> dict:
        """The stored document ``{"id", "title", "text", "metadata"}``; KeyError when absent."""
        with self._store_lock:
            row = self._db.execute(
                "SELECT doc_id, title, text, metadata FROM documents WHERE doc_id = ?", (str(doc_id),)
            ).fetchone()
        if row is None:
            raise KeyError(f"document id {doc_id!r} is not in the store")
        return {"id": row[0], "title": row[1], "text": row[2], "metadata": json.loads(row[3])}

    def _store_changed(self) -> None:
        self._generation += 1
        self.result_cache.clear()
        self._filter_cache.clear()

    # ------------------------------------------------------------------ filters

    def _filter_sql(self, filters: Mapping[str, Any]) -> tuple:
        if not isinstance(filters, Mapping):
            raise TypeError(f"filters is a {type(filters).__name__}; expected a dict of field -> condition")
        known = set(BUILTIN_FIELDS) | self._fields
        clauses, params = [], []
        for name, cond in filters.items():
            if name not in known:
                raise ValueError(f"filters: unknown field {name!r}; known fields: {sorted(known)}")
            by_key = '"' in name or "\\" in name
            if name == "doc_id":
                col = "d.doc_id"
            elif name == "title":
                col = "d.title"
            elif by_key:
                # SQLite's JSON path mishandles '"' and '\\' in a quoted label: look the key up.
                col = "(SELECT value FROM json_each(d.metadata) WHERE key = ?)"
            else:
                col = "json_extract(d.metadata, ?)"
            conds = (
                cond
                if isinstance(cond, Mapping)
                else ({"$in": cond} if isinstance(cond, (list, tuple, set)) else {"$eq": cond})
            )
            for op, val in conds.items():
                if op not in _OPERATORS:
                    raise ValueError(
                        f"filters[{name!r}]: unknown operator {op!r}; expected one of {_OPERATORS}"
                    )
                col_params = [] if name in BUILTIN_FIELDS else [name if by_key else f'$."{name}"']
                if op in ("$in", "$nin"):
                    vals = list(val) if isinstance(val, (list, tuple, set)) else None
                    if vals is None:
                        raise ValueError(f"filters[{name!r}][{op!r}] = {val!r}; expected a list")
                    if not vals:
                        clauses.append("0" if op == "$in" else "1")
                        continue
                    for v in vals:
                        self._check_filter_value(name, v)
                    sql_op = "IN" if op == "$in" else "NOT IN"
                    clauses.append(f"{col} {sql_op} ({','.join('?' * len(vals))})")
                    params += col_params + [self._sql_value(v) for v in vals]
                else:
                    self._check_filter_value(name, val)
                    sql_op = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[op]
                    if val is None and op in ("$eq", "$ne"):
                        clauses.append(f"{col} IS {'NOT ' if op == '$ne' else ''}NULL")
                        params += col_params
                    else:
                        clauses.append(f"{col} {sql_op} ?")
                        params += col_params + [self._sql_value(val)]
        return " AND ".join(clauses) or "1", params

    @staticmethod
    def _check_filter_value(name: str, v: Any) -> None:
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise TypeError(
                f"filters[{name!r}]: value {v!r} is a {type(v).__name__}; expected str, number, bool or None"
            )

    @staticmethod
    def _sql_value(v: Any) -> Any:
        return int(v) if isinstance(v, bool) else v

    def _allowed_ids(self, filters: Mapping[str, Any] | None) -> frozenset | None:
        if not filters:
            return None
        key = (self._generation, freeze(dict(filters)))
        hit = self._filter_cache.get(key)
        if hit is not None:
            return hit
        where, params = self._filter_sql(filters)
        with self._store_lock:
            rows = self._db.execute(
                f"SELECT c.id FROM chunks c JOIN documents d ON c.doc_id = d.doc_id WHERE {where}", params
            ).fetchall()
        allowed = frozenset(r[0] for r in rows)
        self._filter_cache.put(key, allowed)
        return allowed

    # ------------------------------------------------------------------ search

    def embed_query(self, query: str) -> np.ndarray:
        """The (cached) query embedding; ValueError without an encoder."""
        if self.encoder is None:
            raise ValueError("this retriever has no encoder")
        vec = self.embedding_cache.get(query)
        if vec is None:
            vec = self.encoder.encode_query(query)
            vec.setflags(write=False)
            self.embedding_cache.put(query, vec)
        return vec

    def _sparse(self, queries: tuple, k: int, allowed: frozenset | None) -> tuple:
        t = _now()
        out = []
        for q in queries:
            out.append(self._bm25_search(q, k, allowed))
        return out, _now() - t

    def _bm25_search(self, q: str, k: int, allowed: frozenset | None) -> tuple:
        n = len(self.bm25)
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if allowed is None:
            return self.bm25.search(q, min(k, n))
        if not allowed:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        # BM25 has no filter: fetch more until k allowed ids are found or the index is exhausted.
        fetch = min(n, max(k * 4, k + 64))
        while True:
            ids, scores = self.bm25.search(q, fetch)
            mask = np.fromiter((int(i) in allowed for i in ids), dtype=bool, count=len(ids))
            if mask.sum() >= k or fetch >= n or len(ids) < fetch:
                return ids[mask][:k], scores[mask][:k]
            fetch = min(n, fetch * 4)

    def _dense(self, queries: tuple, k: int, allowed: frozenset | None) -> tuple:
        t = _now()
        vecs = [self.embed_query(q) for q in queries]
        t_embed = _now() - t
        t = _now()
        out = []
        n = len(self.dense)
        for v in vecs:
            if n == 0 or (allowed is not None and not allowed):
                out.append((np.zeros(0, np.int64), np.zeros(0, np.float32)))
            else:
                out.append(self.dense.search(v, min(k, n), filter=allowed))
        return out, t_embed, _now() - t

    def _stage(self, stage: Any, queries: tuple, k: int, allowed: frozenset | None) -> tuple:
        t = _now()
        out = [stage.search(q, k, allowed) for q in queries]
        return out, _now() - t

    def search(
        self,
        query: str | Sequence[str],
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        *,
        rerank: bool = True,
        use_cache: bool = True,
    ) -> SearchResult:
        """The ``k`` best passages for a question (or several phrasings of it).

        Args:
            query: the question, or a list of phrasings of it (RAG-Fusion): every phrasing is
                searched by every stage and all the lists are fused.
            k: passages to return.
            filters: metadata conditions, all of which must hold: ``{"lang": "en"}``,
                ``{"year": {"$gte": 2020}}``, ``{"source": ["a", "b"]}`` (any of),
                operators ``$eq $ne $in $nin $gt $gte $lt $lte``; fields are ``doc_id``,
                ``title`` and the documents' metadata keys.
            rerank: apply the configured re-rankers (cross-encoder, rerank stages).
            use_cache: consult and fill the results cache.

        Returns:
            A :class:`SearchResult` (a sequence of :class:`Passage`, with per-stage timings).

        Raises:
            ValueError: blank query, bad ``k``, a filter on an unknown field or with an unknown
                operator. TypeError: a query that is not str / list of str, bad filter values.
        """
        t0 = _now()
        queries = _check_queries(query)
        k = _positive_int(k, "k")
        if filters is not None and not isinstance(filters, Mapping):
            raise TypeError(f"filters is a {type(filters).__name__}; expected a dict of field -> condition")
        key = None
        if use_cache and self.result_cache.max_entries:
            try:
                key = (self._generation, queries, k, freeze(dict(filters)) if filters else None, bool(rerank))
            except TypeError:
                key = None
            if key is not None:
                hit = self.result_cache.get(key)
                if hit is not None:
                    dt = _now() - t0
                    return SearchResult(hit.passages, {"cache": dt, "total": dt}, True, queries)
        generation = self._generation
        allowed = self._allowed_ids(filters)
        timings: dict = {}
        rerankers = bool(rerank) and (self.reranker is not None or bool(self.rerank_stages))
        depth = max(self.candidates, k, self.rerank_candidates if rerankers else 0)
        lists, names = [], []
        # Sparse (and extra stages) on worker threads while this thread embeds and searches dense.
        futures = []
        pool = self._executor() if (self.bm25 is not None and self.dense is not None) or self.stages else None
        if self.bm25 is not None:
            if pool is not None:
                futures.append(("sparse", pool.submit(self._sparse, queries, depth, allowed)))
            else:
                res, timings["sparse"] = self._sparse(queries, depth, allowed)
                lists += res
                names += ["sparse"] * len(res)
        for stage in self.stages:
            futures.append((stage.name, pool.submit(self._stage, stage, queries, depth, allowed)))
        if self.dense is not None:
            res, timings["embed"], timings["dense"] = self._dense(queries, depth, allowed)
            lists += res
            names += ["dense"] * len(res)
        for name, fut in futures:
            res, timings[name] = fut.result()
            lists += res
            names += [name] * len(res)
        t = _now()
        top = max(k, self.rerank_candidates) if rerankers else k
        weights = [float(self.weights.get(n, 1.0)) for n in names] if self.weights else None
        ids, scores = _rrf(lists, self.rrf_k, weights, top)
        timings["fusion"] = _now() - t
        t = _now()
        rows = self._fetch(ids)
        timings["store"] = _now() - t
        passages = [self._passage(rows[int(i)], float(s)) for i, s in zip(ids, scores) if int(i) in rows]
        if rerankers and passages:
            t = _now()
            passages = self._rerank(queries[0], passages, max(k, self.rerank_candidates))
            timings["rerank"] = _now() - t
        passages = tuple(passages[:k])
        timings["total"] = _now() - t0
        result = SearchResult(passages, timings, False, queries)
        if key is not None and generation == self._generation:
            self.result_cache.put(key, result)
        return result

    def _rerank(self, query: str, passages: list, depth: int) -> list:
        # Every passage returned is re-scored (depth >= k), so scores stay on one scale.
        head = passages[:depth]
        for stage in self.rerank_stages:
            ids = np.asarray([p.id for p in head], dtype=np.int64)
            new_ids, new_scores = stage.rerank(query, ids, [self._indexed_text(p) for p in head])
            by_id = {p.id: p for p in head}
            head = [_with_score(by_id[int(i)], float(s)) for i, s in zip(new_ids, new_scores)]
        if self.reranker is not None:
            ranked = self.reranker.rank(query, [self._indexed_text(p) for p in head])
            head = [_with_score(head[r["corpus_id"]], float(r["score"])) for r in ranked]
        return head

    @staticmethod
    def _indexed_text(p: Passage) -> str:
        return f"{p.context}\n{p.text}" if p.context else p.text

    def _fetch(self, ids: np.ndarray) -> dict:
        if len(ids) == 0:
            return {}
        id_list = [int(i) for i in ids]
        with self._store_lock:
            rows = self._db.execute(
                'SELECT c.id, c.doc_id, c.text, d.title, c.start, c."end", d.metadata, c.context '
                "FROM chunks c JOIN documents d ON c.doc_id = d.doc_id "
                f"WHERE c.id IN ({','.join('?' * len(id_list))})",
                id_list,
            ).fetchall()
        return {r[0]: r for r in rows}

    @staticmethod
    def _passage(row: tuple, score: float) -> Passage:
        cid, doc_id, text, title, start, end, metadata, context = row
        # Read-only: passages are shared with the results cache.
        md = MappingProxyType(json.loads(metadata) if metadata != "{}" else {})
        source = md.get("source") or md.get("url") or doc_id
        return Passage(cid, doc_id, text, title, str(source), score, start, end, md, context)

    # ------------------------------------------------------------------ caches

    def cache_stats(self) -> dict:
        """``{"embeddings": {...}, "results": {...}}`` hit/miss counters of both caches."""
        return {"embeddings": self.embedding_cache.stats(), "results": self.result_cache.stats()}

    def clear_cache(self) -> None:
        """Empties both caches."""
        self.embedding_cache.clear()
        self.result_cache.clear()
        self._filter_cache.clear()

    # ------------------------------------------------------------------ persistence

    def _config(self) -> dict:
        return {
            "chunk_size": self.chunk_size,
            "chunk_overlap": self.chunk_overlap,
            "contextualize": (
                None
                if self.contextualize is None
                else "default"
                if self.contextualize is default_context
                else "custom"
            ),
            "rrf_k": self.rrf_k,
            "weights": self.weights,
            "candidates": self.candidates,
            "rerank_candidates": self.rerank_candidates,
            "cache_size": self.result_cache.max_entries,
            "dense_kind": self.dense.kind if self.dense is not None else None,
        }

    def save(self, path: str | os.PathLike) -> None:
        """Writes everything (store, indexes, configuration) to the folder ``path``, atomically.

        The folder is first written as a temporary sibling, fsynced, then renamed into place;
        an existing folder at ``path`` is replaced only once the new one is complete. Custom
        stages must implement ``save(folder)``; a custom ``contextualize`` callable is not saved
        (pass it again to :meth:`load` to add documents with it).

        Raises:
            OSError: the folder cannot be written (anything already at ``path`` is untouched).
        """
        dst = Path(path)
        parent = dst.parent if str(dst.parent) else Path(".")
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f".{dst.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with self._write_lock:
            try:
                tmp.mkdir()
                files = []
                with self._store_lock:
                    out = sqlite3.connect(str(tmp / STORE_FILE))
                    try:
                        self._db.backup(out)
                        out.execute("PRAGMA journal_mode=DELETE")
                        out.commit()
                    finally:
                        out.close()
                files.append(STORE_FILE)
                if self.bm25 is not None:
                    self.bm25.save(tmp / BM25_FILE)
                    files.append(BM25_FILE)
                if self.dense is not None:
                    self.dense.save(tmp / DENSE_FILE)
                    files.append(DENSE_FILE)
                stage_names = []
                for stage in self.stages + self.rerank_stages:
                    if hasattr(stage, "save"):
                        d = tmp / f"stage-{stage.name}"
                        d.mkdir()
                        stage.save(d)
                        stage_names.append(stage.name)
                        files += [str(p.relative_to(tmp)) for p in sorted(d.rglob("*")) if p.is_file()]
                for f in files:
                    with open(tmp / f, "rb+") as fh:
                        os.fsync(fh.fileno())
                manifest = {
                    "format": FORMAT_NAME,
                    "version": FORMAT_VERSION,
                    "encoder": None
                    if self.encoder is None
                    else {
                        "ref": self.encoder_ref,
                        "fingerprint": self.encoder.fingerprint,
                        "dim": int(self.encoder.dim),
                    },
                    "reranker": None
                    if self.reranker is None
                    else {
                        "ref": self.reranker_ref,
                        "fingerprint": getattr(self.reranker, "fingerprint", None),
                    },
                    "next_chunk_id": self._next_chunk_id,
                    "fields": sorted(self._fields),
                    "stages": stage_names,
                    "config": self._config(),
                    "files": {
                        f: {"size": (tmp / f).stat().st_size, "sha256": _sha256(tmp / f)} for f in files
                    },
                }
                with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
                    json.dump(manifest, fh, indent=1, sort_keys=True)
                    fh.flush()
                    os.fsync(fh.fileno())
                fsync_dir(tmp)
                old = None
                if dst.exists():
                    if not (dst / MANIFEST).is_file() and any(dst.iterdir()):
                        raise FileExistsError(
                            f"{str(dst)!r} exists and is not a saved retriever; refusing to replace it"
                        )
                    old = parent / f".{dst.name}.old-{uuid.uuid4().hex[:8]}"
                    os.replace(dst, old)
                os.replace(tmp, dst)
                fsync_dir(parent)
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        encoder: Any = None,
        reranker: Any = "saved",
        *,
        contextualize: Any = None,
        stages: Sequence[Any] = (),
        verify: bool = True,
    ) -> Retriever:
        """Opens a folder written by :meth:`save`.

        Args:
            path: the folder.
            encoder: the query encoder (an Encoder, a folder or a name); default: the saved
                reference. Its fingerprint must equal the one the vectors were built with.
            reranker: "saved" (default: the saved reference, if any), None, or a CrossEncoder.
            contextualize: a custom callable to use for documents added later (the saved
                retriever used the default or none; that choice is restored otherwise).
            stages: the extra stages, already loaded, when the saved retriever had some.
            verify: check every file's SHA-256 against the manifest before reading it.

        Raises:
            RetrieverFolderError: a missing folder or manifest, another format or version, a
                missing, truncated or corrupted file, a manifest field of the wrong type, a
                store that is not this format's SQLite schema (or has malformed rows), indexes
                whose chunk ids differ from the store's. These checks run with ``verify=False``
                too, so a folder that loads can be searched, written and saved.
            ragfind.ModelMismatchError (a ValueError): ``encoder`` is not the model the dense
                vectors were built with (or gives vectors of another dimension).
        """
        from ragfind.dense.index import DenseIndex
        from ragfind.models import ModelMismatchError
        from ragfind.sparse.bm25 import BM25Index

        folder = Path(path)
        if not folder.is_dir():
            raise RetrieverFolderError(f"{str(folder)!r} is not a folder (no saved retriever there)")
        mpath = folder / MANIFEST
        if not mpath.is_file():
            raise RetrieverFolderError(
                f"{str(folder)!r} has no {MANIFEST}; it is not a saved ragfind retriever"
            )
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
            fmt, version, files = manifest["format"], manifest["version"], manifest["files"]
            config = manifest["config"]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise RetrieverFolderError(f"{str(mpath)!r} is not a valid manifest: {exc}") from exc
        if fmt != FORMAT_NAME:
            raise RetrieverFolderError(f"{str(folder)!r} holds format {fmt!r}; expected {FORMAT_NAME!r}")
        if version != FORMAT_VERSION:
            raise RetrieverFolderError(
                f"{str(folder)!r} has format version {version}; this ragfind reads {FORMAT_VERSION}"
            )
        _check_manifest(manifest, mpath)
        for name, info in files.items():
            f = folder / name
            if not f.is_file():
                raise RetrieverFolderError(f"{str(folder)!r} is missing {name}")
            if f.stat().st_size != info["size"]:
                raise RetrieverFolderError(
                    f"{str(f)!r} has {f.stat().st_size} bytes; the manifest says {info['size']} (truncated?)"
                )
            if verify and _sha256(f) != info["sha256"]:
                raise RetrieverFolderError(f"{str(f)!r} does not match its checksum (corrupted)")
        enc_info = manifest.get("encoder")
        if enc_info is None:
            enc = None
            if encoder is not None:
                raise ValueError("this retriever was saved without an encoder; pass encoder=None")
        else:
            if encoder is None and not enc_info.get("ref"):
                raise ValueError(
                    f"the retriever in {str(folder)!r} was saved with an encoder object of no known path; "
                    "pass encoder="
                )
            enc = cls._load_encoder(encoder if encoder is not None else enc_info["ref"])
            if enc.fingerprint != enc_info["fingerprint"]:
                raise ModelMismatchError(
                    f"the retriever in {str(folder)!r} was built with embedding model "
                    f"{enc_info['fingerprint']!r} "
                    f"but the encoder given is {enc.fingerprint!r}; load it with the same model or re-index"
                )
        if reranker == "saved":
            rr_info = manifest.get("reranker")
            reranker = None if rr_info is None else rr_info["ref"]
        obj = cls.__new__(cls)
        obj.encoder = enc
        obj.encoder_ref = (
            None
            if enc_info is None
            else (
                os.fspath(encoder)
                if isinstance(encoder, (str, os.PathLike))
                else enc_info["ref"]
                if encoder is None
                else _path_of(enc)
            )
        )
        obj.reranker = cls._load_reranker(reranker)
        obj.reranker_ref = (
            reranker
            if isinstance(reranker, (str, os.PathLike)) or reranker is None
            else str(getattr(reranker, "path", ""))
        )
        try:
            obj.bm25 = BM25Index.load(folder / BM25_FILE, mmap=False) if BM25_FILE in files else None
            obj.dense = DenseIndex.load(folder / DENSE_FILE, mmap=False) if DENSE_FILE in files else None
        except (ValueError, OSError) as exc:
            raise RetrieverFolderError(f"{str(folder)!r}: an index file could not be read: {exc}") from exc
        if obj.dense is not None and enc is not None:
            obj.dense.check_fingerprint(enc.fingerprint)
            if obj.dense.dim != enc.dim:
                raise ModelMismatchError(
                    f"the retriever in {str(folder)!r} holds {obj.dense.dim}-d vectors but the encoder "
                    f"gives {enc.dim}-d ones"
                )
        obj.chunk_size = config["chunk_size"]
        obj.chunk_overlap = config["chunk_overlap"]
        obj.contextualize = contextualize or (
            default_context if config["contextualize"] == "default" else None
        )
        obj.tokenizer = load_tokenizer(enc.tokenizer if enc is not None else None)
        obj.stages = [s for s in stages if isinstance(s, RetrievalStage)]
        obj.rerank_stages = [
            s for s in stages if isinstance(s, RerankStage) and not isinstance(s, RetrievalStage)
        ]
        missing = set(manifest.get("stages", [])) - {s.name for s in stages}
        if missing:
            raise ValueError(
                f"the saved retriever had stages {sorted(missing)}; pass them (loaded) in stages="
            )
        obj.rrf_k = float(config["rrf_k"])
        obj.weights = dict(config["weights"] or {})
        obj.candidates = int(config["candidates"])
        obj.rerank_candidates = int(config["rerank_candidates"])
        obj.embedding_cache = LRUCache(int(config["cache_size"]))
        obj.result_cache = LRUCache(int(config["cache_size"]))
        obj._filter_cache = LRUCache(256 if config["cache_size"] else 0)
        obj.show_progress = False
        obj._threads = 2
        obj._pool = None
        obj._write_lock = threading.RLock()
        obj._store_lock = threading.Lock()
        obj._generation = 0
        obj._next_chunk_id = int(manifest["next_chunk_id"])
        obj._fields = set(manifest.get("fields", []))
        db = _open_store(folder, obj._next_chunk_id)
        try:
            chunk_ids = np.fromiter((r[0] for r in db.execute("SELECT id FROM chunks ORDER BY id")), np.int64)
            for name, index in (("bm25", obj.bm25), ("dense", obj.dense)):
                if index is None:
                    continue
                if len(index) != len(chunk_ids):
                    raise RetrieverFolderError(
                        f"{str(folder)!r}: the {name} index holds {len(index)} chunks, "
                        f"the store {len(chunk_ids)}"
                    )
                ids = np.asarray(index.ids if name == "bm25" else index.ids())
                if ids.dtype.kind not in "iu" or not np.array_equal(np.sort(ids), chunk_ids):
                    raise RetrieverFolderError(
                        f"{str(folder)!r}: the {name} index holds other chunk ids than the store"
                    )
        except BaseException:
            db.close()
            raise
        obj._db = db
        return obj

    def __repr__(self) -> str:
        parts = [f"documents={len(self)}", f"chunks={self.n_chunks}"]
        parts.append("bm25" if self.bm25 is not None else "no-bm25")
        if self.encoder is not None:
            parts.append(f"dense(dim={self.encoder.dim})")
        if self.reranker is not None:
            parts.append("cross-encoder")
        parts += [s.name for s in self.stages + self.rerank_stages]
        return f"Retriever({', '.join(parts)})"


def _check_manifest(m: Any, mpath: Path) -> None:
    """Checks the manifest's structure and value types, so that a corrupt or hand-edited one is a
    RetrieverFolderError here rather than a KeyError/TypeError (or a wrong result) later."""

    def bad(what: str) -> RetrieverFolderError:
        return RetrieverFolderError(f"{str(mpath)!r} is not a valid manifest: {what}")

    def is_int(v: Any, lo: int = 0, hi: int = 1 << 62) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi

    def is_num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))

    def str_or_none(v: Any) -> bool:
        return v is None or isinstance(v, str)

    if not isinstance(m, dict):
        raise bad(f"a JSON {type(m).__name__}, expected an object")
    files = m["files"]
    if not isinstance(files, dict) or STORE_FILE not in files:
        raise bad(f"'files' must be an object naming {STORE_FILE} and the index files")
    for name, info in files.items():
        parts = Path(name).parts
        if name not in (STORE_FILE, BM25_FILE, DENSE_FILE) and not (
            len(parts) >= 2 and parts[0].startswith("stage-") and ".." not in parts and "\0" not in name
        ):
            raise bad(f"file {name!r} is not one a retriever folder holds")
        if not (isinstance(info, dict) and is_int(info.get("size")) and isinstance(info.get("sha256"), str)):
            raise bad(f"files[{name!r}] must be {{'size': int, 'sha256': str}}")
    if BM25_FILE not in files and DENSE_FILE not in files:
        raise bad(f"it names neither {BM25_FILE} nor {DENSE_FILE}")
    enc = m.get("encoder")
    if enc is not None and not (
        isinstance(enc, dict)
        and {"ref", "fingerprint", "dim"} <= set(enc)
        and str_or_none(enc.get("ref"))
        and str_or_none(enc.get("fingerprint"))
        and is_int(enc.get("dim"), 1)
    ):
        raise bad("'encoder' must be null or {'ref': str|null, 'fingerprint': str|null, 'dim': int}")
    if (enc is None) != (DENSE_FILE not in files):
        raise bad(f"{DENSE_FILE} must be present exactly when an encoder is")
    rr = m.get("reranker")
    if rr is not None and not (isinstance(rr, dict) and "ref" in rr and str_or_none(rr["ref"])):
        raise bad("'reranker' must be null or {'ref': str|null, ...}")
    if not is_int(m.get("next_chunk_id")):
        raise bad(f"next_chunk_id = {m.get('next_chunk_id')!r}; expected an int in [0, 2**62)")
    for key in ("fields", "stages"):
        v = m.get(key, [])
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise bad(f"{key!r} must be a list of str")
    c = m["config"]
    if not isinstance(c, dict):
        raise bad("'config' must be an object")
    try:
        size = c["chunk_size"]
        if size is not None and not is_int(size, 1):
            raise bad(f"chunk_size = {size!r}; expected null or a positive int")
        overlap = c["chunk_overlap"]
        if not is_num(overlap):
            raise bad(f"chunk_overlap = {overlap!r}; expected a number")
        if size is not None:
            from ragfind.pipeline.chunking import _check_size

            try:
                _check_size(size, overlap)
            except (ValueError, TypeError) as exc:
                raise bad(str(exc)) from exc
        if c["contextualize"] not in (None, "default", "custom"):
            raise bad(f"contextualize = {c['contextualize']!r}; expected null, 'default' or 'custom'")
        if not (is_num(c["rrf_k"]) and c["rrf_k"] >= 0):
            raise bad(f"rrf_k = {c['rrf_k']!r}; expected a finite number >= 0")
        w = c["weights"]
        names = ["sparse", "dense"] + m.get("stages", [])
        if w is not None and not (
            isinstance(w, dict) and all(k in names and is_num(v) for k, v in w.items())
        ):
            raise bad(f"weights = {w!r}; expected stage names ({names}) -> finite numbers")
        for key, lo in (("candidates", 1), ("rerank_candidates", 1), ("cache_size", 0)):
            if not is_int(c[key], lo, 1 << 31):
                raise bad(f"{key} = {c[key]!r}; expected an int >= {lo}")
    except KeyError as exc:
        raise bad(f"'config' lacks {exc}") from exc


_STORE_SCHEMA: list = []


def _store_schema() -> list:
    """sqlite_master of a new store: a saved one must match it exactly (no foreign tables,
    columns, triggers or views, which the queries and writes here do not expect)."""
    if not _STORE_SCHEMA:
        db = Retriever._new_store()
        _STORE_SCHEMA.extend(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"))
        db.close()
    return _STORE_SCHEMA


def _decode_text(b: bytes) -> str:
    # A stored string with invalid UTF-8 reads as U+FFFD instead of failing every later query.
    return str(b, "utf-8", "replace")


def _open_store(folder: Path, next_chunk_id: int) -> sqlite3.Connection:
    """Copies the folder's SQLite store into memory and checks it: pages and indexes
    (integrity_check; a corrupt index passes quick_check and fails a later join), the exact
    schema, column types, metadata JSON objects, chunk ids below ``next_chunk_id``."""
    path = folder / STORE_FILE  # present: load() checked every file the manifest names

    def bad(what: str) -> RetrieverFolderError:
        return RetrieverFolderError(f"{str(folder)!r}: the document store {what}")

    db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    db.text_factory = _decode_text
    try:
        # A file: URI (percent-encoded, so '?' or '#' in the folder name are not parameters).
        src = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            src.backup(db)
        finally:
            src.close()
        check = db.execute("PRAGMA integrity_check").fetchall()
        if check != [("ok",)]:
            raise bad(f"is corrupt: {'; '.join(str(r[0]) for r in check[:3])}")
        if db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall() != (
            _store_schema()
        ):
            raise bad("has another schema than a ragfind retriever's")
        bad_rows = db.execute(
            "SELECT (SELECT COUNT(*) FROM documents WHERE typeof(doc_id) != 'text' OR typeof(title) != 'text'"
            " OR typeof(text) != 'text' OR typeof(metadata) != 'text' OR NOT json_valid(metadata)),"
            " (SELECT COUNT(*) FROM chunks WHERE typeof(doc_id) != 'text' OR typeof(idx) != 'integer'"
            " OR typeof(start) != 'integer' OR typeof(\"end\") != 'integer' OR typeof(n_tokens) != 'integer'"
            " OR typeof(text) != 'text' OR typeof(context) != 'text' OR id < 0 OR id >= ?"
            " OR doc_id NOT IN (SELECT doc_id FROM documents)),"
            " (SELECT COUNT(*) FROM fields WHERE typeof(name) != 'text')",
            (next_chunk_id,),
        ).fetchone()
        if any(bad_rows):
            raise bad(
                f"holds malformed rows ({bad_rows[0]} documents, {bad_rows[1]} chunks, {bad_rows[2]} fields; "
                f"a chunk id must be below next_chunk_id = {next_chunk_id} and name a stored document)"
            )
        # Valid JSON by now (json_valid above), so json_type cannot fail.
        row = db.execute(
            "SELECT metadata FROM documents WHERE json_type(metadata) != 'object' LIMIT 1"
        ).fetchone()
        if row is not None:
            raise bad(f"holds metadata {row[0][:80]!r} that is not a JSON object")
    except (sqlite3.DatabaseError, ValueError) as exc:
        db.close()
        if isinstance(exc, RetrieverFolderError):
            raise
        raise bad(f"is not a valid SQLite file of a ragfind retriever: {exc}") from exc
    except BaseException:
        db.close()
        raise
    return db


def _path_of(model: Any) -> str | None:
    path = getattr(model, "path", None)
    return os.fspath(path) if path is not None else None


def _with_score(p: Passage, score: float) -> Passage:
    return Passage(p.id, p.doc_id, p.text, p.title, p.source, score, p.start, p.end, p.metadata, p.context)


def _rrf(lists: list, k: float, weights: list | None, top: int) -> tuple:
    from ragfind import _core

    nonempty = [(ids, w) for (ids, _), w in zip(lists, weights or [1.0] * len(lists)) if len(ids)]
    if not nonempty:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    return _core.rrf([ids for ids, _ in nonempty], k, [w for _, w in nonempty] if weights else None, top)
