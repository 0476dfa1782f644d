"""``ShardedRetriever``: the router over the shard actors.

A search is one call per shard: every shard runs every stage (BM25 scored with the
collection's statistics, which the router keeps current through the writes it routes:
:class:`_CollectionStats`; dense with the query vector embedded once here) and sends its lists
with the stored rows of their heads; each stage's per-shard top lists are merged by (score,
collection-wide chunk id) into the global top list. Fusion, passage assembly and re-ranking run here with the
Retriever's own code (the head is a Retriever without documents built with
:class:`_ShardStages`, a stage runner whose filters, first stages, re-rank stages and passage
fetches go to the shards), so the results equal one Retriever's over the same documents.

Writes are replicated to every in-sync copy of their shard and acknowledged once all of them
hold it (sequence numbers, primary terms and in-sync copies: :mod:`.replication`); searches
take no lock and read in-sync copies only, and every call on a copy has a deadline.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.distributed import folder as fmt
from ragfind.distributed._ray import require_ray
from ragfind.distributed.fanout import GraphFailed, SearchGraph
from ragfind.distributed.partition import MAX_SHARDS, shard_of, shard_of_chunk
from ragfind.distributed.replication import Copies, ShardUnavailableError, StalePrimaryError, idle_healer
from ragfind.distributed.shard import STATE, WAL, ShardActor, _Err, bm25_spec, bm25_stages
from ragfind.persist.atomic import fsync_dir
from ragfind.pipeline.documents import check_documents, check_field_kinds
from ragfind.pipeline.filters import BUILTIN_FIELDS
from ragfind.pipeline.results import SearchResult
from ragfind.pipeline.retriever import Retriever
from ragfind.pipeline.runner import StageLists
from ragfind.pipeline.saved import BM25_FILE, MANIFEST, RetrieverFolderError
from ragfind.sparse.analyzer import Analyzer
from ragfind.sparse.bm25 import BM25Index

__all__ = ["ShardedRetriever", "ShardedSearchResult", "ShardUnavailableError", "StalePrimaryError"]


@dataclass(frozen=True)
class ShardedSearchResult(SearchResult):
    """A :class:`ragfind.SearchResult`; ``partial`` is True when shards were left out
    (``missing_shards``), which only a search with ``partial=True`` returns."""

    @property
    def missing_shards(self) -> tuple:
        """The shards left out (``missing``)."""
        return self.missing


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} = {value!r}; expected a positive int")
    return int(value)


_STATS_ATTEMPTS = 6  # rounds a search retries while writes race it
# Searches before ``fanout="auto"`` compiles its graph: a router that searches now and then
# never pays for one (a compile and the actors' warm-up take a second or more of CPU).
_GRAPH_AFTER = 32
_FANOUTS = ("auto", "graph", "calls")


def _written(ack: Any) -> int:
    """The chunks a shard's write acknowledgement counts (None: a retry it already held)."""
    return int(ack["n"] or 0) if isinstance(ack, dict) else int(ack or 0)


def _raise_err(res: Any) -> Any:
    if isinstance(res, _Err):
        raise res.exc
    return res


class _ShardStages:
    """The head's stage runner (:class:`ragfind.pipeline.runner.StageRunner`): filters are
    compiled by the shards, first stages run on every shard and their lists are merged here,
    re-rank stages run on the shards holding the chunks, passages are fetched from them."""

    def __init__(self, router: ShardedRetriever) -> None:
        self._router = router

    @property
    def generation(self) -> int:
        return self._router._generation

    def compile_filters(self, filters: Any) -> Any:
        return dict(filters) if filters else None

    def first_stage(
        self, stages: list, queries: tuple, depth: int, flt: Any, timings: dict, *, partial: bool = False
    ) -> StageLists:
        router = self._router
        t0 = time.perf_counter()
        plan = []
        t_embed = 0.0
        terms: dict = {}
        for s in stages:
            if getattr(s, "kind", None) == "bm25" and s.name in router._bm25_names:
                plan.append((s.name, "bm25", list(queries)))
                terms[s.name] = [list(dict.fromkeys(s.index.analyze_query(q))) for q in queries]
            elif hasattr(s, "embed"):
                t = time.perf_counter()
                plan.append((s.name, "vector", [np.asarray(s.embed(q)) for q in queries]))
                t_embed += time.perf_counter() - t
            else:
                plan.append((s.name, "text", list(queries)))
        everyone = list(range(router.num_shards))
        t = time.perf_counter()
        got, missing = router._search_shards(plan, terms, depth, flt, everyone, partial)
        t_search = time.perf_counter() - t
        cache = getattr(router._copies._local, "rows", None)
        if cache is not None:
            for part in got.values():
                cache.update(part["rows"])
        shards = sorted(got)
        lists, names = [], []
        for name, _, inputs in plan:
            for qi in range(len(inputs)):
                parts = [got[s]["lists"][name][qi] for s in shards]
                if not parts:
                    lists.append((np.zeros(0, np.int64), np.zeros(0, np.float32)))
                    names.append(name)
                    continue
                ids = np.concatenate([p[0] for p in parts])
                scores = np.concatenate([p[1] for p in parts])
                # Score descending, ties by chunk id (= insertion order, as in one Retriever).
                order = np.lexsort((ids, -scores.astype(np.float64)))[:depth]
                lists.append((ids[order], scores[order]))
                names.append(name)
            timings[name] = t_search
        if t_embed:
            timings["embed"] = t_embed
        timings["first_stage"] = time.perf_counter() - t0
        return StageLists(lists, names, (), tuple(sorted(missing)))

    def rerank(self, stage: Any, query: str, ids: np.ndarray, texts: list) -> tuple:
        """``stage`` run on the shards holding the chunks; scores merged (ties: input order)."""
        ids = np.asarray(ids, np.int64)
        pos = {int(i): n for n, i in enumerate(ids.tolist())}
        shards = shard_of_chunk(ids)
        calls = {}
        for s in np.unique(shards).tolist():
            sel = np.nonzero(shards == s)[0]
            calls[s] = ("rerank", stage.name, query, ids[sel], [texts[j] for j in sel])
        rows = []
        for out_ids, scores in self._router._scatter(calls).values():
            rows += [(-float(sc), pos[int(i)], int(i), sc) for i, sc in zip(out_ids, scores)]
        rows.sort()
        return np.asarray([r[2] for r in rows], np.int64), np.asarray([r[3] for r in rows], np.float32)

    def fetch(self, ids: Sequence[int], *, partial: bool = False) -> tuple:
        ids = np.asarray(ids, np.int64)
        if not len(ids):
            return {}, ()
        # Rows that came with the first-stage lists of this search need no call.
        cache = getattr(self._router._copies._local, "rows", None) or {}
        have = {int(i): cache[int(i)] for i in ids.tolist() if int(i) in cache}
        if len(have) == len(ids):
            return have, ()
        ids = np.asarray([i for i in ids.tolist() if int(i) not in have], np.int64)
        shards = shard_of_chunk(ids)
        calls = {s: ("fetch", ids[shards == s].tolist()) for s in np.unique(shards).tolist()}
        rows: dict = dict(have)
        got = self._router._scatter(calls, partial)
        for part in got.values():
            rows.update(part)
        return rows, tuple(sorted(set(calls) - set(got)))

    def count_chunks(self) -> int:
        return self._router.n_chunks

    def clear(self) -> None:
        pass

    def close(self) -> None:
        pass


class _CollectionStats:
    """The BM25 statistics of the whole collection, kept at the router so that a search needs
    no statistics call: per shard, the version (its last write) they hold for it, its live
    chunks, their total length and the df of every term, and the sums over the shards.

    They follow the writes this router routes (each acknowledgement carries what the write
    changed, :class:`.shard.BM25Stats`) and are refreshed from a shard's whole table when a
    change does not apply (another version than the one held). Every search sends each shard
    the version its part was read at; a copy holding another answers with its own numbers
    instead, and the search is scored again: results stay exactly one Retriever's.
    """

    def __init__(self, num_shards: int) -> None:
        self._lock = threading.Lock()
        self.version: list = [None] * num_shards  # None: a whole table is needed
        self._shard: list = [{} for _ in range(num_shards)]  # stage -> [N, total, {term: df}]
        self._sum: dict = {}  # stage -> [N, total, {term: df}]

    def stale(self) -> list:
        return [s for s, v in enumerate(self.version) if v is None]

    def forget(self, s: int, unless: int | None = None) -> None:
        """Shard ``s``'s numbers are behind (a write this router did not route): refresh them."""
        with self._lock:
            if unless is None or self.version[s] != unless:
                self.version[s] = None

    def apply(self, s: int, report: Any) -> bool:
        """Takes a shard's report (an acknowledgement's changes or a whole table); False when
        it does not apply to the version held (the shard then needs a whole table)."""
        if not isinstance(report, dict) or "stages" not in report:
            self.forget(s)
            return False
        base = report["base"]
        with self._lock:
            if base is not None and base != self.version[s]:
                self.version[s] = None
                return False
            for name, (n, total, terms, df) in report["stages"].items():
                whole = self._sum.setdefault(name, [0, 0, {}])
                mine = self._shard[s].get(name)
                if base is None or mine is None:
                    if mine is not None:  # a whole table replaces the shard's part
                        gdf = whole[2]
                        for w, d in mine[2].items():
                            gdf[w] -= d
                        whole[0] -= mine[0]
                        whole[1] -= mine[1]
                    mine = self._shard[s][name] = [0, 0, {}]
                whole[0] += int(n) - mine[0]
                whole[1] += int(total) - mine[1]
                mine[0], mine[1] = int(n), int(total)
                sdf, gdf = mine[2], whole[2]
                for w, d in zip(terms, np.asarray(df).tolist()):
                    gdf[w] = gdf.get(w, 0) + d - sdf.get(w, 0)
                    sdf[w] = d
            self.version[s] = int(report["version"])
            return True

    def read(self, terms: dict, shards: Sequence[int], override: Mapping[int, tuple]) -> tuple:
        """``(stats, versions)``: ``stats[stage][query] = (N, total, {term: df})`` summed over the
        shards, ``versions[shard]`` the version each shard's part was read at. ``override``:
        ``{shard: (version, {stage: [(N, total, df per term) per query]})}`` replaces shards'
        parts with the numbers they answered with."""
        with self._lock:
            versions = {s: self.version[s] for s in shards}
            stats: dict = {}
            for name, per_query in terms.items():
                whole = self._sum.get(name, [0, 0, {}])
                gdf = whole[2]
                rows = []
                for qi, ts in enumerate(per_query):
                    n, total = whole[0], whole[1]
                    df = [gdf.get(w, 0) for w in ts]
                    for s, (_, theirs) in override.items():
                        mine = self._shard[s].get(name, [0, 0, {}])
                        sn, stotal, sdf = theirs[name][qi]
                        n += int(sn) - mine[0]
                        total += int(stotal) - mine[1]
                        df = [a + int(b) - mine[2].get(w, 0) for a, b, w in zip(df, sdf, ts)]
                    rows.append((n, total, dict(zip(ts, df))))
                stats[name] = rows
        for s, (v, _) in override.items():
            versions[s] = v
        return stats, versions


class ShardedRetriever:
    """A :class:`ragfind.Retriever` over ``num_shards`` Ray actors, with the same results.

    Args:
        num_shards: shards (1 .. 1024); a document goes to ``shard_of(id, num_shards)``.
        replicas: copies per shard (actors); a search reads one in-sync copy per shard
            (another when it fails or misses the deadline), a write goes to every in-sync copy
            and is acknowledged once all of them hold it (see ``RELIABILITY.md``).
        address: the Ray cluster to connect to (``ray.init(address=...)``) when Ray is not
            initialised yet; None starts (or joins) a local Ray.
        work_dir: where each copy of a shard keeps its own write-ahead log and snapshots
            (``shard-0000/copy-0/`` ...), on the disk of the node it runs on: the same path on
            every node, no shared file system needed. Default: a new temporary folder,
            removed by :meth:`close`.
        max_restarts: how often Ray restarts a dead shard actor (-1: without limit).
        restart_wait: seconds ``save`` waits for the shards to write their folders (the
            constructor waits at least a minute for the actors to start).
        deadline: seconds a call waits for the copies (default 2). A search's call that a copy
            has not answered after a quarter of it also goes to another in-sync copy (a hedged
            request; the first answer counts), so one stalled copy costs a search that quarter,
            and a shard no copy answers within the deadline is unavailable; a write fails (and
            is never committed later).
        write_deadline_per_doc: what a write of ``n`` documents adds to its deadline
            (``deadline + n * write_deadline_per_doc``): indexing takes time.
        wait_for_active_shards: copies of a shard that must be in sync before a write to it
            starts (Elasticsearch's setting of that name): 1 (default) the primary alone,
            ``"all"`` every copy, or a number up to ``replicas``. Checked on every shard of the
            write before any is written (after letting recovered copies back in); too few is a
            :class:`ShardUnavailableError` and nothing is applied. A write that starts still
            goes to every in-sync copy and is acknowledged once all of them hold it.
        placement: ``"spread"`` (default): the copies of a shard go to distinct nodes (a
            STRICT_SPREAD placement group per shard; a ValueError when the cluster has fewer
            nodes than ``replicas``); ``"any"``: where Ray puts them.
        name: a named collection: its shard actors are named and detached, so they outlive
            this router, :meth:`attach` finds them from any driver, and :meth:`close` leaves
            them running (:meth:`destroy` stops them). Give a ``work_dir`` (kept on every node).
        actor_options: more ``ray.remote`` options for the shard actors (``num_cpus``, ...).
        fanout: how a search calls the shards. ``"graph"``: through a Ray Compiled Graph
            over one in-sync copy of each shard (channels set up once; about a quarter of the
            cost of ordinary calls), compiled in the background from the start; ``"auto"``
            (default): the same once this router has searched a few dozen times;
            ``"calls"``: ordinary actor calls only. A search the graph cannot take (another
            thread in it, a copy busy with a write or out of the in-sync set, a copy that
            fails) makes ordinary calls, so results and deadlines are the same either way.
            A named collection (several routers may serve it; an actor serves one graph)
            always uses ordinary calls.
        **retriever_options: the :class:`ragfind.Retriever` arguments (``encoder``, ``bm25``,
            ``chunk_size``, ``stages``, ``rrf_k``, ...), the same for every shard. The
            re-ranker runs at the router; the encoder embeds queries at the router and
            documents in the shards (objects given here are pickled to the actors; give
            ``stages`` as a zero-argument callable returning them when they do not pickle,
            e.g. ``stages=lambda: [ragfind.SpladeStage(ragfind.SpladeEncoder())]``).

    Raises:
        ValueError: ``num_shards`` or ``replicas`` < 1, more than 1024 shards.
        ImportError: Ray is not installed (``pip install "ragfind[ray]"``).
    """

    def __init__(
        self,
        num_shards: int,
        *,
        replicas: int = 1,
        address: str | None = None,
        work_dir: str | os.PathLike | None = None,
        max_restarts: int = -1,
        restart_wait: float = 60.0,
        deadline: float = 2.0,
        write_deadline_per_doc: float = 0.01,
        wait_for_active_shards: int | str = 1,
        placement: str = "spread",
        name: str | None = None,
        actor_options: Mapping[str, Any] | None = None,
        fanout: str = "auto",
        **retriever_options: Any,
    ) -> None:
        self._init(
            num_shards,
            replicas,
            address,
            work_dir,
            max_restarts,
            restart_wait,
            (deadline, write_deadline_per_doc, placement, wait_for_active_shards, fanout),
            actor_options,
            retriever_options,
            snapshot=None,
            manifest=None,
            name=name,
        )

    def _init(
        self,
        num_shards: Any,
        replicas: Any,
        address: Any,
        work_dir: Any,
        max_restarts: int,
        restart_wait: float,
        deadlines: tuple,
        actor_options: Any,
        retriever_options: dict,
        snapshot: Path | None,
        manifest: dict | None,
        name: str | None = None,
        attach: bool = False,
    ) -> None:
        self._closed = True
        self._graph = None
        if name is not None and (not isinstance(name, str) or not name or "/" in name):
            raise ValueError(f"name = {name!r}; expected a non-empty str without '/'")
        self.name = name
        self.num_shards = _positive(num_shards, "num_shards")
        if self.num_shards > MAX_SHARDS:
            raise ValueError(f"num_shards = {num_shards!r}; expected at most {MAX_SHARDS}")
        self.replicas = _positive(replicas, "replicas")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < -1:
            raise ValueError(f"max_restarts = {max_restarts!r}; expected an int >= -1")
        self.restart_wait = float(restart_wait)
        deadline, write_deadline_per_doc, placement, active, fanout = deadlines
        if fanout not in _FANOUTS:
            raise ValueError(f"fanout = {fanout!r}; expected one of {', '.join(map(repr, _FANOUTS))}")
        if fanout == "graph" and name is not None:
            raise ValueError(
                "fanout='graph' with a named collection: several routers may serve it and a shard "
                "actor serves one compiled graph; pass fanout='auto' or 'calls'"
            )
        if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not deadline > 0:
            raise ValueError(f"deadline = {deadline!r}; expected seconds > 0")
        self.deadline = float(deadline)
        self.write_deadline_per_doc = float(write_deadline_per_doc)
        ok = active == "all" or (
            isinstance(active, (int, np.integer))
            and not isinstance(active, bool)
            and 1 <= active <= self.replicas
        )
        if not ok:
            raise ValueError(
                f"wait_for_active_shards = {active!r}; expected 'all' or an int from 1 to replicas "
                f"({self.replicas})"
            )
        self.wait_for_active_shards = active if active == "all" else int(active)
        ray = require_ray()
        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        options = dict(retriever_options)
        stages = options.get("stages", ())
        self._generation = 0  # counts the writes: the head caches results per generation
        self._kinds: dict | None = None  # metadata field -> kinds of value (_field_kinds)
        head = Retriever(
            **{k: v for k, v in options.items() if k != "stages"},
            stages=stages() if callable(stages) else stages,
            stage_runner=_ShardStages(self),
        )
        shard_options = dict(options)
        if head.bm25 is not None:
            shard_options["bm25"] = bm25_spec(head.bm25)
        self._options = options
        # A named collection outlives its routers: its folder is never removed by one.
        self._own_work_dir = work_dir is None and name is None
        if attach:
            self.work_dir = None  # the collection's, as its creator gave it
        else:
            self.work_dir = Path(tempfile.mkdtemp(prefix="ragfind-shards-") if work_dir is None else work_dir)
            self.work_dir.mkdir(parents=True, exist_ok=True)
        shard_class = ray.remote(ShardActor)
        self._groups: list = []
        self._actors: list = []
        copy_options = (lambda s, r: {}) if attach else self._placement(placement, dict(actor_options or {}))
        for s in range(self.num_shards):
            if attach:
                try:
                    self._actors.append(
                        [
                            ray.get_actor(_actor_name(name, s, r), namespace=NAMESPACE)
                            for r in range(self.replicas)
                        ]
                    )
                except ValueError as exc:
                    raise ValueError(
                        f"no sharded collection {name!r} with {self.num_shards} shards x {self.replicas} "
                        f"copies is running on this cluster ({exc})"
                    ) from None
                continue
            # Each copy's own folder, on its own node's disk (the same path on every node).
            homes = [self.work_dir / fmt.shard_dir(s) / f"copy-{r}" for r in range(self.replicas)]
            _adopt_shared_log(self.work_dir / fmt.shard_dir(s), homes)
            self._actors.append(
                [
                    shard_class.options(
                        max_restarts=max_restarts,
                        max_task_retries=0,
                        **{**dict(actor_options or {}), **copy_options(s, r), **_named(name, s, r)},
                    ).remote(s, os.fspath(homes[r]), shard_options, r == 0)
                    for r in range(self.replicas)
                ]
            )
        self._closed = False
        _at_exit(self)
        self._stop = threading.Event()
        self._failed: dict = {}
        try:
            # Starting actors on a busy cluster takes a while: at least a minute.
            start_wait = max(self.restart_wait, 60.0)
            if snapshot is not None:
                self._seed(snapshot, manifest, start_wait)
            self._copies = Copies(ray, self._actors, self.deadline, start_wait)
            for sh in range(self.num_shards):
                if not self._copies.in_sync[sh]:
                    # Surface why (a folder that does not load, options that do not unpickle).
                    ray.get(self._actors[sh][0].info.remote(), timeout=start_wait)
                    raise ShardUnavailableError(sh, "its election", start_wait)
            infos = self._scatter({s: ("info",) for s in range(self.num_shards)})
        except BaseException:
            self.close()
            raise
        self._healer = idle_healer(self._copies, self._stop)
        self._stats = _CollectionStats(self.num_shards)
        first = infos[0]
        for s, info in infos.items():
            if (
                info["first_stages"] != first["first_stages"]
                or info["rerank_stages"] != first["rerank_stages"]
            ):
                self.close()
                raise fmt.ShardedFolderError(f"shard {s} has other stages than shard 0: {info} vs {first}")
        head_names = [st.name for st in head.first_stages]
        rerank_names = [st.name for st in head.rerank_stages]
        if head_names != first["first_stages"] or rerank_names != first["rerank_stages"]:
            self.close()
            raise ValueError(
                f"the shards' stages {first['first_stages']} + {first['rerank_stages']} differ from "
                f"the options' {head_names} + {rerank_names}"
            )
        self._head = head
        self._bm25_names = {st.name for st in bm25_stages(head)}
        try:
            self._refresh_stats(range(self.num_shards))
        except BaseException:
            self.close()
            raise
        self._next_seq = max([i["max_seq"] for i in infos.values()] + [-1]) + 1
        # Only a router taking over a running collection can find a batch half written.
        self._batches_checked = not attach
        if attach:
            try:
                with self._copies.write_lock:
                    self._check_batches()
            except ShardUnavailableError:
                pass  # done before this router's first write instead
        if manifest is not None:
            self._next_seq = max(self._next_seq, int(manifest["next_doc_seq"]))
        if fanout != "calls" and name is None:
            after = 0 if fanout == "graph" else _GRAPH_AFTER
            self._graph = SearchGraph(ray, self._copies, self.deadline, build_after=after)

    def _seed(self, snapshot: Path, manifest: dict | None, wait: float) -> None:
        """Sends each saved shard folder to its copies through Ray (no file system is shared),
        one shard at a time; each copy keeps it on its own disk. Not a constructor argument:
        Ray could not restart an actor whose arguments went out of scope with this router."""
        for s, reps in enumerate(self._actors):
            lsn = int(manifest["lsn"][s]) if manifest is not None else 0
            files = self._ray.put(fmt.read_tree(snapshot / fmt.shard_dir(s)))
            for res in self._ray.get([a.seed.remote(files, lsn) for a in reps], timeout=wait):
                _raise_err(res)

    def _placement(self, placement: str, actor_options: dict) -> Any:
        """``(shard, copy) -> ray options``: with ``"spread"`` and more than one copy, each
        shard's copies go to distinct nodes (a STRICT_SPREAD placement group per shard)."""
        if placement not in ("spread", "any"):
            raise ValueError(f"placement = {placement!r}; expected 'spread' or 'any'")
        if placement == "any" or self.replicas == 1:
            return lambda s, r: {}
        ray = self._ray
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(nodes) < self.replicas:
            raise ValueError(
                f"replicas = {self.replicas} with placement='spread' needs {self.replicas} nodes (one "
                f"per copy of a shard); the cluster has {len(nodes)}. Add nodes, ask for fewer "
                "replicas, or pass placement='any' to allow copies of a shard on one node"
            )
        from ray.util.placement_group import placement_group  # the ray extra
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cpus = float(actor_options.get("num_cpus", 0.01)) or 0.01
        for s in range(self.num_shards):
            # A named collection's groups outlive the router, as its actors do, and carry a
            # name by which any router's destroy() finds them.
            life = (
                {"lifetime": "detached", "name": _group_name(self.name, s)} if self.name is not None else {}
            )
            pg = placement_group([{"CPU": cpus}] * self.replicas, strategy="STRICT_SPREAD", **life)
            self._groups.append(pg)
        for pg in self._groups:
            if not pg.wait(max(self.restart_wait, 60.0)):
                self._remove_groups()
                raise RuntimeError(
                    f"the cluster could not place {self.replicas} copies of a shard on distinct nodes "
                    f"({cpus} CPU each) within {max(self.restart_wait, 60.0):.0f} s"
                )

        def options(s: int, r: int) -> dict:
            return {
                "num_cpus": cpus,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    self._groups[s], placement_group_bundle_index=r
                ),
            }

        return options

    # ------------------------------------------------------------------ calls

    def _scatter(self, calls: Mapping[int, tuple], partial: bool = False) -> dict:
        """Runs ``calls[shard]`` on one in-sync copy of every given shard concurrently (the
        search's pinned copy); ``{shard: result}`` (errors returned by a shard re-raised
        here). With ``partial``, a shard no copy answers is left out instead of raising."""
        return {s: _raise_err(r) for s, r in self._copies.read(calls, partial).items()}

    def _search_shards(
        self, plan: list, terms: dict, depth: int, flt: Any, shards: list, partial: bool
    ) -> tuple:
        """``({shard: {"lists", "rows"}}, shards left out)``: every stage on every shard in one
        call per shard, BM25 scored with the router's collection statistics. A shard whose copy
        holds another version than its statistics were read at answers with its own numbers
        and the shards are asked again with them (a write raced the search); after a few such
        rounds the search waits for the writes in progress (their lock)."""
        missing: set = set()
        override: dict = {}
        rows_top = getattr(self._copies._local, "rows_top", 0)
        if sum(len(inputs) for _, _, inputs in plan) > 1:
            # Several lists: a fused head may rank deeper in each of them than in one list
            # (which the shards' heads always cover: its global head is in their union).
            rows_top *= 2
        lock = self._copies.write_lock
        held = False
        try:
            for attempt in range(_STATS_ATTEMPTS):
                stats, versions = None, {}
                if terms:
                    stale = [s for s in self._stats.stale() if s in shards and s not in override]
                    if stale:
                        missing |= self._refresh_stats(stale, partial)
                        shards = [s for s in shards if s not in missing]
                    stats, versions = self._stats.read(terms, shards, override)
                # Pickled once for every shard: Ray then handles one bytes argument per call.
                request = pickle.dumps((plan, stats, depth, flt, rows_top, versions), pickle.HIGHEST_PROTOCOL)
                got = self._first_stage(request, shards, partial)
                missing |= set(shards) - set(got)
                shards = sorted(got)
                racing = {s: r for s, r in got.items() if "stale" in r}
                if not racing:
                    return got, missing
                for s, r in racing.items():
                    override[s] = (int(r["stale"]), r["stats"])
                    if not lock.locked():
                        # Not a write of this router in flight: its numbers are behind.
                        self._stats.forget(s, unless=int(r["stale"]))
                if attempt >= 2 and not held:
                    held = lock.acquire(timeout=self.deadline)
        finally:
            if held:
                lock.release()
        raise ShardUnavailableError(
            min(racing), "first_stage", self.deadline, "its statistics changed on every try (racing writes)"
        )

    def _first_stage(self, request: bytes, shards: list, partial: bool) -> dict:
        """``{shard: answer}`` of the search ``request`` on ``shards``: through the search graph
        when it takes it, by ordinary calls for the shards it leaves (a copy busy with a
        write) or for all of them (the graph busy, not built or failed); a graph copy that was
        busy or failed is avoided where another copy of its shard is in sync."""
        graph = self._graph
        got = graph.call(request, shards) if graph is not None else None
        out: dict = {}
        rest = shards
        avoid = None
        if isinstance(got, GraphFailed):
            avoid = dict(enumerate(got.copies))
            for s, r in avoid.items():
                self._copies.probe(s, r)  # one that does not answer comes last from now on
        elif got is not None:
            replies, on = got
            pins = getattr(self._copies._local, "pins", None)
            rest = []
            for s in shards:
                reply = replies[s]
                if reply is None:  # busy with a write or a save: another copy if one is in sync
                    rest.append(s)
                    avoid = avoid or {}
                    avoid[s] = on[s]
                    continue
                out[s] = pickle.loads(_raise_err(reply))
                if pins is not None:
                    pins[s] = on[s]
        if rest:
            calls = {s: ("first_stage", request) for s in rest}
            for s, reply in self._copies.read(calls, partial, avoid=avoid).items():
                out[s] = pickle.loads(_raise_err(reply))
        return out

    def _refresh_stats(self, shards: Iterable[int], partial: bool = False) -> set:
        """Reads the whole BM25 statistics of ``shards``; returns the shards left out."""
        shards = list(shards)
        if not self._bm25_names or not shards:
            return set()
        got = self._scatter({s: ("bm25_table",) for s in shards}, partial)
        for s, report in got.items():
            self._stats.apply(s, report)
        return set(shards) - set(got)

    def _note_acks(self, out: Mapping[int, Any]) -> None:
        """The statistics follow the acknowledged writes (the write lock held); a shard whose
        acknowledgement does not apply to the version held is read whole by the next search
        (never here: a write waits on no other call)."""
        if not self._bm25_names:
            return
        for s, r in out.items():
            if not isinstance(r, BaseException):
                self._stats.apply(s, r.get("stats") if isinstance(r, dict) else None)

    def _read_primaries(self, calls: Mapping[int, tuple], timeout: float | None = None) -> dict:
        """``calls`` on each shard's primary (the write lock held)."""
        for s in calls:
            if self._copies.primary[s] not in self._copies.in_sync[s]:
                self._copies.heal(s)
        out = self._copies.read(calls, primary=True, timeout=timeout)
        return {s: _raise_err(r) for s, r in out.items()}

    def _check_batches(self) -> None:
        """Once, before this router's first write (the write lock held): a router that died
        while an add was on its way may have left the batch on some of its shards only; it was
        never acknowledged, so the shards holding it give it back (adds stay all or nothing).
        A shard's last write is the only one a dead router can have left half done."""
        if self._batches_checked:
            return
        lasts = self._read_primaries({s: ("last_add",) for s in range(self.num_shards)})
        ask: dict = {}
        for s, last in lasts.items():
            if last is not None:
                for t in last[1]:
                    if t != s:
                        ask.setdefault(t, []).append(last[0])
        known: dict = {}
        if ask:
            got = self._read_primaries({t: ("knows_batches", bids) for t, bids in ask.items()})
            for t, bids in ask.items():
                known.update({(t, b): k for b, k in zip(bids, got[t])})
        undo = {
            s: ("delete", last[2])
            for s, last in lasts.items()
            if last is not None and not all(known.get((t, last[0]), True) for t in last[1] if t != s)
        }
        if undo:
            try:
                self._write_shards(undo, sum(len(c[1]) for c in undo.values()), check=False)
            finally:
                self._generation += 1
        self._batches_checked = True

    def _check_active(self, calls: Mapping[int, tuple]) -> None:
        """``wait_for_active_shards`` on every shard of a write, before any is written."""
        copies = self._copies
        for s in sorted(calls):
            need = self.replicas if self.wait_for_active_shards == "all" else self.wait_for_active_shards
            if len(copies.in_sync[s]) < need and not copies.fenced[s]:
                copies.heal(s)
            have = len(copies.in_sync[s])
            if have < need:
                raise ShardUnavailableError(
                    s,
                    calls[s][0],
                    self.deadline,
                    f"{have} of its {self.replicas} copies are in sync; wait_for_active_shards = "
                    f"{self.wait_for_active_shards!r} asks for {need}",
                )

    def _write_shards(self, calls: Mapping[int, tuple], n_docs: int, check: bool = True) -> dict:
        """One write per shard (the write lock held); raises the first failure."""
        if check:
            self._check_active(calls)
        out = self._copies.write(calls, self.deadline + n_docs * self.write_deadline_per_doc)
        self._note_acks(out)
        for s in sorted(out):
            if isinstance(out[s], BaseException):
                self._failed = {t: r for t, r in out.items() if not isinstance(r, BaseException)}
                raise out[s]
        return out

    # ------------------------------------------------------------------ documents

    def __len__(self) -> int:
        """Number of documents over all shards."""
        return sum(i["documents"] for i in self._infos().values())

    @property
    def n_chunks(self) -> int:
        """Number of chunks over all shards."""
        return sum(i["chunks"] for i in self._infos().values())

    @property
    def fields(self) -> list:
        """Fields filters may use (``doc_id``, ``title`` and every metadata key seen)."""
        seen = set(BUILTIN_FIELDS)
        for i in self._infos().values():
            seen |= set(i["fields"])
        return sorted(seen)

    def _infos(self) -> dict:
        self._check_open()
        return self._scatter({s: ("info",) for s in range(self.num_shards)})

    def shard_info(self) -> list:
        """Per shard: documents, chunks, last applied write, log records replayed at start, pid."""
        infos = self._infos()
        return [infos[s] for s in range(self.num_shards)]

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this ShardedRetriever is closed")

    def add_documents(
        self,
        documents: Iterable[Mapping[str, Any]],
        *,
        embeddings: np.ndarray | None = None,
        batch_size: int = 32,
    ) -> int:
        """:meth:`ragfind.Retriever.add_documents`: each document goes to its shard; returns
        the number of chunks added once every shard has made its part durable. All or nothing:
        a shard that refuses its part takes the others' back out, and a part left by a router
        that died midway is taken back by the next router (:meth:`attach`).

        ``embeddings`` (one row per chunk, in order) are split by the router, which chunks the
        documents to count their chunks (as the shards will)."""
        self._check_open()
        docs = check_documents(documents)
        if not docs:
            return 0
        rows = None
        if embeddings is not None:
            if not any(hasattr(st, "prepare") for st in self._head.first_stages):
                raise ValueError("embeddings were given but this retriever has no encoder")
            counts: dict = {}
            for c in self._head.chunks(docs):
                counts[c.doc_id] = counts.get(c.doc_id, 0) + 1
            emb = np.asarray(embeddings)
            total = sum(counts.values())
            if emb.ndim != 2 or emb.shape[0] != total:
                raise ValueError(
                    f"embeddings have shape {emb.shape}; expected ({total}, dim) (one row per chunk)"
                )
            ends = np.cumsum([counts.get(d["id"], 0) for d in docs])
            rows = [emb[e - counts.get(d["id"], 0) : e] for d, e in zip(docs, ends)]
        with self._copies.write_lock:
            self._check_batches()
            # Each shard keeps its fields' kinds; the router keeps them across shards.
            kinds = self._field_kinds()
            batch_kinds = check_field_kinds(docs, lambda f: kinds.get(f, 0))
            by_shard: dict = {}
            for n, d in enumerate(docs):
                by_shard.setdefault(shard_of(d["id"], self.num_shards), []).append(n)
            present = self._read_primaries(
                {s: ("existing", [docs[n]["id"] for n in ns]) for s, ns in by_shard.items()}
            )
            taken = [x for s in sorted(present) for x in present[s]]
            if taken:
                raise ValueError(
                    f"document id {taken[0]!r} is already in the store ({len(taken)} of the batch are); "
                    "delete_documents() it first to replace it"
                )
            seqs = list(range(self._next_seq, self._next_seq + len(docs)))
            self._next_seq += len(docs)  # never reused, also when this add fails
            calls = {}
            # Every part names the batch and its shards: a router taking over after this one
            # died mid-add finds a batch some of its shards lack (:meth:`_check_batches`).
            batch = [uuid.uuid4().hex, sorted(by_shard)]
            for s, ns in by_shard.items():
                emb_part = np.concatenate([rows[n] for n in ns]) if rows is not None else None
                calls[s] = ("add", [docs[n] for n in ns], [seqs[n] for n in ns], emb_part, batch)
            self._failed = {}
            try:
                out = self._write_shards(calls, len(docs))
            except BaseException:
                self._kinds = None  # a shard that took and gave back a part keeps its kinds
                # All or nothing: the shards that took their part give it back.
                undo = {s: ("delete", [docs[n]["id"] for n in by_shard[s]]) for s in self._failed}
                if undo:
                    try:
                        self._note_acks(
                            self._copies.write(undo, self.deadline + len(docs) * self.write_deadline_per_doc)
                        )
                    except Exception:  # noqa: BLE001 - the original failure is the one to report
                        pass
                raise
            finally:
                self._generation += 1
            for f, bits in batch_kinds.items():
                kinds[f] = kinds.get(f, 0) | bits
            return sum(_written(r) for r in out.values())

    def _field_kinds(self) -> dict:
        """Metadata field -> the kinds of value the shards hold (read once, then kept up to
        date by this router's writes; a field is the same field on every shard)."""
        if self._kinds is None:
            kinds: dict = {}
            for i in self._infos().values():
                for f, bits in i.get("kinds", {}).items():
                    kinds[f] = kinds.get(f, 0) | bits
            self._kinds = kinds
        return self._kinds

    def delete_documents(self, doc_ids: Iterable[Any]) -> int:
        """Removes documents and their chunks from their shards; returns the chunks removed.

        Raises:
            KeyError: an id is not stored (nothing is removed).
        """
        self._check_open()
        ids = [str(d) for d in ([doc_ids] if isinstance(doc_ids, (str, int)) else doc_ids)]
        if not ids:
            return 0
        with self._copies.write_lock:
            self._check_batches()
            by_shard: dict = {}
            for d in dict.fromkeys(ids):
                by_shard.setdefault(shard_of(d, self.num_shards), []).append(d)
            present = self._read_primaries({s: ("existing", ds) for s, ds in by_shard.items()})
            for s, ds in by_shard.items():
                missing = [d for d in ds if d not in set(present[s])]
                if missing:
                    raise KeyError(f"document id {missing[0]!r} is not in the store; nothing was deleted")
            try:
                out = self._write_shards({s: ("delete", ds) for s, ds in by_shard.items()}, len(ids))
            finally:
                self._generation += 1
            return sum(_written(r) for r in out.values())

    def get_document(self, doc_id: Any) -> dict:
        """The stored document ``{"id", "title", "text", "metadata"}``; KeyError when absent."""
        self._check_open()
        s = shard_of(doc_id, self.num_shards)
        return self._scatter({s: ("get_document", str(doc_id))})[s]

    # ------------------------------------------------------------------ search

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
    ) -> ShardedSearchResult:
        """:meth:`ragfind.Retriever.search` over every shard, with the same results.

        Each shard's phases go to one in-sync copy; a copy that fails is replaced by another
        in-sync copy, and one still silent after a quarter of ``deadline`` is hedged by another
        (silent copies cost a phase one ``deadline`` in all). ``partial=True``: a shard no copy
        answers is left out and the result is marked ``partial`` (its ``missing_shards``);
        otherwise that is a :class:`ShardUnavailableError` naming the shard. One call per shard
        in the steady state (the router holds the BM25 statistics; see ``RELIABILITY.md``).
        """
        self._check_open()
        local = self._copies.pin()  # one copy per shard for all of this search's phases
        # The shards send the rows of their lists' heads along (the passages kept, twice
        # that when lists are fused; a fused head deeper than that in every list, or rows
        # beyond what fits in one inline Ray reply, are fetched after).
        want = k if isinstance(k, int) else 10
        head = self._head
        if rerank and (head.reranker is not None or head.rerank_stages):
            want = max(want, head.rerank_candidates)  # the passages the re-rankers see
        local.rows_top, local.rows = int(want), {}
        try:
            res = self._head.search(
                query,
                k,
                filters,
                rerank=rerank,
                use_cache=use_cache,
                collapse=collapse,
                stages=stages,
                partial=partial,
            )
        finally:
            self._copies.unpin()
        return ShardedSearchResult(
            res.passages, res.timings, res.cached, res.queries, res.concurrent, res.missing
        )

    def embed_query(self, query: str) -> np.ndarray:
        """The (cached) query embedding, computed at the router."""
        return self._head.embed_query(query)

    def cache_stats(self) -> dict:
        return self._head.cache_stats()

    def set_cache_size(self, cache_size: int) -> None:
        """:meth:`ragfind.Retriever.set_cache_size` of the router's caches."""
        self._head.set_cache_size(cache_size)

    def clear_cache(self) -> None:
        self._head.clear_cache()

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike) -> None:
        """Writes the sharded folder ``path`` (``shards.json`` + one Retriever folder per
        shard), atomically: written aside, then renamed into place. Writes wait meanwhile;
        afterwards each shard restarts from its new folder and empties its log.

        Raises:
            FileExistsError: ``path`` exists and is not a sharded folder (it is left alone).
        """
        self._check_open()
        dst = Path(path)
        parent = dst.parent if str(dst.parent) else Path(".")
        parent.mkdir(parents=True, exist_ok=True)
        if dst.exists() and not fmt.is_sharded_folder(dst) and any(dst.iterdir()):
            raise FileExistsError(
                f"{str(dst)!r} exists and is not a sharded retriever folder; refusing to replace it"
            )
        tmp = parent / f".{dst.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # Writes wait; searches go on (on the copies not busy saving).
        with self._copies.write_lock:
            try:
                tmp.mkdir()
                # Every in-sync copy snapshots itself on its own disk and empties its log; the
                # primaries' snapshots come here through Ray (no file system is shared).
                self._copies.checkpoint(range(self.num_shards), self.restart_wait)
                exports = {s: ("export",) for s in range(self.num_shards)}
                got = self._read_primaries(exports, self.restart_wait)
                lsns = {}
                for s, shard in got.items():
                    fmt.write_tree(tmp / fmt.shard_dir(s), shard["files"])
                    lsns[s] = shard["lsn"]
                fmt.write_manifest(
                    tmp,
                    {
                        "format": fmt.FORMAT_NAME,
                        "version": fmt.FORMAT_VERSION,
                        "num_shards": self.num_shards,
                        "next_doc_seq": self._next_seq,
                        "lsn": [int(lsns[s]) for s in range(self.num_shards)],
                        "options": {
                            "reranker": self._head.reranker_ref
                            if isinstance(self._head.reranker_ref, str)
                            else None
                        },
                    },
                )
                fsync_dir(tmp)
                old = None
                if dst.exists():
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
        num_shards: int | None = None,
        *,
        replicas: int = 1,
        address: str | None = None,
        work_dir: str | os.PathLike | None = None,
        max_restarts: int = -1,
        restart_wait: float = 60.0,
        deadline: float = 2.0,
        write_deadline_per_doc: float = 0.01,
        wait_for_active_shards: int | str = 1,
        placement: str = "spread",
        actor_options: Mapping[str, Any] | None = None,
        fanout: str = "auto",
        **retriever_options: Any,
    ) -> ShardedRetriever:
        """Opens a folder written by :meth:`save` (or by :func:`ragfind.distributed.build`).

        ``num_shards``, when given, must be the folder's. ``retriever_options`` as for
        :meth:`ragfind.Retriever.load` and the constructor (``encoder``, ``stages``, ...);
        settings not given are read from the shard folders.

        Raises:
            ShardedFolderError (a ValueError): not a sharded folder, another format or version,
                another shard count than ``num_shards``, a shard folder missing.
            ragfind.RetrieverFolderError: a shard folder that does not load.
        """
        folder = Path(path).resolve()
        m = fmt.read_manifest(folder)
        if num_shards is not None and _positive(num_shards, "num_shards") != m["num_shards"]:
            raise fmt.ShardedFolderError(
                f"{str(path)!r} holds {m['num_shards']} shards; num_shards = {num_shards!r} was asked "
                "(a sharded folder is loaded with its own shard count)"
            )
        opts = _options_from_folder(folder / fmt.shard_dir(0), m, retriever_options)
        obj = cls.__new__(cls)
        obj._init(
            m["num_shards"],
            replicas,
            address,
            work_dir,
            max_restarts,
            restart_wait,
            (deadline, write_deadline_per_doc, placement, wait_for_active_shards, fanout),
            actor_options,
            opts,
            snapshot=folder,
            manifest=m,
        )
        return obj

    @classmethod
    def attach(
        cls,
        name: str,
        num_shards: int,
        *,
        replicas: int = 1,
        address: str | None = None,
        deadline: float = 2.0,
        write_deadline_per_doc: float = 0.01,
        wait_for_active_shards: int | str = 1,
        **retriever_options: Any,
    ) -> ShardedRetriever:
        """A router over the running collection ``name`` (created with ``name=``), e.g. after
        the router that created it died. It takes the writes over under a new primary term:
        the routers before it may still search, and their writes raise
        :class:`StalePrimaryError`. An add its predecessor left on some of its shards only
        (it died midway; that add was never acknowledged) is taken back first.
        ``retriever_options`` as given to the constructor; ``deadline``,
        ``write_deadline_per_doc`` and ``wait_for_active_shards`` as there.

        Raises:
            ValueError: no such collection with ``num_shards`` x ``replicas`` copies.
        """
        obj = cls.__new__(cls)
        obj._init(
            num_shards,
            replicas,
            address,
            None,
            -1,
            60.0,
            (deadline, write_deadline_per_doc, "any", wait_for_active_shards, "calls"),
            None,
            dict(retriever_options),
            snapshot=None,
            manifest=None,
            name=name,
            attach=True,
        )
        return obj

    def destroy(self) -> None:
        """Stops the shard actors of this collection (named or not) for good and removes its
        placement groups, also when this router attached to it; :meth:`close` of a named
        collection leaves them running for other routers."""
        self._kill_actors()
        self._remove_groups()
        self._remove_named_groups()
        self.close()

    def _kill_actors(self) -> None:
        for reps in getattr(self, "_actors", ()):
            for a in reps:
                try:
                    self._ray.kill(a, no_restart=True)
                except Exception:
                    pass

    def close(self) -> None:
        """Stops this router; the shard actors too, unless the collection is named (see
        :meth:`destroy`). Removes the default work folder. Idempotent.

        Never starts Ray: once Ray is down (``ray.shutdown()``, or the interpreter exiting:
        a router left open is closed at exit, and by ``__del__``), the actors, placement
        groups and search graph went with it, and only this process's part is undone.
        Calling Ray then would start a fresh local cluster (``ray.kill`` initialises Ray on
        demand) and wait for it, so the script would never end."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        _OPEN.discard(self)
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        ray_up = self._ray_running()
        if self._graph is not None and ray_up:
            self._graph.close()  # before the actors stop: they would fail its loops
        if getattr(self, "name", None) is not None:
            return
        if ray_up:
            for reps in self._actors:
                for a in reps:
                    try:
                        self._ray.kill(a, no_restart=True)
                    except Exception:
                        pass
            self._remove_groups()
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _ray_running(self) -> bool:
        """Ray is up in this process, and may be called without starting it (is_initialized
        itself never starts it); False while the interpreter is finalizing."""
        ray = getattr(self, "_ray", None)
        if ray is None or sys.is_finalizing():
            return False
        try:
            return bool(ray.is_initialized())
        except Exception:  # noqa: BLE001 - Ray's modules torn down at exit
            return False

    def _remove_groups(self) -> None:
        from ray.util.placement_group import remove_placement_group  # the ray extra

        for pg in getattr(self, "_groups", ()):
            try:
                remove_placement_group(pg)
            except Exception:
                pass
        self._groups = []

    def _remove_named_groups(self) -> None:
        """Removes the named collection's placement groups whichever router created them. They
        are looked up by name in the cluster's table: ``get_placement_group`` searches only this
        driver's namespace, and the creating driver had its own. A missing one is no error."""
        if getattr(self, "name", None) is None or not hasattr(self, "_ray"):
            return
        # the ray extra
        from ray.util.placement_group import (
            PlacementGroup,
            placement_group_table,
            remove_placement_group,
        )

        names = {_group_name(self.name, s) for s in range(self.num_shards)}
        try:
            table = placement_group_table()
        except Exception:
            return
        for group_id, info in table.items():
            if info.get("name") in names and info.get("state") != "REMOVED":
                try:
                    remove_placement_group(PlacementGroup(self._ray.PlacementGroupID.from_hex(group_id)))
                except Exception:
                    pass  # removed meanwhile

    def __enter__(self) -> ShardedRetriever:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"ShardedRetriever(num_shards={self.num_shards}, replicas={self.replicas})"


NAMESPACE = "ragfind"

#: The routers not yet closed, closed at exit by :func:`_close_open`.
_OPEN: weakref.WeakSet = weakref.WeakSet()
_HOOKED: list = []


def _at_exit(router: ShardedRetriever) -> None:
    """Records an open router, to be closed at interpreter exit. The hook is registered on the
    first router, after ``import ray`` registered Ray's own: atexit runs the later hook first,
    so routers close while Ray still runs (their work folders go too). Should Ray's hook run
    first anyway (Ray imported again, say), :meth:`ShardedRetriever.close` leaves Ray alone."""
    _OPEN.add(router)
    if not _HOOKED:
        _HOOKED.append(True)
        atexit.register(_close_open)


def _close_open() -> None:
    for router in list(_OPEN):
        try:
            router.close()
        except Exception:  # noqa: BLE001 - best effort at exit, as __del__
            pass


def _actor_name(name: str | None, s: int, r: int) -> str:
    return f"{name}/shard-{s:04d}/copy-{r}"


def _group_name(name: str, s: int) -> str:
    """The name of a named collection's placement group of shard ``s`` (one per shard)."""
    return f"{NAMESPACE}/{name}/shard-{s:04d}"


def _named(name: str | None, s: int, r: int) -> dict:
    """A named collection's actors: detached (they outlive the router), found by name."""
    if name is None:
        return {}
    return {"name": _actor_name(name, s, r), "namespace": NAMESPACE, "lifetime": "detached"}


def _adopt_shared_log(shard_home: Path, homes: list) -> None:
    """A ``work_dir`` of an older version kept one log and state per shard, shared by its
    copies (on a shared file system): each copy starts from a copy of them, so the writes
    acknowledged since the last save are kept. Each copy's folder is written aside and renamed
    into place; the shared files go last (a crash midway leaves them for the next start, and a
    copy whose folder is missing then recovers from another)."""
    old = [shard_home / name for name in (WAL, STATE) if (shard_home / name).is_file()]
    if not old or any(h.exists() for h in homes):
        return
    files = {f.name: f.read_bytes() for f in old}
    for h in homes:
        tmp = h.with_name(h.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        fmt.write_tree(tmp, files)
        os.replace(tmp, h)
    fsync_dir(shard_home)
    for f in old:
        f.unlink()
    fsync_dir(shard_home)


def _options_from_folder(shard0: Path, manifest: dict, given: dict) -> dict:
    """The Retriever options a sharded folder was built with (from shard 0's manifest and
    BM25 index), overridden by those given."""
    try:
        with open(shard0 / MANIFEST, encoding="utf-8") as fh:
            m = json.load(fh)
    except (OSError, ValueError) as exc:
        raise RetrieverFolderError(f"{str(shard0)!r}: no readable {MANIFEST}: {exc}") from exc
    cfg = m.get("config", {})
    opts: dict = {}
    for key in (
        "chunk_size",
        "chunk_overlap",
        "rrf_k",
        "weights",
        "candidates",
        "rerank_candidates",
        "cache_size",
    ):
        if key in cfg:
            opts[key] = cfg[key]
    if cfg.get("dense_kind"):
        opts["dense_kind"] = cfg["dense_kind"]
    opts["contextualize"] = cfg.get("contextualize") is not None
    enc = m.get("encoder")
    opts["encoder"] = enc["ref"] if enc else None
    if (shard0 / BM25_FILE).exists():
        saved = BM25Index.load(shard0 / BM25_FILE, mmap=True)
        s = saved.stats()
        opts["bm25"] = BM25Index(
            s["method"], s["k1"], s["b"], s["delta"], Analyzer.from_config(saved.analyzer.config())
        )
    else:
        opts["bm25"] = None
    rr = manifest.get("options", {}).get("reranker")
    if rr:
        opts["reranker"] = rr
    opts.update(given)
    return opts
