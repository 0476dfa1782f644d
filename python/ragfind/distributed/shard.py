"""One shard: a Retriever over a partition of the documents, served by a Ray actor.

A shard is a :class:`ragfind.Retriever` whose chunk ids are collection-wide (its chunk-id
policy is :class:`.partition.ShardChunkIds`), so a shard folder is an ordinary Retriever
folder. :class:`ShardActor` holds one, applies the router's writes (the primary fsyncs each
to the shard's write-ahead log before it is acknowledged; see :mod:`.replication`), and
answers the router's search in one call: every stage's top list, BM25 scored with the
collection statistics the router keeps (:class:`BM25Stats` here tells it what each write
changed), and the stored rows of the lists' heads.

Every copy keeps its own log and snapshots in its own folder (``home``, on its node's disk:
no file system is shared). It logs each write it applies, fsynced before it answers, and an
abort record for a failed write it takes back. On (re)start it loads its last snapshot, if any,
and replays the writes of its log that count (:func:`plan_records`). A copy that missed writes
(it was stopped, restarted elsewhere with an empty disk, or held a write that failed) recovers
from the primary (:meth:`ShardActor.recover`): the writes it lacks come from the primary's log,
or the primary's snapshot when its log no longer reaches back that far.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import pickle
import shutil
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.distributed.folder import MANIFEST, read_tree, write_tree
from ragfind.distributed.partition import ShardChunkIds, doc_seq_of_chunk
from ragfind.persist.atomic import fsync_dir
from ragfind.persist.wal import WriteLog
from ragfind.pipeline.retriever import Retriever
from ragfind.pipeline.stages.bm25 import BM25Stage
from ragfind.sparse.analyzer import Analyzer
from ragfind.sparse.bm25 import BM25Index

STATE = "state.json"
WAL = "wal.log"
SNAPSHOTS = "snapshots"
KEEP_BATCHES = 4096  # batch ids a copy remembers (a crashed router's last one is recent)


def decode_array(d: dict | None, blob: bytes | None = None) -> np.ndarray | None:
    """A record's embeddings: raw little-endian float32 in the record's binary part (``f4`` in
    base64 in logs written before)."""
    if d is None:
        return None
    raw = base64.b64decode(d["f4"]) if "f4" in d else blob
    return np.frombuffer(raw, dtype="<f4").reshape(d["shape"]).copy()


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


def _exclusive(fn):
    """Runs a write under the copy's mutex: the search graph's thread reads the copy while
    ordinary calls (one at a time on the actor's own thread) write it."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        with self._mutex:
            return fn(self, *args, **kwargs)

    return wrapper


def bm25_stages(r: Retriever) -> list:
    """The first stages whose scores take the collection's statistics: BM25 over a plain
    :class:`ragfind.BM25Index` (a BM25F index scores with its own)."""
    return [s for s in r.first_stages if isinstance(s, BM25Stage) and isinstance(s.index, BM25Index)]


class BM25Stats:
    """What this copy's BM25 statistics were when the router last heard of them, so that a
    write's acknowledgement carries only what the write changed: per stage ``(N, total
    length, terms, their df)`` for the terms whose df changed, against version ``base``.

    Term ids of an index only grow (its vocabulary is append-only), so the df arrays of two
    versions compare position by position; after a reload nothing is assumed (a full table).
    """

    def __init__(self) -> None:
        self.version: int | None = None
        self._seen: dict = {}  # stage -> (index object, vocabulary list, df array)

    def reset(self) -> None:
        self.version, self._seen = None, {}

    def _same_terms(self, stage: Any) -> bool:
        """The index seen last, its terms still numbered as then (checked on the last one)."""
        seen = self._seen.get(stage.name)
        if seen is None or seen[0] is not stage.index:
            return False
        vocab = seen[1]
        return not vocab or int(stage.index._core.term_ids([vocab[-1]])[0]) == len(vocab) - 1

    def report(self, r: Retriever, version: int, full: bool = False) -> dict:
        """``{"base": the version the changes apply to (None: whole tables), "version",
        "stages": {name: (N, total, terms, their df)}}``; this copy's statistics are then
        known to the router at ``version``."""
        stages = bm25_stages(r)
        full = full or self.version is None or any(not self._same_terms(st) for st in stages)
        out = {}
        for st in stages:
            core = st.index._core  # the whole df table in one native call
            n, total, _ = core.term_stats([])
            df = np.asarray(core.document_frequencies(), np.int64)
            if full:
                vocab = list(core.vocabulary())
                changed = np.arange(len(df))
            else:
                _, vocab, old = self._seen[st.name]
                if len(df) > len(vocab):
                    vocab = vocab + list(core.vocabulary()[len(vocab) :])
                changed = np.nonzero(df[: len(old)] != old)[0]
                changed = np.concatenate([changed, np.arange(len(old), len(df))])
            self._seen[st.name] = (st.index, vocab, df)
            out[st.name] = (int(n), int(total), [vocab[i] for i in changed.tolist()], df[changed])
        base = None if full else self.version
        self.version = int(version)
        return {"base": base, "version": int(version), "stages": out}


# Ray hands a call's result back inline up to 100 KiB (its max_direct_call_object_size); a
# bigger one goes through the object store, several more round trips: a 4-shard hybrid
# search's answers of 150 KB took 11.9 ms against 5.6 ms at 48 KB (bench/distributed.md).
INLINE_REPLY_BYTES = int(os.environ.get("RAY_max_direct_call_object_size", 100 * 1024))
REPLY_BYTES = INLINE_REPLY_BYTES * 7 // 8  # room for pickle's framing and estimation error


def _row_bytes(row: tuple) -> int:
    """About what a stored row pickles to (its strings, the rest small)."""
    n = 48
    for x in row:  # a loop, not a generator: this runs for every row a search sends
        n += len(x) + 5 if x.__class__ is str else 9
    return n


def head_rows(store: Any, lists: list, top: int, budget: int, rrf_k: float = 60.0) -> dict:
    """``{chunk id: row}`` of the ``top`` chunks of ``lists`` most likely in the fused head,
    best first while their size fits in ``budget`` bytes: the router fetches any other the
    fused head needs. "Most likely": the highest reciprocal-rank sum over the lists (this
    shard's RRF; one list: its order), as a chunk ranked 30th in two lists outranks one
    ranked 1st in one."""
    lists = [np.asarray(ids, np.int64) for ids in lists if len(ids)]
    if not lists or top <= 0:
        return {}
    if len(lists) == 1:
        order = lists[0][:top].tolist()  # one list: its own order
    else:
        ids = np.concatenate(lists)
        ranks = np.concatenate([np.arange(1, len(x) + 1) for x in lists])
        chunks, first, where = np.unique(ids, return_index=True, return_inverse=True)
        prio = np.bincount(where, weights=1.0 / (rrf_k + ranks))
        # Best first, ties in order of first appearance (list by list).
        order = chunks[np.lexsort((first, -prio))[:top]].tolist()
    rows: dict = {}
    for row in store.fetch_list(order):
        budget -= _row_bytes(row)
        if budget < 0:
            break
        rows[row[0]] = row
    return rows


class _Refused:
    """A write a copy refused without applying it: ``why`` is ``"stale"`` (the router's
    primary term is older than the copy's: another router took over) or ``"gap"`` (the copy
    missed a write: ``last`` is the last one it holds)."""

    def __init__(self, why: str, last: int, term: int) -> None:
        self.why, self.last, self.term = why, int(last), int(term)


def _seq(record: dict) -> int:
    """A write record's sequence number (``lsn`` in logs written before)."""
    return int(record.get("seq", record.get("lsn", 0)))


def plan_records(records: list) -> tuple:
    """``(writes, term, max seq)`` of a log: the add/delete records that count, in order. A
    write named by an abort record is dropped (it was reported failed), and so is one whose
    term is older than a term record before it (a fenced-off primary appended it late)."""
    aborted: set = set()
    pairs: set = set()  # (seq, term): that write only (another may come under its number)
    for r in records:
        if r.get("op") == "abort":
            seqs = [int(x) for x in r["seqs"]]
            if "terms" in r:
                pairs.update(zip(seqs, (int(t) for t in r["terms"])))
            else:
                aborted.update(seqs)
    writes, top, max_seq = [], 0, 0
    for r in records:
        term = int(r.get("term", 0))
        if r.get("op") in ("add", "delete"):
            seq = _seq(r)
            max_seq = max(max_seq, seq)
            if term >= top and seq not in aborted and (seq, term) not in pairs:
                writes.append(r)
        elif r.get("op") == "abort":
            max_seq = max([max_seq, *(int(x) for x in r["seqs"])])
        top = max(top, term)
    return writes, top, max_seq


class ShardActor:
    """Ray actor body for one copy of shard ``shard`` (wrapped with ``ray.remote`` by the router).

    Every write carries the router's primary term, its sequence number ``seq`` (never reused)
    and ``prev``, the write before it on this shard: a copy whose last write is not ``prev``
    refuses it (it missed one) and leaves the in-sync set until :meth:`recover`. Each copy
    logs every write it applies in its own log (``home``), and an abort record for a failed
    one it takes back.
    """

    def __init__(self, shard: int, home: str, options: dict, primary: bool = False) -> None:
        self.shard = int(shard)
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self._raw_options = options
        self.wal = WriteLog(self.home / WAL)
        self.chunk_ids = ShardChunkIds(self.shard)
        self.bm25_stats = BM25Stats()
        # A copy (re)starts as a follower: the router promotes one copy per term.
        self.primary = False
        self.term = 0
        self.incarnation = uuid.uuid4().hex
        self._fault: str | None = None
        self._mutex = threading.RLock()
        self._load()

    @_guard
    @_exclusive
    def seed(self, files: dict, lsn: int) -> int:
        """Starts from a saved shard folder sent by the router (``load``; ``files`` as
        :func:`ragfind.distributed.folder.read_tree`'s) unless this copy's own folder holds
        a snapshot as new. It is this copy's snapshot from then on, also across restarts.
        Returns the last write held."""
        if not self._has_state() or self._snapshot()[1] < int(lsn):
            self._install(files, int(lsn), [])
            self._load()
        return self.last

    def _load(self) -> None:
        """The last saved folder plus the log's writes that count."""
        snapshot, self.base = self._snapshot()
        # Fresh options each load: a BM25 index built from its spec must start empty.
        self.options = retriever_options(self._raw_options)
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
        self.last = self.base
        self.terms: dict = {}  # seq -> term of the writes applied since the snapshot
        self.bm25_stats.reset()  # a new index: the next acknowledgement sends full tables
        self.applied: list = []  # the seqs applied since the snapshot, in order
        self.replayed = 0
        self.log_term = 0
        self.log_max_seq = self.base
        # Its own log: a torn tail (a crash mid-append, never acknowledged) is cut before it
        # appends again.
        records = self.wal.recover()
        # The batches of adds this copy holds: those a snapshot holds were carried over in
        # the term record that starts the log after it, the others are the log's adds.
        self.batch_ids: dict = {}
        self.last_batch: list | None = None
        for r in records:
            if r.get("op") == "term":
                self.batch_ids.update(dict.fromkeys(r.get("batches", ())))
        self._catch_up(records, self.base)
        self.term = max(self.term, self.log_term)

    def _catch_up(self, records: list, floor: int) -> bool:
        """Applies the log's writes after ``last``; False when this copy holds a write the log
        does not count (aborted or fenced) or lacks one before ``last``: it must reload."""
        writes, self.log_term, top = plan_records(records)
        self.log_max_seq = max(self.log_max_seq, top)
        counted = [_seq(r) for r in writes]
        # Writes up to ``floor`` are in the snapshot (the log is emptied at each save).
        mine = [q for q in self.applied if q > floor]
        if mine != [q for q in counted if q <= self.last]:
            return False
        for r in writes:
            seq = _seq(r)
            if seq > self.last:
                self._apply(r)
                self._held(seq, int(r.get("term", 0)))
                self.replayed += 1
        return True

    def _sync(self, aborts: list | None = None) -> int:
        """Brings this copy to the log: the writes it missed applied, a write the log does not
        count taken back (by reloading from the snapshot). Returns the last write held."""
        if aborts:
            self.wal.append({"op": "abort", "term": self.term, "seqs": [int(x) for x in aborts]})
        floor = self._snapshot()[1]
        if floor > self.last or not self._catch_up(self.wal.records(), floor):
            self._load()
        return self.last

    def _has_state(self) -> bool:
        return (self.home / STATE).is_file()

    def _snapshot(self) -> tuple:
        """(this copy's last snapshot folder or None, the last write it holds)."""
        p = self.home / STATE
        if not p.is_file():
            return None, 0
        with open(p, encoding="utf-8") as fh:
            state = json.load(fh)
        snapshot = state.get("snapshot")
        if snapshot is None:
            return None, 0
        if "lsn" in state:
            return os.fspath(self.home / snapshot), int(state["lsn"])
        # Written by an older version: the saved sharded folder itself, its manifest beside.
        with open(Path(snapshot).parent / MANIFEST, encoding="utf-8") as fh:
            lsn = json.load(fh)["lsn"][self.shard]
        return snapshot, int(lsn)

    def _publish(self, folder: Path, lsn: int, batches: list, aborted: list) -> None:
        """Makes ``folder`` (under ``home/snapshots``, written and fsynced) this copy's snapshot
        at write ``lsn`` and starts the log afresh: the term (fencing off an older primary),
        the batches the snapshot holds and the aborted writes outlive the truncation."""
        tmp = self.home / (STATE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"snapshot": folder.relative_to(self.home).as_posix(), "lsn": int(lsn)}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.home / STATE)
        fsync_dir(self.home)
        self._fresh_log(batches, aborted)
        for old in (self.home / SNAPSHOTS).iterdir():
            if old.name != folder.name:
                shutil.rmtree(old, ignore_errors=True)

    def _fresh_log(self, batches: list, aborted: Any) -> None:
        """Empties the log, keeping what must outlive it: the term (fencing off an older
        primary), the batches this copy holds and the writes known to have failed."""
        self.wal.reset()
        self.wal.append({"op": "term", "term": self.term, "batches": list(batches)})
        if aborted:
            self.wal.append({"op": "abort", "term": self.term, "seqs": sorted(int(x) for x in aborted)})

    def _new_snapshot_dir(self, lsn: int) -> Path:
        return self.home / SNAPSHOTS / f"{int(lsn):012d}-{uuid.uuid4().hex[:8]}"

    def _install(self, files: dict, lsn: int, batches: list, aborted: list = ()) -> None:
        """Makes a snapshot sent by a peer (or the router) this copy's own (not loaded yet)."""
        folder = self._new_snapshot_dir(lsn)
        write_tree(folder, files)
        self._publish(folder, lsn, batches, list(aborted))

    def _restart_from(self, plan: dict) -> None:
        """Starts this copy afresh from a peer's snapshot (``files``; None: from nothing), its
        log emptied; the peer's writes after the snapshot are applied next."""
        if plan["files"] is not None:
            self._install(plan["files"], plan["lsn"], plan["batches"], plan["aborted"])
        else:
            (self.home / STATE).unlink(missing_ok=True)
            fsync_dir(self.home)
            self._fresh_log(plan["batches"], plan["aborted"])
            shutil.rmtree(self.home / SNAPSHOTS, ignore_errors=True)
        self._load()

    @staticmethod
    def _aborted(records: list) -> set:
        """The writes a log's ``records`` name as failed (whatever their term)."""
        return {int(x) for r in records if r.get("op") == "abort" and "terms" not in r for x in r["seqs"]}

    def _held(self, seq: int, term: int) -> None:
        """Counts write ``seq`` of ``term`` as the last one this copy holds."""
        self.last = seq
        self.applied.append(seq)
        self.terms[seq] = term

    def _log(self, rec: dict) -> None:
        """Appends a write to this copy's log, fsynced; vectors as raw float32, not JSON."""
        emb = rec.get("emb")
        if isinstance(emb, np.ndarray):
            a = np.ascontiguousarray(emb, dtype="<f4")
            self.wal.append({**rec, "emb": {"shape": list(a.shape)}}, a.tobytes())
        elif "_blob" in rec:
            self.wal.append({k: v for k, v in rec.items() if k != "_blob"}, rec["_blob"])
        else:
            self.wal.append(rec)

    # ----- writes

    def _apply(self, rec: dict) -> int:
        if rec["op"] == "add":
            docs = rec["docs"]
            with self.chunk_ids.numbering({str(d["id"]): s for d, s in zip(docs, rec["seqs"])}):
                emb = rec.get("emb")
                if not isinstance(emb, np.ndarray):
                    emb = decode_array(emb, rec.get("_blob"))
                n = self.r.add_documents(docs, embeddings=emb)
        else:
            n = self.r.delete_documents(rec["ids"])
        # The last write, when it is an add of a batch: what a router taking over after a
        # crash checks the batch's other shards against (:meth:`last_add`).
        self.last_batch = None
        if rec.get("batch"):
            bid, shards = rec["batch"]
            self.batch_ids[bid] = None
            if len(self.batch_ids) > KEEP_BATCHES:
                del self.batch_ids[next(iter(self.batch_ids))]
            self.last_batch = [bid, [int(x) for x in shards], [str(d["id"]) for d in rec["docs"]]]
        return n

    def _write(self, term: int, seq: int, prev: int, rec: dict) -> Any:
        if term < self.term:
            return _Refused("stale", self.last, self.term)
        if seq in self.applied:
            return None  # a retry of a write this copy holds
        if prev != self.last:
            return _Refused("gap", self.last, self.term)
        self.term = term
        if self._fault == "exit_before_apply":
            os._exit(1)
        rec = {**rec, "term": int(term), "seq": int(seq)}
        n = self._apply(rec)
        if self._fault == "stop_before_log":
            self._fault = None
            os.kill(os.getpid(), signal.SIGSTOP)  # stalls until the test sends SIGCONT
        try:
            self._log(rec)  # every copy: a copy recovers from its own disk first
        except BaseException:
            self._load()  # take the write back: it was never durable
            raise
        self.log_max_seq = max(self.log_max_seq, seq)
        if self._fault == "exit_after_log":
            os._exit(1)
        self._held(int(seq), int(term))
        # The acknowledgement carries what the write did to the BM25 statistics, so the
        # router's copy of them stays current without asking per search.
        # Whole tables when this copy's last report was not at ``prev`` (it caught up through
        # the log since, or it was never asked): the router holds the statistics at ``prev``.
        full = self.bm25_stats.version != int(prev)
        return {"n": n, "stats": self.bm25_stats.report(self.r, self.last, full=full)}

    @_guard
    @_exclusive
    def add(
        self,
        term: int,
        seq: int,
        prev: int,
        docs: list,
        seqs: list,
        embeddings: Any = None,
        batch: list | None = None,
    ) -> Any:
        """Adds documents; returns their chunk count once applied (and, on the primary, durable).
        ``batch``: ``[batch id, the shards holding a part of it]`` (logged with the write)."""
        rec = {"op": "add", "docs": docs, "seqs": [int(s) for s in seqs]}
        if batch is not None:
            rec["batch"] = [str(batch[0]), [int(x) for x in batch[1]]]
        if embeddings is not None:
            rec["emb"] = np.asarray(embeddings, np.float32)
        return self._write(term, seq, prev, rec)

    @_guard
    @_exclusive
    def delete(self, term: int, seq: int, prev: int, doc_ids: list) -> Any:
        return self._write(term, seq, prev, {"op": "delete", "ids": [str(d) for d in doc_ids]})

    @_guard
    @_exclusive
    def abort(self, term: int, seqs: list) -> Any:
        """Records that writes ``seqs`` failed (so no replay commits them) and takes them back
        here if this copy applied them. Returns the last write held."""
        if term < self.term:
            return _Refused("stale", self.last, self.term)
        self.term = term
        return self._sync(seqs)

    @_guard
    @_exclusive
    def promote(self, term: int, aborts: list, min_last: int = 0) -> Any:
        """Becomes the primary of ``term``: records the term (fencing off writes an older
        primary may still append) and ``aborts``, then catches up with its log. A copy whose
        last write is before ``min_last`` (the last acknowledged one) refuses: it lacks one."""
        if term <= max(self.term, self.log_term):
            # Terms only grow: two routers never hold the same one.
            return _Refused("stale", self.last, max(self.term, self.log_term))
        if self.last < int(min_last):
            return _Refused("behind", self.last, self.term)
        self.term = term
        self.primary = True
        self.wal.append({"op": "term", "term": int(term)})
        self._sync(aborts)
        return self.state()

    @_guard
    @_exclusive
    def recover(self, term: int, aborts: list, source: Any = None, timeout: float = 60.0) -> Any:
        """Follows the primary of ``term`` (``source``, its actor): takes back the writes this
        copy holds that the primary does not count (aborted, or never acknowledged), then
        applies and logs the ones it lacks, from the primary's log, or installs the primary's
        snapshot first when that log no longer reaches back to this copy's last write.
        Returns :meth:`state`."""
        if term < self.term:
            return _Refused("stale", self.last, self.term)
        self.term = term
        self.primary = False
        self._sync(aborts)
        if source is None:
            return self.state()
        import ray  # the ray extra

        for _ in range(3):
            pairs = [(q, self.terms.get(q, -1)) for q in self.applied if q > self.base]
            plan = ray.get(source.history.remote(self.base, pairs, self.last), timeout=timeout)
            if isinstance(plan, _Err):
                raise plan.exc
            if plan.get("take_back"):
                # Logged as failed here (by number and term: another write may come under
                # the same number), then this copy reloads without them.
                seqs = [int(q) for q in plan["take_back"]]
                terms = [self.terms.get(q, -1) for q in seqs]
                self.wal.append({"op": "abort", "term": self.term, "seqs": seqs, "terms": terms})
                self._load()
                continue
            if "lsn" in plan:
                self._restart_from(plan)
            for rec in plan["records"]:
                seq = _seq(rec)
                if seq <= self.last:
                    continue
                self._apply(rec)
                self._log(rec)
                self._held(seq, int(rec.get("term", 0)))
                self.log_max_seq = max(self.log_max_seq, seq)
            break
        return self.state()

    @_guard
    def history(self, base: int, pairs: list, last: int) -> dict:
        """What a copy recovering from this one needs, given what it holds: its snapshot's
        last write ``base``, then ``pairs`` ``(seq, term)`` and ``last``. One of
        ``{"take_back": seqs}`` (writes it holds that this copy does not count: aborted,
        or another write under that number), ``{"records": the writes after last}``, or the
        same with ``files``, ``lsn``, ``batches`` and ``aborted``: this copy's snapshot, when its
        log does not reach back to ``last`` (or the other's history has a hole).

        Reads its log and snapshot files outside the copy's mutex (the search graph's reads
        go on meanwhile): what it sends is cut to the writes held when the call began."""
        with self._mutex:  # a consistent view of what this copy holds (cheap)
            base_s, last_s = self.base, self.last
            mine = {q: self.terms.get(q) for q in self.applied if q > base_s}
            batches = list(self.batch_ids)
            snapshot, lsn = self._snapshot()
        records = self.wal.records()
        aborted = self._aborted(records)
        theirs = {int(q): int(t) for q, t in pairs}
        bad = [q for q, t in theirs.items() if q in aborted or (q > base_s and mine.get(q) != t)]
        if bad:
            return {"take_back": sorted(bad)}
        writes = [r for r in plan_records(records)[0] if base_s < _seq(r) <= last_s]
        lo = max(int(base), base_s)
        holes = [q for q in mine if lo < q <= int(last) and q not in theirs]
        if int(last) >= base_s and not holes:
            return {"records": [r for r in writes if _seq(r) > int(last)]}
        # This log does not reach back to the other's last write: start it from this
        # snapshot (none: from nothing, the whole history being in this log).
        return {
            "records": writes,
            "files": read_tree(snapshot) if snapshot is not None else None,
            "lsn": lsn,
            "batches": batches,
            "aborted": sorted(aborted),
        }

    def state(self) -> dict:
        return {
            "last": self.last,
            "term": self.term,
            "log_term": self.log_term,
            "log_max_seq": max(self.log_max_seq, self.last),
            "primary": self.primary,
            "incarnation": self.incarnation,
        }

    def inject_fault(self, mode: str | None) -> None:
        """Tests only: on the next write, ``"exit_after_log"``, ``"exit_before_apply"`` or
        ``"stop_before_log"`` (SIGSTOP itself between applying and logging)."""
        self._fault = mode

    def digest(self) -> dict:
        """What this copy holds: last write, documents (sorted ids), chunks."""
        store = self.r.store
        with store.lock:
            ids = sorted(row[0] for row in store.db.execute("SELECT doc_id FROM documents"))
        return {"last": self.last, "documents": len(self.r), "chunks": self.r.n_chunks, "ids": ids}

    # ----- persistence

    @_guard
    @_exclusive
    def checkpoint(self) -> int:
        """Saves this copy as its snapshot on its own disk and empties its log (a ``save``
        of the collection). Returns the last write the snapshot holds."""
        return self._checkpoint()

    def _checkpoint(self) -> int:
        snapshot, lsn = self._snapshot()
        if snapshot is not None and lsn == self.last and Path(snapshot).is_relative_to(self.home):
            return self.last  # nothing written since this copy's last one
        folder = self._new_snapshot_dir(self.last)
        self.r.save(folder)
        fsync_dir(folder.parent)
        self._publish(folder, self.last, list(self.batch_ids), self._aborted(self.wal.records()))
        self.base = self.last
        return self.last

    @_guard
    @_exclusive
    def export(self) -> dict:
        """:meth:`checkpoint`, then ``{"files": the snapshot's files, "lsn"}``: the shard's
        folder for the router to write where the collection is saved."""
        lsn = self._checkpoint()
        return {"files": read_tree(self._snapshot()[0]), "lsn": lsn}

    # ----- reads

    def info(self) -> dict:
        r = self.r
        return {
            "documents": len(r),
            "chunks": r.n_chunks,
            "max_seq": _max_seq(r),
            "fields": sorted(r.store.fields),
            "kinds": {f: r.field_kinds(f) for f in r.store.fields},
            "first_stages": [s.name for s in r.first_stages],
            "rerank_stages": [s.name for s in r.rerank_stages],
            "applied": self.last,
            "replayed": self.replayed,
            "pid": os.getpid(),
            "node": _node_id(),
        }

    def node(self) -> str | None:
        """The Ray node this copy runs on."""
        return _node_id()

    def last_add(self) -> list | None:
        """``[batch id, its shards, this shard's document ids]`` when this copy's last write is
        an add of a batch (else None): a router that died while the batch was on its way may
        have left it on some of its shards only."""
        return self.last_batch

    def knows_batches(self, bids: list) -> list:
        """Per batch id: whether this copy applied its part (the last KEEP_BATCHES batches)."""
        return [b in self.batch_ids for b in bids]

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

    def bm25_table(self) -> dict:
        """This copy's whole BM25 statistics (as a write's acknowledgement, with ``base`` None):
        what the router starts from, and refreshes from when its version differs."""
        return self.bm25_stats.report(self.r, self.last, full=True)

    def first_stage(self, request: bytes) -> Any:
        """:meth:`search_stages` of a request the router pickled once for every shard: ``(plan,
        stats, depth, filters, rows_top, {shard: version})``. The answer comes back pickled
        too (bytes), so Ray handles one argument and one result per call, not each array."""
        plan, stats, depth, filters, rows_top, versions = pickle.loads(request)
        out = self.search_stages(plan, stats, depth, filters, rows_top, versions.get(self.shard))
        return out if isinstance(out, _Err) else pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)

    def graph_first_stage(self, request: bytes | None) -> Any:
        """:meth:`first_stage` for the router's search graph (:mod:`.fanout`), which runs on a
        thread of its own: None at once, instead of waiting, while a write holds this copy
        (the router then asks by an ordinary call, queued behind the write), and for the
        graph's warm-up request (None)."""
        if request is None or not self._mutex.acquire(blocking=False):
            return None
        try:
            return self.first_stage(request)
        finally:
            self._mutex.release()

    @_guard
    def search_stages(
        self,
        plan: list,
        stats: dict | None,
        depth: int,
        filters: Any,
        rows_top: int = 0,
        version: int | None = None,
    ) -> dict:
        """``{"lists": {stage: [(ids, scores) per query]}, "rows": {id: stored row}}`` over this
        shard: BM25 scored with the given global statistics, dense/other stages with the given
        query vectors; the rows of the first ``rows_top`` of every list come along, so the
        router's passages need no other call.

        ``version``: the write this shard's part of ``stats`` was read at. When this copy holds
        another, nothing is searched: ``{"stale": last write held, "stats": {stage: [(N, total,
        df of the query's terms) per query]}}`` lets the router score again with the right ones.
        """
        if version is not None and int(version) != self.last:
            out_stats = {}
            for name, kind, inputs in plan:
                if kind == "bm25":
                    index = self.r.stage(name).index
                    out_stats[name] = [
                        index.term_stats(list(dict.fromkeys(index.analyze_query(q)))) for q in inputs
                    ]
            return {"stale": self.last, "stats": out_stats}
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
        rows: dict = {}
        if rows_top:
            lists = [ids for per_query in out.values() for ids, _ in per_query]
            budget = REPLY_BYTES - sum(16 * len(ids) for ids in lists) - 1024
            rows = head_rows(self.r.store, lists, rows_top, budget, getattr(self.r, "rrf_k", 60.0))
        return {"lists": out, "rows": rows}

    def fetch(self, ids: list) -> dict:
        return self.r.store.fetch(ids)

    @_guard
    def rerank(self, name: str, query: str, ids: np.ndarray, texts: list) -> tuple:
        return self.r.stage(name).rerank(query, ids, texts)


def _node_id() -> str | None:
    """The Ray node this copy runs on (None outside Ray)."""
    try:
        import ray  # the ray extra

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - informational only
        return None


def _max_seq(r: Retriever) -> int:
    if r.store.next_chunk_id == 0:
        return -1
    return int(doc_seq_of_chunk(np.asarray([r.store.next_chunk_id - 1]))[0])
