"""The pruned searches start from a score floor: a query term's weight times the k-th largest
document-side weight of its list (kept per list for k = 10, 100, 1000) is a score that k live
documents reach. These cases aim at where such a floor could be wrong: ties at the k-th
score, deleted documents holding a list's best weights, statistics that change after the
floor was cached, other collection statistics, and k at and around the kept ranks."""

from __future__ import annotations

import numpy as np
import pytest
from bm25_exact import METHODS, assert_same_as_exhaustive, index_for

from ragfind import BM25Index


@pytest.mark.parametrize("method", METHODS)
def test_ties_at_the_kth_score_keep_the_earliest_documents(method):
    # 1,500 documents of the same length with "x" once tie exactly: the floor must lie strictly
    # below their score, and the earliest ones win, as in the exhaustive scan.
    index = index_for(method)
    # (x in fewer than half of the documents: Robertson's idf is negative above that)
    docs = [["x", f"u{i}"] for i in range(1500)] + [[f"v{i}", f"w{i}"] for i in range(2000)]
    index.add_tokenized(docs)
    for k in (1, 9, 10, 11, 100, 1000, 1001):
        ids, scores = index.search_tokenized(["x"], k=k, algorithm="maxscore")
        np.testing.assert_array_equal(ids, np.arange(k))
        assert len(set(scores.tolist())) == 1
        assert_same_as_exhaustive(index, ["x", "u3"], k)


@pytest.mark.parametrize("method", METHODS)
def test_deleted_documents_do_not_raise_the_floor(method):
    # The 40 best weights of "x" belong to short documents that are then deleted: a floor
    # taken over every posting would lie above every live document and return nothing.
    index = index_for(method)
    best = [["x", "x", "x"] for _ in range(40)]
    rest = [["x", "y"] + [f"p{i}", f"q{i}", f"r{i}", f"s{i}"] for i in range(2000)]
    index.add_tokenized(best + rest + [["z"]] * 2500)
    for k in (10, 100):
        assert_same_as_exhaustive(index, ["x"], k)  # the floor is cached for this statistics epoch
    index.delete(list(range(40)))
    for k in (1, 10, 11, 100, 1000):
        ids, _ = index.search_tokenized(["x"], k=k, algorithm="maxscore")
        assert len(ids) == k and ids.min() >= 40
        assert_same_as_exhaustive(index, ["x"], k)
        assert_same_as_exhaustive(index, ["x", "y", "p7"], k)


def test_floors_follow_new_documents_and_parameters():
    rng = np.random.default_rng(3)
    vocab = [f"t{i}" for i in range(60)]
    index = BM25Index()
    index.add_tokenized([list(rng.choice(vocab, size=int(rng.integers(3, 40)))) for _ in range(3000)])
    queries = [list(rng.choice(vocab, size=int(rng.integers(1, 5)))) for _ in range(20)]
    for q in queries:
        assert_same_as_exhaustive(index, q, 10)
    # Shorter documents with more occurrences: larger weights than any cached floor knew of.
    index.add_tokenized([["t1", "t1", "t2"] for _ in range(30)])
    index.set_params(k1=2.0, b=0.3)
    for q in queries + [["t1"], ["t1", "t2"]]:
        for k in (10, 100):
            assert_same_as_exhaustive(index, q, k)


def test_floors_under_other_collection_statistics():
    rng = np.random.default_rng(4)
    vocab = [f"t{i}" for i in range(40)]
    index = BM25Index()
    index.add_tokenized([list(rng.choice(vocab, size=int(rng.integers(2, 30)))) for _ in range(2500)])
    for q in (["t0"], ["t1", "t5"], ["t2", "t2", "t9", "t30"]):
        n, total, df = index.term_stats(sorted(set(q)))
        for scale in (0.5, 1.0, 3.0):  # another avgdl, the same one, a larger collection
            stats = (
                int(n * scale) + 1,
                int(total * scale * 0.7),
                {t: int(d * scale) + 1 for t, d in zip(sorted(set(q)), df)},
            )
            for k in (1, 10, 100):
                assert_same_as_exhaustive(index, q, k, stats=stats)


@pytest.mark.parametrize("method", METHODS)
def test_repeated_terms_several_segments_and_large_k(method):
    rng = np.random.default_rng(11)
    vocab = [f"t{i}" for i in range(200)]
    p = 1.0 / np.arange(1, 201) ** 1.05
    p /= p.sum()
    index = index_for(method)
    for _ in range(3):  # three segments: a floor from one bounds the whole search
        index.add_tokenized(
            [list(rng.choice(vocab, size=int(rng.integers(2, 50)), p=p)) for _ in range(1200)]
        )
    for _ in range(15):
        q = list(rng.choice(vocab, size=int(rng.integers(1, 6)), p=p))
        q += q[:1]  # a repeated term weighs twice
        for k in (1, 10, 55, 100, 101, 1000, 1001, 5000):
            assert_same_as_exhaustive(index, q, k)
