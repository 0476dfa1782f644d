"""``retrieve(k=0)`` of the bm25s drop-in returns what bm25s returns (empty ``(n, 0)`` arrays of
the same dtypes), and a negative or non-int k is a clear error, compared with bm25s itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ragfind.compat.bm25s as rbm25s

bm25s = pytest.importorskip("bm25s")

TEXTS = ["Cats purr and hunt mice.", "Dogs bark at cats.", "Mice fear cats that hunt mice.", "Birds fly."]
QUERIES = ["cat", "dog bark", "nothing here"]


def pair(module, backend):
    tokens = module.tokenize(TEXTS, stopwords="en", show_progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bm25s's numba notices
        model = module.BM25(backend=backend)
        model.index(tokens, show_progress=False)
    return model, module.tokenize(QUERIES, stopwords="en", show_progress=False)


def shapes(out):
    arrays = out if isinstance(out, tuple) else (out,)
    return [(a.shape, a.dtype) for a in arrays]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize(
    "options",
    [{}, {"corpus": TEXTS}, {"corpus": np.asarray(TEXTS)}, {"return_as": "documents"}],
    ids=["indices", "list-corpus", "array-corpus", "documents"],
)
def test_k_0_returns_what_bm25s_returns(backend, options):
    if backend == "numba":
        pytest.importorskip("numba")
    ours, q_ours = pair(rbm25s, backend)
    ref, q_ref = pair(bm25s, backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expect = ref.retrieve(q_ref, k=0, show_progress=False, **options)
    got = ours.retrieve(q_ours, k=0, show_progress=False, **options)
    assert type(got).__name__ == type(expect).__name__
    assert shapes(got) == shapes(expect)
    assert shapes(got)[0][0] == (len(QUERIES), 0)


def test_k_negative_or_not_an_int_is_a_clear_error():
    ours, q = pair(rbm25s, "numpy")
    ref, q_ref = pair(bm25s, "numpy")
    with pytest.raises(ValueError) as theirs:
        ref.retrieve(q_ref, k=-1, show_progress=False)
    with pytest.raises(ValueError) as mine:
        ours.retrieve(q, k=-1, show_progress=False)
    assert str(mine.value) == str(theirs.value) == "k must be a non-negative integer, but got -1."
    for bad in (1.5, True, "2", None):
        with pytest.raises(TypeError, match=r"^k must be a non-negative integer, got "):
            ours.retrieve(q, k=bad, show_progress=False)
    # Within the corpus, results keep their shape; past it, bm25s's own error.
    assert ours.retrieve(q, k=np.int64(4), show_progress=False).documents.shape == (3, 4)
    with pytest.raises(ValueError, match="larger than the number of available scores"):
        ours.retrieve(q, k=5, show_progress=False)
