"""A script that never closes its ShardedRetrievers ends: ragfind never starts Ray from
``__del__`` or an exit hook (``ray.kill`` on a Ray that is down would start a fresh local one
and wait for it for ever), and routers left open are closed at exit, work folders included."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sharded_helpers  # noqa: F401 - skips the module without Ray

import ragfind

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import ray
    from ragfind.distributed import ShardedRetriever

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    routers = []  # kept alive until the interpreter exits: none is closed by the script
    for _ in range(2):
        # A long deadline: this is about exiting, and on a loaded machine the search graph's
        # compile (in the background) can hold the shards' calls past the default one.
        shard = ShardedRetriever(
            num_shards=4, deadline=30, encoder=None, chunk_size=None, contextualize=False, cache_size=0
        )
        shard.add_documents([{"id": str(i), "text": f"doc {i} reset"} for i in range(20)])
        for i in range(60):
            shard.search(f"reset {i}", k=3)
        shard.delete_documents(["1", "2"])
        for i in range(10):
            shard.search(f"reset {i}", k=3)
        routers.append(shard)
        print("work_dir", shard.work_dir, flush=True)
    if os.environ.get("SHUT_RAY_FIRST"):
        ray.shutdown()  # as Ray's own exit hook does when it runs before the routers close
    print("searched", flush=True)
    sys.exit(0)
    """
)


@pytest.mark.parametrize("ray_first", [False, True], ids=["routers-open-at-exit", "ray-down-first"])
def test_script_with_open_routers_exits(tmp_path, ray_first):
    script = tmp_path / "open_routers.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(Path(ragfind.__file__).resolve().parents[1]))
    if ray_first:
        env["SHUT_RAY_FIRST"] = "1"
    # Before the fix the script printed "searched" and then never ended.
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"exit status {proc.returncode}: {proc.stderr[-3000:]}"
    lines = proc.stdout.splitlines()
    assert "searched" in lines
    work_dirs = [line.split(" ", 1)[1] for line in lines if line.startswith("work_dir ")]
    assert len(work_dirs) == 2
    # Closed at exit (with Ray still up, or only their local part once Ray is down): their
    # work folders are gone either way.
    assert not [d for d in work_dirs if Path(d).exists()]
