"""A multi-node Ray cluster on this machine for the cluster tests: a head without CPUs and
worker nodes with a custom resource each (``node_a``, ``node_b``), every node started with
``ray start --block`` on loopback in its own process group.

Stopping and cleaning up go by process id only: a node is its ``ray start`` process and every
process under it (raylet, agents, the workers the raylet started); :meth:`LocalCluster.close`
kills those and any process left whose command line names this cluster's folder, never with
``ray stop`` (which would stop every Ray on the machine)."""

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as fh:
        return subprocess.Popen(args, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def wait_started(proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
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


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _parents() -> dict:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", encoding="utf-8", errors="replace") as fh:
                    out[int(d)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def descendants(pid: int) -> list:
    """``pid`` and every process under it (by parent id, whatever their session)."""
    children: dict = {}
    for p, pp in _parents().items():
        children.setdefault(pp, []).append(p)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def signal_all(pids: list, sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def connect(address: str, nodes: int = 3):
    """A driver's ``ray.init`` against the cluster at ``address``, then a wait (2 minutes at
    most) until ``nodes`` of its nodes are alive; returns the ``ray`` module."""
    import ray

    ray.init(
        address=address,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}},
    )
    end = time.monotonic() + 120
    while len([n for n in ray.nodes() if n["Alive"]]) < nodes:
        if time.monotonic() > end:
            raise SystemExit(f"the cluster did not reach {nodes} nodes")
        time.sleep(0.5)
    return ray


def ragfind_env() -> dict:
    """The environment of the nodes and drivers: the folder holding the ragfind the tests
    import on the path (the source tree with a built module, or site-packages)."""
    import ragfind

    python = str(Path(ragfind.__file__).resolve().parent.parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([python, os.environ.get("PYTHONPATH", "")]),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",  # a loopback cluster of one test: no token to hand around
    }
    env.pop("RAY_ADDRESS", None)
    return env


class LocalCluster:
    """Head (0 CPUs) + one worker node per name in ``workers`` (2 CPUs and resource
    ``{name: 1}`` each). ``address``, ``env``, ``root`` (a fresh short folder: Ray's socket
    paths have a length limit), ``nodes[name]`` (the node's ``ray start`` process)."""

    def __init__(self, workers: tuple = ("node_a", "node_b")) -> None:
        self.ray_cli = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
        self.root = Path(tempfile.mkdtemp(prefix="rfc-"))
        self.env = ragfind_env()
        self.procs: list = []
        self.nodes: dict = {}
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        common = ["--block", "--disable-usage-stats"]
        try:
            head = [self.ray_cli, "start", "--head", f"--port={port}", "--num-cpus=0"]
            head += ["--include-dashboard=false", f"--temp-dir={self.root / 'ray'}"]
            self.procs.append(start(head + common, self.env, self.root / "head.log"))
            wait_started(self.procs[0], self.root / "head.log")
            for name in workers:
                # Ports of their own: two nodes on one machine must not both take the defaults.
                worker = [self.ray_cli, "start", f"--address={self.address}", "--num-cpus=2"]
                worker += [
                    f"--dashboard-agent-listen-port={free_port()}",
                    f"--metrics-export-port={free_port()}",
                    f"--resources={json.dumps({name: 1})}",
                ]
                self.nodes[name] = start(worker + common, self.env, self.root / f"{name}.log")
                self.procs.append(self.nodes[name])
                wait_started(self.nodes[name], self.root / f"{name}.log")
        except BaseException:
            self.close()
            raise

    def logs(self) -> str:
        tails = [f"\n--- {f.name}\n" + f.read_text(errors="replace")[-1500:] for f in self.root.glob("*.log")]
        return "".join(tails)

    def run_driver(self, args: list, timeout: float) -> dict:
        """Runs ``python args...`` against this cluster; its last JSON line of output."""
        out = subprocess.run(
            [sys.executable, *args, self.address],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        assert out.returncode == 0 and lines, out.stdout[-2000:] + out.stderr[-3000:] + self.logs()
        return json.loads(lines[-1])

    def close(self) -> None:
        """Kills every process of this cluster (by id) and removes its folder."""
        for p in reversed(self.procs):
            kill_group(p)
        # Workers of the nodes that outlived their raylet: their command lines name the folder.
        mark = os.fspath(self.root).encode()
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) != os.getpid():
                try:
                    with open(f"/proc/{d}/cmdline", "rb") as fh:
                        if mark in fh.read():
                            os.kill(int(d), signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
