"""Searches read a document's length normalisation through a one-byte length code and a
per-code weight table (cpp/include/ragfind/bm25/length_codes.hpp). The corpora here have more
distinct lengths than there are codes, documents too long for any code and term frequencies
past the table, so every path (table, computed tf, escaped length) is scored and checked against
the double-precision scores of ``score``, which never use the codes."""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import BM25Index
from ragfind.ids import IdFilter

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]
ALGORITHMS = ("exhaustive", "maxscore", "blockmax", "auto", "direct")


def corpus(rng: np.random.Generator, n: int) -> list[list[str]]:
    vocab = 300
    p = 1.0 / np.arange(1, vocab + 1) ** 1.1
    p /= p.sum()
    # Lengths 1..900 uniformly: about 900 distinct lengths for 255 codes.
    docs = [[f"t{t}" for t in rng.choice(vocab, size=int(m), p=p)] for m in rng.integers(1, 901, size=n)]
    for d in rng.choice(n, size=n // 10, replace=False):
        docs[d] += [f"t{int(rng.integers(0, 40))}"] * int(rng.integers(5, 40))  # tf past the table
    for d in rng.choice(n, size=4, replace=False):
        docs[d] = docs[d] + ["filler"] * 70_000  # longer than any coded length
    return docs


def check_against_reference(index: BM25Index, qs, k: int, flt=None) -> None:
    live_ids = index.ids  # score order (ids are ints added in increasing order here)
    allowed = None
    if flt is not None:
        allowed = np.isin(live_ids, np.asarray(list(flt), dtype=np.int64))
    for q in qs:
        ref = index.score(q)
        matching = np.zeros(len(index), dtype=bool)
        for t in q:
            matching |= index.score([t]) > index.score(["no-such-term"])[0]
        if allowed is not None:
            matching &= allowed
        order = np.lexsort((np.arange(len(ref)), -ref))
        order = order[matching[order]][:k]
        for algorithm in ALGORITHMS:
            ids, scores = index.search_tokenized(q, k=k, algorithm=algorithm, filter=flt)
            assert len(ids) == len(order), (algorithm, q)
            np.testing.assert_allclose(scores, ref[order], rtol=2e-6, err_msg=f"{algorithm} {q}")
            pos = np.searchsorted(live_ids, ids)
            np.testing.assert_array_equal(live_ids[pos], ids)
            np.testing.assert_allclose(ref[pos], ref[order], rtol=2e-6, err_msg=f"{algorithm} {q}")


@pytest.mark.parametrize("method", METHODS)
def test_every_length_and_tf_path_scores_as_the_double_reference(method):
    rng = np.random.default_rng(11)
    docs = corpus(rng, 2500)
    index = BM25Index(method=method, k1=1.4, b=0.7, delta=0.6 if method in ("bm25l", "bm25+") else None)
    index.add_tokenized(docs[:2000])
    index.add_tokenized(docs[2000:])
    qs = [[f"t{t}" for t in rng.integers(0, 60, size=int(rng.integers(1, 6)))] for _ in range(12)]
    qs += [["filler", "t3"], ["t1", "t2", "filler"]]
    for k in (1, 10, 200):
        check_against_reference(index, qs, k)
    check_against_reference(index, qs, 10, flt=IdFilter(range(0, 2500, 7)))
    # A change moves avgdl and the codes (deleted documents keep theirs until compaction).
    index.delete(list(range(0, 600, 3)))
    index.add_tokenized(corpus(rng, 300))
    check_against_reference(index, qs, 10)


def test_search_with_outside_statistics_uses_their_avgdl_for_escaped_lengths():
    rng = np.random.default_rng(5)
    docs = corpus(rng, 1600)
    full = BM25Index()
    full.add_tokenized(docs)
    # Shards with different average lengths: each searches with the union's statistics.
    halves = [BM25Index(), BM25Index()]
    halves[0].add_tokenized(sorted(docs, key=len)[:800])
    halves[1].add_tokenized(sorted(docs, key=len)[800:])
    order = sorted(range(len(docs)), key=lambda i: len(docs[i]))
    n = sum(h.term_stats([])[0] for h in halves)
    total = sum(h.term_stats([])[1] for h in halves)
    for q in (["filler", "t2"], ["t0", "t7", "t30"], ["t5"]):
        df = {t: int(sum(h.term_stats([t])[2][0] for h in halves)) for t in dict.fromkeys(q)}
        ref = full.score(q)
        for i, h in enumerate(halves):
            ids, scores = h.search(" ".join(q), k=50, stats=(n, total, df))
            assert len(ids) > 0
            global_ids = np.asarray(order[800 * i : 800 * (i + 1)])[ids]
            np.testing.assert_allclose(scores, ref[global_ids], rtol=2e-6)


def test_codes_follow_a_reload(tmp_path):
    rng = np.random.default_rng(3)
    index = BM25Index()
    index.add_tokenized(corpus(rng, 900))
    index.save(tmp_path / "i")
    for mmap in (False, True):
        loaded = BM25Index.load(tmp_path / "i", mmap=mmap)
        for q in (["filler", "t1"], ["t4", "t9"]):
            for algorithm in ALGORITHMS:
                a = index.search_tokenized(q, k=30, algorithm=algorithm)
                b = loaded.search_tokenized(q, k=30, algorithm=algorithm)
                np.testing.assert_array_equal(a[0], b[0])
                np.testing.assert_array_equal(a[1], b[1])
