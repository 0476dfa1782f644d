"""BM25 with collection statistics given from outside: a shard searched with the statistics of
the union of all shards scores exactly as one index over the union (the reference)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import ragfind

WORDS = [f"w{i}" for i in range(60)]
ALGORITHMS = ("auto", "maxscore", "blockmax", "exhaustive", "direct")


def _corpus(n: int, seed: int) -> list:
    rng = random.Random(seed)
    # Skewed word choice so df varies a lot; lengths vary so avgdl differs between shards.
    return [" ".join(rng.choices(WORDS[: rng.randint(5, 60)], k=rng.randint(1, 40))) for _ in range(n)]


def _global_stats(shards: list, queries: list, index: ragfind.BM25Index) -> tuple:
    dfs = []
    n = total = 0
    for q in queries:
        terms = list(dict.fromkeys(index.analyze_query(q)))
        per = [s.term_stats(terms) for s in shards]
        n = sum(p[0] for p in per)
        total = sum(p[1] for p in per)
        dfs.append({t: int(sum(p[2][i] for p in per)) for i, t in enumerate(terms)})
    return n, total, dfs


def _merged(shards: list, queries: list, k: int, stats: tuple, **kw) -> list:
    n, total, dfs = stats
    out = []
    for qi, q in enumerate(queries):
        rows = []
        for s in shards:
            ids, scores = s.search(q, k, stats=(n, total, dfs[qi]), **kw)
            rows += list(zip(scores.tolist(), ids.tolist()))
        rows.sort(key=lambda r: (-r[0], r[1]))
        out.append(rows[:k])
    return out


def _check_equal(full: ragfind.BM25Index, shards: list, queries: list, k: int, **kw) -> None:
    stats = _global_stats(shards, queries, full)
    merged = _merged(shards, queries, k, stats, **kw)
    for q, got in zip(queries, merged):
        ids, scores = full.search(q, k, **kw)
        assert len(got) == len(ids), q
        # Every doc's score is equal (within float rounding); the ids equal up to ties at the cut.
        ref = dict(zip(ids.tolist(), scores.tolist()))
        all_scores = full.score(q)
        pos = {d: i for i, d in enumerate(full.ids.tolist())}
        for s, d in got:
            assert s == pytest.approx(all_scores[pos[d]], rel=1e-6), (q, d)
        np.testing.assert_allclose([s for s, _ in got], scores, rtol=1e-6)
        cut = scores[-1] if len(scores) else 0
        assert {d for s, d in got if s > cut * (1 + 1e-6)} <= set(ref), q


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_shards_with_global_stats_equal_the_union(method: str, algorithm: str) -> None:
    texts = _corpus(900, 1)
    ids = [f"d{i}" for i in range(len(texts))]
    full = ragfind.BM25Index(method=method)
    full.add(texts, ids)
    shards = [ragfind.BM25Index(method=method) for _ in range(3)]
    for j, s in enumerate(shards):
        s.add(texts[j::3], ids[j::3])
    queries = ["w1 w2", "w3 w3 w40", "w59 w7 w0 w12 w33", "w5 unknownterm", "w58"]
    _check_equal(full, shards, queries, 10, algorithm=algorithm)
    # After deletes (statistics of the live documents) and with a filter.
    gone = ids[::7]
    full.delete(gone)
    for j, s in enumerate(shards):
        s.delete([d for d in gone if int(d[1:]) % 3 == j])
    _check_equal(full, shards, queries, 10, algorithm=algorithm)
    allowed = set(ids[1::5]) - set(gone)
    _check_equal(full, shards, queries, 10, algorithm=algorithm, filter=allowed)


def test_large_segments_use_maxscore_with_global_bounds() -> None:
    # Over 65,536 documents a segment is searched with MaxScore: its bounds must use the
    # global length normalisation or pruning would drop documents.
    rng = random.Random(3)
    texts = [" ".join(rng.choices(WORDS[:30], k=rng.randint(1, 6))) for _ in range(140_000)]
    big = ragfind.BM25Index()
    big.add(texts[:70_000])
    small = ragfind.BM25Index()
    small.add(texts[70_000:], ids=list(range(70_000, 140_000)))
    full = ragfind.BM25Index()
    full.add(texts)
    for algorithm in ("maxscore", "blockmax"):  # block bounds must hold under the global avgdl
        _check_equal(full, [big, small], ["w1 w2 w3", "w29 w0", "w4"], 20, algorithm=algorithm)


def test_stats_are_cached_per_avgdl_and_follow_writes() -> None:
    # Repeated searches reuse the norms computed for the global avgdl; a write (new slots,
    # new lengths) must rebuild them.
    a, b, full = ragfind.BM25Index(), ragfind.BM25Index(), ragfind.BM25Index()
    a.add(["xx yy", "xx"], ids=["a", "b"])
    b.add(["zz zz zz xx", "yy"], ids=["c", "d"])
    full.add(["xx yy", "xx", "zz zz zz xx", "yy"], ids=["a", "b", "c", "d"])
    queries = ["xx yy", "xx"]
    _check_equal(full, [a, b], queries, 5)
    _check_equal(full, [a, b], queries, 5)
    a.add(["xx xx xx xx xx xx xx"], ids=["e"])
    full.add(["xx xx xx xx xx xx xx"], ids=["e"])
    _check_equal(full, [a, b], queries, 5)
    b.delete(["c"])
    full.delete(["c"])
    _check_equal(full, [a, b], queries, 5)


def test_term_stats_and_bad_stats() -> None:
    a = ragfind.BM25Index()
    a.add(["the cat sat", "cats and dogs"], ids=["a", "b"])
    terms = a.analyze_query("Cats cat dog")
    assert terms == ["cat", "cat", "dog"]
    n, total, df = a.term_stats(["cat", "dog", "nothere"])
    assert (n, df.tolist()) == (2, [2, 1, 0])
    assert total == sum(a._core.document_lengths().tolist())
    with pytest.raises(ValueError, match="no df for the query term 'dog'"):
        a.search("cat dog", 3, stats=(2, total, {"cat": 2}))
    with pytest.raises(ValueError, match="num_docs"):
        a.search("cat", 3, stats=(-1, total, {"cat": 2}))
    with pytest.raises(TypeError, match="stats"):
        a.search("cat", 3, stats=5)
    # A batch with stats equals the one-by-one searches.
    st = (2, total, [{"cat": 2}, {"dog": 1}])
    batch = a.search_batch(["cat", "dog"], 3, stats=st)
    for q, d, (ids, scores) in zip(["cat", "dog"], st[2], batch):
        ids1, scores1 = a.search(q, 3, stats=(2, total, d))
        assert ids.tolist() == ids1.tolist()
        np.testing.assert_array_equal(scores, scores1)
