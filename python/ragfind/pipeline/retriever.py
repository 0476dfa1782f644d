"""``ragfind.Retriever``: the retrieval pipeline in one object, an orchestrator over stages.

Documents go in (chunked, optionally with a contextual-retrieval prefix), questions come out as
passages:

- a SQLite document store (:mod:`.store`) holds documents, chunk text, offsets and metadata;
  a metadata filter is evaluated by the native metadata index (:mod:`.filters`, kept up to
  date on every write) into an :class:`ragfind.IdFilter` of chunk ids that every stage hands
  to its index;
- first-stage retrievers (:class:`RetrievalStage`: BM25 and dense by default, built from the
  ``bm25=`` / ``encoder=`` arguments, plus any given, e.g. SPLADE) run concurrently on a
  thread pool (their indexes release the GIL) and return ranked lists;
- reciprocal rank fusion (C++) merges every list, from every phrasing of the question when a
  list of phrasings is given (RAG-Fusion);
- re-rankers (:class:`RerankStage`, e.g. late interaction) and an optional
  :class:`ragfind.CrossEncoder` reorder the head;
- every passage carries each stage's rank and score (:class:`Passage` ``ranks``/``scores``);
- LRU caches of query embeddings and of results answer repeated questions in microseconds;
  the results cache is invalidated whenever the store changes.

Everything is saved as one folder (``save`` / ``Retriever.load``, :mod:`.saved`), atomically.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any, Callable, NamedTuple

import numpy as np

from ragfind import _core
from ragfind.errors import check_k
from ragfind.fusion import fit_convex_weight
from ragfind.models import load_model
from ragfind.models.cross_encoder import CrossEncoder
from ragfind.models.static import StaticEncoder
from ragfind.models.static_fit import fit_query_encoder
from ragfind.pipeline.cache import LRUCache, freeze
from ragfind.pipeline.chunk_ids import ChunkIdPolicy, sequential_chunk_ids
from ragfind.pipeline.chunking import Chunk, _chunk_checked, _whole_checked, default_context, load_tokenizer
from ragfind.pipeline.documents import check_documents, check_field_kinds
from ragfind.pipeline.filters import BUILTIN_FIELDS, MetadataFilters, check_filters
from ragfind.pipeline.highlights import LazyHighlighter
from ragfind.pipeline.results import (
    Passage,
    SearchResult,
    metadata_and_source,
    passage_from_fields,
    rank_views,
    result_from_fields,
    set_highlights,
)
from ragfind.pipeline.runner import LocalStages, StageRunner
from ragfind.pipeline.saved import FORMAT_VERSION, RetrieverFolderError, load_folder, save_folder
from ragfind.pipeline.stages import RerankStage, RetrievalStage
from ragfind.pipeline.stages.bm25 import BM25Stage
from ragfind.pipeline.stages.dense import DenseStage, check_dense_options
from ragfind.pipeline.store import DocumentStore
from ragfind.sparse.analyzer import Analyzer
from ragfind.sparse.bm25 import BM25Index
from ragfind.sparse.feedback import RM3
from ragfind.sparse.fields import BM25FIndex

__all__ = [
    "Retriever",
    "Passage",
    "SearchResult",
    "RetrievalStage",
    "RerankStage",
    "RetrieverFolderError",
    "FORMAT_VERSION",
]

#: The keys a document may have; anything else is a ValueError (a typo would drop data).
COLLAPSE = (None, "document")
#: A search's k up to this is taken as given; a larger one is clamped to the chunks there are
#: (counting them costs a store query, or a call to every shard).
_K_COUNTED = 1000
_EMPTY: Mapping = MappingProxyType({})
#: Adds of at least this many documents show progress bars unless ``show_progress=False``.
PROGRESS_DOCUMENTS = 10_000


_now = time.perf_counter  # the builtin itself: no Python frame per reading


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


def _path_of(model: Any) -> str | None:
    path = getattr(model, "path", None)
    return os.fspath(path) if path is not None else None


class RankedList(NamedTuple):
    """A results-cache entry of a search that was one ranked list: its ids, fused and stage
    scores, and stage, from which the runner builds the passages again (or writes their rows)
    while the documents are as they were (the cache key holds their generation). Far smaller
    than the passages, whose texts would otherwise stay alive in the cache."""

    ids: np.ndarray
    fused: list
    scores: np.ndarray
    stage: str


FUSIONS = ("rrf", "convex")
#: The fusion and weights of a Retriever with a static query encoder unless given others: the
#: static query list is weaker than BM25's, and convex fusion lets its scores add recall where
#: they are clear without its ranks outvoting BM25's, as RRF's would (bench/static.md).
STATIC_QUERY_FUSION = ("convex", {"bm25": 0.7, "dense": 0.3})


class Retriever:
    """Retrieval over a document store: first stages (BM25 + dense + more), fused, re-ranked, cached.

    Args:
        encoder: an :class:`ragfind.Encoder`, a model folder / default model name (loaded with
            :func:`ragfind.load_model`), or None: the dense stage (:class:`DenseStage`) is
            built over it.
        reranker: an optional :class:`ragfind.CrossEncoder` (or a folder / name) re-scoring the
            best ``rerank_candidates`` fused passages.
        chunk_size: tokens per chunk; ``"auto"`` (default) picks the encoder's window minus room
            for the context prefix, at most 384; ``None`` indexes every document whole.
        chunk_overlap: overlap between chunks (fraction of ``chunk_size`` or tokens).
        contextualize: True (default) indexes each chunk with :func:`ragfind.default_context`
            (title and heading path), False for none, or a callable ``(document, chunk) -> str``
            (an LLM in production). The context is indexed, never shown as passage text.
        tokenizer: the chunking tokenizer (default: the encoder's, else MiniLM's).
        bm25: a fresh :class:`ragfind.BM25Index` for the BM25 stage (:class:`BM25Stage`; default
            ``BM25Index()``: Lucene BM25, k1=1.2, b=0.75, English stemming), or None for none.
        feedback: None (default) or a :class:`ragfind.RM3`: the BM25 stage's searches are
            expanded by pseudo-relevance feedback (a first BM25 search, the feedback chunks'
            terms read from the store, a second search). Saved and reloaded with the retriever.
            Not with a BM25F index or a ``stage_runner``.
        dense_kind: ``"exact"`` (SIMD brute force, default), ``"hnsw"`` or ``"ivf"`` (k-means
            lists, automatic nlist retrained as the store grows; stores under 78 chunks
            use one list, i.e. an exact scan).
        dense_options: more :class:`ragfind.DenseIndex` arguments for the dense index, e.g.
            ``{"nprobe": 32}`` (ivf), ``{"ef": 128, "M": 32}`` (hnsw), ``{"dtype": "f16"}``;
            saved with the index. Not ``dim``, ``metric``, ``kind`` or ``fingerprint``.
        stages: more :class:`RetrievalStage` objects whose lists join the fusion (after the
            BM25 and dense stages), and :class:`RerankStage` objects applied after fusion
            (before the cross-encoder).
        rrf_k: the RRF constant.
        fusion: ``"rrf"`` (reciprocal rank fusion, the default) or ``"convex"``: each list's
            scores min-max normalised per query, then summed with ``weights`` (CombSUM,
            :func:`ragfind.fuse_scores`), so a weak list's low scores count for little where
            RRF would give its ranks full say (the default with a static ``query_encoder``).
        weights: optional RRF weights by stage name, e.g. ``{"bm25": 1.0, "dense": 1.5}``
            (default: all 1; with a static ``query_encoder`` and no ``fusion`` given,
            ``STATIC_QUERY_FUSION``: convex fusion with BM25 0.7, dense 0.3).
        query_encoder: embeds queries instead of ``encoder`` (documents are still embedded by
            ``encoder``): ``"static"`` fits a static encoder into ``encoder``'s space on the
            indexed chunks (and pseudo-queries cut from them) at each :meth:`add_documents`,
            starting from the previous fit (:func:`ragfind.fit_query_encoder`): a query then
            costs a token lookup instead of a transformer pass. Or a fitted
            :class:`ragfind.StaticEncoder` (or its folder) whose ``target_fingerprint`` is
            ``encoder``'s. Saved in the retriever's folder and reloaded with it.
        candidates: how many results each first-stage retriever returns per phrasing.
        rerank_candidates: how many fused passages the re-rankers see.
        cache_size: entries in each of the embedding and result caches (0 disables them). The
            compiled metadata filters are kept apart from it (the last 256, patched after a
            write), so a retriever without a results cache still evaluates a filter once.
        threads: worker threads for concurrent stages (default 2).
        show_progress: tqdm progress bars during :meth:`add_documents` (chunking, encoding):
            None (default) for adds of at least 10,000 documents, True always, False never.
        stage_runner: how the stages run (:class:`ragfind.pipeline.runner.StageRunner`):
            filters compiled, first-stage lists searched, re-rankers called, passages fetched.
            Default: :class:`~ragfind.pipeline.runner.LocalStages` over this retriever's
            store, with ``threads`` workers; a sharded retriever passes one that asks its shards.
        chunk_id_policy: how new chunks get ids (:mod:`ragfind.pipeline.chunk_ids`); default:
            sequential from the store's next id.

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
        feedback: RM3 | None = None,
        dense_kind: str = "exact",
        dense_options: Mapping[str, Any] | None = None,
        stages: Sequence[Any] = (),
        rrf_k: float = 60,
        weights: Mapping[str, float] | None = None,
        fusion: str | None = None,
        candidates: int = 100,
        rerank_candidates: int = 30,
        cache_size: int = 1024,
        threads: int = 2,
        show_progress: bool | None = None,
        stage_runner: StageRunner | None = None,
        chunk_id_policy: ChunkIdPolicy | None = None,
        query_encoder: Any = None,
    ) -> None:
        enc = self._load_encoder(encoder)
        encoder_ref = encoder if isinstance(encoder, (str, os.PathLike)) or encoder is None else _path_of(enc)
        if isinstance(encoder_ref, os.PathLike):
            encoder_ref = os.fspath(encoder_ref)
        rr = self._load_reranker(reranker)
        reranker_ref = (
            reranker
            if isinstance(reranker, (str, os.PathLike)) or reranker is None
            else str(getattr(rr, "path", "")) or None
        )
        if isinstance(reranker_ref, os.PathLike):
            reranker_ref = os.fspath(reranker_ref)
        if isinstance(bm25, str) and bm25 == "default":
            bm25 = BM25Index()
        if bm25 is not None and not isinstance(bm25, (BM25Index, BM25FIndex)):
            raise TypeError(
                f"bm25 is a {type(bm25).__name__}; expected a ragfind.BM25Index, 'default' or None"
            )
        if isinstance(bm25, BM25FIndex) and not set(bm25.fields) <= {"title", "text"}:
            raise ValueError(
                f"bm25 fields {list(bm25.fields)}: a Retriever indexes the fields 'title' and 'text'"
            )
        if bm25 is not None and len(bm25) > 0:
            raise ValueError(
                "bm25 already holds documents; pass an empty BM25Index (the Retriever owns its ids)"
            )
        if dense_kind not in ("exact", "hnsw", "ivf"):
            raise ValueError(f"dense_kind = {dense_kind!r}; expected 'exact', 'hnsw' or 'ivf'")
        dense_options = check_dense_options(dense_options)
        if contextualize is True:
            contextualize = default_context
        fit_queries = isinstance(query_encoder, str) and query_encoder == "static"
        if query_encoder is not None and enc is None:
            raise ValueError("query_encoder needs an encoder (the documents' model)")
        if fit_queries:
            query_encoder = None
        elif isinstance(query_encoder, (str, os.PathLike)):
            query_encoder = StaticEncoder(query_encoder)
        if (
            fusion is None
            and weights is None
            and (fit_queries or query_encoder is not None)
            and bm25 is not None
        ):
            fusion, weights = STATIC_QUERY_FUSION[0], dict(STATIC_QUERY_FUSION[1])
        if contextualize is not False and contextualize is not None and not callable(contextualize):
            raise TypeError(
                f"contextualize is a {type(contextualize).__name__}; expected a bool or a callable"
            )
        self._setup(
            encoder=enc,
            encoder_ref=encoder_ref,
            reranker=rr,
            reranker_ref=reranker_ref,
            bm25=BM25Stage(bm25) if bm25 is not None else None,
            dense_index=None,
            dense_kind=dense_kind,
            dense_options=dense_options,
            stages=stages,
            chunk_size=self._resolve_chunk_size(enc, chunk_size, contextualize),
            chunk_overlap=chunk_overlap,
            contextualize=contextualize or None,
            tokenizer=tokenizer if tokenizer is not None else (enc.tokenizer if enc is not None else None),
            rrf_k=rrf_k,
            weights=weights,
            fusion=fusion or "rrf",
            candidates=candidates,
            rerank_candidates=rerank_candidates,
            cache_size=cache_size,
            threads=threads,
            show_progress=show_progress,
            store=DocumentStore(),
            stage_runner=stage_runner,
            chunk_id_policy=chunk_id_policy,
            query_encoder=query_encoder,
            fit_queries=fit_queries,
            feedback=feedback,
        )

    def _setup(
        self,
        *,
        encoder: Any,
        encoder_ref: Any,
        reranker: Any,
        reranker_ref: Any,
        bm25: BM25Stage | None,
        dense_index: Any,
        dense_kind: str,
        stages: Sequence[Any],
        chunk_size: int | None,
        chunk_overlap: float | int,
        contextualize: Any,
        tokenizer: Any,
        rrf_k: float,
        weights: Mapping[str, float] | None,
        candidates: int,
        rerank_candidates: int,
        cache_size: int,
        threads: int,
        show_progress: bool | None,
        store: DocumentStore,
        metadata: MetadataFilters | None = None,
        dense_options: Mapping[str, Any] | None = None,
        stage_runner: StageRunner | None = None,
        chunk_id_policy: ChunkIdPolicy | None = None,
        query_encoder: Any = None,
        fit_queries: bool = False,
        fusion: str = "rrf",
        feedback: RM3 | None = None,
    ) -> None:
        """Everything ``__init__`` and ``load`` share: the stage lists, caches, store, runner."""
        for s in stages:
            if not isinstance(s, (RetrievalStage, RerankStage)):
                raise TypeError(f"stage {s!r} implements neither RetrievalStage nor RerankStage")
        self.encoder = encoder
        self.encoder_ref = encoder_ref
        self.reranker = reranker
        self.reranker_ref = reranker_ref
        self.embedding_cache = LRUCache(cache_size)
        self.result_cache = LRUCache(cache_size)
        self._saved_cache_size = cache_size  # what save() records; set_cache_size leaves it
        defaults: list = [bm25] if bm25 is not None else []
        if encoder is not None:
            defaults.append(
                DenseStage(
                    encoder,
                    dense_index,
                    kind=dense_kind,
                    name="dense",
                    cache=self.embedding_cache,
                    options=dense_options,
                    query_encoder=query_encoder,
                )
            )
        #: Whether each add_documents refits the static query encoder (``query_encoder="static"``).
        self.fit_queries = bool(fit_queries) and encoder is not None
        #: First-stage retrievers, in fusion order.
        self.first_stages: list = defaults + [s for s in stages if isinstance(s, RetrievalStage)]
        #: Re-rankers of the fused head, in order (the cross-encoder runs after them).
        self.rerank_stages: list = [
            s for s in stages if isinstance(s, RerankStage) and not isinstance(s, RetrievalStage)
        ]
        if not self.first_stages:
            raise ValueError("a Retriever needs at least one of bm25 and encoder (or a RetrievalStage)")
        names = [s.name for s in self.first_stages]
        if len(set(names)) != len(names):
            raise ValueError(f"first-stage names must be unique; got {names}")
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.contextualize = contextualize
        # Resolved once (a copy without truncation), not on every add_documents call.
        self.tokenizer = load_tokenizer(tokenizer)
        self.rrf_k = float(rrf_k)
        if fusion not in FUSIONS:
            raise ValueError(f"fusion = {fusion!r}; expected one of {FUSIONS}")
        self.fusion = fusion
        self.weights = dict(weights or {})
        unknown = set(self.weights) - set(names)
        if unknown:
            hint = " ('sparse' is now 'bm25')" if "sparse" in unknown and "bm25" in names else ""
            raise ValueError(f"weights name unknown stages {sorted(unknown)}; expected some of {names}{hint}")
        self.candidates = _positive_int(candidates, "candidates")
        self.rerank_candidates = _positive_int(rerank_candidates, "rerank_candidates")
        self.store = store
        if metadata is None:
            metadata = MetadataFilters.from_rows(store.chunk_rows())
        #: The native metadata index filters are evaluated on (kept up to date by every write).
        self.metadata = metadata
        threads = _positive_int(threads, "threads")
        if stage_runner is not None and not isinstance(stage_runner, StageRunner):
            raise TypeError(
                f"stage_runner is a {type(stage_runner).__name__}; expected a "
                "ragfind.pipeline.runner.StageRunner (or None)"
            )
        if chunk_id_policy is not None and not callable(chunk_id_policy):
            raise TypeError(
                f"chunk_id_policy is a {type(chunk_id_policy).__name__}; expected a callable "
                "(store, chunks) -> ids (or None)"
            )
        #: Runs the stages (here by default; a sharded retriever's runs them on its shards).
        self.stage_runner: StageRunner = (
            stage_runner if stage_runner is not None else LocalStages(store, metadata, threads=threads)
        )
        if feedback is not None:
            if bm25 is None:
                raise ValueError("feedback: needs the BM25 stage (bm25=None was given)")
            if stage_runner is not None:
                raise ValueError("feedback: not supported with a stage_runner (the stages run elsewhere)")
            bm25.set_feedback(feedback, self._feedback_texts)
        #: Gives new chunks their ids.
        self.chunk_id_policy: ChunkIdPolicy = chunk_id_policy or sequential_chunk_ids
        self.show_progress = show_progress
        self._write_lock = threading.RLock()
        self._rrf_table: tuple | None = None  # rrf_k, weight, single-list RRF scores, decreasing

    # ------------------------------------------------------------------ construction helpers

    @staticmethod
    def _load_encoder(encoder: Any):
        if encoder is None:
            return None
        if isinstance(encoder, (str, os.PathLike)):
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
            return CrossEncoder(reranker)
        if not hasattr(reranker, "rank"):
            raise TypeError(
                f"reranker is a {type(reranker).__name__} without .rank; expected a ragfind.CrossEncoder"
            )
        return reranker

    @staticmethod
    def _resolve_chunk_size(encoder: Any, chunk_size: Any, contextualize: Any) -> int | None:
        if chunk_size is None:
            return None
        if isinstance(chunk_size, str) and chunk_size == "auto":
            window = getattr(encoder, "max_length", 512) if encoder is not None else 512
            room = 2 + (48 if contextualize else 0)  # [CLS]/[SEP] and the context prefix
            return max(32, min(384, int(window) - room))
        return _positive_int(chunk_size, "chunk_size")

    def close(self) -> None:
        """Stops the worker threads (the object stays usable; they restart on demand)."""
        self.stage_runner.close()

    # ------------------------------------------------------------------ stages

    def stage(self, name: str) -> Any:
        """The first-stage or re-rank stage called ``name``; KeyError when none is."""
        for s in self.first_stages + self.rerank_stages:
            if s.name == name:
                return s
        raise KeyError(
            f"no stage {name!r}; stages: {[s.name for s in self.first_stages + self.rerank_stages]}"
        )

    def _first_of(self, kind: str) -> Any:
        for s in self.first_stages:
            if getattr(s, "kind", None) == kind:
                return s
        return None

    @property
    def bm25(self) -> Any:
        """The :class:`ragfind.BM25Index` of the BM25 stage, or None."""
        s = self._first_of("bm25")
        return s.index if s is not None else None

    @property
    def dense(self) -> Any:
        """The :class:`ragfind.DenseIndex` of the dense stage, or None."""
        s = self._first_of("dense")
        return s.index if s is not None else None

    # ------------------------------------------------------------------ documents

    def __len__(self) -> int:
        """Number of documents in the store."""
        return self.store.count_documents()

    @property
    def n_chunks(self) -> int:
        """Number of chunks (passages) indexed (wherever the stage runner searches)."""
        return self.stage_runner.count_chunks()

    @property
    def fields(self) -> list:
        """Fields filters may use: ``doc_id``, ``title`` and every metadata key seen."""
        return sorted(set(BUILTIN_FIELDS) | self.store.fields)

    def check_documents(self, docs: Iterable[Mapping[str, Any]]) -> list:
        """The documents of a write as :meth:`add_documents` would store them, checked
        (:func:`ragfind.pipeline.documents.check_documents`, with the kinds of value each
        metadata field already holds); raises what :meth:`add_documents` raises for them."""
        return check_documents(docs, self.field_kinds)

    def field_kinds(self, field: str) -> int:
        """The kinds of value metadata ``field`` holds (bits of ``MetadataIndex.kinds``)."""
        return self.metadata.kinds("m:" + field) | self.store.kinds.get(field, 0)

    def add_documents(
        self,
        documents: Iterable[Mapping[str, Any]],
        *,
        embeddings: np.ndarray | None = None,
        batch_size: int = 32,
    ) -> int:
        """Chunks, embeds and indexes documents; all or nothing.

        Args:
            documents: dicts with ``id`` (a non-empty str, or an int, stored as ``str(id)``) and
                ``text`` (str), and optionally ``title`` (str) and ``metadata`` (a dict with str
                keys whose values JSON can hold: None, bool, str, finite numbers, lists and
                dicts of those); no other keys. Each metadata field keeps the kind of its first
                value (str, number, bool, list/object; null fits any), so its filters stay
                right (:mod:`ragfind.pipeline.documents`).
            embeddings: precomputed chunk embeddings, one row per chunk in order (float,
                (n_chunks, dim)); typically with ``chunk_size=None`` (one chunk per document).
            batch_size: encoder batch size.

        Returns:
            The number of chunks added.

        Raises:
            ValueError: an id already in the store or repeated in the batch, a document without
                ``id``/``text`` or with another key, NaN or an infinity in the metadata,
                metadata nested too deep, embeddings of the wrong shape.
            TypeError: a malformed document, an id neither str nor int, a metadata value JSON
                cannot hold or of another kind than its field's.
            The document errors are :class:`ragfind.pipeline.documents.DocumentError` errors
            naming the document and the field. Nothing is added when an error is raised.
        """
        # The kinds are checked under the write lock below, once.
        docs = check_documents(documents, check_kinds=False)
        if not docs:
            return 0
        chunks = self._chunk(docs)
        meta_json = [
            json.dumps(d["metadata"], sort_keys=True, ensure_ascii=False, allow_nan=False)
            if d.get("metadata")
            else "{}"
            for d in docs
        ]
        meta_of = {d["id"]: (d.get("title") or "", d.get("metadata") or {}) for d in docs}
        takers = [s for s in self.first_stages + self.rerank_stages if hasattr(s, "prepare")]
        if embeddings is not None and not takers:
            raise ValueError("embeddings were given but this retriever has no encoder")
        with self._write_lock:
            # Under the lock: a write meanwhile may have given a field its kind.
            batch_kinds = check_field_kinds(docs, self.field_kinds)
            store = self.store
            ids_in = [d["id"] for d in docs]
            existing = store.existing(ids_in)
            if existing:
                raise ValueError(
                    f"document id {existing[0]!r} is already in the store "
                    f"({len(existing)} of the batch are); "
                    "delete_documents() it first to replace it"
                )
            n_chunks = len(chunks)
            chunk_ids = np.asarray(self.chunk_id_policy(store, chunks), np.int64)
            indexed = [c.indexed_text() for c in chunks]

            # The expensive, side-effect-free part (encoding) runs on its own thread while the
            # store rows and the other stages are written (it releases the GIL); a failure on
            # either side undoes everything. Given embeddings are only checked, first.
            def prepare_all() -> dict:
                return {
                    id(s): s.prepare(
                        indexed,
                        embeddings=embeddings,
                        batch_size=batch_size,
                        show_progress=self._progress(len(docs)),
                    )
                    for s in takers
                }

            prepared: dict = {}
            encoding = None
            if n_chunks and takers:
                if embeddings is None:
                    encoding = ThreadPoolExecutor(1, thread_name_prefix="ragfind-encode")
                    future = encoding.submit(prepare_all)
                else:
                    prepared = prepare_all()
            done: list = []
            indexed_meta = False
            fitted = None
            try:
                new_fields = {k for d in docs for k in (d.get("metadata") or {})}
                store.begin_insert(
                    [(i, d.get("title") or "", d["text"], m) for i, d, m in zip(ids_in, docs, meta_json)],
                    [
                        (int(cid), c.doc_id, c.index, c.start, c.end, c.n_tokens, c.text, c.context)
                        for cid, c in zip(chunk_ids, chunks)
                    ],
                    new_fields - store.fields,
                )
                try:
                    if n_chunks:
                        per_chunk = [meta_of[c.doc_id] for c in chunks]
                        self.metadata.add(
                            chunk_ids,
                            [c.doc_id for c in chunks],
                            [t for t, _ in per_chunk],
                            [m for _, m in per_chunk],
                        )
                        indexed_meta = True
                        for s in self.first_stages + [s for s in self.rerank_stages if hasattr(s, "add")]:
                            if any(s is t for t in takers):
                                if encoding is not None and not prepared:
                                    prepared = future.result()
                                s.add(chunk_ids, indexed, prepared[id(s)])
                            elif getattr(s, "kind", None) == "bm25" and s.fields:
                                s.add(chunk_ids, s.field_docs(chunks, indexed))
                            else:
                                s.add(chunk_ids, indexed)
                            done.append(s)
                        if self.fit_queries:
                            # Fitted before the commit (a failure undoes the add), used after it.
                            dense = self._first_of("dense")
                            fitted = self._fit_query_encoder(dense, indexed, prepared[id(dense)], len(docs))
                    store.commit()
                    if fitted is not None:
                        dense.set_query_encoder(fitted)
                except BaseException:
                    if indexed_meta:
                        self.metadata.remove(chunk_ids)
                    for s in done:
                        try:
                            s.delete(chunk_ids)
                        except Exception:
                            pass
                    store.rollback()
                    # Searches meanwhile may have seen (and cached) the rows just undone.
                    self._store_changed()
                    raise
            finally:
                if encoding is not None:
                    encoding.shutdown(wait=True)
            store.fields |= new_fields
            store.add_kinds(batch_kinds)
            if n_chunks:
                store.next_chunk_id = max(store.next_chunk_id, int(chunk_ids.max()) + 1)
            self._store_changed()
            return n_chunks

    def _fit_query_encoder(self, dense: Any, texts: list, vectors: np.ndarray, n_docs: int) -> Any:
        """The static query encoder fitted on newly added chunks, pulled toward the previous
        fit (or the encoder's distilled token table)."""
        return fit_query_encoder(
            texts,
            vectors,
            self.encoder,
            prior=dense.query_encoder,
            show_progress=self._progress(n_docs),
        )

    @property
    def query_encoder(self) -> Any:
        """The dense stage's query encoder when it is not ``encoder`` (e.g. a fitted
        :class:`ragfind.StaticEncoder`), else None."""
        dense = self._first_of("dense")
        return None if dense is None else dense.query_encoder

    def chunks(self, documents: Iterable[Mapping[str, Any]]) -> list:
        """The chunks (:class:`ragfind.Chunk`) :meth:`add_documents` would index for
        ``documents``, in order (e.g. to split precomputed embeddings by document); the documents
        are checked as it checks them."""
        return self._chunk(self.check_documents(documents))

    def _chunk(self, docs: list) -> list:
        """The chunks of checked documents, in order, as :meth:`add_documents` indexes them."""
        if self.chunk_size is None and self.encoder is None:
            # No token budget to enforce and no encoder window: no tokenizer pass.
            return _whole_checked(docs, self.contextualize)
        return _chunk_checked(
            docs,
            size=self.chunk_size if self.chunk_size is not None else 1 << 30,  # None: one chunk each
            overlap=self.chunk_overlap if self.chunk_size else 0,
            tokenizer=self.tokenizer,
            contextualize=self.contextualize,
            show_progress=self._progress(len(docs)),
        )

    def _progress(self, n_documents: int) -> bool:
        if self.show_progress is None:
            return n_documents >= PROGRESS_DOCUMENTS
        return bool(self.show_progress)

    def delete_documents(self, doc_ids: Iterable[Any]) -> int:
        """Removes documents and their chunks; returns the number of chunks removed.

        Raises:
            KeyError: an id is not in the store (nothing is removed).
        """
        ids = [str(d) for d in ([doc_ids] if isinstance(doc_ids, (str, int)) else doc_ids)]
        with self._write_lock:
            chunk_ids = self.store.chunks_of(ids)
            if len(chunk_ids):
                for s in self.first_stages + [s for s in self.rerank_stages if hasattr(s, "delete")]:
                    s.delete(chunk_ids)
                self.metadata.remove(chunk_ids)
            self.store.remove(ids)
            self._store_changed()
            return len(chunk_ids)

    def get_document(self, doc_id: Any) -> dict:
        """The stored document ``{"id", "title", "text", "metadata"}``; KeyError when absent."""
        return self.store.get_document(doc_id)

    def _store_changed(self) -> None:
        self.store.changed()
        self.result_cache.clear()
        # The runner's compiled filters stay: each is patched on its next use (filters.py).

    # ------------------------------------------------------------------ search

    def embed_query(self, query: str) -> np.ndarray:
        """The (cached) query embedding of the dense stage; ValueError without one."""
        s = self._first_of("dense")
        if s is None:
            raise ValueError("this retriever has no encoder")
        return s.embed(query)

    def search(
        self,
        query: str | Sequence[str],
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        *,
        rerank: bool = True,
        use_cache: bool = True,
        collapse: str | None = None,
        stages: Sequence[str] | None = None,
        partial: bool = False,
    ) -> SearchResult:
        """The ``k`` best passages for a question (or several phrasings of it).

        Args:
            query: the question, or a list of phrasings of it (RAG-Fusion): every phrasing is
                searched by every stage and all the lists are fused.
            k: passages to return, an int >= 1 (a ``k`` past the number of chunks is taken as
                that number, as by every index).
            filters: metadata conditions, all of which must hold: ``{"lang": "en"}``,
                ``{"year": {"$gte": 2020}}``, ``{"source": ["a", "b"]}`` (any of),
                field operators ``$eq $ne $in $nin $gt $gte $lt $lte $exists $not`` and
                ``{"$and" | "$or": [filter, ...]}``, ``{"$not": filter}`` nested up to 32 levels
                (Mongo/Chroma style; see :mod:`ragfind.pipeline.filters`); fields are
                ``doc_id``, ``title`` and the documents' metadata keys. Every stage searches
                only the chunks allowed (inside its index), so ``k`` results come back
                whenever ``k`` allowed chunks match.
            rerank: apply the configured re-rankers (rerank stages, cross-encoder).
            use_cache: consult and fill the results cache.
            collapse: ``"document"``: at most one passage per document (its best-fused chunk,
                re-ranked afterwards), still ``k`` passages when ``k`` documents match.
            stages: names of the first stages to run (default: all), e.g. ``["bm25"]``.
            partial: when the stage runner cannot reach part of the collection (a shard),
                answer from the rest and name the parts left out in ``missing`` instead of
                raising. Such a result is never cached. A local retriever always answers whole.

        Returns:
            A :class:`SearchResult` (a sequence of :class:`Passage`, with per-stage timings).

        Raises:
            ValueError: blank query, ``k < 1``, a filter on an unknown field or with an unknown
                or malformed operator, an unknown ``collapse`` or stage name. TypeError: a query
                that is not str / list of str, a ``k`` that is not an int, a filter value of
                another type than the field's.
        """
        t0 = _now()
        # The common case (one non-blank str, an int k, no filter, all stages) checked inline.
        queries = (query,) if type(query) is str and not query.isspace() and query else _check_queries(query)
        if type(k) is not int or k < 1 or k > _K_COUNTED:
            # Past a thousand, k is clamped to the chunks there are: what every stage would
            # return anyway, and what fusion and the RRF table are then sized by.
            k = check_k(k, self.n_chunks)
        if filters is not None:
            check_filters(filters)
        if collapse is not None and collapse not in COLLAPSE:
            raise ValueError(f"collapse = {collapse!r}; expected None or 'document'")
        run = self.first_stages if stages is None else self._select_stages(stages)
        key = self._cache_key(queries, k, filters, rerank, collapse, run) if use_cache else None
        if key is not None:
            hit = self.result_cache.get(key)
            if hit is not None:
                if type(hit) is RankedList:
                    hl = LazyHighlighter(queries, self._analyzer())
                    hit = self.stage_runner.passages(hit.ids, hit.fused, hit.scores, hit.stage, hl, hl.texts)
                dt = _now() - t0
                return result_from_fields(hit, {"cache": dt, "total": dt}, True, queries, (), ())
        runner = self.stage_runner
        generation = key[0] if key is not None else None  # only a cached result needs it
        if filters:
            t_filter = _now()
            flt = runner.compile_filters(filters)
            timings: dict = {"filter": _now() - t_filter}
        else:  # every runner compiles no filter (None or {}) to None
            flt, timings = None, {}
        rerankers = bool(rerank) and (self.reranker is not None or bool(self.rerank_stages))
        head = max(k, self.rerank_candidates) if rerankers else k
        depth = max(self.candidates, head)
        missing: set = set()
        if (
            len(run) == 1
            and len(queries) == 1
            and collapse is None
            and getattr(run[0], "kind", None) == "bm25"
        ):
            # One exact ranked list: its fused top `head` is its own top `head`, in its order.
            depth = head
            ranked = self._ranked(run)
            fused = None if ranked is None or rerankers else self._rrf_of_one(run[0].name, head)
            if fused is not None:
                # ... and a runner that builds its passages from its own store.
                ids, scores = ranked(run[0], queries[0], head, flt, timings)
                t = _now()
                hl = LazyHighlighter(queries, self._analyzer())
                passages = runner.passages(ids, fused, scores, run[0].name, hl, hl.texts)
                timings["store"] = _now() - t
                timings["fusion"] = 0.0  # the list's own order: nothing to fuse
                timings["total"] = _now() - t0
                return self._answered(
                    key, generation, result_from_fields(passages, timings, False, queries, (), ())
                )
        build = getattr(runner, "passages", None) if collapse is None and not rerankers else None
        while True:
            found = runner.first_stage(run, queries, depth, flt, timings, partial=partial)
            lists, names, concurrent = found.lists, found.names, found.concurrent
            if found.missing:
                missing.update(found.missing)
            t = _now()
            one = self._one_list(lists, names, head) if build is not None else None
            if one is not None:
                # One ranked list and a runner that builds passages from its own store: the
                # passages come straight from the stored columns, in the list's order.
                t1 = _now()
                highlighter = LazyHighlighter(queries, self._analyzer())
                passages = build(one[0], one[1], lists[0][1], names[0], highlighter, highlighter.texts)
                t2 = _now()
                timings["fusion"] = t1 - t
                timings["store"] = t2 - t1
                timings["total"] = t2 - t0
                result = result_from_fields(
                    passages, timings, False, queries, concurrent, tuple(sorted(missing)) if missing else ()
                )
                return self._answered(key, generation, result)
            ids, fused = self._fuse(lists, names, None if collapse else head)
            timings["fusion"] = _now() - t
            t = _now()
            rows, left_out = runner.fetch(ids, partial=partial)
            missing.update(left_out)
            timings["store"] = _now() - t
            order = [(i, s) for i, s in zip(ids.tolist(), fused.tolist()) if i in rows]
            if collapse == "document":
                seen: set = set()
                best = []
                for i, s in order:
                    if rows[i][1] not in seen:
                        seen.add(rows[i][1])
                        best.append((i, s))
                order = best
                # A document may fill a whole list with its chunks: look deeper until `head`
                # documents are found or every stage ran out.
                if (
                    len(order) < head
                    and any(len(ids_) >= depth for ids_, _ in lists)
                    and depth < self.n_chunks
                ):
                    depth *= 4
                    continue
            break
        order = order[:head]
        passages = self._passages(order, rows, lists, names)
        if rerankers and passages:
            t = _now()
            passages = self._rerank(queries[0], passages, timings)
            timings["rerank"] = _now() - t
        passages = tuple(self._highlighted(passages[:k], queries))
        timings["total"] = _now() - t0
        result = result_from_fields(passages, timings, False, queries, concurrent, tuple(sorted(missing)))
        return self._answered(key, generation, result)

    def _answered(self, key: Any, generation: Any, result: SearchResult) -> SearchResult:
        """``result``, cached under ``key`` (None: not cached) when it is whole and the documents
        did not change since ``generation`` was read, before the search."""
        if not result.missing:
            # The passages alone: a tuple of untracked objects, which the cycle collector stops
            # walking after one look (a SearchResult would stay tracked while cached).
            self._keep(key, generation, result.passages)
        return result

    def _keep(self, key: Any, generation: Any, entry: Any) -> None:
        """Caches ``entry`` under ``key`` (None: not cached) when the documents did not change
        since ``generation`` was read, before the search."""
        if key is not None and generation == self.stage_runner.generation:
            self.result_cache.put(key, entry)

    def _cache_key(self, queries: tuple, k: int, filters: Any, rerank: Any, collapse: Any, run: list) -> Any:
        """The results cache's key of a search (None: not cached: no cache, or a filter value
        that cannot be hashed)."""
        if not self.result_cache.max_entries:
            return None
        try:
            return (
                self.stage_runner.generation,
                queries,
                k,
                freeze(dict(filters)) if filters else None,
                bool(rerank),
                collapse,
                tuple([s.name for s in run]),
            )
        except TypeError:
            return None

    def _ranked(self, run: list) -> Any:
        """The runner's ``ranked_list`` when a search of the stages ``run`` is one exact ranked
        list whose passages the runner builds from its own store (one BM25 stage); else None."""
        runner = self.stage_runner
        if (
            len(run) != 1
            or getattr(run[0], "kind", None) != "bm25"
            or getattr(runner, "passages", None) is None
        ):
            return None
        return getattr(runner, "ranked_list", None)

    def search_rows_json(self, query: str, k: int = 10) -> tuple | None:
        """:meth:`search` ``(query, k)``'s passages as the JSON text of their result rows, as
        ``ragfind serve`` answers them (``doc_id``, ``chunk_id``, ``title``, ``text``,
        ``score``, ``ranks``, ``scores``, ``metadata``, ``source``, ``start``, ``end``; see
        :func:`ragfind.serve.service.passage_json`), written straight from the store with no
        :class:`Passage` made: ``(text, timings, cached)``, the results cache consulted and
        filled as :meth:`search` does.

        None when that search is not one ranked list the runner writes itself (several stages
        or re-rankers, a runner without it), the cache holds its passages, or a row holds what
        JSON's own types cannot show: :meth:`search` then answers (and raises for a bad query
        or ``k``, which this leaves to it)."""
        t0 = _now()
        if type(query) is not str or not query or query.isspace() or type(k) is not int:
            return None
        if k < 1:
            return None  # search() raises for it
        if k > _K_COUNTED:
            k = check_k(k, self.n_chunks)  # as search() clamps it: the same cache key and rows
        run = self.first_stages
        runner = self.stage_runner
        ranked = self._ranked(run)
        write = getattr(runner, "rows_json", None)
        rerankers = self.reranker is not None or bool(self.rerank_stages)
        fused = None if ranked is None or write is None or rerankers else self._rrf_of_one(run[0].name, k)
        if fused is None:
            return None
        queries = (query,)
        key = self._cache_key(queries, k, None, True, None, run)
        generation = key[0] if key is not None else None
        if key is not None:
            hit = self.result_cache.peek(key)
            if hit is not None:
                if type(hit) is not RankedList:
                    return None  # passages: search() answers from them
                text = write(hit.ids, hit.fused, hit.scores, hit.stage)
                if text is None:
                    return None
                self.result_cache.get(key)  # counted as a hit, made the most recent
                dt = _now() - t0
                return text, {"cache": dt, "total": dt}, True
        timings: dict = {}
        ids, scores = ranked(run[0], query, k, None, timings)
        t = _now()
        text = write(ids, fused, scores, run[0].name)
        if text is None:  # a row the passages show better: built and cached by search()
            return None
        if key is not None:
            self.result_cache.get(key)  # counted as a miss
        timings["store"] = _now() - t
        timings["fusion"] = 0.0
        timings["total"] = _now() - t0
        self._keep(key, generation, RankedList(ids, fused[: len(ids)], scores, run[0].name))
        return text, timings, False

    def _select_stages(self, names: Sequence[str] | None) -> list:
        if names is None:
            return self.first_stages
        if isinstance(names, str):
            names = [names]
        by_name = {s.name: s for s in self.first_stages}
        unknown = [n for n in names if n not in by_name]
        if unknown or not names:
            raise ValueError(f"stages = {list(names)!r}; expected a non-empty list of {list(by_name)}")
        return [by_name[n] for n in by_name if n in set(names)]

    def _one_list(self, lists: list, names: list, top: int) -> tuple | None:
        """``(ids, fused scores)`` of the RRF of a single list, its first ``top`` in its order,
        when that is what the RRF is (a positive weight and strictly decreasing scores; ties
        are ordered by the core); None otherwise."""
        if len(lists) != 1:
            return None
        ids = lists[0][0]
        if len(ids) > top:
            ids = ids[:top]
        scores = self._rrf_of_one(names[0], len(ids))
        return None if scores is None else (ids, scores[: len(ids)])

    def _rrf_of_one(self, name: str, n: int) -> list | None:
        """The RRF scores of ranks 1, 2, ... of a single list of stage ``name`` (at least ``n``
        of them, shared: do not modify), when they are that list's fusion (a positive weight
        and strictly decreasing scores); None otherwise."""
        if self.fusion != "rrf":
            return None
        w = float(self.weights.get(name, 1.0)) if self.weights else 1.0
        table = self._rrf_table
        if table is None or table[0] != self.rrf_k or table[1] != w or len(table[2]) < n:
            # w / (k + rank) as the core computes it: w * (1 / (k + r + 1)), r from 0.
            scores = (w * (1.0 / (self.rrf_k + np.arange(max(n, 1000), dtype=np.float64) + 1.0))).tolist()
            decreasing = w > 0 and all(b < a for a, b in zip(scores, scores[1:]))
            table = self._rrf_table = (self.rrf_k, w, scores, decreasing)
        return table[2] if table[3] else None

    def _fuse(self, lists: list, names: list, top: int | None) -> tuple:
        weights = [float(self.weights.get(n, 1.0)) for n in names] if self.weights else None
        keep = [i for i, (ids, _) in enumerate(lists) if len(ids)]
        if not keep:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        if top is None:
            top = sum(len(lists[i][0]) for i in keep)
        if len(keep) == 1:
            one = self._one_list([lists[keep[0]]], [names[keep[0]]], top)
            if one is not None:
                return one[0], np.asarray(one[1], np.float64)
        if self.fusion == "convex":
            return _core.fuse_scores(
                [lists[i] for i in keep],
                "min-max",
                "sum",
                [weights[i] for i in keep] if weights else None,
                top,
            )
        return _core.rrf(
            [lists[i][0] for i in keep], self.rrf_k, [weights[i] for i in keep] if weights else None, top
        )

    @staticmethod
    def _ranks(lists: list, names: list, wanted: set) -> dict:
        """``{chunk id: {stage: (best 1-based rank over the phrasings, its score)}}`` for the
        ``wanted`` chunks."""
        out: dict = {}
        for (ids, scores), name in zip(lists, names):
            for r, (i, s) in enumerate(zip(ids.tolist(), scores.tolist()), 1):
                if i in wanted:
                    per = out.setdefault(i, {})
                    # The best rank; equal ranks (several phrasings): the higher score.
                    if name not in per or (r, -s) < (per[name][0], -per[name][1]):
                        per[name] = (r, s)
        return out

    def _rerank(self, query: str, head: list, timings: dict) -> list:
        # Every passage returned is re-scored (the head holds >= k), so scores stay on one scale.
        for stage in self.rerank_stages:
            t = _now()
            ids = np.asarray([p.id for p in head], dtype=np.int64)
            new_ids, new_scores = self.stage_runner.rerank(
                stage, query, ids, [self._indexed_text(p) for p in head]
            )
            by_id = {p.id: p for p in head}
            head = [_with_score(by_id[int(i)], float(s), stage.name) for i, s in zip(new_ids, new_scores)]
            timings[stage.name] = _now() - t
        if self.reranker is not None:
            t = _now()
            ranked = self.reranker.rank(query, [self._indexed_text(p) for p in head])
            head = [_with_score(head[r["corpus_id"]], float(r["score"]), "cross_encoder") for r in ranked]
            timings["cross_encoder"] = _now() - t
        return head

    def _highlighted(self, passages: list, queries: tuple) -> list:
        """The passages with their highlights, by the BM25 stage's analyzer (default one else),
        computed when first read (:class:`LazyHighlighter`)."""
        highlighter = LazyHighlighter(queries, self._analyzer(), [p.text for p in passages])
        for p in passages:
            # Passages built by this search, not yet shared: set before anyone reads them.
            set_highlights(p, highlighter)
        return passages

    def _analyzer(self) -> Any:
        """The analyzer highlights match with: the BM25 stage's, else a default one."""
        bm25 = self._first_of("bm25")
        if bm25 is not None:
            return bm25.index.analyzer
        analyzer = getattr(self, "_default_analyzer", None)
        if analyzer is None:
            analyzer = self._default_analyzer = Analyzer()
        return analyzer

    def _feedback_texts(self, ids: Any) -> list:
        """The indexed texts of chunk ids, from the store (RM3 reads its feedback chunks' terms
        there rather than from a second copy of every text)."""
        rows = {r[0]: r for r in self.store.fetch_list([int(i) for i in ids])}
        out = []
        for i in ids:
            r = rows.get(int(i))
            # ROW: text at 2, context at 7; as Chunk.indexed_text.
            out.append("" if r is None else f"{r[7]}\n{r[2]}" if r[7] else r[2])
        return out

    @property
    def feedback(self) -> RM3 | None:
        """The BM25 stage's pseudo-relevance feedback (:class:`ragfind.RM3`), or None."""
        bm25 = self._first_of("bm25")
        return getattr(bm25, "feedback", None)

    @staticmethod
    def _indexed_text(p: Passage) -> str:
        return f"{p.context}\n{p.text}" if p.context else p.text

    def _passages(self, order: list, rows: dict, lists: list, names: list) -> list:
        """The passages of ``order`` (``(chunk id, fused score)``, best first) from their store
        ``rows``, with each first stage's rank and score."""
        if len(lists) != 1:
            ranks = self._ranks(lists, names, {i for i, _ in order})
            return [self._passage(rows[i], s, ranks.get(i, {})) for i, s in order]
        # One list: a chunk's rank in it is its position (the list ranks each id once).
        name = names[0]
        ids, scores = lists[0]
        at = {i: n for n, i in enumerate(ids.tolist())}
        stage_scores = scores.tolist()
        out = []
        build, proxy, empty = passage_from_fields, MappingProxyType, _EMPTY
        views = rank_views(name)
        for i, fused in order:
            cid, doc_id, text, title, start, end, metadata, context = rows[i]
            n = at[i]
            md, source = (empty, doc_id) if metadata == "{}" else metadata_and_source(metadata, doc_id)
            ranks = views[n] if n < len(views) else proxy({name: n + 1})
            scored = proxy({name: stage_scores[n], "fused": fused})
            out.append(
                build(cid, doc_id, text, title, source, fused, start, end, md, context, ranks, scored, [])
            )
        return out

    @staticmethod
    def _passage(row: tuple, score: float, ranks: Mapping[str, tuple]) -> Passage:
        cid, doc_id, text, title, start, end, metadata, context = row
        # Read-only: passages are shared with the results cache.
        md, source = metadata_and_source(metadata, doc_id)
        scores = {n: float(s) for n, (_, s) in ranks.items()}
        scores["fused"] = score
        return passage_from_fields(
            cid,
            doc_id,
            text,
            title,
            source,
            score,
            start,
            end,
            md,
            context,
            MappingProxyType({n: r for n, (r, _) in ranks.items()}),
            MappingProxyType(scores),
            [],
        )

    # ------------------------------------------------------------------ caches

    def cache_stats(self) -> dict:
        """``{"embeddings": {...}, "results": {...}}`` hit/miss counters of both caches."""
        return {"embeddings": self.embedding_cache.stats(), "results": self.result_cache.stats()}

    def set_cache_size(self, cache_size: int) -> None:
        """Resizes the embedding and result caches to ``cache_size`` entries each (0 disables
        them), keeping the most recently used entries that fit. A setting of this process, as
        ``ragfind serve --cache-size``: :meth:`save` keeps the size the retriever was made with."""
        self.embedding_cache.resize(cache_size)
        self.result_cache.resize(cache_size)

    def clear_cache(self) -> None:
        """Empties both caches (and the compiled filters)."""
        self.embedding_cache.clear()
        self.result_cache.clear()
        self.stage_runner.clear()

    def fit_fusion_weight(
        self,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        *,
        metric: str = "ndcg@10",
        grid: Sequence[float] | None = None,
        apply: bool = True,
    ) -> tuple[float, dict[float, float]]:
        """Fits the BM25 weight of convex fusion (``fusion="convex"``) on your judged queries.

        Each query is searched once by the BM25 and dense stages (``candidates`` each, no
        filter); each list is cut to its documents' best chunk, and
        :func:`ragfind.fit_convex_weight` (min-max, as the retriever fuses) picks the weight
        that maximises ``metric`` over ``qrels``. Fit on queries other than those you report
        on. With ``apply`` the retriever then fuses by ``fusion="convex"``,
        ``weights={"bm25": w, "dense": 1 - w}`` (saved with it) and its results cache is
        cleared.

        Args:
            queries: ``{query id: text}``.
            qrels: ``{query id: {document id: judgement}}`` (:func:`ragfind.eval.load_qrels`).
            metric: a metric :func:`ragfind.eval.evaluate` knows.
            grid: BM25 weights to try, in [0, 1] (default 0, 0.05, ..., 1).
            apply: set the fitted fusion on this retriever.

        Returns:
            ``(BM25 weight, {weight: mean metric})``.

        Raises:
            ValueError: the retriever lacks a ``"bm25"`` or a ``"dense"`` stage, or no query is
                both in ``queries`` and judged in ``qrels``.
        """
        names = [s.name for s in self.first_stages]
        if "bm25" not in names or "dense" not in names:
            raise ValueError(
                f"fit_fusion_weight needs the 'bm25' and 'dense' stages; this retriever has {names}"
            )
        stages = [self._first_of("bm25"), self._first_of("dense")]
        doc_ids: list = []
        number: dict = {}
        runs: list[dict] = [{}, {}]
        for q, text in queries.items():
            if str(q) not in qrels:
                continue
            for run in runs:  # a stage that finds nothing gives an empty list
                run[q] = (np.zeros(0, np.int64), np.zeros(0, np.float32))
            found = self.stage_runner.first_stage(stages, (text,), self.candidates, None, {})
            chunks = {int(i) for ids, _ in found.lists for i in ids.tolist()}
            rows, _ = self.stage_runner.fetch(sorted(chunks))
            for (ids, scores), name in zip(found.lists, found.names):
                best: dict = {}  # document number -> its best chunk's score (lists are best first)
                for i, s in zip(ids.tolist(), scores.tolist()):
                    row = rows.get(i)
                    if row is None:
                        continue
                    n = number.setdefault(row[1], len(number))
                    if n == len(doc_ids):
                        doc_ids.append(row[1])
                    best.setdefault(n, s)
                runs[0 if name == "bm25" else 1][q] = (
                    np.fromiter(best.keys(), np.int64, len(best)),
                    np.fromiter(best.values(), np.float32, len(best)),
                )
        if not runs[0]:
            raise ValueError("no query of queries is in qrels")
        w, means = fit_convex_weight(
            runs[0], runs[1], {str(q): j for q, j in qrels.items()}, "min-max", metric, grid, doc_ids
        )
        if apply:
            with self._write_lock:
                self.fusion = "convex"
                self.weights = {**(self.weights or {}), "bm25": w, "dense": 1.0 - w}
                self.result_cache.clear()
        return w, means

    # ------------------------------------------------------------------ persistence

    def _config(self) -> dict:
        dense = self.dense
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
            "fusion": self.fusion,
            "weights": self.weights,
            "candidates": self.candidates,
            "rerank_candidates": self.rerank_candidates,
            "cache_size": self._saved_cache_size,
            "dense_kind": dense.kind if dense is not None else None,
            "fit_query_encoder": self.fit_queries,
            "feedback": None if self.feedback is None else self.feedback.config(),
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
        save_folder(self, path)

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
        chunk_id_policy: ChunkIdPolicy | None = None,
    ) -> Retriever:
        """Opens a folder written by :meth:`save` (format version 2, or 1: its ``"sparse"``
        weight is read as ``"bm25"``).

        Args:
            path: the folder.
            encoder: the query encoder (an Encoder, a folder or a name); default: the saved
                reference. Its fingerprint must equal the one the vectors were built with. A
                saved static ``query_encoder`` (and ``"static"`` refitting) comes back with the
                folder.
            reranker: "saved" (default: the saved reference, if any), None, or a CrossEncoder.
            contextualize: a custom callable to use for documents added later (the saved
                retriever used the default or none; that choice is restored otherwise).
            stages: the extra stages, already loaded, when the saved retriever had some.
            verify: check every file's SHA-256 against the manifest before reading it.
            chunk_id_policy: how chunks added later get ids (as for the constructor).

        Raises:
            RetrieverFolderError: a missing folder or manifest, another format or version, a
                missing, truncated or corrupted file, a manifest field of the wrong type, a
                store that is not this format's SQLite schema (or has malformed rows), indexes
                whose chunk ids differ from the store's. These checks run with ``verify=False``
                too, so a folder that loads can be searched, written and saved.
            ragfind.ModelMismatchError (a ValueError): ``encoder`` is not the model the dense
                vectors were built with (or gives vectors of another dimension).
        """
        return load_folder(
            cls, path, encoder, reranker, contextualize, stages, verify, chunk_id_policy=chunk_id_policy
        )

    def __repr__(self) -> str:
        parts = [f"documents={len(self)}", f"chunks={self.n_chunks}"]
        for s in self.first_stages:
            parts.append(f"dense(dim={self.encoder.dim})" if getattr(s, "kind", None) == "dense" else s.name)
        if self.reranker is not None:
            parts.append("cross-encoder")
        parts += [s.name for s in self.rerank_stages]
        return f"Retriever({', '.join(parts)})"


def _with_score(p: Passage, score: float, by: str) -> Passage:
    scores = dict(p.scores)
    scores[by] = score
    return Passage(
        p.id,
        p.doc_id,
        p.text,
        p.title,
        p.source,
        score,
        p.start,
        p.end,
        p.metadata,
        p.context,
        p.ranks,
        MappingProxyType(scores),
        p.highlights,
    )
