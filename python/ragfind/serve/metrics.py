"""Prometheus text exposition (format 0.0.4) of the service's counters and latency histograms.

A few counters and fixed-bucket histograms under one lock. A request or a search only appends
its figures to a queue (an atomic append, no lock: the histograms' bucket searches and the lock
were ~4 us of a ~150 us served search); they are folded into the histograms in bulk, with NumPy,
when the queue is long or the page is read, so the page always counts every one.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict, deque

import numpy as np

__all__ = ["Metrics", "BUCKETS"]

#: Latency buckets in seconds (upper bounds; +Inf is implied).
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _labels(pairs: tuple) -> str:
    if not pairs:
        return ""

    def esc(v: object) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")

    body = ",".join(f'{k}="{esc(v)}"' for k, v in pairs)
    return "{" + body + "}"


class _Histogram:
    __slots__ = ("counts", "total", "n")

    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        i = bisect_left(BUCKETS, value)  # the first bound >= value; past the last: +Inf only
        if i < len(BUCKETS) and value == value:  # NaN: in no bucket, as no bound is >= it
            self.counts[i] += 1
        self.total += value
        self.n += 1

    def observe_many(self, values: list) -> None:
        """:meth:`observe` of each value, in one pass."""
        a = np.asarray(values, dtype=np.float64)
        where = np.searchsorted(_BOUNDS, a, side="left")  # NaN sorts last: +Inf only
        for i, c in enumerate(np.bincount(where, minlength=len(BUCKETS) + 1)[: len(BUCKETS)].tolist()):
            self.counts[i] += c
        self.total += float(a.sum())  # NaN included, as observe adds it
        self.n += len(values)


_BOUNDS = np.asarray(BUCKETS, dtype=np.float64)
#: Figures queued before a request folds them in (bounds the queue's memory).
FOLD_AFTER = 4096


class Metrics:
    """Request counts by route/method/status, per-stage search latencies, cache hits, writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict = defaultdict(int)
        self._latency: dict = defaultdict(_Histogram)
        self._stage: dict = defaultdict(_Histogram)
        self._counters: dict = defaultdict(int)
        self._shed: dict = defaultdict(int)
        self._queued: deque = deque()  # ("r", route, method, status, seconds) | ("s", timings, cached)

    def _fold(self) -> None:
        """Moves the queued figures into the counters and histograms (the lock held)."""
        queue = self._queued
        latency: dict = defaultdict(list)
        stage: dict = defaultdict(list)
        while True:
            try:
                item = queue.popleft()  # atomic against appends: none is lost
            except IndexError:
                break
            if item[0] == "r":
                _, route, method, status, seconds = item
                self._requests[(route, method, status)] += 1
                latency[route].append(seconds)
            else:
                _, timings, cached = item
                for name, seconds in timings.items():
                    stage[name].append(float(seconds))
                self._counters[
                    "ragfind_search_cache_hits_total" if cached else "ragfind_search_cache_misses_total"
                ] += 1
        for route, values in latency.items():
            self._latency[(route,)].observe_many(values)
        for name, values in stage.items():
            self._stage[(name,)].observe_many(values)

    def _queue(self, item: tuple) -> None:
        self._queued.append(item)
        if len(self._queued) >= FOLD_AFTER:
            with self._lock:
                self._fold()

    def shed(self, route: str, reason: str) -> None:
        """One request refused with 503 by the queue (``reason``: queue_full or queue_wait)."""
        with self._lock:
            self._shed[(route, reason)] += 1

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        self._queue(("r", route, method, status, seconds))

    def search(self, timings: dict, cached: bool) -> None:
        """One search's stage timings (``SearchResult.timings``, not changed afterwards)."""
        self._queue(("s", timings, cached))

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counters[name] += n

    def render(self, extra: dict | None = None) -> str:
        """The exposition text; ``extra``: ``{name: (type, help, value)}`` gauges read now."""
        out: list = []
        with self._lock:
            self._fold()
            out.append("# HELP ragfind_http_requests_total HTTP requests by route, method and status.")
            out.append("# TYPE ragfind_http_requests_total counter")
            for (route, method, status), n in sorted(self._requests.items()):
                labels = _labels((("route", route), ("method", method), ("status", status)))
                out.append(f"ragfind_http_requests_total{labels} {n}")
            for name, helptext, label, hists in (
                (
                    "ragfind_http_request_duration_seconds",
                    "Request latency by route.",
                    "route",
                    self._latency,
                ),
                (
                    "ragfind_search_stage_seconds",
                    "Search latency by stage (SearchResult.timings).",
                    "stage",
                    self._stage,
                ),
            ):
                out.append(f"# HELP {name} {helptext}")
                out.append(f"# TYPE {name} histogram")
                for (value,), h in sorted(hists.items()):
                    cum = 0
                    for ub, c in zip(BUCKETS, h.counts):
                        cum += c
                        out.append(f"{name}_bucket{_labels(((label, value), ('le', repr(ub))))} {cum}")
                    out.append(f"{name}_bucket{_labels(((label, value), ('le', '+Inf')))} {h.n}")
                    out.append(f"{name}_sum{_labels(((label, value),))} {h.total!r}")
                    out.append(f"{name}_count{_labels(((label, value),))} {h.n}")
            out.append(
                "# HELP ragfind_requests_shed_total Requests refused with 503 by the queue, by reason."
            )
            out.append("# TYPE ragfind_requests_shed_total counter")
            for (route, reason), n in sorted(self._shed.items()):
                out.append(
                    f"ragfind_requests_shed_total{_labels((('route', route), ('reason', reason)))} {n}"
                )
            counters = dict(self._counters)
        for name in ("ragfind_search_cache_hits_total", "ragfind_search_cache_misses_total"):
            counters.setdefault(name, 0)
        for name, n in sorted(counters.items()):
            out.append(f"# TYPE {name} counter")
            out.append(f"{name} {n}")
        for name, (kind, helptext, value) in sorted((extra or {}).items()):
            out.append(f"# HELP {name} {helptext}")
            out.append(f"# TYPE {name} {kind}")
            out.append(f"{name} {value}")
        return "\n".join(out) + "\n"
