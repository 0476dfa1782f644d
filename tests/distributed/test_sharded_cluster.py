"""A ShardedRetriever on a real multi-node Ray cluster on this machine: a head without CPUs
and two worker nodes (custom resources ``node_a`` / ``node_b``), each started with ``ray
start`` on loopback in its own process group. Every shard has a copy on each worker node;
worker node A is killed mid-stream of writes: no acknowledged document is lost, searches go on
within the deadline and still equal one Retriever over the acknowledged documents.

Bounded for CI: every process has a timeout (about two minutes in all on a loaded machine);
the cluster's processes are killed by process group, never with ``ray stop`` (which would stop
every Ray on the machine)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import sharded_helpers  # noqa: F401 - skips without Ray (a failure in CI)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as fh:
        return subprocess.Popen(args, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_started(proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    """Until ``ray start --block`` says the node runs (a worker started before the head is
    up gives up)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if "Ray runtime started" in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"ray start exited: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    raise AssertionError(f"ray start did not start within {timeout:.0f} s")


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def test_worker_node_killed_loses_nothing_acknowledged() -> None:
    shared = sharded_helpers.shared_data_dir()
    if not (shared / "cranfield" / "corpus.jsonl").exists():
        pytest.skip(f"shared evaluation data not found at {shared} (set RAGFIND_DATA)")
    ray_cli = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    root = Path(tempfile.mkdtemp(prefix="rfc-"))  # short: Ray's socket paths have a length limit
    port = _free_port()
    # The folder holding the ragfind this test imports: the source tree with a built module, or
    # site-packages when installed (the bare source tree has no _core).
    import ragfind

    python = str(Path(ragfind.__file__).resolve().parent.parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([python, os.environ.get("PYTHONPATH", "")]),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",  # a loopback cluster of one test: no token to hand around
    }
    env.pop("RAY_ADDRESS", None)
    common = ["--block", "--disable-usage-stats"]
    procs = []
    try:
        head = [ray_cli, "start", "--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false"]
        procs.append(_start(head + [f"--temp-dir={root / 'ray'}"] + common, env, root / "head.log"))
        _wait_started(procs[0], root / "head.log")
        for name in ("node_a", "node_b"):
            # Ports of their own: two nodes on one machine must not both take the defaults.
            worker = [ray_cli, "start", f"--address=127.0.0.1:{port}", "--num-cpus=2"]
            worker += [
                f"--dashboard-agent-listen-port={_free_port()}",
                f"--metrics-export-port={_free_port()}",
            ]
            res = f"--resources={json.dumps({name: 1})}"
            procs.append(_start(worker + [res] + common, env, root / f"{name}.log"))
            _wait_started(procs[-1], root / f"{name}.log")
        driver = [sys.executable, str(HERE / "cluster_driver.py"), f"127.0.0.1:{port}"]
        out = subprocess.run(
            driver + [str(root / "work"), str(procs[1].pid)],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        tails = [f"\n--- {f.name}\n" + f.read_text(errors="replace")[-1500:] for f in root.glob("*.log")]
        logs = "".join(tails)
        assert out.returncode == 0 and lines, out.stderr[-3000:] + logs
        got = json.loads(lines[-1])
    finally:
        for p in reversed(procs):
            _kill(p)
        shutil.rmtree(root, ignore_errors=True)
    assert got["nodes"] == 3
    assert got["lost"] == [], f"acknowledged documents lost: {got['lost'][:5]}"
    assert got["acked"] >= 400 and got["stored"] == got["acked"], json.dumps(got)
    assert got["equal"], json.dumps(got)
    # The deadline bounds every wait on a copy: a search asks the surviving copy after at
    # most one deadline on the dead one (plus the call itself).
    assert got["max_search_s"] < 3 * got["deadline"], json.dumps(got)
    # Each shard had a copy on each worker node; what is left in sync is on node B.
    assert sorted(map(sorted, got["placed"])) == [["node_a"], ["node_a"], ["node_b"], ["node_b"]]
    assert got["in_sync_nodes"] == [["node_b"], ["node_b"]], json.dumps(got)
