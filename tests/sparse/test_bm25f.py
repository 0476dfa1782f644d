"""BM25F (fields=...) against the formula of Zaragoza et al. (2004) written in numpy here."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ragfind import BM25Index
from ragfind.errors import DuplicateIdError, UnknownIdError
from ragfind.sparse.analyzer import Analyzer

PLAIN = Analyzer(stopwords=None, stemmer=None, split_identifiers=False)


def ref_bm25f(docs, fields, field_b, query, k1=1.2):
    """ptf = sum_f w_f tf_f / (1 - b_f + b_f len_f / avglen_f); idf * ptf / (k1 + ptf)."""
    n = len(docs)
    toks = {f: [d.get(f, "").split() for d in docs] for f in fields}
    lens = {f: np.array([len(t) for t in toks[f]], float) for f in fields}
    scores = np.zeros(n)
    for term in query.split():
        ptf = np.zeros(n)
        for f, w in fields.items():
            tf = np.array([t.count(term) for t in toks[f]], float)
            avg = lens[f].mean()
            norm = 1 - field_b[f] + field_b[f] * lens[f] / avg if avg > 0 else np.ones(n)
            ptf += np.divide(w * tf, norm, out=np.zeros(n), where=tf > 0)
        df = int((ptf > 0).sum())
        if df:
            idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
            scores += np.where(ptf > 0, idf * ptf / (k1 + ptf), 0.0)
    return scores


def random_docs(rng, n):
    vocab = ["aa", "bb", "cc", "dd", "ee", "ff"]

    def text(m):
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(0, m)))

    return [{"title": text(4), "body": text(15)} for _ in range(n)]


@pytest.mark.parametrize("seed", range(4))
def test_scores_match_numpy_reference(seed):
    rng = random.Random(seed)
    docs = random_docs(rng, 80)
    fields = {"title": rng.choice([1.0, 2.0, 3.5]), "body": rng.choice([0.5, 1.0])}
    field_b = {"title": rng.choice([0.0, 0.5, 0.75]), "body": rng.choice([0.3, 0.75, 1.0])}
    idx = BM25Index(fields=fields, field_b=field_b, analyzer=PLAIN)
    idx.add(docs)
    for q in ["aa", "bb cc", "dd dd ee", "ff aa bb zz"]:
        ref = ref_bm25f(docs, fields, field_b, q)
        np.testing.assert_allclose(idx.score(q), ref, rtol=1e-9, atol=1e-12)
        ids, scores = idx.search(q, k=10)
        order = sorted((i for i in range(len(docs)) if ref[i] > 0), key=lambda i: (-np.float32(ref[i]), i))
        assert ids.tolist() == order[:10]
        np.testing.assert_allclose(scores, ref[order[:10]], rtol=1e-6)
        for i in order[:3]:
            e = idx.explain(q, i)
            assert e.kind == "bm25f" and e.score == pytest.approx(ref[i])
            assert sum(c.value for c in e.contributions) == pytest.approx(e.score)
            for t in e.detail["terms"]:
                shares = [c.value for c in e.contributions if c.detail["term"] == t["term"]]
                assert sum(shares) == pytest.approx(t["contribution"])


def test_one_field_is_lucene_bm25():
    rng = random.Random(5)
    docs = random_docs(rng, 50)
    f = BM25Index(fields={"body": 1.0}, analyzer=PLAIN)
    f.add([{"body": d["body"]} for d in docs])
    plain = BM25Index(analyzer=PLAIN)
    plain.add([d["body"] for d in docs])
    for q in ["aa", "bb cc dd"]:
        np.testing.assert_allclose(f.score(q), plain.score(q), rtol=1e-9)


def test_not_a_sum_of_per_field_bm25():
    docs = [{"title": "aa", "body": "aa aa aa"}, {"title": "bb", "body": "aa"}]
    idx = BM25Index(fields={"title": 1.0, "body": 1.0}, analyzer=PLAIN)
    idx.add(docs)
    fields, b = {"title": 1.0, "body": 1.0}, {"title": 0.75, "body": 0.75}
    np.testing.assert_allclose(idx.score("aa"), ref_bm25f(docs, fields, b, "aa"))
    # a sum of saturated per-field parts would be larger than one saturation of the sum
    e = idx.explain("aa", 0).detail["terms"][0]
    ptf = e["pseudo_tf"]
    assert e["contribution"] == pytest.approx(e["idf"] * ptf / (1.2 + ptf))


def test_ids_deletes_filters_save_load(tmp_path):
    rng = random.Random(9)
    docs = random_docs(rng, 60)
    fields, field_b = {"title": 2.0, "body": 1.0}, {"title": 0.5, "body": 0.75}
    idx = BM25Index(fields=fields, field_b=field_b, analyzer=PLAIN)
    ids = [f"d{i}" for i in range(60)]
    idx.add(docs[:30], ids=ids[:30])
    idx.add(docs[30:], ids=ids[30:])
    with pytest.raises(DuplicateIdError):
        idx.add([{"title": "x"}], ids=["d3"])
    with pytest.raises(UnknownIdError):
        idx.delete(["nope"])
    assert len(idx) == 60
    dead = ids[::4]
    idx.delete(dead)
    live = [i for i in range(60) if ids[i] not in set(dead)]
    ref = ref_bm25f([docs[i] for i in live], fields, field_b, "aa bb")
    np.testing.assert_allclose(idx.score("aa bb"), ref, rtol=1e-9)
    allowed = {ids[i] for i in live[::3]}
    fids, _ = idx.search("aa bb", k=100, filter=allowed)
    assert set(fids.tolist()) == {
        ids[live[j]] for j in range(len(live)) if ref[j] > 0 and ids[live[j]] in allowed
    }
    idx.save(tmp_path / "f.bm25")
    back = BM25Index.load(tmp_path / "f.bm25")
    assert back.fields == fields and back.field_b == field_b
    a, b = idx.search("aa bb", k=20), back.search("aa bb", k=20)
    assert a[0].tolist() == b[0].tolist()
    np.testing.assert_allclose(a[1], b[1])


def test_errors():
    with pytest.raises(ValueError, match="fields"):
        BM25Index(fields={})
    with pytest.raises(ValueError, match="weight"):
        BM25Index(fields={"a": -1.0})
    with pytest.raises(ValueError, match="field_b"):
        BM25Index(fields={"a": 1.0}, field_b={"b": 0.5})
    with pytest.raises(ValueError, match="field_b"):
        BM25Index(fields={"a": 1.0}, field_b={"a": 2})
    with pytest.raises(ValueError, match="lucene"):
        BM25Index(fields={"a": 1.0}, method="bm25+")
    idx = BM25Index(fields={"title": 1.0, "body": 1.0})
    with pytest.raises(ValueError, match="not one of the fields"):
        idx.add([{"titel": "typo"}])
    with pytest.raises(TypeError, match="expected str"):
        idx.add([{"title": 3}])
    assert len(idx) == 0
    with pytest.raises(ValueError, match="k"):
        idx.search("x", k=0)


def test_retriever_indexes_title_and_text_as_fields(tmp_path):
    import ragfind

    docs = [
        {"id": "a", "title": "Volcano", "text": "A mountain that erupts lava."},
        {"id": "b", "title": "Geology", "text": "Rocks, volcano studies and volcano maps."},
        {"id": "c", "title": "Cooking", "text": "Bread and butter."},
    ]
    bm25 = BM25Index(fields={"title": 5.0, "text": 1.0})
    r = ragfind.Retriever(encoder=None, bm25=bm25)
    r.add_documents(docs)
    res = r.search("volcano", k=3)
    assert res.doc_ids == ["a", "b"]  # the title weight beats two mentions in the text
    assert res[0].highlights == []  # the match is in the title, not the passage text
    assert [res[1].text[b:e] for b, e in res[1].highlights] == ["volcano", "volcano"]
    plain = ragfind.Retriever(encoder=None)
    plain.add_documents(docs)
    assert plain.search("volcano", k=3).doc_ids[0] == "b"
    r.save(tmp_path / "r")
    back = ragfind.Retriever.load(tmp_path / "r")
    assert back.search("volcano", k=3).doc_ids == ["a", "b"]
    with pytest.raises(ValueError, match="title"):
        ragfind.Retriever(encoder=None, bm25=BM25Index(fields={"body": 1.0}))
