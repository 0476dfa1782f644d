"""RM3 pseudo-relevance feedback: the expansion, its weights, parity with a slow reference of
Anserini's Rm3Reranker, the BM25 stage option and the parameter checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragfind import BM25Index
from ragfind.pipeline.stages import BM25Stage
from ragfind.sparse.feedback import RM3

# "apple" is in documents 0 and 1 only; they share "orchard" and "cider" with document 2, which
# holds no query term. Filler documents keep every term under Anserini's 10% df cut.
DOCS = [
    "apple orchard cider harvest",
    "apple cider orchard press",
    "orchard cider barrel",
    "ship sail harbour",
] + [f"filler{i} word{i}" for i in range(26)]


def texts_of(docs):
    return lambda ids: [docs[int(i)] for i in ids]


def test_expansion_finds_a_document_without_query_terms():
    index = BM25Index(analyzer="whitespace")
    index.add(DOCS)
    plain, _ = index.search("apple", k=10)
    assert set(plain.tolist()) == {0, 1}
    ids, scores = RM3(fb_docs=2).search(index, "apple", 10, texts_of(DOCS))
    assert 2 in ids.tolist() and 3 not in ids.tolist()
    assert ids[:2].tolist() in ([0, 1], [1, 0])
    assert np.all(np.diff(scores) <= 0)


def test_weights_sum_to_one_and_mix_the_query():
    index = BM25Index(analyzer="whitespace")
    index.add(DOCS)
    rm3 = RM3(fb_docs=2, fb_terms=3)
    model = rm3.relevance_model(index, DOCS[:2], [2.0, 1.0])
    assert len(model) <= 3 and math.isclose(sum(model.values()), 1.0)
    w = rm3.weights(index, "apple apple orchard", DOCS[:2], [2.0, 1.0])
    assert math.isclose(sum(w.values()), 1.0)
    only_query = RM3(original_query_weight=1.0).weights(index, "apple apple orchard", DOCS[:2], [2.0, 1.0])
    assert only_query == pytest.approx({"apple": 2 / 3, "orchard": 1 / 3})
    only_model = RM3(fb_docs=2, fb_terms=3, original_query_weight=0.0).weights(
        index, "apple", DOCS[:2], [2.0, 1.0]
    )
    assert only_model == pytest.approx(model)


def test_common_and_short_terms_are_not_feedback_terms():
    docs = ["apple common x", "apple common yy"] + [f"common other{i}" for i in range(8)]
    index = BM25Index(analyzer="whitespace")
    index.add(docs)
    model = RM3().relevance_model(index, docs[:2], [1.0, 1.0])
    # common: df 100%; apple: df 20%; x: one character.
    assert model == {"yy": 1.0}


# ---- parity with a slow reference


def bm25(term, d, toks, k1=1.2, b=0.75):
    n = len(toks)
    df = sum(term in t for t in toks)
    tf = toks[d].count(term)
    if tf == 0:
        return 0.0
    avgdl = sum(map(len, toks)) / n
    return math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * len(toks[d]) / avgdl))


def reference_rm3(docs, query, fb_docs, fb_terms, alpha, max_df=0.1):
    """Anserini's Rm3Reranker over whitespace tokens, written out longhand."""
    toks = [d.split() for d in docs]
    n = len(docs)
    first = sorted(range(n), key=lambda d: (-sum(bm25(t, d, toks) for t in query.split()), d))
    first = [d for d in first if any(t in toks[d] for t in query.split())][:fb_docs]
    rm = {}
    for d in first:
        score = sum(bm25(t, d, toks) for t in query.split())
        vec = {}
        for t in toks[d]:
            if 2 <= len(t) <= 20 and sum(t in x for x in toks) / n <= max_df:
                vec[t] = vec.get(t, 0) + 1
        vec = dict(sorted(vec.items(), key=lambda kv: (-kv[1], kv[0]))[:fb_terms])
        norm = sum(vec.values())
        for t, c in vec.items():
            rm[t] = rm.get(t, 0.0) + c / norm * score
    rm = dict(sorted(rm.items(), key=lambda kv: (-kv[1], kv[0]))[:fb_terms])
    total = sum(rm.values())
    q = {}
    for t in query.split():
        q[t] = q.get(t, 0) + 1 / len(query.split())
    out = {t: alpha * w for t, w in q.items()}
    for t, w in rm.items():
        out[t] = out.get(t, 0.0) + (1 - alpha) * w / total
    return out, toks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_parity_with_a_slow_reference(seed):
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(60)]
    p = 1 / np.arange(1, 61)
    docs = [" ".join(rng.choice(vocab, size=int(rng.integers(3, 30)), p=p / p.sum())) for _ in range(300)]
    query = "w20 w35 w20"
    index = BM25Index(analyzer="whitespace")
    index.add(docs)
    rm3 = RM3(fb_docs=5, fb_terms=8, original_query_weight=0.6)
    ref, toks = reference_rm3(docs, query, 5, 8, 0.6)
    first_ids, first_scores = index.search(query, k=5)
    got = rm3.weights(index, query, [docs[i] for i in first_ids], first_scores)
    assert got == pytest.approx(ref, rel=1e-5)  # float32 first-pass scores
    ids, scores = rm3.search(index, query, 20, texts_of(docs))
    counts = {t: round(w * rm3.resolution) for t, w in got.items()}
    exact = np.array([sum(w * bm25(t, d, toks) for t, w in ref.items()) for d in range(len(docs))])
    quantised = np.array(
        [sum(c / rm3.resolution * bm25(t, d, toks) for t, c in counts.items()) for d in range(len(docs))]
    )
    np.testing.assert_allclose(scores, quantised[ids], rtol=1e-5)
    assert set(ids.tolist()) <= set(np.flatnonzero(quantised > 0).tolist())
    assert scores[-1] >= np.sort(quantised)[::-1][19] * (1 - 1e-5)
    # Rounding each weight to 1/resolution moves a score by at most half that per term.
    bound = 0.5 / rm3.resolution * np.array([sum(bm25(t, d, toks) for t in ref) for d in ids])
    assert np.all(np.abs(scores - exact[ids]) <= bound + 1e-5)


def test_filter_keeps_the_unfiltered_ranking():
    index = BM25Index(analyzer="whitespace")
    index.add(DOCS)
    rm3 = RM3(fb_docs=2)
    ids, scores = rm3.search(index, "apple", 10, texts_of(DOCS))
    allowed = [1, 2, 3]
    fids, fscores = rm3.search(index, "apple", 10, texts_of(DOCS), filter=allowed)
    keep = np.isin(ids, allowed)
    assert fids.tolist() == ids[keep].tolist()
    np.testing.assert_allclose(fscores, scores[keep])


def test_no_match_and_empty_index():
    index = BM25Index(analyzer="whitespace")
    ids, _ = RM3().search(index, "apple", 5, texts_of(DOCS))
    assert len(ids) == 0
    index.add(DOCS)
    ids, _ = RM3().search(index, "nothing", 5, texts_of(DOCS))
    assert len(ids) == 0


# ---- the stage option


def test_stage_with_feedback():
    stage = BM25Stage(BM25Index(analyzer="whitespace"), feedback=RM3(fb_docs=2))
    stage.add(np.arange(len(DOCS)), DOCS)
    assert 2 in stage.search("apple", 10)[0].tolist()
    stage.delete(np.array([2]))
    assert 2 not in stage.search("apple", 10)[0].tolist()
    plain = BM25Stage(BM25Index(analyzer="whitespace"))
    plain.add(np.arange(len(DOCS)), DOCS)
    assert plain.feedback is None and 2 not in plain.search("apple", 10)[0].tolist()
    with pytest.raises(ValueError, match="stats"):
        stage.search("apple", 10, None, (10, 30, {"apple": 2}))


def test_stage_rejects_bad_feedback():
    with pytest.raises(TypeError, match="feedback"):
        BM25Stage(BM25Index(), feedback="rm3")
    with pytest.raises(ValueError, match="BM25F"):
        BM25Stage(BM25Index(fields={"title": 2.0, "text": 1.0}), feedback=RM3())
    full = BM25Index()
    full.add(["x y"])
    with pytest.raises(ValueError, match="empty"):
        BM25Stage(full, feedback=RM3())


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"fb_docs": 0}, "fb_docs"),
        ({"fb_docs": 2.5}, "fb_docs"),
        ({"fb_terms": -1}, "fb_terms"),
        ({"fb_terms": True}, "fb_terms"),
        ({"original_query_weight": 1.5}, "original_query_weight"),
        ({"original_query_weight": float("nan")}, "original_query_weight"),
        ({"original_query_weight": "half"}, "original_query_weight"),
        ({"max_df_ratio": 0}, "max_df_ratio"),
        ({"resolution": 0}, "resolution"),
    ],
)
def test_bad_parameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        RM3(**kwargs)


def test_mismatched_texts_and_scores():
    index = BM25Index()
    index.add(DOCS)
    with pytest.raises(ValueError, match="texts and scores"):
        RM3().weights(index, "apple", DOCS[:2], [1.0])
    with pytest.raises(TypeError, match="query"):
        RM3().search(index, b"apple", 5, texts_of(DOCS))


def test_stage_reads_texts_from_a_callable():
    index = BM25Index(analyzer="whitespace")
    index.add(DOCS)
    stage = BM25Stage(index, feedback=RM3(fb_docs=2), texts=texts_of(DOCS))
    assert stage._texts is None
    ids, scores = stage.search("apple", 10)
    want_ids, want_scores = RM3(fb_docs=2).search(index, "apple", 10, texts_of(DOCS))
    assert ids.tolist() == want_ids.tolist()
    np.testing.assert_array_equal(scores, want_scores)
    stage.set_feedback(None)
    assert 2 not in stage.search("apple", 10)[0].tolist()
    with pytest.raises(TypeError, match="texts"):
        stage.set_feedback(RM3(), texts="not callable")


def test_a_phrase_query_is_searched_as_it_is():
    index = BM25Index(analyzer="whitespace", positions=True)
    index.add(DOCS)
    rm3 = RM3(fb_docs=2)
    for q in ('"apple orchard"', '"apple cider"~2 orchard'):
        ids, scores = rm3.search(index, q, 10, texts_of(DOCS))
        want_ids, want_scores = index.search(q, 10)
        assert ids.tolist() == want_ids.tolist()
        np.testing.assert_array_equal(scores, want_scores)
    # Without phrases the same index is expanded.
    assert 2 in rm3.search(index, "apple", 10, texts_of(DOCS))[0].tolist()
