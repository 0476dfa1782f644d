"""The metrics' queued figures, folded in bulk, give the page of observing them one at a time."""

from __future__ import annotations

import math
import random
import threading

from ragfind.serve import metrics as metrics_mod
from ragfind.serve.metrics import BUCKETS, Metrics, _Histogram


def _reference(values: list) -> _Histogram:
    h = _Histogram()
    for v in values:
        h.observe(v)
    return h


def test_bulk_fold_equals_one_at_a_time() -> None:
    rng = random.Random(5)
    values = [rng.choice(BUCKETS) for _ in range(200)]  # on a bound: that bound's bucket
    values += [rng.uniform(0, 6) for _ in range(500)] + [0.0, 1e-9, 10.0, float("nan")]
    m = Metrics()
    for i, v in enumerate(values):
        m.request("/search", "POST", 200 if i % 3 else 400, v)
        m.search({"bm25": v, "total": 2 * v}, cached=i % 5 == 0)
    text = m.render()
    ref = _reference(values)
    cum = 0
    for ub, c in zip(BUCKETS, ref.counts):
        cum += c
        assert f'ragfind_http_request_duration_seconds_bucket{{route="/search",le="{ub!r}"}} {cum}' in text
    assert f'ragfind_http_request_duration_seconds_count{{route="/search"}} {len(values)}' in text
    assert 'ragfind_http_request_duration_seconds_sum{route="/search"} nan' in text  # NaN observed
    n400 = sum(1 for i in range(len(values)) if i % 3 == 0)
    assert f'ragfind_http_requests_total{{route="/search",method="POST",status="400"}} {n400}' in text
    assert f"ragfind_search_cache_hits_total {sum(1 for i in range(len(values)) if i % 5 == 0)}" in text
    ref_total = _reference([2 * v for v in values])
    assert (
        f'ragfind_search_stage_seconds_bucket{{stage="total",le="0.001"}} {sum(ref_total.counts[:4])}' in text
    )


def test_figures_from_many_threads_are_all_counted(monkeypatch) -> None:
    monkeypatch.setattr(metrics_mod, "FOLD_AFTER", 64)  # folds while others append
    m = Metrics()

    def work() -> None:
        for _ in range(5000):
            m.request("/health", "GET", 200, 0.0002)
            m.search({"total": 0.0003}, cached=False)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = m.render()
    assert 'ragfind_http_requests_total{route="/health",method="GET",status="200"} 20000' in text
    assert 'ragfind_search_stage_seconds_bucket{stage="total",le="0.0005"} 20000' in text
    assert "ragfind_search_cache_misses_total 20000" in text
    total = float(text.split('ragfind_http_request_duration_seconds_sum{route="/health"} ')[1].split()[0])
    assert math.isclose(total, 20000 * 0.0002, rel_tol=1e-9)
