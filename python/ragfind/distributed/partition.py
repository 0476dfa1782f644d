"""Which shard holds a document, and the collection-wide chunk ids shards give their chunks.

A document goes to ``shard_of(doc_id, num_shards)``: a stable hash (BLAKE2b of the id's UTF-8
bytes), the same in every process and Python version, unlike the salted ``hash()``.

Chunk ids are unique over the whole collection and increase in the order documents were
added, so ties between equal scores break exactly as in one Retriever (whose chunk ids are
sequential): ``(doc_seq << 30) | (shard << 20) | chunk index``, ``doc_seq`` the router's
counter of added documents. The shard of any returned id is read back from its bits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

CHUNK_BITS = 20
SHARD_BITS = 10
MAX_SHARDS = 1 << SHARD_BITS
MAX_CHUNKS_PER_DOC = 1 << CHUNK_BITS
MAX_DOC_SEQ = 1 << (62 - CHUNK_BITS - SHARD_BITS)


def shard_of(doc_id: object, num_shards: int) -> int:
    """The shard (0 .. num_shards - 1) of a document id (ids are compared as str)."""
    digest = hashlib.blake2b(str(doc_id).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % num_shards


def chunk_id(doc_seq: int, shard: int, index: int) -> int:
    if index >= MAX_CHUNKS_PER_DOC:
        raise ValueError(f"a document has more than {MAX_CHUNKS_PER_DOC} chunks; expected fewer")
    if doc_seq >= MAX_DOC_SEQ:
        raise ValueError(f"more than {MAX_DOC_SEQ} documents were added to this sharded retriever")
    return (doc_seq << (CHUNK_BITS + SHARD_BITS)) | (shard << CHUNK_BITS) | index


def shard_of_chunk(ids: np.ndarray) -> np.ndarray:
    return (np.asarray(ids, np.int64) >> CHUNK_BITS) & (MAX_SHARDS - 1)


def doc_seq_of_chunk(ids: np.ndarray) -> np.ndarray:
    return np.asarray(ids, np.int64) >> (CHUNK_BITS + SHARD_BITS)


class ShardChunkIds:
    """The chunk-id policy of shard ``shard`` (:mod:`ragfind.pipeline.chunk_ids`): chunk ``i``
    of the document the router numbered ``seq`` gets ``chunk_id(seq, shard, i)``. A shard's
    documents are added inside ``numbering(seqs)``, which gives their numbers by id."""

    def __init__(self, shard: int) -> None:
        self.shard = int(shard)
        self._seqs: Mapping[str, int] | None = None

    @contextmanager
    def numbering(self, seqs: Mapping[str, int]) -> Iterator[None]:
        self._seqs = seqs
        try:
            yield
        finally:
            self._seqs = None

    def __call__(self, store: Any, chunks: Sequence[Any]) -> np.ndarray:
        if self._seqs is None:
            raise RuntimeError("a shard's documents are added through its ShardedRetriever")
        return np.asarray([chunk_id(self._seqs[c.doc_id], self.shard, c.index) for c in chunks], np.int64)
