"""``ragfind serve``: an HTTP service (Starlette + uvicorn, the ``ragfind[serve]`` extra) over a
saved retriever folder, with a page at ``/`` that shows why each passage ranked where it did.

- :mod:`.app`: :func:`create_app` (the ASGI app) and :func:`load_retriever` (a folder, or a
  sharded folder with ``shards.json``);
- :mod:`.config`: :class:`ServeConfig` (limits, API key, checkpoint policy, the queue);
- :mod:`.service`: validation and writes, each durable in the folder's write log
  (:mod:`ragfind.persist.wal`) before it is acknowledged;
- :mod:`.admission`: the bounded queue and threads (503 + Retry-After past them) and the fast
  searches answered on the event loop;
- :mod:`.workers`: ``--workers N``: worker processes that follow one writer process;
- :mod:`.explain`: the per-stage explanation of one passage (BM25 terms, cosine, fusion, MaxSim);
- :mod:`.metrics`: the Prometheus text exposition.
"""

from __future__ import annotations

from ragfind.serve.config import ServeConfig
from ragfind.serve.explain import bm25_rescore, explain_passage

__all__ = ["ServeConfig", "create_app", "load_retriever", "explain_passage", "bm25_rescore"]


def __getattr__(name: str):
    # The app needs starlette (the extra); the explanation helpers do not.
    if name in ("create_app", "load_retriever"):
        from ragfind.serve import app  # the serve extra

        return getattr(app, name)
    raise AttributeError(name)
