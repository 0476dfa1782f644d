"""``ragfind serve --access-log/--no-access-log``: uvicorn's line per request, on by default."""

from __future__ import annotations

import argparse

import pytest
from serve_fixtures import bm25_folder_fixture  # noqa: F401

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_process import start_ragfind_serve  # noqa: E402

from ragfind.cli import serve as serve_cli  # noqa: E402


def served_log(folder, *flags: str) -> str:
    proc, url = start_ragfind_serve(folder, "--read-only", "--log-level", "info", *flags)
    try:
        assert httpx.get(url + "/health", timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return (folder.parent / "serve.out").read_text()


def test_access_log_on_by_default_and_off_on_request(bm25_folder):
    log = served_log(bm25_folder)
    assert '"GET /health HTTP/1.1" 200' in log
    (bm25_folder.parent / "serve.out").unlink()
    log = served_log(bm25_folder, "--no-access-log")
    assert "Uvicorn running" in log  # the other info lines stay
    assert "GET /health" not in log


@pytest.mark.parametrize("flag, expected", [([], "--access-log"), (["--no-access-log"], "--no-access-log")])
def test_workers_get_the_access_log_choice(flag, expected):
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "/some/folder", *flag])
    assert expected in serve_cli._worker_args(args)


def test_workers_get_the_cache_size():
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "/some/folder", "--cache-size", "0"])
    out = serve_cli._worker_args(args)
    assert out[out.index("--cache-size") + 1] == "0"
    assert "--cache-size" not in serve_cli._worker_args(parser.parse_args(["serve", "/some/folder"]))
