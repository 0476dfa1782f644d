"""The search fan-out on a Ray Compiled Graph: one copy of every shard called at once through
shared-memory channels set up once, about a quarter of what ordinary actor calls cost
(``bench/compare_ray_fanout.py``).

Only a search's shard call goes through the graph; writes, statistics, fetches, re-ranking
and recovery stay ordinary calls, and any search the graph cannot take falls back to them:

- Ray allows one thread at a time in a graph: a search finding it busy makes ordinary calls.
- An actor serves one graph at a time, so a router holds one, and only for a collection no
  other router serves (not a named one).
- A copy busy with a write answers None at once (:meth:`.shard.ShardActor.graph_first_stage`):
  that shard is asked by an ordinary call, on another in-sync copy when there is one.
- A graph over a copy that left the in-sync set is not used; one that fails or misses the
  deadline is torn down and its copies are avoided by that search's ordinary calls. A new
  graph is compiled in the background over in-sync copies, waiting longer after each failure.
- The graph's copies are on the router's node: Ray's channels to another node go through the
  raylets, and a node stopped mid-transfer crashed a raylet in the cluster tests (Ray 2.60,
  ``MutableObjectProvider::HandlePushMutableObject``). Elsewhere searches make ordinary calls.
- Compiling a graph and warming it up hold up the copies' ordinary calls (0.3-0.9 s here
  idle, seconds on busy cores): a wait on the copies that overlaps a compile gets
  ``COMPILE_GRACE`` deadlines (:class:`.replication.Copies`), so no search or write fails
  for it.
- While it waits for the next search, each actor of a graph polls its channel (Ray's
  ``ReadAcquire`` spins with ``sched_yield``): about half a core per shard copy, measured,
  though it yields to other work. A graph no search has used for ``idle_after`` seconds is
  torn down, and compiled again when searches come back.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ragfind.distributed.replication import Copies

__all__ = ["SearchGraph"]

# A first execution starts each actor's graph loop: seconds on a loaded machine.
_WARM_UP_WAIT = 60.0
_RETRY_WAIT = (1.0, 60.0)  # after a failed or broken graph: first wait, longest wait
IDLE_AFTER = 30.0  # seconds without a search before the graph is torn down


class GraphFailed:
    """The graph failed or missed the deadline; ``copies[shard]`` were the copies it called."""

    def __init__(self, copies: tuple) -> None:
        self.copies = copies


class SearchGraph:
    """A compiled graph calling ``first_stage`` on one in-sync copy of every shard.

    ``build_after`` searches (0: at once) before a graph is compiled, in the background, and
    again after it was torn down for ``idle_after`` seconds without a search: a router that
    searches once in a while never pays for one.
    """

    def __init__(
        self,
        ray: Any,
        copies: Copies,
        deadline: float,
        build_after: int = 0,
        idle_after: float = IDLE_AFTER,
    ) -> None:
        self._ray = ray
        self._copies = copies
        self.deadline = float(deadline)
        self._lock = threading.Lock()  # held by the one thread inside the graph
        self._starting = threading.Lock()  # starts the builder
        self._graph: Any = None
        self._on: tuple = ()  # the copy of each shard the graph calls
        self._build_after = int(build_after)
        self._countdown = int(build_after)
        self._idle_after = float(idle_after)
        self._last_search = time.monotonic()
        self._reaper: threading.Thread | None = None
        self._builder: threading.Thread | None = None
        self._teardown: threading.Thread | None = None
        self._next_try = 0.0
        self._wait = _RETRY_WAIT[0]
        self._closed = False
        self.built = 0  # graphs compiled and warmed up (tests and benchmarks read these)
        self.served = 0  # searches the graph answered
        self._typical = 0.001  # seconds a graph call takes (moving average, at most 10 ms)
        if self._countdown <= 0:
            self._schedule()

    @property
    def ready(self) -> bool:
        return self._graph is not None

    def wait_ready(self, timeout: float) -> bool:
        """Tests and benchmarks: waits until a graph is up (True) or ``timeout`` passes."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._graph is not None:
                return True
            self._schedule()
            time.sleep(0.02)
        return self._graph is not None

    def call(self, request: bytes, shards: list) -> Any:
        """``(replies, copies)``: each shard's reply (None: that copy was busy with a write) and
        the copy that gave it; :class:`GraphFailed`; or None when the graph cannot take this
        search."""
        self._last_search = time.monotonic()
        if self._graph is None:
            if self._countdown > 0:
                self._countdown -= 1
            if self._countdown <= 0:
                self._schedule()
            return None
        # Another thread's search in the graph ends in about one graph call: waiting that long
        # costs less than the ordinary calls (about twice a graph call at four shards).
        if not self._lock.acquire(timeout=self._typical):
            return None
        try:
            graph, on = self._graph, self._on
            if graph is None or len(shards) != len(on):
                return None
            in_sync = self._copies.in_sync
            if not all(r in in_sync[s] for s, r in enumerate(on)):
                self._drop()  # a copy left the set: compile over the current one
                return None
            t = time.perf_counter()
            try:
                replies = self._ray.get(graph.execute(request), timeout=self.deadline)
            except Exception:  # noqa: BLE001 - a dead or stopped copy, a closed channel
                self._drop()
                return GraphFailed(on)
            self._typical += 0.1 * (min(time.perf_counter() - t, 0.01) - self._typical)
            self._wait = _RETRY_WAIT[0]
            self.served += 1
            return replies, on
        finally:
            self._lock.release()

    # ------------------------------------------------------------------ building

    def _schedule(self) -> None:
        if self._closed or time.monotonic() < self._next_try:
            return
        with self._starting:  # searches on several threads: one builder at a time
            b = self._builder
            if self._closed or (b is not None and b.is_alive()):
                return
            self._next_try = time.monotonic() + self._wait
            b = threading.Thread(target=self._build, name="ragfind-search-graph", daemon=True)
            b.start()
            self._builder = b

    def _failed(self) -> None:
        self._next_try = time.monotonic() + self._wait
        self._wait = min(self._wait * 2, _RETRY_WAIT[1])

    def _build(self) -> None:
        from ray.dag import InputNode, MultiOutputNode  # the ray extra

        t = self._teardown
        if t is not None:
            t.join(self.deadline)
            if t.is_alive():  # a copy still holds the old graph (stopped): later
                self._failed()
                return
        copies = self._copies
        graph = None
        try:
            on = self._choose()
            if on is None:
                self._failed()
                return
            with InputNode() as inp:
                dag = MultiOutputNode(
                    [copies.actors[s][r].graph_first_stage.bind(inp) for s, r in enumerate(on)]
                )
            # Meanwhile the copies answer ordinary calls late: their waits get longer.
            with copies.compiling():
                # Sending a search waits for the copies to take it: within the deadline too.
                graph = dag.experimental_compile(_submit_timeout=self.deadline)
                self._ray.get(graph.execute(None), timeout=_WARM_UP_WAIT)
        except Exception:  # noqa: BLE001 - a copy died or is stopped: ordinary calls meanwhile
            if graph is not None:
                self._tear_down(graph)
            self._failed()
            return
        with self._lock:
            if self._closed:
                self._tear_down(graph)
                return
            self._graph, self._on = graph, on
            self.built += 1
            self._last_search = time.monotonic()
            if self._reaper is None or not self._reaper.is_alive():
                r = threading.Thread(target=self._reap, name="ragfind-search-graph-idle", daemon=True)
                r.start()
                self._reaper = r

    def _reap(self) -> None:
        """Tears the graph down once no search used it for ``idle_after`` seconds (its actors
        poll their channels while it is up)."""
        while not self._closed and self._graph is not None:
            idle = time.monotonic() - self._last_search
            if idle >= self._idle_after:
                with self._lock:
                    if self._graph is not None and time.monotonic() - self._last_search >= self._idle_after:
                        graph, self._graph, self._on = self._graph, None, ()
                        self._tear_down(graph)
                        self._countdown = self._build_after
                return
            time.sleep(min(self._idle_after - idle, 5.0) + 0.01)

    def _choose(self) -> tuple | None:
        """A copy of each shard for the graph: in sync, not stuck in an earlier call (a
        stopped copy would hang it), on this router's node (the primary when it is one of
        them); None when some shard has none."""
        ray, copies = self._ray, self._copies
        live = [
            [r for r in sorted(copies.in_sync[s]) if copies._free(s, r)] for s in range(len(copies.actors))
        ]
        refs = {(s, r): copies.actors[s][r].node.remote() for s, rs in enumerate(live) for r in rs}
        nodes = dict(zip(refs, ray.get(list(refs.values()), timeout=self.deadline)))
        here = ray.get_runtime_context().get_node_id()
        on = []
        for s, rs in enumerate(live):
            local = sorted((r != copies.primary[s], r) for r in rs if nodes[(s, r)] == here)
            if not local:
                return None
            on.append(local[0][1])
        return tuple(on)

    def _drop(self) -> None:
        """Takes the graph out (the lock held) and tears it down in the background: a stopped
        copy can hold a teardown until it resumes or dies."""
        graph, self._graph, self._on = self._graph, None, ()
        if graph is not None:
            self._tear_down(graph)
        self._failed()

    def _tear_down(self, graph: Any) -> None:
        def run() -> None:
            try:
                graph.teardown()
            except Exception:  # noqa: BLE001 - the actors are gone or going
                pass

        t = threading.Thread(target=run, name="ragfind-search-graph-teardown", daemon=True)
        t.start()
        self._teardown = t  # started first: a builder joins it

    def close(self, wait: float = 5.0) -> None:
        """Tears the graph down (before the router stops its actors)."""
        self._closed = True
        with self._lock:
            graph, self._graph, self._on = self._graph, None, ()
        if graph is not None:
            self._tear_down(graph)
        for t in (self._builder, self._teardown):
            if t is not None and t is not threading.current_thread():
                t.join(wait)
