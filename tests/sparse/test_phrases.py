"""Positions and phrase queries, against a brute-force reference written here: every choice of
positions enumerated, Lucene's BM25 and PhraseWeight (idf = sum of the words' idfs, tf = phrase
frequency) in plain Python."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from ragfind import BM25Index
from ragfind.errors import UnknownIdError
from ragfind.sparse.analyzer import Analyzer

PLAIN = dict(stopwords=None, stemmer=None, split_identifiers=False)


def ref_phrase_freq(words: list[str], phrase: list[str], slop: int) -> float:
    """Per position a of phrase[0]: the cheapest distinct positions p_i of phrase[i] (p_0 = a),
    cost max(p_i - i) - min(p_i - i); sum of 1 / (1 + cost) over anchors with cost <= slop."""
    pos = {t: [i for i, w in enumerate(words) if w == t] for t in set(phrase)}
    freq = 0.0
    for a in pos[phrase[0]]:
        best = None
        for rest in itertools.product(*(pos[t] for t in phrase[1:])):
            chosen = (a, *rest)
            if len(set(chosen)) < len(chosen):
                continue
            adj = [p - i for i, p in enumerate(chosen)]
            cost = max(adj) - min(adj)
            if best is None or cost < best:
                best = cost
        if best is not None and best <= slop:
            freq += 1.0 / (1.0 + best)
    return freq


def ref_scores(docs, plain: list[str], phrases, k1=1.2, b=0.75):
    """Lucene BM25 of plain words OR phrases; None for a document matching nothing."""
    toks = [d.split() for d in docs]
    n = len(docs)
    avgdl = sum(map(len, toks)) / n
    df = {}
    for t in toks:
        for w in set(t):
            df[w] = df.get(w, 0) + 1

    def idf(w):
        return math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))

    out = []
    for t in toks:
        L = 1 - b + b * len(t) / avgdl
        s, hit = 0.0, False
        for w in plain:
            tf = t.count(w)
            if tf:
                s += idf(w) * tf / (tf + k1 * L)
                hit = True
        for ph, slop in phrases:
            if any(w not in df for w in ph):
                continue
            pf = ref_phrase_freq(t, ph, slop)
            if pf > 0:
                s += sum(idf(w) for w in ph) * pf / (pf + k1 * L)
                hit = True
        out.append(s if hit else None)
    return out


def query_string(plain, phrases):
    parts = [f'"{" ".join(ph)}"' + (f"~{slop}" if slop else "") for ph, slop in phrases]
    return " ".join(parts + plain)


def check(idx, docs, plain, phrases, k=1000, slots=None):
    ref = ref_scores(docs, plain, phrases)
    want = sorted(((-s, i) for i, s in enumerate(ref) if s is not None and (slots is None or i in slots)))
    ids, scores = idx.search(query_string(plain, phrases), k=k)
    assert len(ids) == min(k, len(want)), (plain, phrases)
    np.testing.assert_allclose(scores, [-s for s, _ in want[: len(ids)]], rtol=1e-5, atol=1e-6)
    # equal scores may come in either order only when they are equal in float32
    got = {int(i) for i in ids}
    assert got == {i for _, i in want[: len(ids)]} or len(set(np.float32(scores))) < len(scores)


HAND = [
    "new york",
    "new big york",
    "york new",
    "new big old york",
    "york big new",
    "new york new york",
    "the york",
    "new new york",
]


@pytest.fixture
def hand():
    idx = BM25Index(analyzer=Analyzer(**PLAIN), positions=True)
    idx.add(HAND)
    return idx


def matches(idx, q):
    return sorted(idx.search(q, k=100)[0].tolist())


def test_lucene_slop_examples(hand):
    assert matches(hand, '"new york"') == [0, 5, 7]
    assert matches(hand, '"new york"~1') == [0, 1, 5, 7]
    assert matches(hand, '"new york"~2') == [0, 1, 2, 3, 5, 7]  # a swap costs 2
    assert matches(hand, '"new york"~3') == [0, 1, 2, 3, 4, 5, 7]  # york big new: a swap and a gap
    assert matches(hand, '"york new"') == [2, 5]
    assert matches(hand, '"new york"~999999999999999999') == [0, 1, 2, 3, 4, 5, 7]


def test_phrase_frequencies_match_reference(hand):
    for q, (ph, slop) in [('"new york"', (["new", "york"], 0)), ('"new york"~2', (["new", "york"], 2))]:
        for i, text in enumerate(HAND):
            want = ref_phrase_freq(text.split(), ph, slop)
            if want == 0:
                continue
            e = hand.explain(q, i)
            assert e.detail["phrases"][0]["phrase_freq"] == pytest.approx(want)
            assert e.score == pytest.approx(sum(p["contribution"] for p in e.detail["phrases"]))
            assert e.score == pytest.approx(sum(c.value for c in e.contributions))
    assert hand.explain('"new york"', 5).detail["phrases"][0]["phrase_freq"] == 2.0  # exact: a count


@pytest.mark.parametrize("seed", range(6))
def test_random_queries_match_brute_force(seed):
    rng = random.Random(seed)
    vocab = ["aa", "bb", "cc", "dd", "ee"][: 3 + seed % 3]
    docs = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12))) for _ in range(60)]
    idx = BM25Index(analyzer=Analyzer(**PLAIN), positions=True)
    idx.add(docs)
    for _ in range(25):
        phrases = [
            ([rng.choice(vocab) for _ in range(rng.randint(2, 3))], rng.choice([0, 0, 1, 2, 3, 5]))
            for _ in range(rng.randint(1, 2))
        ]
        plain = [rng.choice(vocab)] if rng.random() < 0.4 else []
        check(idx, docs, plain, phrases, k=rng.choice([1, 5, 1000]))


def test_unknown_words_and_single_word_phrases(hand):
    assert matches(hand, '"new zebra"') == []
    assert matches(hand, '"new zebra" york') == matches(hand, "york")
    # a one-word phrase scores as the word
    a, b = hand.search('"big"', k=10), hand.search("big", k=10)
    assert a[0].tolist() == b[0].tolist()
    np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
    assert matches(hand, '""') == [] and matches(hand, '"" big') == matches(hand, "big")


def test_stopwords_leave_no_gap_and_phrases_are_analyzed():
    idx = BM25Index(positions=True)  # default analyzer: English stopwords and stemming
    idx.add(["Bank of America reports", "the bank in north america", "america bank"])
    assert matches(idx, '"bank of america"') == [0]  # = "bank america": "of" leaves no gap
    assert matches(idx, '"bank america"') == [0]
    assert matches(idx, '"bank america"~1') == [0, 1]  # "north" in between
    assert matches(idx, '"banks america"') == [0]  # stemmed like the documents
    assert matches(idx, '"bank america"~2') == [0, 1, 2]
    idx2 = BM25Index(positions=True)
    idx2.add(["call getUserById function", "user function"])
    assert matches(idx2, '"user function"') == [0, 1]  # an identifier part sits at its word


def test_mixed_query_and_escapes(hand):
    docs = HAND
    check(hand, docs, ["big"], [(["new", "york"], 0)])
    assert matches(hand, r"\"new york\"") == matches(hand, "new york")
    assert matches(hand, '"new york') == matches(hand, "new york")  # unbalanced: plain


def test_deletes_filters_save_load(tmp_path):
    rng = random.Random(7)
    vocab = ["aa", "bb", "cc"]
    docs = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 10))) for _ in range(200)]
    idx = BM25Index(analyzer=Analyzer(**PLAIN), positions=True)
    for start in range(0, 200, 50):
        idx.add(docs[start : start + 50], ids=list(range(start, start + 50)))
    dead = list(range(0, 200, 3))
    idx.delete(dead)  # past the compaction threshold: segments are rewritten
    live = [i for i in range(200) if i not in set(dead)]
    q = '"aa bb"~1 cc'
    ref = ref_scores([docs[i] for i in live], ["cc"], [(["aa", "bb"], 1)])
    want = sorted((-s, live[j]) for j, s in enumerate(ref) if s is not None)
    ids, scores = idx.search(q, k=10)
    np.testing.assert_allclose(scores, [-s for s, _ in want[:10]], rtol=1e-5)
    allowed = live[::2]
    fids, _ = idx.search(q, k=1000, filter=allowed)
    assert set(fids.tolist()) == {i for _, i in want if i in set(allowed)}
    idx.save(tmp_path / "p.bm25")
    back = BM25Index.load(tmp_path / "p.bm25")
    assert back.positions
    for query in [q, '"aa bb cc"~3', '"cc aa"']:
        a, b = idx.search(query, k=20), back.search(query, k=20)
        assert a[0].tolist() == b[0].tolist()
        np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
    back.add(["aa bb"], ids=[1000])  # a loaded index keeps adding positions
    assert 1000 in back.search('"aa bb"', k=1000)[0].tolist()


def test_batch_and_tokenized(hand):
    res = hand.search_batch(['"new york"', "big", '"york new"'], k=10)
    assert [sorted(r[0].tolist()) for r in res] == [[0, 5, 7], matches(hand, "big"), [2, 5]]
    t = BM25Index(positions=True)
    t.add_tokenized([["xx", "yy"], ["yy", "xx"]])
    assert matches(t, '"xx yy"') == [0]


def test_positions_off_and_sizes(hand, tmp_path):
    plain = BM25Index(analyzer=Analyzer(**PLAIN))
    plain.add(HAND)
    assert not plain.positions and plain.stats()["positions_bytes"] == 0
    # without positions quotes are ignored: the words are plain terms
    assert matches(plain, '"new york"') == matches(plain, "new york")
    assert hand.stats()["positions_bytes"] > 0
    plain.save(tmp_path / "a.bm25")
    hand.save(tmp_path / "b.bm25")
    assert (tmp_path / "b.bm25").stat().st_size > (tmp_path / "a.bm25").stat().st_size
    assert not BM25Index.load(tmp_path / "a.bm25").positions


def test_explain_errors(hand):
    with pytest.raises(UnknownIdError):
        hand.explain('"new york"', 12345)
    with pytest.raises(ValueError, match="k"):
        hand.search('"new york"', k=0)


# ----- the score-bounded search of a phrase alone: its top k must be the first k of the full
# ranking (k at least the number of matches: nothing is skipped), ids and scores alike.


def assert_prefix(idx, q, ks, **kw):
    full_ids, full_scores = idx.search(q, k=10**6, **kw)
    for k in ks:
        ids, scores = idx.search(q, k=k, **kw)
        n = min(k, len(full_ids))
        assert ids.tolist() == full_ids[:n].tolist(), (q, k)
        assert scores.tolist() == full_scores[:n].tolist(), (q, k)
    return full_ids, full_scores


def skewed_corpus(seed, n=3000):
    """Documents of very different lengths (1 to ~2000 words: exact and rounded length codes)
    where "aa" is common, "bb" rarer and "cc" rare, with repeats, so that top-k thresholds
    rise and whole blocks are skipped."""
    rng = random.Random(seed)
    words = ["aa"] * 6 + ["bb"] * 3 + ["cc"] + ["dd", "ee", "ff", "gg", "hh"] * 4
    docs = []
    for _ in range(n):
        short = rng.random() < 0.95
        length = rng.choice([1, 2, 3, 5, 8, 13, 30, 60, 200]) if short else rng.randint(500, 2000)
        docs.append(" ".join(rng.choice(words) for _ in range(length)))
    return docs


PRUNE_QUERIES = [
    '"aa bb"',
    '"bb aa"',
    '"aa cc"',
    '"cc aa"',
    '"aa aa"',
    '"aa bb aa"',
    '"aa bb cc"',
    '"aa bb"~1',
    '"aa bb"~2',
    '"bb aa"~2',
    '"cc aa"~3',
    '"aa cc"~2',
    '"aa aa"~2',
    '"aa bb cc"~4',
    '"aa bb"~2147483647',
]


@pytest.mark.parametrize("seed", range(3))
def test_pruned_phrase_top_k_is_the_full_rankings_prefix(seed):
    docs = skewed_corpus(seed)
    idx = BM25Index(analyzer=Analyzer(**PLAIN), positions=True)
    for start in range(0, len(docs), 700):  # several adds (segments)
        idx.add(docs[start : start + 700])
    for q in PRUNE_QUERIES:
        full_ids, _ = assert_prefix(idx, q, [1, 2, 7, 10, 33, 100, 1000])
        assert len(full_ids) > 0, q


def test_pruned_phrase_against_brute_force():
    docs = skewed_corpus(11, n=800)
    docs = [d for d in docs if len(d.split()) < 100]  # keeps the reference cheap
    idx = BM25Index(analyzer=Analyzer(**PLAIN), positions=True)
    idx.add(docs)
    for ph, slop in [(["aa", "bb"], 0), (["cc", "aa"], 2), (["aa", "bb", "aa"], 1), (["bb", "aa"], 3)]:
        for k in [1, 5, 20]:
            check(idx, docs, [], [(ph, slop)], k=k)


def test_pruned_phrase_ties_keep_insertion_order():
    # Identical documents score alike: the top k are the earliest, also after a block skip.
    docs = ["zz yy"] * 40 + ["aa bb xx"] * 100 + ["aa bb"] * 200 + ["aa bb xx"] * 100
    idx = BM25Index(analyzer=Analyzer(**PLAIN), positions=True)
    idx.add(docs)
    for k in [1, 5, 64, 199, 200, 201, 250, 1000]:
        ids, scores = idx.search('"aa bb"', k=k)
        want = list(range(140, 340))[:k]
        if k > 200:
            want += [*range(40, 140), *range(340, 440)][: k - 200]
        assert ids.tolist() == want
        assert len(set(scores[: min(k, 200)].tolist())) == 1
    assert_prefix(idx, '"aa bb"~1', [1, 5, 64, 200, 250])


def test_pruned_phrase_with_deletes_filters_and_ids():
    docs = skewed_corpus(4, n=2000)
    idx = BM25Index(analyzer=Analyzer(**PLAIN), positions=True)
    idx.add(docs, ids=[f"d{i}" for i in range(len(docs))])
    full_ids, _ = idx.search('"aa bb"', k=10**6)
    # delete the best documents (few: no compaction, the lists keep dead entries), then more
    gone: set = set()
    for batch in [full_ids[:5].tolist(), full_ids[5:50:3].tolist(), [f"d{i}" for i in range(0, 2000, 3)]]:
        fresh = [d for d in batch if d not in gone]
        idx.delete(fresh)
        gone.update(fresh)
        for q in PRUNE_QUERIES[:10]:
            assert_prefix(idx, q, [1, 3, 10, 100])
    allowed = [f"d{i}" for i in range(1, 2000, 7)]
    for q in PRUNE_QUERIES[:10]:
        ids, _ = assert_prefix(idx, q, [1, 3, 10, 100], filter=allowed)
        assert set(ids.tolist()) <= set(allowed)


def test_pruned_phrase_with_overlap_tokens_and_tokenized():
    # Identifier parts do not count towards the length: the bounds' lengths must agree.
    rng = random.Random(3)
    parts = ["getUser", "user", "id", "fetch", "userId", "loadUserById", "name"]
    docs = [" ".join(rng.choice(parts) for _ in range(rng.randint(1, 40))) for _ in range(1500)]
    idx = BM25Index(positions=True)
    idx.add(docs)
    for q in ['"user id"', '"get user"', '"user"', '"fetch user"~2', '"load user"']:
        assert_prefix(idx, q, [1, 4, 10, 50])
    t = BM25Index(positions=True)
    toks = [d.lower().split() for d in docs]
    t.add_tokenized(toks)
    assert_prefix(t, '"getuser userid"', [1, 4, 10, 50])
    assert_prefix(t, '"getuser userid"~2', [1, 4, 10, 50])


def test_parse_query_fast_path_agrees_with_the_loop():
    from ragfind.sparse.query import _parse, parse_query

    rng = random.Random(0)
    alphabet = ['"', '"', "\\", "~", "1", "2", "0", " ", "a", "b", "\u0663", "\n"]
    cases = ['"a b"', '"a b"~2', '"a b"~', '"a b"~x', '"a b"~12345678901', '"a b"~0123456789']
    cases += ['""', '"a\\"b"', ' "a b"', '"a b" ']
    cases += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(20000)]
    for q in cases:
        if '"' in q:
            assert parse_query(q) == _parse(q), q


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_pruned_phrase_every_variant(method):
    docs = skewed_corpus(8, n=1500)
    idx = BM25Index(method=method, analyzer=Analyzer(**PLAIN), positions=True)
    idx.add(docs)
    for q in ['"aa bb"', '"cc aa"~2', '"aa bb cc"~1', '"aa aa"']:
        assert_prefix(idx, q, [1, 10, 60])
