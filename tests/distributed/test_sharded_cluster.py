"""A ShardedRetriever on a real multi-node Ray cluster on this machine: a head without CPUs
and two worker nodes (custom resources ``node_a`` / ``node_b``), each started with ``ray
start`` on loopback in its own process group (:mod:`ray_cluster`). Every shard has a copy
on each worker node; worker node A is killed mid-stream of writes: no acknowledged document
is lost, searches go on within the deadline and still equal one Retriever over the
acknowledged documents.

Bounded for CI: every process has a timeout (about two minutes in all on a loaded machine);
the cluster's processes are killed by id, never with ``ray stop`` (which would stop every Ray
on the machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sharded_helpers  # noqa: F401 - skips without Ray (a failure in CI)
from ray_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

HERE = Path(__file__).resolve().parent


def test_worker_node_killed_loses_nothing_acknowledged() -> None:
    shared = sharded_helpers.shared_data_dir()
    if not (shared / "cranfield" / "corpus.jsonl").exists():
        pytest.skip(f"shared evaluation data not found at {shared} (set RAGFIND_DATA)")
    with LocalCluster() as cluster:
        node_a = cluster.nodes["node_a"].pid  # its process group: the node's `ray start`
        driver = [str(HERE / "cluster_driver.py"), str(cluster.root / "work"), str(node_a)]
        got = cluster.run_driver(driver, timeout=240)
    assert got["nodes"] == 3
    # No search graph over copies on other nodes (Ray's cross-node channels): ordinary calls.
    assert got["graph_built"] == 0, json.dumps(got)
    assert got["lost"] == [], f"acknowledged documents lost: {got['lost'][:5]}"
    assert got["acked"] >= 400 and got["stored"] == got["acked"], json.dumps(got)
    assert got["equal"], json.dumps(got)
    # The deadline bounds every wait on a copy: a search asks the surviving copy after at
    # most one deadline on the dead one (plus the call itself).
    assert got["max_search_s"] < 3 * got["deadline"], json.dumps(got)
    # Each shard had a copy on each worker node; what is left in sync is on node B.
    assert sorted(map(sorted, got["placed"])) == [["node_a"], ["node_a"], ["node_b"], ["node_b"]]
    assert got["in_sync_nodes"] == [["node_b"], ["node_b"]], json.dumps(got)
