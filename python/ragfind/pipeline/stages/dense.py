"""Dense first-stage retrieval: an :class:`ragfind.Encoder` over a :class:`ragfind.DenseIndex`,
with a cache of query embeddings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ragfind.dense.index import DenseIndex
from ragfind.errors import ModelMismatchError, unknown_ids
from ragfind.ids import IdFilter
from ragfind.index import Contribution, Explanation
from ragfind.pipeline.cache import LRUCache

__all__ = ["DenseStage"]

_SET_BY_STAGE = ("dim", "metric", "kind", "fingerprint")


def check_dense_options(options: Any) -> dict:
    """``options`` as a dict of DenseIndex keyword arguments the caller may set."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"dense_options is a {type(options).__name__}; expected a dict or None")
    fixed = [k for k in options if k in _SET_BY_STAGE]
    if fixed:
        raise ValueError(f"dense_options may not set {fixed[0]!r} (the Retriever sets it)")
    return dict(options)


def check_query_encoder(query_encoder: Any, fingerprint: str | None, dim: int) -> None:
    """Raises ModelMismatchError unless ``query_encoder`` gives vectors in the space of an index
    of ``fingerprint`` and ``dim``: its ``target_fingerprint`` (a query encoder fitted into that
    space), else its own ``fingerprint``, must be the index's."""
    for attr in ("encode_query", "dim", "fingerprint"):
        if not hasattr(query_encoder, attr):
            raise TypeError(f"query_encoder is a {type(query_encoder).__name__} without .{attr}")
    space = getattr(query_encoder, "target_fingerprint", None) or query_encoder.fingerprint
    if fingerprint is not None and space != fingerprint:
        raise ModelMismatchError(
            f"the query encoder gives vectors of model {space!r} but the dense index holds vectors "
            f"of model {fingerprint!r}; fit a query encoder into that model's space "
            "(ragfind.fit_query_encoder) or use the model the index was built with"
        )
    if int(query_encoder.dim) != int(dim):
        raise ModelMismatchError(
            f"the query encoder gives {query_encoder.dim}-d vectors; the index holds {dim}-d ones"
        )


class DenseStage:
    """Semantic retrieval: the query embedding's nearest chunks (cosine, exact, HNSW or IVF).

    Args:
        encoder: a bi-encoder (``encode``, ``encode_query``, ``dim``, ``fingerprint``).
        index: the :class:`ragfind.DenseIndex` to fill (default: a new cosine index of the
            encoder's dimension and fingerprint, of ``kind``).
        kind: ``"exact"`` (SIMD brute force), ``"hnsw"`` or ``"ivf"`` (automatic nlist,
            retrained as the index grows), for a new index.
        options: more :class:`ragfind.DenseIndex` arguments for a new index (e.g.
            ``{"nprobe": 32}``, ``{"ef": 128}``, ``{"dtype": "f16"}``); not ``dim``,
            ``metric``, ``kind`` or ``fingerprint``, which the stage sets.
        name: the stage's name.
        cache: the LRU cache of query embeddings (shared with the Retriever's statistics).
        query_encoder: embeds the queries instead of ``encoder`` (e.g. a static encoder fitted
            into ``encoder``'s space, ``ragfind.fit_query_encoder``); its ``target_fingerprint``
            (else its ``fingerprint``) must be the index's.
    """

    kind = "dense"

    def __init__(
        self,
        encoder: Any,
        index: Any = None,
        *,
        kind: str = "exact",
        name: str = "dense",
        cache: LRUCache | None = None,
        options: Any = None,
        query_encoder: Any = None,
    ) -> None:
        if kind not in ("exact", "hnsw", "ivf"):
            raise ValueError(f"dense_kind = {kind!r}; expected 'exact', 'hnsw' or 'ivf'")
        opts = check_dense_options(options)
        if index is None:
            index = DenseIndex(
                encoder.dim, metric="cosine", kind=kind, fingerprint=encoder.fingerprint, **opts
            )
        self.encoder = encoder
        self.index = index
        self.name = name
        self.cache = cache if cache is not None else LRUCache(1024)
        self.query_encoder: Any = None
        self.set_query_encoder(query_encoder)

    def set_query_encoder(self, query_encoder: Any) -> None:
        """Embeds queries with ``query_encoder`` from now on (None: with ``encoder``); clears
        the embedding cache.

        Raises:
            ragfind.ModelMismatchError: its vectors are not in the index's space (another
                ``target_fingerprint`` / ``fingerprint``, or another dimension).
        """
        if query_encoder is not None:
            check_query_encoder(query_encoder, self.index.fingerprint, self.index.dim)
        self.query_encoder = query_encoder
        self.cache.clear()

    def __len__(self) -> int:
        return len(self.index)

    @property
    def ids(self) -> np.ndarray:
        return self.index.ids

    def prepare(
        self, texts: list, embeddings: Any = None, batch_size: int = 32, show_progress: bool = False
    ) -> np.ndarray:
        """The chunk vectors: ``embeddings`` checked (float, (len(texts), dim), finite), or the
        encoder's. Writes nothing."""
        dim = self.index.dim
        if embeddings is None:
            return self.encoder.encode(texts, batch_size=batch_size, show_progress=show_progress)
        vectors = np.asarray(embeddings)
        if vectors.dtype.kind != "f":
            raise TypeError(f"embeddings have dtype {vectors.dtype}; expected floats")
        if vectors.shape != (len(texts), dim):
            raise ValueError(
                f"embeddings have shape {vectors.shape}; expected ({len(texts)}, {dim}) "
                "(one row per chunk; use chunk_size=None for one chunk per document)"
            )
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if not np.isfinite(vectors).all():
            raise ValueError("embeddings contain NaN or inf")
        return vectors

    def add(self, ids: np.ndarray, texts: list, prepared: Any = None) -> None:
        vectors = self.prepare(texts) if prepared is None else prepared
        self.index.add(vectors, ids)

    def delete(self, ids: np.ndarray) -> None:
        self.index.delete(ids)

    def embed(self, query: str) -> np.ndarray:
        """The (cached, read-only) query embedding."""
        vec = self.cache.get(query)
        if vec is None:
            vec = (self.query_encoder or self.encoder).encode_query(query)
            vec.setflags(write=False)
            self.cache.put(query, vec)
        return vec

    def search(self, query: Any, k: int, filter: Any = None) -> tuple:  # noqa: A002
        """``(chunk ids, cosine scores)`` best first for a phrasing (or its embedding from
        :meth:`embed`); ``filter`` goes to the index."""
        vec = self.embed(query) if isinstance(query, str) else query
        n = len(self.index)
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        return self.index.search(vec, min(k, n), filter=filter)

    def explain(self, query: Any, chunk_id: int, text: Any = None) -> Explanation:
        """The similarity of the query embedding and the chunk's stored vector: an Explanation
        of kind ``"dense"``, one contribution (named by the metric), ``detail`` with ``metric``
        and ``dim``. UnknownIdError when the index does not hold the chunk."""
        vec = self.embed(query) if isinstance(query, str) else query
        ids, scores = self.index.search(vec, 1, filter=IdFilter([chunk_id]))
        if not len(ids):
            raise unknown_ids([chunk_id], "chunk_id")
        score = float(np.asarray(scores)[0])
        metric = str(self.index.metric)
        detail = {"metric": metric, "dim": int(self.index.dim)}
        return Explanation("dense", chunk_id, score, (Contribution(metric, score),), detail)

    def save(self, path: Any) -> None:
        self.index.save(path)
