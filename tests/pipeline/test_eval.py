"""ragfind.eval against pytrec_eval (trec_eval itself) and ranx, on random and real runs."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from ragfind.eval import BeirDataset, evaluate, load_beir, load_qrels, rank_run

pytrec_eval = pytest.importorskip("pytrec_eval")

# ragfind metric name -> pytrec_eval measure (and the key it reports under).
CUTS = (1, 3, 5, 10, 100)
PYTREC_OF = {"ndcg": "ndcg", "map": "map", "mrr": "recip_rank"}
for _k in CUTS:
    PYTREC_OF[f"ndcg@{_k}"] = f"ndcg_cut.{_k}"
    PYTREC_OF[f"recall@{_k}"] = f"recall.{_k}"
    PYTREC_OF[f"precision@{_k}"] = f"P.{_k}"
    PYTREC_OF[f"map@{_k}"] = f"map_cut.{_k}"

RANX_METRICS = [f"{m}@{k}" for m in ("ndcg", "recall", "precision", "mrr", "map") for k in CUTS] + [
    "mrr",
    "map",
]


def pytrec_per_query(qrels, run, metrics):
    """{metric: {qid: value}} from pytrec_eval, for the queries it reports."""
    evaluator = pytrec_eval.RelevanceEvaluator(
        {q: {d: int(r) for d, r in j.items()} for q, j in qrels.items()},
        {PYTREC_OF[m] for m in metrics},
    )
    got = evaluator.evaluate({q: {d: float(s) for d, s in r.items()} for q, r in run.items()})
    return {m: {q: vals[PYTREC_OF[m].replace(".", "_")] for q, vals in got.items()} for m in metrics}


@pytest.fixture(scope="module")
def ranx():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import ranx as ranx_module
    return ranx_module


def ranx_per_query(ranx, qrels, run, metrics):
    """{metric: {qid: value}} from ranx. ranx's order among tied scores is its sort's (not
    trec_eval's), so it gets the same ranking with tie-free scores (n, n-1, ..., 1) in trec_eval's
    rank order; every judged query gets a (possibly empty) entry."""
    ordered = {}
    for q in qrels:
        ranked = rank_run(run[q]) if q in run else []
        ordered[q] = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba type-safety chatter inside ranx
        values = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(ordered), metrics, return_mean=False)
    qids = list(ranx.Qrels(qrels).keys())
    return {m: dict(zip(qids, np.atleast_1d(values[m]).tolist())) for m in metrics}


def assert_close(ours: dict, theirs: dict, label: str) -> None:
    for q, v in theirs.items():
        assert math.isclose(ours[q], v, rel_tol=1e-9, abs_tol=1e-12), f"{label} query {q}: {ours[q]} != {v}"


def random_case(seed: int, n_queries: int = 60, n_docs: int = 80, with_negative: bool = True):
    """Graded qrels (some zero/negative judgements), runs with heavy score ties, unjudged
    documents, empty runs and missing queries."""
    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(n_docs)]
    qrels, run = {}, {}
    for qi in range(n_queries):
        q = f"q{qi}"
        judged = rng.choice(n_docs, size=int(rng.integers(1, 15)), replace=False)
        levels = [-1, 0, 1, 2, 3] if with_negative else [0, 1, 2, 3]
        grades = rng.choice(levels, size=len(judged), p=None)
        grades[0] = int(rng.integers(1, 4))  # at least one relevant document
        qrels[q] = {docs[d]: int(g) for d, g in zip(judged, grades)}
        shape = qi % 6
        if shape == 0:
            run[q] = {}  # empty run
        elif shape == 1:
            continue  # query missing from the run
        else:
            retrieved = rng.choice(n_docs, size=int(rng.integers(1, 60)), replace=False)
            # few distinct score values -> many ties
            scores = rng.integers(0, 4 if shape == 2 else 1000, size=len(retrieved)) / 4.0
            run[q] = {docs[d]: float(s) for d, s in zip(retrieved, scores)}
    run["unjudged-query"] = {"d1": 1.0}
    qrels["no-relevant"] = {"d2": 0, "d3": -1}  # never scored
    return qrels, run


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_runs_match_pytrec_eval(seed):
    qrels, run = random_case(seed)
    metrics = list(PYTREC_OF)
    ours = evaluate(qrels, run, metrics)
    assert ours.num_queries == len(qrels) - 1
    assert "no-relevant" not in ours.per_query["ndcg@10"]
    theirs = pytrec_per_query({q: j for q, j in qrels.items() if q != "no-relevant"}, run, metrics)
    reported = set(next(iter(theirs.values())))
    assert reported == {q for q in run if q in qrels}  # pytrec_eval skips missing queries
    for m in metrics:
        assert_close(ours.per_query[m], theirs[m], m)
    # missing queries score 0 and count in the mean (trec_eval -c)
    for q in ours.missing_queries:
        assert q not in run
        assert all(ours.per_query[m][q] == 0.0 for m in metrics)
    for m in metrics:
        assert ours.mean[m] == pytest.approx(np.mean(list(ours.per_query[m].values())), rel=1e-12)


@pytest.mark.parametrize("seed", [3, 4])
def test_random_runs_match_ranx(ranx, seed):
    qrels, run = random_case(seed, with_negative=False)
    qrels = {q: j for q, j in qrels.items() if q != "no-relevant"}
    ours = evaluate(qrels, run, RANX_METRICS)
    theirs = ranx_per_query(ranx, qrels, run, RANX_METRICS)
    for m in RANX_METRICS:
        assert_close(ours.per_query[m], theirs[m], m)
        assert ours.mean[m] == pytest.approx(np.mean(list(theirs[m].values())), rel=1e-9)


def test_ties_follow_trec_eval_order():
    # Three documents tie at 1.0: trec_eval ranks them by doc id descending: d, b, a.
    qrels = {"q": {"a": 1, "b": 2, "c": 0, "z": -1}}
    run = {"q": {"a": 1.0, "b": 1.0, "c": 2.0, "d": 1.0, "z": 3.0}}
    assert rank_run(run["q"]) == ["z", "c", "d", "b", "a"]
    res = evaluate(qrels, run, ["mrr", "map", "ndcg@10", "recall@10", "precision@1"])
    assert res.per_query["mrr"]["q"] == pytest.approx(1 / 4)
    assert res.per_query["map"]["q"] == pytest.approx((1 / 4 + 2 / 5) / 2)
    # negative judgement counts as gain 0; ideal = [2, 1]
    dcg = 2 / math.log2(5) + 1 / math.log2(6)
    assert res.per_query["ndcg@10"]["q"] == pytest.approx(dcg / (2 + 1 / math.log2(3)))
    assert res.per_query["recall@10"]["q"] == 1.0
    assert res.per_query["precision@1"]["q"] == 0.0
    theirs = pytrec_per_query(qrels, run, ["mrr", "map", "ndcg@10"])
    for m in ("mrr", "map", "ndcg@10"):
        assert_close(res.per_query[m], theirs[m], m)


def test_hand_computed_graded_example():
    qrels = {"q": {"a": 3, "b": 1, "c": 2}}
    ranked = ["b", "x", "a"]  # c is never retrieved
    res = evaluate(qrels, {"q": ranked}, ["ndcg@2", "ndcg@3", "recall@2", "mrr@1", "map@3", "precision@3"])
    ideal2 = 3 + 2 / math.log2(3)
    assert res["ndcg@2"] == pytest.approx(1 / ideal2)
    ideal3 = ideal2 + 1 / 2
    assert res["ndcg@3"] == pytest.approx((1 + 3 / 2) / ideal3)
    assert res["recall@2"] == pytest.approx(1 / 3)
    assert res["mrr@1"] == 1.0
    assert res["map@3"] == pytest.approx((1 / 1 + 2 / 3) / 3)
    assert res["precision@3"] == pytest.approx(2 / 3)


def test_run_formats_agree():
    qrels = {"q1": {"a": 1, "c": 2}, "q2": {"7": 1}}
    as_dict = {"q1": {"a": 0.5, "b": 0.9, "c": 0.1}, "q2": {"3": 2.0, "7": 1.0}}
    as_list = {"q1": ["b", "a", "c"], "q2": ["3", "7"]}
    as_pair = {
        "q1": (np.array(["b", "a", "c"]), np.array([0.9, 0.5, 0.1], dtype=np.float32)),
        "q2": (np.array([3, 7], dtype=np.int64), np.array([2.0, 1.0], dtype=np.float32)),
    }
    metrics = ["ndcg@10", "recall@2", "mrr", "map"]
    expected = evaluate(qrels, as_dict, metrics).per_query
    assert evaluate(qrels, as_list, metrics).per_query == expected
    assert evaluate(qrels, as_pair, metrics).per_query == expected
    # a list is taken as already ranked, whatever the ids look like
    assert rank_run(["c", "a", "b"]) == ["c", "a", "b"]


def test_empty_run_and_no_overlap_score_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 2}}
    res = evaluate(qrels, {"q1": {}, "other": {"b": 1.0}}, ["ndcg@10", "recall@10", "mrr", "map"])
    assert res.num_queries == 2
    assert sorted(res.missing_queries) == ["q2"]
    assert res.mean == {"ndcg@10": 0.0, "recall@10": 0.0, "mrr": 0.0, "map": 0.0}
    assert "ndcg@10 0.0000" in str(res)


@pytest.mark.parametrize(
    ("metrics", "error", "match"),
    [
        (["bleu@10"], ValueError, "unknown metric 'bleu@10'"),
        (["ndcg@0"], ValueError, "cutoff k must be >= 1"),
        (["precision"], ValueError, "precision needs a cutoff"),
        ([], ValueError, "at least one metric"),
        ([10], TypeError, "metric names must be strings"),
    ],
)
def test_bad_metric_names(metrics, error, match):
    with pytest.raises(error, match=match):
        evaluate({"q": {"a": 1}}, {"q": ["a"]}, metrics)


def test_bad_runs_and_qrels():
    qrels = {"q": {"a": 1}}
    with pytest.raises(ValueError, match="NaN score"):
        evaluate(qrels, {"q": {"a": float("nan")}})
    with pytest.raises(ValueError, match="appears twice"):
        evaluate(qrels, {"q": ["a", "b", "a"]})
    with pytest.raises(ValueError, match="appears twice"):
        evaluate(qrels, {"q": (["a", "a"], [1.0, 0.5])})
    with pytest.raises(ValueError, match="differ in length"):
        evaluate(qrels, {"q": (["a", "b"], [1.0])})
    with pytest.raises(TypeError, match="run for query 'q'"):
        evaluate(qrels, {"q": "a"})
    with pytest.raises(TypeError, match="run must be"):
        evaluate(qrels, [("q", ["a"])])
    with pytest.raises(TypeError, match="qrels must be"):
        evaluate([("q", {"a": 1})], {"q": ["a"]})
    with pytest.raises(ValueError, match="nothing to score"):
        evaluate({"q": {"a": 0}}, {"q": ["a"]})


# ----------------------------------------------------------------------------------------------
# Loading BEIR folders
# ----------------------------------------------------------------------------------------------


def write_beir(root, qrels_text="query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t0\nq3\td1\t2\nq3\td3\t0\n"):
    (root / "qrels").mkdir(parents=True)
    docs = [
        {"_id": "d1", "title": "Alpha", "text": "first"},
        {"_id": "d2", "text": "second"},
        {"_id": "d3", "title": "", "text": "third"},
    ]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n", encoding="utf-8")
    queries = [{"_id": q, "text": f"text of {q}", "metadata": {}} for q in ("q1", "q2", "q3", "q4")]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n", encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(qrels_text, encoding="utf-8")
    return root


def test_load_beir_keeps_only_scored_queries(tmp_path):
    data = load_beir(write_beir(tmp_path))
    assert isinstance(data, BeirDataset)
    assert list(data.queries) == ["q1", "q3"]  # q2 only has a 0 judgement, q4 none
    assert data.qrels == {"q1": {"d1": 1}, "q3": {"d1": 2, "d3": 0}}
    assert data.documents() == (["d1", "d2", "d3"], ["Alpha first", "second", "third"])
    assert data.query_items() == (["q1", "q3"], ["text of q1", "text of q3"])
    assert "queries=2" in repr(data)
    assert load_beir(tmp_path, load_corpus=False).corpus == {}


def test_load_qrels_trec_format_and_no_header(tmp_path):
    p = tmp_path / "qrels.txt"
    p.write_text("q1 0 d1 1\nq1 0 d2 0\nq2 0 d9 0\n", encoding="utf-8")
    assert load_qrels(p) == {"q1": {"d1": 1, "d2": 0}}
    p.write_text("q1\td1\t2\n", encoding="utf-8")
    assert load_qrels(p) == {"q1": {"d1": 2}}
    assert load_qrels(p, relevance_level=3) == {}


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="BEIR folder not found"):
        load_beir(tmp_path / "nope")
    root = write_beir(tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="qrels file not found"):
        load_beir(root, split="dev")
    # a non-integer judgement on the first line is a header; later it is an error
    bad = write_beir(tmp_path / "b", "q1\td1\t1\nq1\td2\tx\n")
    with pytest.raises(ValueError, match=r"test.tsv:2: judgement must be an integer, got 'x'"):
        load_beir(bad)
    (bad / "qrels" / "test.tsv").write_text("q1\td1\t1\nq1\td1\t2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="judges document 'd1' twice"):
        load_beir(bad)
    (bad / "qrels" / "test.tsv").write_text("q1\td1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected 3 \\(BEIR\\) or 4 \\(TREC\\) fields"):
        load_beir(bad)
    (bad / "qrels" / "test.tsv").write_text("q9\td1\t1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not in .*queries.jsonl"):
        load_beir(bad)
    (bad / "qrels" / "test.tsv").write_text("q1\td1\t1\n", encoding="utf-8")
    with open(bad / "corpus.jsonl", "a", encoding="utf-8") as f:
        f.write('{"_id": "d1", "text": "again"}\n')
    with pytest.raises(ValueError, match="duplicate document id 'd1'"):
        load_beir(bad)
    (bad / "corpus.jsonl").write_text('{"_id": "d1", "text": \n', encoding="utf-8")
    with pytest.raises(ValueError, match="corpus.jsonl:1: not valid JSON"):
        load_beir(bad)


# ----------------------------------------------------------------------------------------------
# Real runs: BM25 (bm25s, the reference settings of ../shared/data/README.md)
# ----------------------------------------------------------------------------------------------


def bm25s_run(data: BeirDataset, k: int = 100) -> dict:
    bm25s = pytest.importorskip("bm25s")
    Stemmer = pytest.importorskip("Stemmer")
    stemmer = Stemmer.Stemmer("english")
    doc_ids, texts = data.documents()
    qids, qtexts = data.query_items()
    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    tokens = bm25s.tokenize(qtexts, stopwords="en", stemmer=stemmer, show_progress=False)
    idx, scores = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
    return {
        q: {doc_ids[i]: float(s) for i, s in zip(row_i, row_s)} for q, row_i, row_s in zip(qids, idx, scores)
    }


@pytest.mark.parametrize(
    ("name", "ndcg10", "recall100"), [("scifact", 0.6791, 0.9127), ("cranfield", 0.3695, 0.7354)]
)
def test_real_bm25_runs_match_references(data_dir, ranx, name, ndcg10, recall100):
    data = load_beir(data_dir / name)
    run = bm25s_run(data)
    metrics = ["ndcg@10", "recall@100", "mrr@10", "map@100", "precision@5", "mrr", "map"]
    ours = evaluate(data.qrels, run, metrics)
    # the published reference numbers of ../shared/data/README.md
    assert round(ours["ndcg@10"], 4) == ndcg10
    assert round(ours["recall@100"], 4) == recall100
    pytrec_metrics = [m for m in metrics if m != "mrr@10"]
    theirs = pytrec_per_query(data.qrels, run, pytrec_metrics)
    for m in pytrec_metrics:
        assert_close(ours.per_query[m], theirs[m], m)
    theirs = ranx_per_query(ranx, data.qrels, run, metrics)
    for m in metrics:
        assert_close(ours.per_query[m], theirs[m], m)
