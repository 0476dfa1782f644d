"""MaxScore merges its essential lists a window of documents at a time: each list's postings in
the window are scored, the lists merged by doc (a document in several gets its shares summed),
and the candidates come out in doc order. These cases aim at where that could go wrong:
documents shared by several essential lists (their shares must add up), a sparse list whose one
block spans the whole segment next to dense lists (windows end at the first essential block
end, so most windows stop inside the sparse list's block), one essential list alone, lists
with nothing in a window, deleted and filtered-out documents, and several segments. Every
pruned search must equal the exhaustive one."""

from __future__ import annotations

import numpy as np
import pytest
from bm25_exact import METHODS, assert_same_as_exhaustive, index_for

from ragfind import BM25Index, IdFilter

WINDOWED = ("maxscore", "auto")


def _same_as_exhaustive(index: BM25Index, query: list[str], k: int, flt=None) -> None:
    assert_same_as_exhaustive(index, query, k, algorithms=WINDOWED, flt=flt)


@pytest.fixture(scope="module")
def large():
    # 150,000 documents in one segment (past 65,536, so Auto prunes too): "sparse" once every
    # 1,500 documents (100 postings, one block spanning the whole segment), "dense" in every
    # other document (a block every 256 documents), "pair_a"/"pair_b" mostly in the same
    # documents, and random filler of varied length.
    rng = np.random.default_rng(11)
    n = 150_000
    filler = np.array([f"f{i}" for i in range(2000)])
    docs = []
    for i in range(n):
        d = filler[rng.integers(0, 2000, int(rng.integers(3, 30)))].tolist()
        if i % 1500 == 7:
            d.append("sparse")
        if i % 2 == 0:
            d.append("dense")
        if i % 97 < 3:
            d += ["pair_a", "pair_b"]
        elif i % 97 == 3:
            d.append("pair_a")
        if i % 611 == 5:
            d += ["rare"] * int(rng.integers(1, 4))
        docs.append(d)
    index = BM25Index()
    index.add_tokenized(docs)
    return index


QUERIES = [
    ["sparse", "dense"],
    ["sparse", "rare"],
    ["pair_a", "pair_b"],
    ["pair_a", "pair_b", "sparse"],
    ["sparse"],
    ["dense"],
    ["rare", "pair_b", "f3", "f1999"],
    ["dense", "pair_a", "f10"],
    ["sparse", "sparse", "rare"],
]


@pytest.mark.parametrize("k", [1, 10, 100, 1000, 5000])
def test_windows_equal_the_exhaustive_scan(large, k):
    for query in QUERIES:
        _same_as_exhaustive(large, query, k)


def test_shared_documents_add_their_shares(large):
    # With k past the floor's ranks both lists stay essential, so every document holding both
    # terms is summed in the window merge: its score is its two single-term scores added.
    ids, scores = large.search_tokenized(["pair_a", "pair_b"], k=5000, algorithm="maxscore")
    single = {}
    for term in ("pair_a", "pair_b"):
        t_ids, t_scores = large.search_tokenized([term], k=len(large), algorithm="exhaustive")
        single[term] = dict(zip(t_ids.tolist(), t_scores.tolist()))
    both = [i for i in ids.tolist() if i % 97 < 3]
    assert len(both) == len(set(np.flatnonzero(np.arange(150_000) % 97 < 3).tolist()))
    got = dict(zip(ids.tolist(), scores.tolist()))
    want = [single["pair_a"][i] + single["pair_b"][i] for i in both]
    np.testing.assert_allclose([got[i] for i in both], want, rtol=1e-6)


def test_windows_skip_filtered_out_documents(large):
    rng = np.random.default_rng(3)
    allowed = IdFilter(rng.choice(150_000, size=40_000, replace=False).tolist())
    for query in QUERIES[:5]:
        for k in (10, 1000):
            _same_as_exhaustive(large, query, k, flt=allowed)


@pytest.mark.parametrize("method", METHODS)
def test_every_variant_and_deletes_across_segments(method):
    rng = np.random.default_rng(7)
    index = index_for(method)
    vocab = np.array([f"w{i}" for i in range(400)])
    for _ in range(3):  # three segments
        docs = [vocab[rng.zipf(1.3, int(rng.integers(2, 25))) % 400].tolist() for _ in range(30_000)]
        index.add_tokenized(docs)
    index.delete(rng.choice(90_000, size=3000, replace=False).tolist())
    for query in (["w5", "w40"], ["w1", "w2", "w3"], ["w100", "w7", "w399"], ["w0"]):
        for k in (1, 10, 100, 2000):
            _same_as_exhaustive(index, query, k)
