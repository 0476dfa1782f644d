"""``ragfind demo`` run in-process, and the bundled demo data it uses."""

from __future__ import annotations

import re

import pytest

from ragfind.cli import main
from ragfind.data import load_demo_corpus, load_demo_queries


def test_demo_corpus_is_well_formed():
    docs = load_demo_corpus()
    assert 150 <= len(docs) <= 300
    ids = [d["id"] for d in docs]
    assert len(set(ids)) == len(ids)
    for d in docs:
        assert set(d) == {"id", "title", "text", "category"}
        assert d["title"].strip() and len(d["text"].split()) >= 10
    text = " ".join(d["text"] for d in docs)
    for identifier in ("XJ-2000", "E_ACCESS_DENIED", "getUserById", "v2.3.1", "QB-150L", "fetch_metrics"):
        assert identifier in text
    queries = load_demo_queries()
    assert len(queries) >= 5
    known = set(ids)
    for q in queries:
        assert q["query"].strip() and q["relevant"] and set(q["relevant"]) <= known


def test_demo_prints_ranked_results_and_timings(capsys, model_home):
    assert main(["demo", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    docs = load_demo_corpus()
    assert f"({len(docs)} documents)" in out
    assert re.search(r"index build: \d+\.\d+ (ms|us)", out)
    queries = load_demo_queries()
    for q in queries:
        assert repr(q["query"]) in out
    assert re.search(rf"p50 \d+\.\d+ (ms|us), max \d+\.\d+ (ms|us) over {len(queries)} queries", out)
    # result lines: rank, id, score, title
    rows = re.findall(r"^\s+(\d+)\. (\S+)\s+(-?\d+\.\d{3,4})  (.+)$", out, flags=re.MULTILINE)
    assert len(rows) == 3 * len(queries)
    titles = {d["id"]: d["title"] for d in docs}
    for _, doc_id, _, title in rows:
        assert title.removesuffix("  *") == titles[doc_id]


def test_every_demo_query_finds_a_relevant_document_in_its_top_three():
    """The demo queries exercise identifier search (XJ-2000, E_ACCESS_DENIED, getUserById,
    v2.3.1): each must surface one of the documents written to answer it."""
    from ragfind.cli.demo import build_bm25, search_bm25

    index, seconds = build_bm25(load_demo_corpus())
    assert seconds > 0
    for q in load_demo_queries():
        answer = search_bm25(index, q["query"], k=3, repeat=1)
        assert set(answer.doc_ids) & set(q["relevant"]), (q["query"], answer.doc_ids)
        assert answer.scores == sorted(answer.scores, reverse=True)


def test_demo_runs_the_hybrid_pipeline_with_stage_timings(capsys, model_home):
    assert main(["demo", "--repeat", "1", "-q", "gateway will not turn on"]) == 0
    out = capsys.readouterr().out
    assert "hybrid BM25 + all-MiniLM-L6-v2 with RRF" in out
    header = out.split("'gateway will not turn on'")[1].splitlines()[0]
    for stage in ("embed", "bm25", "dense", "fusion", "store"):
        assert re.search(rf"{stage} \d+\.\d+ (ms|us)", header), (stage, header)
    block = out.split("'gateway will not turn on'")[1]
    assert len(re.findall(r"^\s+\d+\. ", block, flags=re.MULTILINE)) == 3


def test_hybrid_demo_queries_find_a_relevant_document_in_the_top_three(model_home):
    from ragfind.cli.demo import build_hybrid, search_hybrid

    retriever, seconds = build_hybrid(load_demo_corpus())
    assert seconds > 0
    for q in load_demo_queries():
        answer = search_hybrid(retriever, q["query"], k=3, repeat=1)
        assert set(answer.doc_ids) & set(q["relevant"]), (q["query"], answer.doc_ids)
    retriever.close()


def test_demo_with_own_queries_and_top_k(capsys):
    assert (
        main(
            [
                "demo",
                "--bm25-only",
                "-q",
                "XJ-2100 outdoor enclosure",
                "-q",
                "zzzz-nothing",
                "-k",
                "5",
                "--repeat",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "'XJ-2100 outdoor enclosure'" in out
    block = out.split("'XJ-2100 outdoor enclosure'")[1].split("[2/2]")[0]
    assert len(re.findall(r"^\s+\d+\. ", block, flags=re.MULTILINE)) == 5
    assert "ts-016" in block
    assert "no matching documents" in out.split("'zzzz-nothing'")[1]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["-k", "0"], "argument -k/--top-k: k must be a positive int, got 0"),
        (["--repeat", "0"], "argument --repeat"),
    ],
)
def test_demo_rejects_bad_arguments(argv, match, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err, err
