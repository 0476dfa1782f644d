"""``ragfind serve --workers N`` says where it answers (the port bound, also for ``--port 0``),
and its private folder (the writer's Unix socket) goes with it on every exit that can be
caught; one left by a ``kill -9`` is removed by the next start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serve_fixtures import bm25_folder_fixture  # noqa: F401

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from serve_process import PACKAGE_PARENT  # noqa: E402

from ragfind.cli.serve import _PRIVATE_PREFIX, _remove_stale_folders  # noqa: E402


def wait_for(pattern: str, log: Path, proc: subprocess.Popen, timeout: float = 90) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text())
        if m is not None:
            return m
        if proc.poll() is not None:
            raise AssertionError(f"the server exited {proc.returncode}: {log.read_text()}")
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} in {timeout} s: {log.read_text()}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_workers_print_the_address_and_remove_their_folder(bm25_folder, tmp_path, sig):
    log = tmp_path / "serve.out"
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [
        "-m",
        "ragfind",
        "serve",
        str(bm25_folder),
        "--workers",
        "2",
        "--port",
        "0",
        "--log-level",
        "info",
    ]
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, *args], env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        port = int(wait_for(r"running on http://127\.0\.0\.1:(\d+) with 2 workers", log, proc).group(1))
        private = Path(wait_for(r"unix socket (\S+)/writer\.sock", log, proc).group(1))
        assert private.is_dir() and private.name.startswith(f"{_PRIVATE_PREFIX}{proc.pid}-")
        deadline = time.monotonic() + 90
        while True:  # the printed port is the one answering
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        proc.send_signal(sig)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -sig  # died of the signal, as without the handler
    assert not private.exists()
    assert "Traceback" not in log.read_text()


def test_a_start_removes_the_folders_of_writers_that_are_gone(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"{_PRIVATE_PREFIX}{gone.pid}-abc"
    alive = tmp_path / f"{_PRIVATE_PREFIX}{os.getpid()}-def"
    older = tmp_path / f"{_PRIVATE_PREFIX}xyz"  # from before the folders held the pid
    other = tmp_path / "something-else-1"
    for d in (stale, alive, older, other):
        d.mkdir()
    (stale / "writer.sock").write_text("")
    _remove_stale_folders(str(tmp_path))
    assert not stale.exists()
    assert alive.is_dir() and older.is_dir() and other.is_dir()
