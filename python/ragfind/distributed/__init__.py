"""Scale-out on Ray: a retriever sharded over Ray actors whose results equal one node's.

:class:`ShardedRetriever` partitions documents over ``num_shards`` shard actors (each an
ordinary :class:`ragfind.Retriever` over its part) by a stable hash of the document id, and
answers with exactly the results of one Retriever over all documents: BM25 scores with the
statistics of the whole collection (kept by the router, versioned per shard), every stage's
per-shard top lists are merged by score before fusion and re-ranking, which run at the router
with the Retriever's own code. :func:`build` indexes a corpus as a Ray Data pipeline.

Ray is an optional dependency (``pip install "ragfind[ray]"``); it is imported on first use.
"""

from __future__ import annotations

from typing import Any

from ragfind.distributed.folder import MANIFEST, ShardedFolderError, is_sharded_folder
from ragfind.distributed.partition import shard_of

__all__ = [
    "ShardedRetriever",
    "ShardedSearchResult",
    "ShardUnavailableError",
    "StalePrimaryError",
    "ShardedFolderError",
    "build",
    "is_sharded_folder",
    "shard_of",
    "MANIFEST",
]


def __getattr__(name: str) -> Any:
    # The parts that need Ray load on first use, so `import ragfind.distributed` works without it.
    if name in ("ShardedRetriever", "ShardedSearchResult", "ShardUnavailableError", "StalePrimaryError"):
        from ragfind.distributed import router  # the ray extra

        return getattr(router, name)
    if name == "build":
        from ragfind.distributed.indexing import build  # the ray extra

        return build
    raise AttributeError(f"module 'ragfind.distributed' has no attribute {name!r}")
