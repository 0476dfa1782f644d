"""Admission of requests that do real work (searches, explanations, document reads and writes):
a bounded queue in front of a fixed thread pool, shedding with 503 past its depth or its wait,
and fast searches answered on the event loop without the hop to a thread.

The queue is FIFO: a request takes a thread when one is free and nobody waits before it, else
it waits in line. Past ``queue_depth`` requests admitted (running and waiting) a new one is shed
at once; one that waits longer than ``queue_wait_ms`` is shed when its time runs out, so no
request waits without bound. ``/health`` and ``/metrics`` never pass through here.

A search whose recent average wall time (per kind: route, stages, rerank) is under
``inline_ms`` runs on the event loop: the hop costs a thread wake-up on each side, more than
such a search. Any slow run moves its kind back to the threads at once, so a slow search blocks
the loop at most once per kind before it is pushed off it. A run's time leaves out what its
thread spent runnable but waiting for a CPU (Linux's schedstat): on a busy machine a 0.2 ms
search is often preempted for milliseconds, which says nothing of its cost, and counting it sent
fast searches to the threads in bursts (half the throughput at 32 clients, bench/serve.md).
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ragfind.serve.service import ApiError

__all__ = ["Gate", "Overloaded"]


class _Schedstat:
    """This thread's ``/proc/thread-self/schedstat``, kept open (one read: a few µs)."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:  # not Linux, or no scheduler statistics: no correction
            self.fd = None

    def __del__(self) -> None:  # the thread ended
        if self.fd is not None:
            os.close(self.fd)


_sched = threading.local()


def run_delay() -> float:
    """Seconds the calling thread has waited, runnable, for a CPU (preempted) since it started;
    0.0 where the system does not say."""
    st = getattr(_sched, "st", None)
    if st is None:
        st = _sched.st = _Schedstat()
    if st.fd is None:
        return 0.0
    try:
        return int(os.pread(st.fd, 64, 0).split()[1]) * 1e-9
    except (OSError, ValueError, IndexError):
        return 0.0


class Overloaded(ApiError):
    """503 with ``Retry-After``: the queue is full, or this request waited past its bound."""

    def __init__(self, reason: str, message: str, retry_after: int = 1) -> None:
        super().__init__(503, message)
        self.reason = reason
        self.retry_after = retry_after


class Gate:
    """The queue and the threads of one process.

    Args:
        threads: threads running admitted requests.
        queue_depth: most requests admitted at once (running and waiting); more get 503.
        queue_wait_s: longest wait for a thread; longer gets 503.
        inline_s: kinds of request whose average wall time is under this run on the event loop
            (0: never).
        on_shed: called with ``(route, reason)`` for each request shed.
    """

    def __init__(
        self,
        threads: int,
        queue_depth: int,
        queue_wait_s: float,
        inline_s: float,
        on_shed: Callable[[str, str], None] | None = None,
    ) -> None:
        self.threads = threads
        self.queue_depth = queue_depth
        self.queue_wait_s = queue_wait_s
        self.inline_s = inline_s
        self.on_shed = on_shed
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="ragfind-serve")
        # Tests drive one app from several event loops at once (TestClient without `with`), so
        # the counters take a lock and a waiter is woken on its own loop.
        self._lock = threading.Lock()
        self.admitted = 0
        self.running = 0
        self._waiters: collections.deque = collections.deque()
        self.cost: dict = {}
        self.inline_runs = 0

    def _shed(self, route: str, reason: str, message: str) -> Overloaded:
        if self.on_shed is not None:
            self.on_shed(route, reason)
        return Overloaded(reason, message, max(1, round(self.queue_wait_s)))

    def check(self, route: str) -> None:
        """Sheds at once when the queue is full: before the body is read and parsed, the work
        an overloaded server can least afford. :meth:`call` checks again."""
        if self.admitted >= self.queue_depth:
            raise self._shed(route, "queue_full", f"overloaded: {self.queue_depth} requests already queued")

    def _learn(self, kind: Any, seconds: float) -> None:
        old = self.cost.get(kind)
        # A run far over the line resets the average: the next one of its kind goes to a thread.
        slow = seconds > 4 * self.inline_s
        self.cost[kind] = seconds if old is None or slow else 0.8 * old + 0.2 * seconds

    def _timed(self, kind: Any, fn: Callable, args: tuple) -> Any:
        if kind is None:
            return fn(*args)
        t, waited = time.perf_counter(), run_delay()
        try:
            return fn(*args)
        finally:
            took = time.perf_counter() - t
            if took > self.inline_s:
                # The wall time less the preemption: what the run itself took (work, locks, I/O).
                # Under the line the correction could only lower it: the second read is skipped.
                took = max(0.0, took - (run_delay() - waited))
            self._learn(kind, took)

    def _wake(self, fut: asyncio.Future) -> None:
        if fut.done():  # expired or cancelled meanwhile: pass the thread on
            self._release()
        else:
            fut.set_result(None)

    def _release(self) -> None:
        with self._lock:
            self.running -= 1
            nxt = None
            while self._waiters:
                f = self._waiters.popleft()
                if not f.done():
                    nxt = f
                    self.running += 1
                    break
        if nxt is not None:
            loop = nxt.get_loop()
            try:
                same = asyncio.get_running_loop() is loop
            except RuntimeError:
                same = False
            if same:
                self._wake(nxt)
            else:
                loop.call_soon_threadsafe(self._wake, nxt)

    async def call(self, route: str, kind: Any, fn: Callable, *args: Any) -> Any:
        """``fn(*args)`` once admitted: on the loop when ``kind`` is known to be fast, else on a
        thread. ``kind`` None: always a thread, never timed. Raises :class:`Overloaded`."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.admitted >= self.queue_depth:
                full = True
            else:
                full = False
                self.admitted += 1
                fut = None
                if self.running < self.threads and not self._waiters:
                    self.running += 1
                else:
                    fut = loop.create_future()
                    self._waiters.append(fut)
        if full:
            raise self._shed(route, "queue_full", f"overloaded: {self.queue_depth} requests already queued")
        try:
            if fut is not None:
                timer = loop.call_later(self.queue_wait_s, _expire, fut)
                try:
                    await fut
                except asyncio.CancelledError:
                    if fut.done() and not fut.cancelled():
                        self._release()  # the thread was handed over as the task was cancelled
                    raise
                except _Expired:
                    raise self._shed(
                        route, "queue_wait", f"overloaded: waited {self.queue_wait_s:g} s for a thread"
                    ) from None
                finally:
                    timer.cancel()
            try:
                est = self.cost.get(kind) if kind is not None and self.inline_s > 0 else None
                if est is not None and est < self.inline_s:
                    self.inline_runs += 1
                    return self._timed(kind, fn, args)
                return await loop.run_in_executor(self.pool, self._timed, kind, fn, args)
            finally:
                self._release()
        finally:
            with self._lock:
                self.admitted -= 1

    def close(self) -> None:
        self.pool.shutdown(wait=False)


class _Expired(Exception):
    pass


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(_Expired())
