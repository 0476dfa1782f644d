"""Starts a real server process (``ragfind serve`` or serve_hash.py) on a free port and waits for it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import ragfind

#: Where the ragfind under test was imported from (the source tree with a built _core, or the
#: installed package under CI), so the child process runs the same one.
PACKAGE_PARENT = str(Path(ragfind.__file__).resolve().parent.parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list, log: Path, port: int) -> tuple:
    """``(process, base url)`` once ``GET /health`` answers (60 s at most)."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(log, "ab") as fh:  # the child keeps its own descriptor
        proc = subprocess.Popen([sys.executable, *args], env=env, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited {proc.returncode}: {log.read_text()}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise AssertionError(f"the server did not start in 60 s: {log.read_text()}")


def start_ragfind_serve(folder: Path, *extra: str) -> tuple:
    port = free_port()
    args = ["-m", "ragfind", "serve", str(folder), "--port", str(port), "--log-level", "warning", *extra]
    return start(args, folder.parent / "serve.out", port)
