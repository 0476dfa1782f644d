"""Readers-vs-writer stress harness shared by test_concurrency.py and tools/stress_concurrency.py.

One writer thread applies a fixed, pre-generated sequence of add/delete operations to an index
while reader threads run searches (single queries and ``search_batch``). The writer bumps a
version counter after each operation returns, so a reader that saw version ``v0`` before its
query and ``v1`` after it may legally observe any state ``v0 .. v1 + 1`` (the operation in flight
may already be visible). Afterwards a fresh index replays the same operations serially and
gives the expected result of every pool query in every state; each concurrent result must
equal one of the results allowed by its window: no torn result, nothing from a state the index
never passed through.

For HNSW (approximate: the graph depends on insertion timing) a result must instead be
consistent with one state of the window: every returned id live in it, the scores the exact
scores of those ids, best first, no duplicates, and min(k, live) results.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

VOCAB = [f"w{i}" for i in range(300)]


@dataclass
class StressReport:
    kind: str
    readers: int
    queries: int = 0
    batch_queries: int = 0
    writes: int = 0
    states_seen: set = field(default_factory=set)
    errors: list = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{self.kind}: {self.readers} reader threads, {self.queries} single queries + "
            f"{self.batch_queries} batch queries, {self.writes} concurrent writes, "
            f"{len(self.states_seen)} distinct states observed, {len(self.errors)} errors, "
            f"{self.seconds:.1f} s"
        )


# ----------------------------------------------------------------------------- workloads


class BM25Workload:
    kind = "bm25"

    def __init__(self, seed: int, n_base: int = 400, n_ops: int = 200, n_queries: int = 48) -> None:
        rng = np.random.default_rng(seed)
        zipf = 1.0 / np.arange(1, len(VOCAB) + 1)
        zipf /= zipf.sum()

        def doc():
            return list(rng.choice(VOCAB, size=int(rng.integers(3, 30)), p=zipf))

        self.base = [doc() for _ in range(n_base)]
        self.ops: list = []
        live = list(range(n_base))
        next_id = n_base
        for i in range(n_ops):
            if i % 2 == 0 or len(live) < 50:
                docs = [doc() for _ in range(int(rng.integers(1, 6)))]
                ids = list(range(next_id, next_id + len(docs)))
                next_id += len(docs)
                self.ops.append(("add", docs, ids))
                live += ids
            else:
                victims = sorted(rng.choice(live, size=int(rng.integers(1, 6)), replace=False).tolist())
                self.ops.append(("delete", victims))
                live = [x for x in live if x not in set(victims)]
        self.queries = [
            list(rng.choice(VOCAB, size=int(rng.integers(1, 5)), p=zipf)) for _ in range(n_queries)
        ]

    def new_index(self):
        from ragfind import BM25Index

        index = BM25Index()
        index.add_tokenized(self.base, ids=list(range(len(self.base))))
        return index

    def apply(self, index, op) -> None:
        if op[0] == "add":
            index.add_tokenized(op[1], ids=op[2])
        else:
            index.delete(op[1])

    def search(self, index, qi: int, k: int):
        return index.search_tokenized(self.queries[qi], k=k)

    def search_batch(self, index, qis: list, k: int):
        return index.search_batch_tokenized([self.queries[i] for i in qis], k=k, threads=2)

    def batch_row(self, out, j: int):
        return out[j]


class DenseWorkload:
    def __init__(
        self, seed: int, kind: str, n_base: int = 400, n_ops: int = 200, n_queries: int = 48, dim: int = 16
    ):
        self.kind = f"dense-{kind}"
        self.index_kind = kind
        self.dim = dim
        rng = np.random.default_rng(seed)
        self.vectors: dict[int, np.ndarray] = {}
        base = rng.standard_normal((n_base, dim)).astype(np.float32)
        self.base_ids = list(range(n_base))
        self.vectors.update(zip(self.base_ids, base))
        self.base = base
        self.ops = []
        live = list(self.base_ids)
        next_id = n_base
        for i in range(n_ops):
            if i % 2 == 0 or len(live) < 50:
                m = int(rng.integers(1, 6))
                X = rng.standard_normal((m, dim)).astype(np.float32)
                ids = list(range(next_id, next_id + m))
                next_id += m
                self.vectors.update(zip(ids, X))
                self.ops.append(("add", X, ids))
                live += ids
            else:
                victims = sorted(rng.choice(live, size=int(rng.integers(1, 6)), replace=False).tolist())
                self.ops.append(("delete", victims))
                victim_set = set(victims)
                live = [x for x in live if x not in victim_set]
        self.queries = rng.standard_normal((n_queries, dim)).astype(np.float32)
        all_ids = sorted(self.vectors)
        M = np.stack([self.vectors[i] for i in all_ids]).astype(np.float64)
        M /= np.linalg.norm(M, axis=1, keepdims=True)
        Qn = self.queries.astype(np.float64) / np.linalg.norm(self.queries, axis=1, keepdims=True)
        self.exact_scores = Qn @ M.T  # (queries, all ids): cosine
        self.col = {x: i for i, x in enumerate(all_ids)}

    def new_index(self):
        from ragfind import DenseIndex

        index = DenseIndex(self.dim, metric="cosine", kind=self.index_kind, ef=64)
        index.add(self.base, ids=self.base_ids)
        return index

    def apply(self, index, op) -> None:
        if op[0] == "add":
            index.add(op[1], ids=op[2])
        else:
            index.delete(op[1])

    def search(self, index, qi: int, k: int):
        return index.search(self.queries[qi], k=k)

    def search_batch(self, index, qis: list, k: int):
        return index.search_batch_padded(self.queries[qis], k=k, threads=2)

    def batch_row(self, out, j: int):
        ids, scores = out
        keep = ids[j] >= 0
        return ids[j][keep], scores[j][keep]


# ----------------------------------------------------------------------------- run


def _key(ids: np.ndarray) -> bytes:
    return np.asarray(ids, dtype=np.int64).tobytes()


def run_stress(
    workload,
    readers: int = 8,
    queries_per_reader: int = 10_000,
    batch_every: int = 50,
    k: int = 10,
    seed: int = 0,
) -> StressReport:
    """Runs readers against a concurrent writer and verifies every result (see module doc)."""
    report = StressReport(workload.kind, readers)
    index = workload.new_index()
    version = [0]  # states 0 .. len(ops); state j = base + ops[:j]
    stop_writer = threading.Event()
    observations: list[list] = [[] for _ in range(readers)]
    failures: list = []
    start_barrier = threading.Barrier(readers + 1)
    writer_done = threading.Event()

    def writer():
        start_barrier.wait()
        try:
            for j, op in enumerate(workload.ops, start=1):
                if stop_writer.is_set():
                    break
                workload.apply(index, op)
                version[0] = j
                report.writes += 1
                time.sleep(0.001)  # a GIL switch: let the readers interleave with many states
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(("writer", repr(e)))
        finally:
            writer_done.set()

    def reader(r: int):
        rng = np.random.default_rng(seed * 1000 + r)
        out = observations[r]
        start_barrier.wait()
        try:
            done = 0
            # Run the quota, and keep reading until the writer is through all its states.
            while done < queries_per_reader or not writer_done.is_set():
                if batch_every and done % batch_every == batch_every - 1:
                    qis = rng.integers(0, len(workload.queries), size=8).tolist()
                    v0 = version[0]
                    res = workload.search_batch(index, qis, k)
                    v1 = version[0]
                    for j, qi in enumerate(qis):
                        ids, scores = workload.batch_row(res, j)
                        out.append((qi, v0, v1, np.array(ids), np.array(scores), True))
                    done += len(qis)
                else:
                    qi = int(rng.integers(0, len(workload.queries)))
                    v0 = version[0]
                    ids, scores = workload.search(index, qi, k)
                    v1 = version[0]
                    out.append((qi, v0, v1, ids, scores, False))
                    done += 1
        except BaseException as e:  # noqa: BLE001
            failures.append((f"reader {r}", repr(e)))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=reader, args=(r,)) for r in range(readers)]
    w = threading.Thread(target=writer)
    for t in threads:
        t.start()
    w.start()
    for t in threads:
        t.join()
    stop_writer.set()
    w.join()
    report.seconds = time.perf_counter() - t0
    report.errors.extend(failures)

    # Serial replay: the expected result of every pool query in every state.
    n_states = report.writes + 1
    exact = not workload.kind.endswith("hnsw")
    replay = workload.new_index()
    expected: list = []
    live_sets: list = []
    live = set(getattr(workload, "base_ids", range(len(getattr(workload, "base", [])))))
    for j in range(n_states):
        if j > 0:
            op = workload.ops[j - 1]
            workload.apply(replay, op)
            if op[0] == "add":
                live |= set(op[2])
            else:
                live -= set(op[1])
        if exact:
            expected.append([workload.search(replay, qi, k) for qi in range(len(workload.queries))])
        else:
            live_sets.append(frozenset(live))

    for obs in observations:
        for qi, v0, v1, ids, scores, batched in obs:
            if batched:
                report.batch_queries += 1
            else:
                report.queries += 1
            window = range(v0, min(v1 + 1, n_states - 1) + 1)
            match = None
            for j in window:
                if exact:
                    e_ids, e_scores = expected[j][qi]
                    if (
                        e_ids.shape == ids.shape
                        and np.array_equal(e_ids, ids)
                        and np.allclose(e_scores, scores, rtol=1e-5, atol=1e-6)
                    ):
                        match = j
                        break
                elif _consistent_hnsw(workload, qi, ids, scores, live_sets[j], k):
                    match = j
                    break
            if match is None:
                report.errors.append(
                    (
                        "inconsistent result",
                        workload.kind,
                        qi,
                        (v0, v1),
                        ids.tolist()[:10],
                        scores.tolist()[:10],
                    )
                )
                if len(report.errors) > 20:
                    return report
            else:
                report.states_seen.add(match)
    return report


def _consistent_hnsw(workload, qi, ids, scores, live, k) -> bool:
    ids_l = ids.tolist()
    if len(ids_l) != min(k, len(live)) or len(set(ids_l)) != len(ids_l):
        return False
    if not all(x in live for x in ids_l):
        return False
    true = workload.exact_scores[qi, [workload.col[x] for x in ids_l]]
    if not np.allclose(true, scores, atol=1e-4):
        return False
    return bool(np.all(np.diff(np.asarray(scores, np.float64)) <= 1e-5))
