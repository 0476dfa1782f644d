"""Block-max MaxScore (algorithm="blockmax") and Auto against the exhaustive reference.

Lists must be long (>= 256 postings) to get block maxima, so the corpora here have a few
thousand documents over a small Zipfian vocabulary; queries mix common and rare terms so that
some lists become non-essential and their block bounds decide.
"""

from __future__ import annotations

import numpy as np
import pytest

from ragfind import BM25Index
from ragfind.ids import IdFilter

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]
PRUNED = ("blockmax", "maxscore", "auto")


def corpus(rng: np.random.Generator, n: int, vocab: int = 400) -> list[list[str]]:
    p = 1.0 / np.arange(1, vocab + 1) ** 1.1
    p /= p.sum()
    lengths = np.maximum(2, rng.lognormal(np.log(25), 0.6, size=n)).astype(int)
    return [[f"t{t}" for t in rng.choice(vocab, size=int(m), p=p)] for m in lengths]


def queries(rng: np.random.Generator, count: int, vocab: int = 400) -> list[list[str]]:
    out = []
    for _ in range(count):
        size = int(rng.integers(1, 8))
        terms = np.concatenate([rng.integers(0, 20, size=1), rng.integers(0, vocab, size=size)])
        out.append([f"t{t}" for t in terms])
    return out


def check_equal(index: BM25Index, qs, ks=(1, 10, 100), flt=None) -> None:
    for q in qs:
        for k in ks:
            ref_ids, ref_scores = index.search_tokenized(q, k=k, algorithm="exhaustive", filter=flt)
            for algorithm in PRUNED:
                ids, scores = index.search_tokenized(q, k=k, algorithm=algorithm, filter=flt)
                assert len(ids) == len(ref_ids), (algorithm, q, k)
                np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, err_msg=f"{algorithm} {q} {k}")
                # ids agree except among (float-)tied scores
                distinct = np.r_[True, np.diff(ref_scores) < -1e-5 * np.abs(ref_scores[1:])]
                distinct &= np.r_[np.diff(ref_scores) < -1e-5 * np.abs(ref_scores[:-1]), True]
                np.testing.assert_array_equal(ids[distinct], ref_ids[distinct])


@pytest.mark.parametrize("method", METHODS)
def test_blockmax_equals_exhaustive_over_segments_deletes_and_filters(method):
    rng = np.random.default_rng(7)
    docs = corpus(rng, 6000)
    index = BM25Index(method=method, k1=1.5, b=0.8, delta=0.7 if method in ("bm25l", "bm25+") else None)
    for start in range(0, 6000, 1500):  # several segments
        index.add_tokenized(docs[start : start + 1500], ids=list(range(start, start + 1500)))
    qs = queries(rng, 25)
    check_equal(index, qs)
    # block maxima built, then the statistics change (more documents, deletes): still exact
    index.add_tokenized(corpus(rng, 700), ids=list(range(6000, 6700)))
    index.delete(sorted(rng.choice(6700, size=900, replace=False).tolist()))
    check_equal(index, qs)
    allowed = rng.choice(index.ids, size=2500, replace=False).tolist()
    check_equal(index, qs[:10], flt=IdFilter(allowed))
    index.delete(rng.choice(index.ids, size=1800, replace=False).tolist())  # past the compaction threshold
    check_equal(index, qs[:10])


def test_blockmax_on_a_loaded_index_and_after_new_parameters(tmp_path):
    rng = np.random.default_rng(3)
    index = BM25Index()
    index.add_tokenized(corpus(rng, 5000))
    path = tmp_path / "i.bm25"
    index.save(path)
    qs = queries(rng, 20)
    for mmap in (True, False):
        check_equal(BM25Index.load(path, mmap=mmap), qs, ks=(10,))


def test_blockmax_with_long_documents_and_large_tf():
    # One term repeated in long documents: the block bound pairs the block's largest tf with
    # its shortest document, an upper bound even when they are different documents.
    rng = np.random.default_rng(1)
    docs = []
    for i in range(4000):
        tf = int(rng.integers(1, 40)) if i % 7 == 0 else 1
        docs.append(["hot"] * tf + ["pad"] * int(rng.integers(0, 400)) + [f"r{i % 50}"])
    index = BM25Index(b=1.0)
    index.add_tokenized(docs)
    check_equal(index, [["hot"], ["hot", "r3"], ["pad", "hot", "r7", "r7"]], ks=(1, 5, 50))


def test_unknown_algorithm_lists_blockmax():
    index = BM25Index()
    index.add_tokenized([["a"]])
    with pytest.raises(ValueError, match="blockmax"):
        index.search("a", algorithm="wand")
