"""How a Retriever numbers new chunks: the chunk-id policy it is built with.

A policy is called with the write lock held, before anything is written, as
``policy(store, chunks)``, and returns one int64 id per chunk, in order, none of them already
in ``store``. The default, :func:`sequential_chunk_ids`, continues from the store's
``next_chunk_id``; a shard of a sharded retriever gives collection-wide ids instead
(:class:`ragfind.distributed.partition.ShardChunkIds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["ChunkIdPolicy", "sequential_chunk_ids"]


class ChunkIdPolicy(Protocol):
    def __call__(self, store: Any, chunks: Sequence[Any]) -> np.ndarray: ...


def sequential_chunk_ids(store: Any, chunks: Sequence[Any]) -> np.ndarray:
    """The next ``len(chunks)`` ids after the store's last, in order."""
    start = store.next_chunk_id
    return np.arange(start, start + len(chunks), dtype=np.int64)
