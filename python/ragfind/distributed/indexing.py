"""Indexing at scale: a Ray Data pipeline from JSONL/Parquet to a sharded folder.

``read_json``/``read_parquet`` -> ``map_batches`` over an actor pool of encoders (each chunks
its batch exactly as a Retriever would and embeds the chunks) -> one builder actor per shard
(a Retriever with the shard's chunk-id policy, given the embeddings) -> ``shard-XXXX/``
folders + ``shards.json``.
The driver streams the embedded documents to the shard builders in source order, numbering
them as one Retriever fed the whole source would, so the folder loads with
:meth:`ShardedRetriever.load` and answers exactly as that Retriever. The driver keeps nothing
per document: a few batches in flight and a counter. A repeated id is caught by the builder of
its shard (every copy of an id hashes there), which already holds the shard's ids.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.distributed import folder as fmt
from ragfind.distributed._ray import require_ray
from ragfind.distributed.partition import MAX_SHARDS, ShardChunkIds, shard_of
from ragfind.distributed.router import _positive
from ragfind.distributed.shard import bm25_spec, retriever_options
from ragfind.persist.atomic import fsync_dir
from ragfind.pipeline.retriever import Retriever

__all__ = ["build"]


def _doc_of(row: dict, id_field: str | None) -> dict:
    key = id_field or ("id" if "id" in row else "_id")
    if key not in row or row[key] is None:
        raise ValueError(f"a source record has no {key!r} field; pass id_field=")
    doc = {"id": str(row[key]), "text": "" if row.get("text") is None else str(row["text"])}
    if row.get("title"):
        doc["title"] = str(row["title"])
    md = row.get("metadata")
    if isinstance(md, dict) and md:
        doc["metadata"] = {k: v for k, v in md.items() if v is not None}
    return doc


class _Embedder:
    """A Ray Data actor: chunks a batch of documents as the Retriever does, embeds the chunks."""

    def __init__(self, options: dict, id_field: str | None, batch_size: int, num_shards: int) -> None:
        self.r = Retriever(**retriever_options(options))
        self.id_field = id_field
        self.batch_size = batch_size
        self.num_shards = num_shards

    def __call__(self, batch: dict) -> dict:
        n = len(next(iter(batch.values())))
        rows = [{k: batch[k][i] for k in batch} for i in range(n)]
        try:
            docs = [_doc_of(r, self.id_field) for r in rows]
        except ValueError as exc:
            # Raised here it would reach build() wrapped in Ray Data's errors: the driver
            # raises it instead (shard -1 marks it).
            return {
                "doc": np.asarray([str(exc)], object),
                "emb": np.asarray([b""], object),
                "shard": np.asarray([-1]),
            }
        chunks = self.r.chunks(docs)
        counts: dict = {}
        for c in chunks:
            counts[c.doc_id] = counts.get(c.doc_id, 0) + 1
        emb = None
        if self.r.encoder is not None and chunks:
            emb = np.asarray(
                self.r.encoder.encode([c.indexed_text() for c in chunks], batch_size=self.batch_size),
                np.float32,
            )
        out_emb, pos = [], 0
        for d in docs:
            m = counts.get(d["id"], 0)
            out_emb.append(b"" if emb is None else emb[pos : pos + m].tobytes())
            pos += m
        return {
            "doc": np.asarray([json.dumps(d, ensure_ascii=False) for d in docs], dtype=object),
            "emb": np.asarray(out_emb, dtype=object),
            "shard": np.asarray([shard_of(d["id"], self.num_shards) for d in docs], np.int64),
        }


class _ShardBuilder:
    """A Ray actor building one shard's Retriever from embedded documents, then saving it.
    Every copy of a document id comes to the builder of its shard, so the ids its Retriever
    holds are all it needs to catch an id repeated anywhere in the source."""

    def __init__(self, shard: int, options: dict) -> None:
        self.chunk_ids = ShardChunkIds(shard)
        self.r = Retriever(**retriever_options(options), chunk_id_policy=self.chunk_ids)
        self.dim = self.r.encoder.dim if self.r.encoder is not None else 0

    def add(self, docs_json: list, seqs: list, emb: list) -> int:
        """Adds documents (JSON text) numbered ``seqs``; ValueError naming an id repeated in
        the source (in this batch or added before), with nothing added."""
        docs = [json.loads(j) for j in docs_json]
        ids = [d["id"] for d in docs]
        repeated, batch = None, set()
        for i in ids:
            if i in batch:
                repeated = i
                break
            batch.add(i)
        if repeated is None:
            repeated = next(iter(self.r.store.existing(ids)), None)
        if repeated is not None:
            raise ValueError(f"document id {repeated!r} is repeated in the source")
        with self.chunk_ids.numbering(dict(zip(ids, seqs))):
            vectors = None
            if self.dim:
                vectors = np.frombuffer(b"".join(emb), np.float32).reshape(-1, self.dim)
            return self.r.add_documents(docs, embeddings=vectors)

    def folder(self) -> dict:
        """The shard's saved folder as :func:`ragfind.distributed.folder.read_tree` files: it
        goes to the driver through Ray (the builders' nodes share no file system with it)."""
        with tempfile.TemporaryDirectory(prefix="ragfind-shard-") as tmp:
            self.r.save(Path(tmp) / "shard")
            return fmt.read_tree(Path(tmp) / "shard")


def encoder_cpus(cluster_cpus: float, num_encoders: int) -> float:
    """CPUs per encoder actor: at most 1, and together leaving a CPU (half of one on a 1-CPU
    cluster) to Ray Data's read tasks, which otherwise never get scheduled behind a pool
    that holds every CPU."""
    reserve = 1.0 if cluster_cpus >= 2 else cluster_cpus / 2
    return min(1.0, max(cluster_cpus - reserve, 0.01) / num_encoders)


def build(
    source: str | os.PathLike | list,
    out: str | os.PathLike,
    num_shards: int,
    *,
    format: str | None = None,  # noqa: A002
    id_field: str | None = None,
    num_encoders: int = 1,
    batch_size: int = 256,
    encode_batch_size: int = 32,
    encoder_options: dict | None = None,
    show_progress: bool = True,
    overwrite: bool = False,
    **retriever_options: Any,
) -> Path:
    """Indexes a corpus into the sharded folder ``out`` with Ray Data; returns its path.

    The driver holds a few batches in flight and a document counter, nothing per document:
    its memory does not grow with the corpus.

    Args:
        source: a JSONL or Parquet file, a folder of them, or a list of paths; records have
            ``id`` (or ``_id``, or ``id_field``), ``text``, optionally ``title`` and a
            ``metadata`` object.
        out: the sharded folder to write (written aside, then renamed into place).
        num_shards: shards (1 .. 1024), by the stable hash of the document id.
        format: ``"json"`` or ``"parquet"`` (default: from the file extension).
        num_encoders: encoder actors embedding batches in parallel (``map_batches`` pool);
            unless ``encoder_options`` sets ``num_cpus``, they share the cluster's CPUs but
            one (:func:`encoder_cpus`), so the reads always run.
        batch_size: documents per batch; ``encode_batch_size``: the encoder's batch size.
        encoder_options: more ``map_batches`` options for the encoder pool (``num_gpus``, ...).
        show_progress: Ray Data's progress bars and a bar of the documents written.
        overwrite: replace an existing sharded folder at ``out``.
        **retriever_options: the :class:`ragfind.Retriever` arguments of every shard (as for
            :class:`ShardedRetriever`); load the result with the same encoder.

    Raises:
        ValueError: ``num_shards`` out of range, an unknown format, a record without id,
            a repeated document id (found by the builder of its shard). Nothing is written
            at ``out`` then. FileExistsError: ``out`` exists (without ``overwrite``).
    """
    n = _positive(num_shards, "num_shards")
    if n > MAX_SHARDS:
        raise ValueError(f"num_shards = {num_shards!r}; expected at most {MAX_SHARDS}")
    dst = Path(out)
    if dst.exists() and (not overwrite or not fmt.is_sharded_folder(dst)) and any(dst.iterdir()):
        raise FileExistsError(
            f"{str(dst)!r} exists; pass overwrite=True to replace a sharded folder"
            if fmt.is_sharded_folder(dst)
            else f"{str(dst)!r} exists and is not a sharded retriever folder; refusing to replace it"
        )
    paths = [os.fspath(p) for p in source] if isinstance(source, (list, tuple)) else [os.fspath(source)]
    if format is None:
        first = paths[0]
        if os.path.isdir(first):
            names = os.listdir(first)
            format = "parquet" if any(x.endswith(".parquet") for x in names) else "json"
        else:
            format = "parquet" if first.endswith(".parquet") else "json"
    if format not in ("json", "parquet"):
        raise ValueError(f"format = {format!r}; expected 'json' or 'parquet'")
    if retriever_options.get("feedback") is not None:
        # Shards score BM25 with collection-wide statistics, which RM3's second search lacks.
        raise ValueError("feedback: not supported by a sharded index")
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    from ray import data as rd  # the ray extra

    ctx = rd.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # document numbers follow the source order
    ctx.enable_progress_bars = bool(show_progress)
    options = dict(retriever_options)
    options.pop("reranker", None)
    template = Retriever(**options)  # checks the options once, here
    if template.bm25 is not None:
        options["bm25"] = bm25_spec(template.bm25)
    num_encoders = _positive(num_encoders, "num_encoders")
    pool = dict(encoder_options or {})
    pool.setdefault("num_cpus", encoder_cpus(ray.cluster_resources().get("CPU", 1.0), num_encoders))
    ds = rd.read_json(paths) if format == "json" else rd.read_parquet(paths)
    ds = ds.map_batches(
        _Embedder,
        fn_constructor_args=(options, id_field, int(encode_batch_size), n),
        batch_size=int(batch_size),
        batch_format="numpy",
        concurrency=num_encoders,
        **pool,
    )
    remote = ray.remote(_ShardBuilder)
    builders = [remote.remote(s, options) for s in range(n)]
    seq = 0
    pending: list = []
    bar = None
    if show_progress:
        from tqdm.auto import tqdm  # import cost: only a progress bar needs it

        bar = tqdm(desc="documents", unit="doc")
    parent = dst.parent if str(dst.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{dst.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        for batch in ds.iter_batches(batch_size=int(batch_size), batch_format="numpy"):
            parts: dict = {}
            for doc_json, emb, s in zip(batch["doc"], batch["emb"], batch["shard"]):
                if s < 0:  # a record the encoders refused
                    raise ValueError(str(doc_json))
                p = parts.setdefault(int(s), ([], [], []))
                p[0].append(str(doc_json))
                p[1].append(seq)
                p[2].append(bytes(emb))
                seq += 1
            pending += [builders[s].add.remote(*p) for s, p in parts.items()]
            if len(pending) > 4 * n:  # bounded in flight: the driver holds a few batches
                _get(ray, pending[: len(pending) // 2])
                pending = pending[len(pending) // 2 :]
            if bar is not None:
                bar.update(len(batch["doc"]))
        _get(ray, pending)
        tmp.mkdir()
        for s, b in enumerate(builders):  # one at a time: the driver holds one shard's files
            fmt.write_tree(tmp / fmt.shard_dir(s), ray.get(b.folder.remote()))
        fmt.write_manifest(
            tmp,
            {
                "format": fmt.FORMAT_NAME,
                "version": fmt.FORMAT_VERSION,
                "num_shards": n,
                "next_doc_seq": seq,
                "lsn": [0] * n,
                "options": {"reranker": None},
            },
        )
        fsync_dir(tmp)
        old = None
        if dst.exists():
            old = parent / f".{dst.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(dst, old)
        os.replace(tmp, dst)
        fsync_dir(parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if bar is not None:
            bar.close()
        for b in builders:
            ray.kill(b)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dst


def _get(ray: Any, refs: list) -> list:
    """``ray.get``, re-raising a builder's ValueError (a repeated id) as itself."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, ValueError):
            raise exc.cause from None
        raise
