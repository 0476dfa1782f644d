"""The copies of every shard and the replication protocol between them, as the router runs it.

Per shard the router holds a primary term, the primary copy, the in-sync set (the copies that
hold every acknowledged write and no failed one) and ``last``, the sequence number of the last
acknowledged write. A write gets the next sequence number (never reused, also when the write
fails) and goes to every in-sync copy at once with the term and ``prev = last``:

- it is acknowledged only when every in-sync copy has applied it and logged it durably in its
  own log; a copy that fails, refuses (it missed a write: ``prev``
  is not its last one) or misses the deadline leaves the in-sync set;
- when the primary fails, the write fails: the copies that applied it take it back, an abort
  record in their logs keeps every later replay from committing it, and the primary leaves the
  in-sync set. The next write first promotes a copy under a new term (never one behind
  ``last``); the term record it logs fences off the old primary.

A copy outside the in-sync set rejoins through ``recover``, from the primary: it gives back
the writes the primary does not count and gets the ones it lacks (from the primary's log, or
its snapshot when that log no longer reaches back), and is let back only when its last write
is ``last``, under the write lock, so no write slips between.
Searches read in-sync copies only, pinned per search, and never take the write lock.

Every wait on a copy is bounded by ``deadline`` seconds, or ``COMPILE_GRACE`` times that for
a wait that overlapped Ray compiling the router's search graph (:mod:`.fanout`), which holds
up the copies' ordinary calls meanwhile.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ragfind.distributed.shard import _Err, _Refused

__all__ = ["Copies", "ShardUnavailableError", "StalePrimaryError"]


class ShardUnavailableError(RuntimeError):
    """No in-sync copy of a shard answered within the deadline (for a write: the write failed
    and is never committed later)."""

    def __init__(self, shard: int, what: str, waited: float, cause: Any = None) -> None:
        why = ""
        if cause is not None:
            why = " Last error: " + " ".join(str(cause).split())[:600]
        super().__init__(
            f"shard {shard} is unavailable: no in-sync copy answered {what} within {waited:.1f} s; "
            f"a write is not applied, a search may pass partial=True to get the other shards' results.{why}"
        )
        self.shard = shard


class StalePrimaryError(RuntimeError):
    """Another router promoted a primary under a newer term: this router is fenced off."""


_TIMEOUT = object()

#: The fraction of a read's deadline after which a silent copy is hedged by another.
HEDGE = 0.25

#: How many deadlines a wait on the copies gets when Ray compiled the search graph meanwhile:
#: the compile's own calls on the copies hold up theirs (0.3-0.9 s here idle, 2-4 s with the
#: cores busy), and a search or write must not fail for the router's own background work.
COMPILE_GRACE = 4.0


class _Failed:
    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc


class Copies:
    """The shard actors (``actors[shard][copy]``) and the replication state of each shard."""

    def __init__(self, ray: Any, actors: list, deadline: float, start_wait: float) -> None:
        self.ray = ray
        self.actors = actors
        self.deadline = float(deadline)
        n = len(actors)
        self.term = [0] * n
        self.primary = [0] * n
        self.in_sync: list = [set() for _ in range(n)]
        self.last = [0] * n
        self.next_seq = [1] * n
        self.aborts: list = [[] for _ in range(n)]
        self.fenced: list = [0] * n  # the newer term another router holds, once seen
        self.write_lock = threading.Lock()
        self._busy: dict = {}  # (shard, copy) -> a call not answered yet
        self._probes: dict = {}  # (shard, copy) -> the healer's no-op call to a copy out of sync
        self._dropped: dict = {}  # (shard, copy) -> when it last left the in-sync set
        self._rr = [0] * n
        self._rr_lock = threading.Lock()
        self._local = threading.local()
        self._compiling = 0  # compiles of the search graph under way
        self._compiled = float("-inf")  # when the last one ended (time.monotonic)
        with self.write_lock:
            for s in range(n):
                self._elect(s, start_wait)

    # ------------------------------------------------------------------ waiting

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Held while Ray compiles and warms up a search graph over these copies."""
        with self._rr_lock:
            self._compiling += 1
        try:
            yield
        finally:
            with self._rr_lock:
                self._compiling -= 1
                self._compiled = time.monotonic()

    def _held_up(self, since: float) -> bool:
        """A compile of the search graph ran at some moment after ``since``."""
        return self._compiling > 0 or self._compiled >= since

    def wait(self, futures: Mapping[Any, Any], timeout: float) -> dict:
        """``{key: result}`` for each future; ``_Failed`` for a dead copy, ``_TIMEOUT`` for one
        not done within ``timeout`` seconds (left running; the copy counts as busy)."""
        ray = self.ray
        refs = list(futures.values())
        out: dict = {}
        ready: set = set()
        if refs:
            start = time.monotonic()
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=max(timeout, 0.0))
            ready = set(done)
            if len(ready) < len(refs) and self._held_up(start):
                rest = [ref for ref in refs if ref not in ready]
                left = start + timeout * COMPILE_GRACE - time.monotonic()
                ready.update(ray.wait(rest, num_returns=len(rest), timeout=max(left, 0.0))[0])
        if ready and len(ready) == len(refs):
            try:
                # All answered (the usual case): one get for all of them.
                return dict(zip(futures, ray.get(refs)))
            except Exception:  # noqa: BLE001 - a copy failed: sorted out one by one below
                pass
        for key, ref in futures.items():
            if ref not in ready:
                out[key] = _TIMEOUT
                if isinstance(key, tuple):
                    self._busy[key] = ref
                continue
            out[key] = self._outcome(ref)
        return out

    def _outcome(self, ref: Any) -> Any:
        """A finished call's result, or ``_Failed`` when its copy died or the call raised."""
        try:
            return self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a dead copy or a task error: this copy failed
            return _Failed(exc)

    def _free(self, s: int, r: int) -> bool:
        fut = self._busy.get((s, r))
        if fut is None:
            return True
        done, _ = self.ray.wait([fut], timeout=0)
        if done:
            self._busy.pop((s, r), None)
            return True
        return False

    def probe(self, s: int, r: int) -> None:
        """Counts copy ``r`` of shard ``s`` as busy until it answers a no-op call (after it
        failed a call another way than the ordinary ones: the search graph)."""
        if (s, r) not in self._busy:
            self._busy[(s, r)] = self._call(s, r, "state")

    def _call(self, s: int, r: int, method: str, *args: Any) -> Any:
        return getattr(self.actors[s][r], method).remote(*args)

    # ------------------------------------------------------------------ membership

    def _elect(self, s: int, wait: float) -> bool:
        """Promotes a copy of shard ``s`` under a new term (the write lock held); the others
        leave the in-sync set until they recover. False when no copy answered."""
        reps = self.actors[s]
        order = sorted(self.in_sync[s]) + [r for r in range(len(reps)) if r not in self.in_sync[s]]
        if self.term[s] == 0:
            order = self._startup_order(s, wait)
        for r in order:
            if not self._free(s, r):
                continue
            term = self.term[s] + 1
            # A copy behind the last acknowledged write refuses: each copy has its own log.
            promote = (term, list(self.aborts[s]), self.last[s])
            res = self.wait({(s, r): self._call(s, r, "promote", *promote)}, wait)[(s, r)]
            if isinstance(res, _Refused) and res.why == "stale":
                if self.term[s] > 0:
                    # Another router took the shard over after this one: it is fenced off.
                    self.fenced[s] = res.term
                    return False
                # Starting (or attaching): go past the term the logs and the copies hold.
                self.term[s] = max(self.term[s], res.term)
                again = self._call(s, r, "promote", self.term[s] + 1, *promote[1:])
                res = self.wait({(s, r): again}, wait)[(s, r)]
            if not isinstance(res, dict) or res["last"] < self.last[s]:
                continue  # failed, silent, or it lacks an acknowledged write
            self.term[s] = int(res["term"])
            self.primary[s] = r
            self.in_sync[s] = {r}
            self.last[s] = int(res["last"])
            self._past(s, res)
            self.aborts[s] = []
            # The others rejoin when they answer (here or in a later heal): a stopped copy
            # must not hold up the write that asked for this election.
            # A copy dropped within the deadline (it failed or did not answer) is left to the
            # healer, which asks it first without the lock: it is likely dead or stopped.
            now = time.monotonic()
            others = [
                c
                for c in range(len(reps))
                if c != r and now - self._dropped.get((s, c), -1e9) > self.deadline
            ]
            self._recover(s, others, min(wait, self.deadline / 4))
            return True
        return False

    def _startup_order(self, s: int, wait: float) -> list:
        """The copies of shard ``s`` to promote first when this router knows nothing of it (it
        starts or attaches): those that answer within ``wait``, the most writes first (each
        copy recovers from its own log, and one may have missed writes); the sequence numbers
        go past every answering copy's."""
        futs = {(s, r): self._call(s, r, "state") for r in range(len(self.actors[s])) if self._free(s, r)}
        if futs:
            # The first may take a while (actors starting); the others get one deadline more.
            self.ray.wait(list(futs.values()), num_returns=1, timeout=wait)
        states = {r: res for (_, r), res in self.wait(futs, self.deadline).items() if isinstance(res, dict)}
        for st in states.values():
            self._past(s, st)
        return sorted(states, key=lambda r: (-int(states[r]["last"]), r))

    def _past(self, s: int, state: dict) -> None:
        """Sequence numbers of shard ``s`` go on past every one a copy's log has used."""
        self.next_seq[s] = max(self.next_seq[s], int(state["log_max_seq"]) + 1)

    def _recover(self, s: int, copies: list, wait: float) -> None:
        """Copies of shard ``s`` outside the in-sync set catch up from the primary (its log,
        or its snapshot when they are too far behind) and rejoin when they hold ``last``. A
        recovery that outlasts ``wait`` goes on; the copy rejoins at a later heal."""
        source = self.actors[s][self.primary[s]]
        futs = {
            (s, r): self._call(s, r, "recover", self.term[s], [], source, max(wait, 60.0))
            for r in copies
            if self._free(s, r)
        }
        for (_, r), res in self.wait(futs, wait).items():
            if isinstance(res, dict):
                self._past(s, res)
            if isinstance(res, dict) and res["last"] == self.last[s] and res["term"] == self.term[s]:
                self.in_sync[s].add(r)

    def checkpoint(self, shards: Any, timeout: float) -> None:
        """Every in-sync copy of ``shards`` snapshots itself on its own disk and empties its
        log (the write lock held); a copy that fails leaves the in-sync set (it recovers
        from the primary later). The primary's own result is checked by the caller's export."""
        futs = {(s, r): self._call(s, r, "checkpoint") for s in shards for r in sorted(self.in_sync[s])}
        for (s, r), res in self.wait(futs, timeout).items():
            if r != self.primary[s] and not isinstance(res, int):
                self._drop(s, r)

    def heal(self, s: int, wait: float | None = None, only: set | None = None) -> None:
        """Brings shard ``s``'s copies back into the in-sync set where they have recovered
        (a new primary first when the primary is out). The write lock is held by the caller.
        ``only``: the copies ``(shard, copy)`` that may be asked to recover (the healer's
        answering ones); None: any."""
        if self.fenced[s]:
            return
        wait = self.deadline if wait is None else wait
        if self.primary[s] not in self.in_sync[s] or self.aborts[s]:
            self._elect(s, wait)
            return
        out = [r for r in range(len(self.actors[s])) if r not in self.in_sync[s]]
        if only is not None:
            out = [r for r in out if (s, r) in only]
        if out:
            self._recover(s, out, wait)

    def answering(self, shards: list) -> set:
        """The copies ``(shard, copy)`` outside the in-sync set of ``shards`` (whose primary is
        in it) that answered a no-op call since the last time asked; the others get one now
        (unless one is still in flight). Never waits: a dead copy Ray is restarting, or a
        stopped one, is simply not in the set."""
        ready: set = set()
        for s in shards:
            if self.primary[s] not in self.in_sync[s] or self.aborts[s]:
                continue
            for r in range(len(self.actors[s])):
                if r in self.in_sync[s]:
                    continue
                ref = self._probes.get((s, r))
                if ref is None:
                    self._probes[(s, r)] = self._call(s, r, "state")
                    continue
                if not self.ray.wait([ref], timeout=0)[0]:
                    continue
                del self._probes[(s, r)]  # answered or failed: a new one next time
                if not isinstance(self._outcome(ref), _Failed):  # else dead or restarting
                    ready.add((s, r))
        return ready

    def needs_heal(self) -> list:
        return [
            s
            for s in range(len(self.actors))
            if not self.fenced[s] and (len(self.in_sync[s]) < len(self.actors[s]) or self.aborts[s])
        ]

    # ------------------------------------------------------------------ reads

    def pin(self) -> Any:
        """Starts a search's pins: each shard's phases go to one copy (while it answers).
        Returns the search's thread-local state."""
        self._local.pins = {}
        return self._local

    def unpin(self) -> None:
        self._local.pins = None
        self._local.rows = None
        self._local.rows_top = 0

    def _choose(self, s: int, tried: set) -> int | None:
        cands = [r for r in sorted(self.in_sync[s]) if r not in tried]
        if not cands:
            return None
        with self._rr_lock:
            self._rr[s] += 1
            turn = self._rr[s]
        # Copies still busy with a call that missed its deadline come last.
        free = [r for r in cands if (s, r) not in self._busy or self._free(s, r)]
        pool = free or cands
        return pool[turn % len(pool)]

    def read(
        self,
        calls: Mapping[int, tuple],
        partial: bool = False,
        primary: bool = False,
        timeout: float | None = None,
        avoid: Mapping[int, int] | None = None,
    ) -> dict:
        """``{shard: result}`` of ``calls[shard]`` on one in-sync copy of each shard: the
        pinned one in a search, else any. A copy still silent after a quarter of the deadline
        (``timeout``) is hedged: the same call goes to another in-sync copy and the first
        answer counts, so silent copies cost one deadline in all. A copy that fails is
        replaced at once, and the replacement has a deadline of its own. A shard none answers
        raises :class:`ShardUnavailableError`, or is left out with ``partial``.
        ``avoid[shard]``: a copy that just failed this search, asked only when no other copy
        of its shard is in sync. ``primary``: the primary only (the write path, its lock
        held): one that does not answer is replaced before the call is retried."""
        if primary:
            return self._read_primaries(calls, timeout)
        ray = self.ray
        pins = getattr(self._local, "pins", None)
        tried: dict = {s: set() for s in calls}
        for s, r in (avoid or {}).items():
            if s in tried and self.in_sync[s] - {r}:
                tried[s].add(r)
        budget = self.deadline if timeout is None else timeout
        out: dict = {}
        last_error: dict = {}
        healed: set = set()
        flying: dict = {}  # shard -> [(copy, ref)] of calls not answered yet
        owner: dict = {}  # ref -> (shard, copy)
        # Per shard: when its call is hedged (None: done) and when it gives up. A copy that
        # fails (it says so) starts the shard's clock again; silence does not.
        hedge_at: dict = {}
        end_at: dict = {}
        started = time.monotonic()
        graced: set = set()

        def launch(s: int, hedge: bool = False) -> bool:
            if not hedge and pins is not None and s in pins and pins[s] in self.in_sync[s] and not tried[s]:
                r = pins[s]
            else:
                r = self._choose(s, tried[s])
            if r is None and not hedge and s not in healed:
                healed.add(s)
                # No in-sync copy left: let a restarted one back in, if no write holds the
                # lock for longer than the deadline.
                if self.write_lock.acquire(timeout=budget):
                    try:
                        self.heal(s)
                    finally:
                        self.write_lock.release()
                r = self._choose(s, set())
            if r is None:
                return False
            tried[s].add(r)
            ref = getattr(self.actors[s][r], calls[s][0]).remote(*calls[s][1:])
            flying.setdefault(s, []).append((r, ref))
            owner[ref] = (s, r)
            if not hedge:
                now = time.monotonic()
                hedge_at[s], end_at[s] = now + budget * HEDGE, now + budget
            return True

        def give_up(s: int) -> None:
            for r, ref in flying.pop(s, ()):
                self._busy[(s, r)] = ref  # still running: read-only, it stays in sync
            if not partial:
                waited = budget * (COMPILE_GRACE if s in graced else 1.0)
                raise ShardUnavailableError(s, calls[s][0], waited, last_error.get(s))

        for s in calls:
            if not launch(s):
                give_up(s)
        refs = list(owner)
        if refs:
            # The usual case: every copy answers before the hedge; one get for all of them.
            first = min(hedge_at.values()) - time.monotonic()
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, first))
            if len(done) == len(refs):
                try:
                    for ref, res in zip(refs, ray.get(refs)):
                        s, r = owner[ref]
                        out[s] = res
                        if pins is not None:
                            pins[s] = r
                    return out
                except Exception:  # noqa: BLE001 - a copy failed: sorted out one by one below
                    out.clear()
        while flying:
            now = time.monotonic()
            for s in list(flying):
                if now >= end_at[s] and s not in graced and self._held_up(started):
                    graced.add(s)
                    end_at[s] += budget * (COMPILE_GRACE - 1)
                if now >= end_at[s]:
                    last_error.setdefault(s, "no copy answered within the deadline")
                    give_up(s)
                elif hedge_at[s] is not None and now >= hedge_at[s]:
                    hedge_at[s] = None
                    if len(flying[s]) == 1:
                        r, ref = flying[s][0]
                        if launch(s, hedge=True):
                            self._busy[(s, r)] = ref  # slow: later searches ask the others first
            if not flying:
                break
            refs = [ref for calls_of in flying.values() for _, ref in calls_of]
            wake = min(hedge_at[s] or end_at[s] for s in flying)  # a hedge comes before the end
            done, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, wake - time.monotonic()))
            for ref in done:
                s, r = owner[ref]
                if s not in flying:
                    continue
                flying[s] = [c for c in flying[s] if c[1] != ref]
                res = self._outcome(ref)
                if isinstance(res, _Failed):
                    last_error[s] = res.exc
                    self._drop(s, r)
                    if not flying[s]:
                        del flying[s]
                        if not launch(s):
                            give_up(s)
                        continue
                    # A failure starts the clock again for the copies still asked (as a new
                    # call would), and asks one more where those were silent.
                    end_at[s] = max(end_at[s], time.monotonic() + budget)
                    if hedge_at[s] is None:
                        launch(s, hedge=True)
                    continue
                out[s] = res
                if pins is not None:
                    pins[s] = r
                for other, pending in flying.pop(s):
                    self._busy[(s, other)] = pending  # the hedge it lost to: still running
        return out

    def _read_primaries(self, calls: Mapping[int, tuple], timeout: float | None) -> dict:
        """:meth:`read` with ``primary``: each call on its shard's primary; one that fails or
        misses ``timeout`` is replaced (a new primary elected) and asked again."""
        tried: dict = {s: set() for s in calls}
        pending = dict(calls)
        out: dict = {}
        last_error: dict = {}
        while pending:
            futs = {}
            for s, call in pending.items():
                p = self.primary[s]
                if p in tried[s] or p not in self.in_sync[s]:
                    raise ShardUnavailableError(s, call[0], self.deadline, last_error.get(s))
                tried[s].add(p)
                futs[s] = (p, getattr(self.actors[s][p], call[0]).remote(*call[1:]))
            pending = {}
            got = self.wait({s: f for s, (_, f) in futs.items()}, timeout or self.deadline)
            for s, res in got.items():
                r = futs[s][0]
                if res is _TIMEOUT or isinstance(res, _Failed):
                    if res is _TIMEOUT:
                        self._busy[(s, r)] = futs[s][1]
                        last_error[s] = f"copy {r} missed the {self.deadline:.1f} s deadline"
                    else:
                        last_error[s] = res.exc
                    self._drop(s, r)
                    self.heal(s)
                    pending[s] = calls[s]
                    continue
                out[s] = res
        return out

    def _drop(self, s: int, r: int) -> None:
        # A dead copy may come back (Ray restarts it) with its own log replayed: it rejoins only
        # through recover, under the write lock.
        self.in_sync[s].discard(r)
        self._dropped[(s, r)] = time.monotonic()

    # ------------------------------------------------------------------ writes

    def write(self, calls: Mapping[int, tuple], timeout: float | None = None) -> dict:
        """Runs the write ``calls[shard] = (method, *args)`` on every in-sync copy of each
        shard at once (the write lock held by the caller). ``{shard: result}``, where a failed
        shard's result is the exception to raise (the write is then not applied anywhere)."""
        for s in calls:
            if self.fenced[s]:
                raise _stale(s, self.fenced[s], self.term[s])
            if self.primary[s] not in self.in_sync[s] or self.aborts[s]:
                self.heal(s)
        futs: dict = {}
        seqs: dict = {}
        out: dict = {}
        for s, (method, *args) in calls.items():
            if self.primary[s] not in self.in_sync[s]:
                out[s] = ShardUnavailableError(s, method, self.deadline, "no copy could be made primary")
                continue
            seq = self.next_seq[s]
            self.next_seq[s] += 1  # never reused, whatever becomes of this write
            seqs[s] = seq
            for r in sorted(self.in_sync[s]):
                futs[(s, r)] = self._call(s, r, method, self.term[s], seq, self.last[s], *args)
        timeout = self.deadline if timeout is None else timeout
        got = self.wait(futs, timeout)
        for s, seq in seqs.items():
            p = self.primary[s]
            mine = {r: got[(s, r)] for (t, r) in got if t == s}
            res = mine[p]
            if _applied(res):
                for r, other in mine.items():
                    if r != p and not _applied(other):
                        self._drop(s, r)
                self.last[s] = seq
                out[s] = res
                continue
            method = calls[s][0]
            if isinstance(res, _Refused) and res.why == "stale":
                self.fenced[s] = res.term
                out[s] = _stale(s, res.term, self.term[s])
            elif isinstance(res, _Err):
                out[s] = res.exc  # refused as a whole (e.g. a bad document): applied nowhere
            else:
                cause = "missed the deadline" if res is _TIMEOUT else getattr(res, "exc", res)
                out[s] = ShardUnavailableError(s, method, timeout, cause)
            if not isinstance(res, _Err):
                self._drop(s, p)
            self._abort(s, seq, [r for r, other in mine.items() if r != p and _applied(other)], res)
        return out

    def _abort(self, s: int, seq: int, applied: list, primary_res: Any) -> None:
        """Write ``seq`` failed: the copies that applied it take it back (and log the abort);
        one that cannot leaves the in-sync set."""
        unknown = not isinstance(primary_res, (_Err, _Refused))  # it may still log it
        p = self.primary[s]
        if unknown and (s, p) in self._busy:
            # Queued behind the write on a stopped primary: it logs the abort after the write.
            self._call(s, p, "abort", self.term[s], [seq])
        futs = {(s, r): self._call(s, r, "abort", self.term[s], [seq]) for r in sorted(self.in_sync[s])}
        logged = False
        for (_, r), res in self.wait(futs, self.deadline).items():
            if isinstance(res, int) and res == self.last[s]:
                logged = True
            else:
                self._drop(s, r)
        if unknown and not logged:
            self.aborts[s].append(seq)  # logged by the next primary before anything else


def _stale(s: int, theirs: int, ours: int) -> StalePrimaryError:
    return StalePrimaryError(
        f"shard {s}: another router holds a newer primary term ({theirs}) than this one ({ours}) "
        "and takes the writes; this router may still search"
    )


def _applied(res: Any) -> bool:
    return not (res is _TIMEOUT or isinstance(res, (_Failed, _Err, _Refused)))


def idle_healer(copies: Copies, stop: threading.Event, period: float = 0.2) -> threading.Thread:
    """A daemon thread that lets recovered copies back in (when no write holds the lock).

    Before it takes the write lock it asks each copy it would let back in for a no-op call,
    and recovers only those that have answered one (:meth:`Copies.answering`, a round later):
    a dead copy Ray is restarting, or a stopped one, would otherwise hold the lock, and every
    write behind it, for a deadline each round."""

    def loop() -> None:
        while not stop.wait(period):
            todo = copies.needs_heal()
            if not todo:
                continue
            ready = copies.answering(todo)
            if not copies.write_lock.acquire(timeout=period):
                continue
            try:
                for s in todo:
                    if stop.is_set():
                        break
                    copies.heal(s, only=ready)
            except Exception:  # noqa: BLE001 - retried on the next round
                pass
            finally:
                copies.write_lock.release()
            time.sleep(0)

    t = threading.Thread(target=loop, name="ragfind-shard-healer", daemon=True)
    t.start()
    return t
