"""One shard: a Retriever over a partition of the documents, served by a Ray actor.

A shard is a :class:`ragfind.Retriever` whose chunk ids are collection-wide (its chunk-id
policy is :class:`.partition.ShardChunkIds`), so a shard folder is an ordinary Retriever
folder. :class:`ShardActor` holds one, applies the router's writes (each recorded in the
shard's write-ahead log, fsynced, before it is acknowledged), and answers the router's two
search phases: the BM25 statistics of the query terms, then every stage's top list scored
with the global statistics.

On (re)start the actor loads the shard's last saved folder, if any, and replays the log.
Replicas of a shard share its folder and log; only the primary (replica 0) writes them.
"""

from __future__ import annotations

import base64
import functools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.distributed.folder import MANIFEST
from ragfind.distributed.partition import ShardChunkIds
from ragfind.persist.wal import WriteLog
from ragfind.pipeline.retriever import Retriever

STATE = "state.json"
WAL = "wal.log"


def encode_array(a: np.ndarray | None) -> dict | None:
    """An array as a JSON value for a write-log record."""
    if a is None:
        return None
    a = np.ascontiguousarray(a, dtype="<f4")
    return {"shape": list(a.shape), "f4": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(d: dict | None) -> np.ndarray | None:
    if d is None:
        return None
    return np.frombuffer(base64.b64decode(d["f4"]), dtype="<f4").reshape(d["shape"]).copy()


def bm25_spec(index: Any) -> dict:
    """A picklable description of an empty BM25Index (pybind objects do not pickle)."""
    s = index.stats()
    return {
        "method": s["method"],
        "k1": s["k1"],
        "b": s["b"],
        "delta": s["delta"],
        "analyzer": index.analyzer.config(),
    }


def bm25_from_spec(spec: dict) -> Any:
    from ragfind.sparse.analyzer import Analyzer
    from ragfind.sparse.bm25 import BM25Index

    return BM25Index(
        spec["method"], spec["k1"], spec["b"], spec["delta"], Analyzer.from_config(spec["analyzer"])
    )


def retriever_options(options: dict) -> dict:
    """The shard's Retriever options: no re-ranker (the router re-ranks), BM25 from its spec,
    ``stages`` built by their factory when one is given."""
    opts = {k: v for k, v in options.items() if k != "reranker"}
    if callable(opts.get("stages")):
        opts["stages"] = list(opts["stages"]())  # a factory: stages that do not pickle
    if isinstance(opts.get("bm25"), dict):
        opts["bm25"] = bm25_from_spec(opts["bm25"])
    return opts


class _Err:
    """An exception raised by a write or a lookup, returned as a value so that the router
    re-raises the original class with its own message (not wrapped in a Ray task error)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _guard(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            return _Err(exc)

    return wrapper


class ShardActor:
    """Ray actor body for shard ``shard`` (wrapped with ``ray.remote`` by the router)."""

    def __init__(self, shard: int, home: str, options: dict, primary: bool) -> None:
        self.shard = int(shard)
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.primary = bool(primary)
        self.options = retriever_options(options)
        self.wal = WriteLog(self.home / WAL)
        self.chunk_ids = ShardChunkIds(self.shard)
        snapshot, self.applied = self._snapshot()
        if snapshot is not None:
            opts = self.options
            self.r = Retriever.load(
                snapshot,
                encoder=opts.get("encoder"),
                reranker=None,
                contextualize=opts.get("contextualize") if callable(opts.get("contextualize")) else None,
                stages=opts.get("stages", ()),
                chunk_id_policy=self.chunk_ids,
            )
        else:
            self.r = Retriever(**self.options, chunk_id_policy=self.chunk_ids)
        self.replayed = 0
        # Only the primary writes the log; a replica reads it as it is (the primary may be
        # appending to it).
        for rec in self.wal.recover() if self.primary else self.wal.records():
            if rec["lsn"] > self.applied:
                self._apply(rec)
                self.applied = rec["lsn"]
                self.replayed += 1

    def _snapshot(self) -> tuple:
        """(last saved shard folder or None, the last write it holds)."""
        p = self.home / STATE
        if not p.is_file():
            return None, 0
        with open(p, encoding="utf-8") as fh:
            snapshot = json.load(fh).get("snapshot")
        if snapshot is None:
            return None, 0
        with open(Path(snapshot).parent / MANIFEST, encoding="utf-8") as fh:
            lsn = json.load(fh)["lsn"][self.shard]
        return snapshot, int(lsn)

    # ----- writes

    def _apply(self, rec: dict) -> int:
        if rec["op"] == "add":
            docs = rec["docs"]
            with self.chunk_ids.numbering({str(d["id"]): s for d, s in zip(docs, rec["seqs"])}):
                return self.r.add_documents(docs, embeddings=decode_array(rec.get("emb")))
        return self.r.delete_documents(rec["ids"])

    def _write(self, rec: dict) -> Any:
        if rec["lsn"] <= self.applied:
            return None  # already applied (a retry, or replayed from the log on restart)
        n = self._apply(rec)
        if self.primary:
            try:
                self.wal.append(rec)
            except BaseException:
                if rec["op"] == "add":
                    self.r.delete_documents([str(d["id"]) for d in rec["docs"]])
                raise
        self.applied = rec["lsn"]
        return n

    @_guard
    def add(self, lsn: int, docs: list, seqs: list, embeddings: Any = None) -> Any:
        """Adds documents; returns their chunk count once durable (None when already applied)."""
        rec = {"op": "add", "lsn": int(lsn), "docs": docs, "seqs": [int(s) for s in seqs]}
        if embeddings is not None:
            rec["emb"] = encode_array(np.asarray(embeddings, np.float32))
        return self._write(rec)

    @_guard
    def delete(self, lsn: int, doc_ids: list) -> Any:
        return self._write({"op": "delete", "lsn": int(lsn), "ids": [str(d) for d in doc_ids]})

    def applied_lsn(self) -> int:
        return self.applied

    # ----- persistence

    @_guard
    def save(self, path: str) -> int:
        self.r.save(path)
        return self.applied

    @_guard
    def commit_snapshot(self, path: str) -> None:
        """After the sharded folder holding ``path`` is published: restart from it, empty the log."""
        tmp = self.home / (STATE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"snapshot": os.fspath(path)}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.home / STATE)
        self.wal.reset()

    # ----- reads

    def info(self) -> dict:
        r = self.r
        return {
            "documents": len(r),
            "chunks": r.n_chunks,
            "max_seq": _max_seq(r),
            "fields": sorted(r.store.fields),
            "first_stages": [s.name for s in r.first_stages],
            "rerank_stages": [s.name for s in r.rerank_stages],
            "applied": self.applied,
            "replayed": self.replayed,
            "pid": os.getpid(),
        }

    def existing(self, doc_ids: list) -> list:
        return self.r.store.existing([str(d) for d in doc_ids])

    @_guard
    def get_document(self, doc_id: Any) -> dict:
        return self.r.get_document(doc_id)

    def term_stats(self, terms: dict) -> dict:
        """``{stage: [(N, total length, df per term) per query]}`` of this shard."""
        out = {}
        for name, per_query in terms.items():
            index = self.r.stage(name).index
            out[name] = [index.term_stats(t) for t in per_query]
        return out

    @_guard
    def first_stage(self, plan: list, stats: dict | None, depth: int, filters: Any) -> dict:
        """Every planned stage's ``[(ids, scores) per query]`` over this shard, BM25 scored
        with the given global statistics, dense/other stages with the given query vectors."""
        flt = self.r.stage_runner.compile_filters(filters)
        out: dict = {}
        empty = (np.zeros(0, np.int64), np.zeros(0, np.float32))
        for name, kind, inputs in plan:
            if flt is not None and len(flt) == 0:
                out[name] = [empty] * len(inputs)
                continue
            stage = self.r.stage(name)
            lists = []
            for qi, q in enumerate(inputs):
                if kind == "bm25":
                    ids, scores = stage.search(q, depth, flt, stats=stats[name][qi])
                else:
                    ids, scores = stage.search(q, depth, flt)
                lists.append((np.asarray(ids, np.int64), np.asarray(scores)))
            out[name] = lists
        return out

    def fetch(self, ids: list) -> dict:
        return self.r.store.fetch(ids)

    @_guard
    def rerank(self, name: str, query: str, ids: np.ndarray, texts: list) -> tuple:
        return self.r.stage(name).rerank(query, ids, texts)


def _max_seq(r: Retriever) -> int:
    from ragfind.distributed.partition import doc_seq_of_chunk

    if r.store.next_chunk_id == 0:
        return -1
    return int(doc_seq_of_chunk(np.asarray([r.store.next_chunk_id - 1]))[0])
