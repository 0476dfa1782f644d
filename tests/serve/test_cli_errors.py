"""The ``ragfind`` command's mistakes end in one clear line on stderr and exit status 2 (not a
traceback), every option has help text, and ``ragfind serve`` refuses bad arguments."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from serve_fixtures import bm25_folder_fixture, encoder_fixture, hybrid_folder_fixture  # noqa: F401
from serve_process import PACKAGE_PARENT

from ragfind.cli import build_parser, main


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": PACKAGE_PARENT, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "ragfind", *argv], capture_output=True, text=True, env=env)


def test_every_option_has_help():
    missing = []
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for a in sub._actions:
                    if not a.help and not isinstance(a, argparse._HelpAction):
                        missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}")
    assert not missing


def test_missing_folder_is_one_line_exit_2(tmp_path):
    proc = run_cli("search", str(tmp_path / "nosuchdir"), "x")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"ragfind search: '{tmp_path / 'nosuchdir'}' is not a folder (no saved retriever there)"
    ]
    assert "Traceback" not in proc.stderr


def test_unknown_split_names_the_splits(tmp_path, capsys):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "a", "title": "", "text": "cats"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q", "text": "cats"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\t1\n")
    with pytest.raises(SystemExit, match="--split 'dev'.*splits here: test") as exc:
        main(["eval", str(beir), "--split", "dev", "--quiet"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_reranker_name_that_is_not_a_folder(bm25_folder, capsys):
    with pytest.raises(
        SystemExit, match="--reranker 'cross-encoder/ms-marco-MiniLM-L-6-v2'.*ragfind export"
    ) as exc:
        main(["search", str(bm25_folder), "cats", "--reranker", "cross-encoder/ms-marco-MiniLM-L-6-v2"])
    assert exc.value.code == 2


def test_earlier_messages_keep_their_text_and_exit_2(bm25_folder):
    with pytest.raises(SystemExit, match="unknown field 'colour'") as exc:
        main(["search", str(bm25_folder), "cats", "--filter", "colour=red"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--workers", "0"], "--workers 0"),
        (["--port", "70000"], "--port 70000"),
        (["--max-k", "0"], "max_k"),
        (["--threads", "0"], "threads = 0"),
        (["--queue-depth", "0"], "queue_depth = 0"),
        (["--queue-wait-ms", "0"], "queue_wait_ms = 0"),
        (["--inline-ms", "-1"], "inline_ms = -1"),
        (["--cache-size", "-1"], "cache_size = -1"),
    ],
)
def test_serve_rejects_bad_arguments(bm25_folder, argv, words):
    with pytest.raises(SystemExit, match=words) as exc:
        main(["serve", str(bm25_folder), *argv])
    assert exc.value.code == 2


def test_serve_missing_folder():
    proc = run_cli("serve", "/nonexistent/folder")
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == "ragfind serve: no retriever folder at '/nonexistent/folder'"
    )


def test_serve_binds_localhost_unless_told(bm25_folder):
    args = build_parser().parse_args(["serve", str(bm25_folder)])
    assert (args.host, args.port, args.api_key, args.max_body) == ("127.0.0.1", 8000, None, 1 << 20)
    assert (args.workers, args.threads, args.queue_depth, args.queue_wait_ms) == (1, 8, 256, 2000.0)


def test_serve_workers_refuse_a_sharded_folder(tmp_path):
    (tmp_path / "shards.json").write_text("{}")
    with pytest.raises(SystemExit, match="a sharded one already spreads") as exc:
        main(["serve", str(tmp_path), "--workers", "2"])
    assert exc.value.code == 2
