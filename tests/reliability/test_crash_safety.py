"""Crash safety of every index ``save``: a writer killed at any point leaves the previous file.

Two kinds of kill, both SIGKILL (no unwinding, no atexit, like an OOM kill or a power cut):

* fault injection: ``RAGFIND_FAULT_INJECT=<point>`` makes the save kill its own process at a
  named point (ragfind/common/crash_safety.hpp for BM25, ragfind/persist/atomic.py for DenseIndex and
  the sectioned files of LateInteractionIndex and SparseVectorIndex): after the temporary file is
  created, after (each) section is written, after fsync just before the rename, and right
  after the rename;
* SIGKILL from the parent at random delays while a child saves a large index in a loop.

After each kill the target path must load intact as the previous index (or, once the rename
happened, as the new one: never anything else), and the next save must succeed and delete the
temporary file the dead writer left behind.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import ragfind
from ragfind import BM25Index, DenseIndex, LateInteractionIndex
from ragfind.sparse.splade_index import SparseVectorIndex

PKG_ROOT = str(Path(ragfind.__file__).resolve().parent.parent)

# Index builders, run identically in the test process and in the killed child.
BUILDERS = textwrap.dedent(
    """
    import numpy as np
    from ragfind import BM25Index, DenseIndex, LateInteractionIndex
    from ragfind.sparse.splade_index import SparseVectorIndex

    def build(kind, n, seed):
        rng = np.random.default_rng(seed)
        if kind == "bm25":
            vocab = np.array([f"w{i}" for i in range(2000)])
            docs = [list(vocab[rng.integers(0, 2000, size=12)]) for _ in range(n)]
            index = BM25Index()
            index.add_tokenized(docs)
            return index
        if kind in ("dense-exact", "dense-hnsw"):
            index = DenseIndex(16, kind=kind.split("-")[1], ef_construction=40, M=8)
            index.add(rng.standard_normal((n, 16)).astype(np.float32))
            return index
        if kind == "late":
            index = LateInteractionIndex(8)
            index.add([rng.standard_normal((int(rng.integers(1, 6)), 8)).astype(np.float32) for _ in range(n)])
            return index
        if kind == "sparse":
            index = SparseVectorIndex(1000)
            index.add([{int(t): float(w) for t, w in zip(rng.integers(0, 1000, 8), rng.random(8) + 0.1)} for _ in range(n)])
            return index
        raise ValueError(kind)
    """
)
namespace: dict = {}
exec(BUILDERS, namespace)  # noqa: S102 - the same code the child runs
build = namespace["build"]

LOADERS = {
    "bm25": BM25Index.load,
    "dense-exact": DenseIndex.load,
    "dense-hnsw": DenseIndex.load,
    "late": LateInteractionIndex.load,
    "sparse": SparseVectorIndex.load,
}

POINTS = {
    "bm25": [
        "bm25.save.created",
        "bm25.save.sections_written",
        "bm25.save.before_rename",
        "bm25.save.after_rename",
    ],
    "dense-exact": [
        "dense.save.created",
        "dense.save.section_written",
        "dense.save.before_rename",
        "dense.save.after_rename",
    ],
    "dense-hnsw": [
        "dense.save.created",
        "dense.save.section_written",
        "dense.save.before_rename",
        "dense.save.after_rename",
    ],
    "late": [
        "sectioned.save.created",
        "sectioned.save.section_written",
        "sectioned.save.before_rename",
        "sectioned.save.after_rename",
    ],
    "sparse": [
        "sectioned.save.created",
        "sectioned.save.section_written",
        "sectioned.save.before_rename",
        "sectioned.save.after_rename",
    ],
}


def fingerprint(kind: str, index) -> tuple:
    """What identifies an index's content: size plus the results of fixed queries."""
    rng = np.random.default_rng(7)
    if kind == "bm25":
        out = [len(index)]
        for q in (["w1", "w2"], ["w17"], ["w3", "w999", "w1500"]):
            ids, scores = index.search_tokenized(q, k=5)
            out.append((ids.tolist(), np.round(scores, 4).tolist()))
        return tuple(map(str, out))
    if kind.startswith("dense"):
        out = [len(index)]
        for q in rng.standard_normal((3, 16)).astype(np.float32):
            ids, scores = index.search(q, k=5)
            out.append((ids.tolist(), np.round(scores, 4).tolist()))
        return tuple(map(str, out))
    if kind == "sparse":
        out = [len(index), index.num_postings]
        for t in (1, 5, 900):
            ids, scores = index.search({t: 1.0, t + 1: 0.5}, k=5)
            out.append((ids.tolist(), np.round(scores, 4).tolist()))
        return tuple(map(str, out))
    out = [len(index), index.n_tokens]
    q = rng.standard_normal((3, 8)).astype(np.float32)
    ids, scores = index.search(q, k=5)
    out.append((ids.tolist(), np.round(scores, 4).tolist()))
    return tuple(map(str, out))


def temp_files(folder: Path, target: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != target)


def child_env(point: str | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RAGFIND_FAULT_INJECT", None)
    if point:
        env["RAGFIND_FAULT_INJECT"] = point
    return env


def run_child(code: str, env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", BUILDERS + textwrap.dedent(code)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.parametrize("kind", list(POINTS))
def test_fault_injected_kill_keeps_previous_index(tmp_path, kind):
    path = tmp_path / "index.bin"
    old = build(kind, 300, seed=1)
    old.save(path)
    old_fp = fingerprint(kind, LOADERS[kind](path))
    new_fp = fingerprint(kind, build(kind, 500, seed=2))
    assert old_fp != new_fp
    for point in POINTS[kind]:
        old.save(path)  # every point starts from the old file
        child = run_child(
            f"""
            build({kind!r}, 500, seed=2).save({str(path)!r})
            print("finished")
            """,
            child_env(point),
        )
        out, err = child.communicate(timeout=120)
        assert child.returncode == -signal.SIGKILL, f"{point}: the fault point did not fire: {out} {err}"
        got = fingerprint(kind, LOADERS[kind](path))
        if point.endswith("after_rename"):
            assert got == new_fp, f"{point}: the renamed new index does not load"
        else:
            assert got == old_fp, f"{point}: the previous index did not survive"
        # At most the dead writer's temporary file is left; the next save (from another
        # process: the dead one's pid is gone) succeeds and removes it.
        leftovers = temp_files(tmp_path, path.name)
        assert all(".tmp" in name for name in leftovers), leftovers
    replacement = build(kind, 200, seed=3)
    replacement.save(path)
    assert fingerprint(kind, LOADERS[kind](path)) == fingerprint(kind, replacement)
    assert temp_files(tmp_path, path.name) == [], "stale temporary files were not cleaned up"


SIZES = {"bm25": 30_000, "dense-exact": 200_000, "dense-hnsw": 10_000, "late": 40_000, "sparse": 30_000}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(POINTS))
def test_sigkill_at_random_delays_during_large_saves(tmp_path, kind):
    """A child saves a large index over and over; the parent SIGKILLs it at random moments."""
    path = tmp_path / "index.bin"
    small = build(kind, 100, seed=5)
    small.save(path)
    small_fp = fingerprint(kind, LOADERS[kind](path))
    rng = random.Random(1234)
    large_fp = None
    kills = 0
    for _ in range(3):
        child = run_child(
            f"""
            import sys, time
            index = build({kind!r}, {SIZES[kind]}, seed=6)
            t0 = time.perf_counter()
            print("ready", flush=True)
            while True:
                index.save({str(path)!r})
            """,
            child_env(),
        )
        line = child.stdout.readline()
        assert line.strip() == "ready", child.stderr.read()
        time.sleep(rng.uniform(0.05, 0.5))
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
        kills += 1
        loaded = LOADERS[kind](path)
        got = fingerprint(kind, loaded)
        if got != small_fp:
            if large_fp is None:
                large_fp = fingerprint(kind, build(kind, SIZES[kind], seed=6))
            assert got == large_fp
    assert kills == 3
    small.save(path)
    assert fingerprint(kind, LOADERS[kind](path)) == small_fp
    assert temp_files(tmp_path, path.name) == []


RETRIEVER_CHILD = """
import ragfind
r = ragfind.Retriever(encoder=None)
r.add_documents([{"id": f"d{i}", "text": f"document {i} about topic {i % 7}"} for i in range(N)])
r.save(PATH)
print("finished")
"""


def _retriever_ids(path: Path) -> list:
    import ragfind

    r = ragfind.Retriever.load(path)
    return sorted(r.get_document(f"d{i}")["id"] for i in range(len(r)))


@pytest.mark.parametrize("point", ["retriever.save.before_swap", "retriever.save.swapped_out"])
def test_retriever_folder_survives_a_kill_during_its_swap(tmp_path, point):
    """A Retriever.save killed just before or in the middle of replacing the folder: the next
    load finds the previous save (before) or the new one (the swap had begun), never nothing,
    and the next save removes the leftovers."""
    path = tmp_path / "kb"
    for n, env_point in ((5, None), (9, point)):
        code = RETRIEVER_CHILD.replace("N)", f"{n})").replace("PATH", repr(str(path)))
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            env=child_env(env_point),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = child.communicate(timeout=120)
        if env_point is None:
            assert child.returncode == 0, err
        else:
            assert child.returncode == -signal.SIGKILL, f"{point}: the fault point did not fire: {out} {err}"
    if point.endswith("swapped_out"):
        assert not path.exists()  # the kill left no folder under the name: load must recover it
    expected = 9 if point.endswith("swapped_out") else 5
    assert _retriever_ids(path) == sorted(f"d{i}" for i in range(expected))
    import ragfind

    ragfind.Retriever.load(path).save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb"], "leftovers of the dead writer remain"
