"""``ragfind index / search / eval / bench`` run in-process on a tiny corpus."""

from __future__ import annotations

import json

import pytest

from ragfind.cli import main

DOCS = [
    {"_id": "a", "title": "Cats", "text": "Cats purr and hunt mice.", "lang": "en"},
    {"_id": "b", "title": "Dogs", "text": "Dogs bark and fetch sticks.", "lang": "en"},
    {"_id": "c", "title": "Chats", "text": "Les chats ronronnent.", "lang": "fr"},
    {"_id": "d", "title": "Rust", "text": "Rust is a programming language.", "lang": "en"},
]


@pytest.fixture()
def beir(tmp_path):
    d = tmp_path / "beir"
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl").write_text("\n".join(json.dumps(x) for x in DOCS) + "\n")
    (d / "queries.jsonl").write_text(
        "\n".join(
            json.dumps(q)
            for q in [
                {"_id": "q1", "text": "which animal purrs"},
                {"_id": "q2", "text": "programming language"},
            ]
        )
        + "\n"
    )
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\td\t1\n")
    return d


def test_index_search_bench_lexical(beir, tmp_path, capsys):
    out_dir = tmp_path / "kb"
    assert main(["index", str(beir), str(out_dir), "--no-dense", "--quiet"]) == 0
    assert "4 documents" in capsys.readouterr().out
    assert main(["search", str(out_dir), "cats purr", "-k", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["passages"][0]["doc_id"] == "a" and "bm25" in res["timings_ms"]
    assert main(["search", str(out_dir), "chats", "cats", "--filter", "lang=fr", "--context", "300"]) == 0
    out = capsys.readouterr().out
    assert "1 passages" in out and " c  Chats" in out and "Answer the question using only" in out
    with pytest.raises(SystemExit, match="unknown field 'colour'"):
        main(["search", str(out_dir), "cats", "--filter", "colour=red"])
    assert main(["bench", str(out_dir), "-n", "4", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "cache hit" in out and "bm25" in out


def test_index_rejects_a_bad_corpus(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    with pytest.raises(SystemExit, match="needs an 'id'"):
        main(["index", str(bad), str(tmp_path / "kb"), "--no-dense", "--quiet"])
    with pytest.raises(SystemExit, match="no corpus"):
        main(["index", str(tmp_path / "nope.jsonl"), str(tmp_path / "kb"), "--no-dense", "--quiet"])


def test_eval_hybrid_with_minilm(beir, capsys, model_home):
    assert main(["eval", str(beir), "--quiet", "--metrics", "ndcg@10,mrr@10"]) == 0
    out = capsys.readouterr().out
    for mode in ("bm25", "dense", "hybrid"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(mode + ":"))
        assert "ndcg@10 1.0000" in line, line  # two easy queries: the right document first
