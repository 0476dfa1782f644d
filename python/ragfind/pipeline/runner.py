"""How a Retriever runs its stages: the stage runner it is built with.

A search asks its stage runner for four things: the compiled form of a metadata filter, every
first stage's ranked lists, the re-ranked order of a re-rank stage, and the stored rows of the
passages fusion kept. :class:`LocalStages` (the default) runs them here, over the retriever's
document store and indexes. A sharded retriever passes a runner whose calls go to its shards,
so the Retriever's own fusion, passage assembly and re-ranking run unchanged over them.

``partial`` travels with each call: a runner that cannot reach part of the collection returns
what it has and names the parts left out (``missing``) when it is True, and raises otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragfind.pipeline.filters import FilterCompiler, MetadataFilters
from ragfind.pipeline.store import DocumentStore

__all__ = ["StageLists", "StageRunner", "LocalStages"]


_INT64 = np.dtype(np.int64)


_now = time.perf_counter  # the builtin itself: no Python frame per reading

#: First stages run one after another on the calling thread when all but the slowest of them
#: are expected to take less than this together (seconds): handing a stage to a pool thread
#: and joining it costs about 0.1-0.2 ms here (a thread wake-up each way and the GIL passed
#: between two threads), more than a short stage saves by overlapping, e.g. BM25 beside a
#: query embedding.
SEQUENTIAL_BELOW = 0.15e-3
_COST_WEIGHT = 0.2  # weight of the newest time in a stage's moving average


def _list_arrays(ids: Any, scores: Any) -> tuple:
    """A stage's ranked list as ``(int64 ids, scores)`` arrays; the index's own arrays pass."""
    if type(ids) is not np.ndarray or ids.dtype is not _INT64:
        ids = np.asarray(ids, np.int64)
    if type(scores) is not np.ndarray:
        scores = np.asarray(scores)
    return ids, scores


@dataclass  # not frozen: a frozen __init__ costs an object.__setattr__ per field, every search
class StageLists:
    """What the first stages found for one search (treat as read-only).

    Attributes:
        lists: ``(ids, scores)`` best first, per stage and phrasing, in fusion order.
        names: the stage name of each list.
        concurrent: the stages whose run overlapped another's in time.
        missing: the parts of the collection left out (shard numbers); empty when complete.
    """

    lists: list
    names: list
    concurrent: tuple = ()
    missing: tuple = ()


@runtime_checkable
class StageRunner(Protocol):
    """Runs a Retriever's stages over its documents, wherever they are.

    ``generation`` changes whenever the documents do: results cached under an older one are
    not served. ``clear()`` drops whatever the runner compiled or cached; ``close()`` stops
    its workers (they may restart on demand).
    """

    @property
    def generation(self) -> int: ...

    def compile_filters(self, filters: Mapping[str, Any] | None) -> Any: ...

    def first_stage(
        self, stages: list, queries: tuple, depth: int, flt: Any, timings: dict, *, partial: bool = False
    ) -> StageLists: ...

    def rerank(self, stage: Any, query: str, ids: np.ndarray, texts: list) -> tuple: ...

    def fetch(self, ids: Sequence[int], *, partial: bool = False) -> tuple: ...

    def count_chunks(self) -> int: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


class LocalStages:
    """The stages run in this process over ``store``: first stages concurrently on a pool of
    ``threads`` workers (their indexes release the GIL), filters evaluated on the native
    ``metadata`` index (built from the store when None) and cached per store state
    (``filter_cache`` entries; 0 evaluates every time)."""

    def __init__(
        self,
        store: DocumentStore,
        metadata: MetadataFilters | None = None,
        *,
        threads: int = 2,
        filter_cache: int = 256,
    ) -> None:
        self.store = store
        if metadata is None:
            metadata = MetadataFilters.from_rows(store.chunk_rows())
        self.filters = FilterCompiler(metadata, store, filter_cache)
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._cost: dict = {}  # stage name -> moving average of its seconds per search

    @property
    def generation(self) -> int:
        return self.store.generation

    def compile_filters(self, filters: Mapping[str, Any] | None) -> Any:
        """None for no filter, else the :class:`ragfind.IdFilter` of the chunks it allows."""
        return self.filters(filters)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="ragfind-retriever")
        return self._pool

    @staticmethod
    def _run_stage(stage: Any, queries: tuple, k: int, flt: Any) -> tuple:
        """One first stage over every phrasing: ``(lists, start, end, embed seconds)``."""
        t0 = _now()
        embed = getattr(stage, "embed", None)
        t_embed = 0.0
        out = []
        for q in queries:
            if embed is not None:
                t = _now()
                q = embed(q)
                t_embed += _now() - t
            out.append(_list_arrays(*stage.search(q, k, flt)))
        return out, t0, _now(), t_embed

    def first_stage(
        self, stages: list, queries: tuple, depth: int, flt: Any, timings: dict, *, partial: bool = False
    ) -> StageLists:
        """Runs the stages concurrently (the first on this thread, the rest on the pool)."""
        t0 = _now()
        if flt is not None and len(flt) == 0:
            # Nothing is allowed: no stage can return anything.
            for s in stages:
                timings[s.name] = 0.0
            timings["first_stage"] = _now() - t0
            return StageLists([], [])
        if len(stages) == 1 and len(queries) == 1 and not hasattr(stages[0], "embed"):
            # One list from one stage on this thread: nothing runs concurrently, nothing to embed.
            stage = stages[0]
            ids, scores = _list_arrays(*stage.search(queries[0], depth, flt))
            timings[stage.name] = timings["first_stage"] = _now() - t0
            return StageLists([(ids, scores)], [stage.name])
        futures = []
        if len(stages) > 1 and not self._sequential(stages):
            pool = self._executor()
            futures = [pool.submit(self._run_stage, s, queries, depth, flt) for s in stages[1:]]
            results = [self._run_stage(stages[0], queries, depth, flt)]
            results += [f.result() for f in futures]
        else:
            results = [self._run_stage(s, queries, depth, flt) for s in stages]
        timings["first_stage"] = _now() - t0
        lists, names, t_embed = [], [], 0.0
        cost = self._cost
        for s, (res, start, end, embed) in zip(stages, results):
            lists += res
            names += [s.name] * len(res)
            timings[s.name] = end - start
            t_embed += embed
            before = cost.get(s.name)
            cost[s.name] = end - start if before is None else before + _COST_WEIGHT * (end - start - before)
        if any(hasattr(s, "embed") for s in stages):
            timings["embed"] = t_embed
        spans = [(start, end) for _, start, end, _ in results]
        overlapped = tuple(
            s.name
            for n, (s, (a, b)) in enumerate(zip(stages, spans))
            if any(a < d and c < b for m, (c, d) in enumerate(spans) if m != n)
        )
        return StageLists(lists, names, overlapped)

    def _sequential(self, stages: list) -> bool:
        """Whether running ``stages`` one after another is expected to beat overlapping them:
        all but the slowest take under ``SEQUENTIAL_BELOW`` together (by their recent times;
        a stage not timed yet runs overlapped)."""
        costs = [self._cost.get(s.name) for s in stages]
        if None in costs:
            return False
        return sum(costs) - max(costs) < SEQUENTIAL_BELOW

    def rerank(self, stage: Any, query: str, ids: np.ndarray, texts: list) -> tuple:
        return stage.rerank(query, ids, texts)

    def fetch(self, ids: Sequence[int], *, partial: bool = False) -> tuple:
        """``(rows by chunk id, missing)``: the store rows of the chunks still stored."""
        return self.store.fetch(ids), ()

    def passages(
        self,
        ids: np.ndarray,
        fused: Any,
        stage_scores: np.ndarray,
        stage: str,
        highlights: Any,
        texts: list | None = None,
    ) -> tuple:
        """The passages of one ranked list of ``stage`` (ids best first, their fused and stage
        scores), built from the store's columns, each text also appended to ``texts`` when
        given: the Retriever asks a runner that has this (optional) method instead of
        :meth:`fetch` when a search has one list."""
        return self.store.passages(ids, fused, stage_scores, stage, highlights, texts)

    def ranked_list(self, stage: Any, query: str, k: int, flt: Any, timings: dict) -> tuple:
        """``stage``'s top ``k`` for one phrasing (``flt``: the compiled filter or None),
        ``(ids, scores)`` best first, the stage's and ``first_stage`` timings set: the search of
        :meth:`first_stage` for one list, without its bookkeeping. Optional, as :meth:`passages`
        is: the Retriever uses it for a search of one exact list (one BM25 stage, one
        phrasing) when a runner has both."""
        t0 = _now()
        if flt is not None and len(flt) == 0:
            ids, scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
        else:
            ids, scores = _list_arrays(*stage.search(query, k, flt))
        timings[stage.name] = timings["first_stage"] = _now() - t0
        return ids, scores

    def rows_json(self, ids: np.ndarray, fused: Any, stage_scores: np.ndarray, stage: str) -> bytes | None:
        """The JSON text of the result rows of :meth:`passages` of the same list, written from
        the store with no passage made, or None (:meth:`DocumentStore.rows_json`). Optional: the
        Retriever's :meth:`~ragfind.Retriever.search_rows_json` needs it."""
        return self.store.rows_json(ids, fused, stage_scores, stage)

    def count_chunks(self) -> int:
        return self.store.count_chunks()

    def clear(self) -> None:
        self.filters.clear()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            if getattr(self, "_pool", None) is not None:
                self._pool.shutdown(wait=False)
        except Exception:
            pass
