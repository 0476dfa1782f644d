"""``ragfind index`` of a malformed JSON-lines corpus, and any option given a bad value, end in
one line on stderr naming the line (or the option) and exit status 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ragfind
from ragfind.cli import main

PACKAGE_PARENT = str(Path(ragfind.__file__).resolve().parent.parent)
GOOD = '{"id": "ok", "text": "cats hunt mice"}'

# (the second line of the corpus, what the message says about it)
BAD_LINES = [
    ("[1, 2]", "the line is an array; expected an object"),
    ('"just text"', "the line is a string; expected an object"),
    ('{"text": "no id"}', "needs an 'id' (or '_id') and a 'text'; this one has no id"),
    ('{"id": "a"}', "needs an 'id' (or '_id') and a 'text'; this one has no text"),
    ('{"id": "a", "text": 3}', "'text' is a number; expected a string"),
    ('{"id": "a", "text": ["x"]}', "'text' is an array; expected a string"),
    ('{"id": "a", "text": "x", "metadata": [1]}', "'metadata' is an array; expected an object"),
    ('{"id": "a", "text": "x", "metadata": "m"}', "'metadata' is a string; expected an object"),
    ('{"id": "a", "text": "x", "title": 5}', "'title' is a number; expected a string"),
    ('{"id": [1], "text": "x"}', "'id' is an array ([1]); expected a non-empty string or an integer"),
    ('{"id": true, "text": "x"}', "'id' is a boolean (True)"),
    ('{"id": "", "text": "x"}', "'id' is a string ('')"),
    ('{"id": "a", "text": ', "not JSON (Expecting value at column 20)"),
    ('{"id": "a", "text": "x", "metadata": {"p": NaN}}', "not JSON (NaN is not JSON)"),
]


@pytest.mark.parametrize("line, words", BAD_LINES, ids=[w for _, w in BAD_LINES])
def test_a_malformed_line_is_one_line_naming_it(tmp_path, capsys, line, words):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(f"{GOOD}\n{line}\n")
    with pytest.raises(SystemExit) as exc:
        main(["index", str(corpus), str(tmp_path / "out"), "--no-dense", "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ragfind index: {corpus}:2: "), err
    assert words in err, err
    assert not (tmp_path / "out").exists()


def test_a_line_that_is_not_utf8(tmp_path, capsys):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_bytes(GOOD.encode() + b'\n{"id": "b", "text": "\xff"}\n')
    with pytest.raises(SystemExit) as exc:
        main(["index", str(corpus), str(tmp_path / "out"), "--no-dense", "--quiet"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith(f"ragfind index: {corpus}:2: not UTF-8")


def test_a_document_the_retriever_refuses_names_its_line(tmp_path, capsys):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(f'{GOOD}\n\n{{"id": "b", "text": "x", "price": 1e999}}\n')  # inf: not JSON
    with pytest.raises(SystemExit) as exc:
        main(["index", str(corpus), str(tmp_path / "out"), "--no-dense", "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ragfind index: {corpus}:3: "), err


def test_the_corpus_reader_keeps_its_rules(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        "\ufeff" + '{"_id": 7, "text": "t", "title": null, "lang": "en", "metadata": {"a": 1}}\n\n'
        '{"id": "x", "text": "u", "title": "T"}\n'
    )
    main(["index", str(corpus), str(tmp_path / "out"), "--no-dense", "--quiet", "--chunk-size", "none"])
    r = ragfind.Retriever.load(tmp_path / "out")
    assert dict(r.get_document("7"))["metadata"] == {"a": 1, "lang": "en"}
    assert dict(r.get_document("x"))["title"] == "T"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["index", "c.jsonl", "out", "--chunk-size", "banana"], "argument --chunk-size: expected a positive"),
        (["index", "c.jsonl", "out", "--chunk-size", "0"], "argument --chunk-size: "),
        (
            ["index", "c.jsonl", "out", "--overlap", "0.9"],
            "argument --overlap: expected a fraction in [0, 0.5]",
        ),
        (["index", "c.jsonl", "out", "--overlap", "nan"], "argument --overlap: "),
        (
            ["index", "c.jsonl", "out", "--batch-size", "0"],
            "argument --batch-size: expected a positive integer",
        ),
        (["search", "f", "q", "-k", "0"], "argument -k: k must be a positive int, got 0"),
        (["search", "f", "q", "-k", "ten"], "argument -k: k must be a positive int, got 'ten'"),
        (["search", "f", "q", "--context", "-1"], "argument --context: expected an integer >= 0"),
        (["eval", "b", "--depth", "0"], "argument --depth: "),
        (["eval", "b", "--chunk-size", "x"], "argument --chunk-size: "),
        (["bench", "f", "-n", "0"], "argument -n: "),
        (["bench", "f", "-k", "-2"], "argument -k: k must be a positive int, got -2"),
        (["demo", "--repeat", "0"], "argument --repeat: "),
        (["export", "a", "b", "--max-length", "0"], "argument --max-length: "),
        (["serve", "f", "--workers", "two"], "argument --workers: invalid int value: 'two'"),
        (["index"], "the following arguments are required: corpus, output"),
    ],
)
def test_a_bad_option_names_it_in_one_line(capsys, argv, words):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ragfind {argv[0]}: ") and words in err, err
    assert err.rstrip().endswith(f"(see ragfind {argv[0]} --help)")


def test_index_of_a_bad_line_in_a_process(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(f'{GOOD}\n{{"id": "a", "text": "x", "metadata": [1]}}\n')
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragfind",
            "index",
            str(corpus),
            str(tmp_path / "out"),
            "--no-dense",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"ragfind index: {corpus}:2: 'metadata' is an array; expected an object"
    ]
