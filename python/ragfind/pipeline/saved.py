"""The saved Retriever folder: ``manifest.json`` (format, version, configuration, every file's
size and SHA-256), ``store.sqlite``, ``metadata.idx`` (the metadata index of filters; a folder
without it rebuilds it from the store), ``passages.cols`` (the passage columns searches read,
memory-mapped; a folder without them builds them from the store), ``bm25.idx`` /
``dense.idx`` (the built-in stages' indexes) and ``stage-<name>/`` (other stages that save
themselves). Written atomically.

Format versions: 2 names the BM25 stage ``"bm25"`` (RRF weights); version 1 called it
``"sparse"`` and still loads (its weights are renamed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.dense.index import DenseIndex
from ragfind.errors import IndexFileError
from ragfind.models import ModelMismatchError
from ragfind.persist.atomic import fault_point, fsync_dir
from ragfind.pipeline.chunking import _check_size, default_context
from ragfind.pipeline.filters import MetadataFilters
from ragfind.pipeline.passage_columns import PassageColumns
from ragfind.pipeline.stages.bm25 import BM25Stage
from ragfind.pipeline.stages.dense import DenseStage
from ragfind.pipeline.store import STORE_FILE, DocumentStore
from ragfind.sparse.feedback import RM3

__all__ = [
    "RetrieverFolderError",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "save_folder",
    "load_folder",
    "recover_folder",
]

FORMAT_NAME = "ragfind-retriever"
FORMAT_VERSION = 2
READS_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
BM25_FILE = "bm25.idx"
DENSE_FILE = "dense.idx"
QUERY_ENCODER_DIR = "query_encoder"  # a static query encoder's model folder
METADATA_FILE = "metadata.idx"
#: The passage columns (a folder without them builds them from the store).
COLUMNS_FILE = "passages.cols"
#: Stage names of version 1 folders renamed since (the BM25 stage was "sparse").
_V1_NAMES = {"sparse": "bm25"}


class RetrieverFolderError(ValueError):
    """A saved retriever folder is missing, incomplete, corrupt or of another format/version."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _builtin_file(stage: Any) -> str | None:
    """The top-level file of a built-in stage under its default name, else None."""
    if isinstance(stage, BM25Stage) and stage.name == "bm25":
        return BM25_FILE
    if isinstance(stage, DenseStage) and stage.name == "dense":
        return DENSE_FILE
    return None


# A save writes ``.<name>.tmp-<pid>-<hex>/`` completely (the manifest last), moves the current
# folder aside to ``.<name>.old-<pid>-<hex>/`` and renames the new one into place. A writer
# killed between those two renames leaves no folder under the name; recover_folder() finishes
# (or undoes) that swap, so a crash never loses the last complete save.
_SIBLING = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>\d+)-[0-9a-f]+$")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists but is not ours to signal
    return True


def _siblings(dst: Path) -> list:
    """(kind, pid, path) of the save leftovers next to ``dst``."""
    parent = dst.parent if str(dst.parent) else Path(".")
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    out = []
    for entry in entries:
        m = _SIBLING.match(entry)
        if m and m.group("name") == dst.name and (parent / entry).is_dir():
            out.append((m.group("kind"), int(m.group("pid")), parent / entry))
    return out


def recover_folder(path: str | os.PathLike, wait: float = 5.0) -> None:
    """Completes a save that was killed between moving the old folder aside and renaming the new
    one into place (the newest complete copy wins), and removes what dead writers left behind.
    A live writer in the middle of its swap is waited for (up to ``wait`` seconds)."""
    dst = Path(path)
    deadline = time.monotonic() + wait
    while not dst.exists():
        leftovers = _siblings(dst)
        if not leftovers:
            return
        swapping = [
            p for kind, pid, p in leftovers if _pid_alive(pid) and (kind == "old" or (p / MANIFEST).is_file())
        ]
        if swapping and time.monotonic() < deadline:
            time.sleep(0.01)
            continue
        # A complete temporary folder (manifest written last) is newer than any moved-aside one.
        complete = [p for kind, _, p in leftovers if kind == "tmp" and (p / MANIFEST).is_file()]
        olds = [p for kind, _, p in leftovers if kind == "old" and (p / MANIFEST).is_file()]
        pick = (complete or olds or [None])[0]
        if pick is None:
            break
        try:
            os.replace(pick, dst)
        except OSError:
            if dst.exists():
                break
            raise
        fsync_dir(dst.parent if str(dst.parent) else Path("."))
        break
    for _, pid, p in _siblings(dst):
        if not _pid_alive(pid) and dst.exists():
            shutil.rmtree(p, ignore_errors=True)


def save_folder(r: Any, path: str | os.PathLike) -> None:
    """Writes ``r`` to the folder ``path`` atomically (see :meth:`Retriever.save`)."""
    dst = Path(path)
    parent = dst.parent if str(dst.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{dst.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    recover_folder(dst)
    with r._write_lock:
        try:
            tmp.mkdir()
            r.store.save(tmp / STORE_FILE)
            r.metadata.save(tmp / METADATA_FILE)
            r.store.columns.save(tmp / COLUMNS_FILE)
            files = [STORE_FILE, METADATA_FILE, COLUMNS_FILE]
            stage_names = []
            for stage in r.first_stages + r.rerank_stages:
                builtin = _builtin_file(stage)
                if builtin is not None:
                    stage.save(tmp / builtin)
                    files.append(builtin)
                elif hasattr(stage, "save"):
                    d = tmp / f"stage-{stage.name}"
                    d.mkdir()
                    stage.save(d)
                    stage_names.append(stage.name)
                    files += [str(p.relative_to(tmp)) for p in sorted(d.rglob("*")) if p.is_file()]
            query_encoder = r.query_encoder
            if query_encoder is not None:
                query_encoder.save(tmp / QUERY_ENCODER_DIR)
                files += [
                    str(p.relative_to(tmp))
                    for p in sorted((tmp / QUERY_ENCODER_DIR).iterdir())
                    if p.is_file()
                ]
            for f in files:
                with open(tmp / f, "rb+") as fh:
                    os.fsync(fh.fileno())
            manifest = {
                "format": FORMAT_NAME,
                "version": FORMAT_VERSION,
                "encoder": None
                if r.encoder is None
                else {"ref": r.encoder_ref, "fingerprint": r.encoder.fingerprint, "dim": int(r.encoder.dim)},
                "reranker": None
                if r.reranker is None
                else {"ref": r.reranker_ref, "fingerprint": getattr(r.reranker, "fingerprint", None)},
                "query_encoder": None
                if query_encoder is None
                else {
                    "fingerprint": query_encoder.fingerprint,
                    "target_fingerprint": query_encoder.target_fingerprint,
                },
                "next_chunk_id": r.store.next_chunk_id,
                "fields": sorted(r.store.fields),
                "kinds": dict(sorted(r.store.kinds.items())),
                "stages": stage_names,
                "config": r._config(),
                "files": {f: {"size": (tmp / f).stat().st_size, "sha256": sha256(tmp / f)} for f in files},
            }
            with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
                json.dump(manifest, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            fsync_dir(tmp)
            fault_point("retriever.save.before_swap")
            old = None
            if dst.exists():
                if not (dst / MANIFEST).is_file() and any(dst.iterdir()):
                    raise FileExistsError(
                        f"{str(dst)!r} exists and is not a saved retriever; refusing to replace it"
                    )
                old = parent / f".{dst.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                os.replace(dst, old)
                fault_point("retriever.save.swapped_out")
            os.replace(tmp, dst)
            fsync_dir(parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def check_manifest(m: Any, mpath: Path) -> None:
    """Checks the manifest's structure and value types, so that a corrupt or hand-edited one is a
    RetrieverFolderError here rather than a KeyError/TypeError (or a wrong result) later."""

    def bad(what: str) -> RetrieverFolderError:
        return RetrieverFolderError(f"{str(mpath)!r} is not a valid manifest: {what}")

    def is_int(v: Any, lo: int = 0, hi: int = 1 << 62) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi

    def is_num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))

    def str_or_none(v: Any) -> bool:
        return v is None or isinstance(v, str)

    if not isinstance(m, dict):
        raise bad(f"a JSON {type(m).__name__}, expected an object")
    files = m["files"]
    if not isinstance(files, dict) or STORE_FILE not in files:
        raise bad(f"'files' must be an object naming {STORE_FILE} and the index files")
    for name, info in files.items():
        parts = Path(name).parts
        if name not in (STORE_FILE, METADATA_FILE, COLUMNS_FILE, BM25_FILE, DENSE_FILE) and not (
            len(parts) >= 2
            and (parts[0].startswith("stage-") or parts[0] == QUERY_ENCODER_DIR)
            and ".." not in parts
            and "\0" not in name
        ):
            raise bad(f"file {name!r} is not one a retriever folder holds")
        if not (isinstance(info, dict) and is_int(info.get("size")) and isinstance(info.get("sha256"), str)):
            raise bad(f"files[{name!r}] must be {{'size': int, 'sha256': str}}")
    for key in ("fields", "stages"):
        v = m.get(key, [])
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise bad(f"{key!r} must be a list of str")
    kinds = m.get("kinds", {})
    if not (isinstance(kinds, dict) and all(is_int(b, 0) and b < 32 for b in kinds.values())):
        raise bad("'kinds' must be a dict of field -> int from 0 to 31")
    if BM25_FILE not in files and DENSE_FILE not in files and not m.get("stages"):
        raise bad(f"it names neither {BM25_FILE} nor {DENSE_FILE} nor a stage")
    enc = m.get("encoder")
    if enc is not None and not (
        isinstance(enc, dict)
        and {"ref", "fingerprint", "dim"} <= set(enc)
        and str_or_none(enc.get("ref"))
        and str_or_none(enc.get("fingerprint"))
        and is_int(enc.get("dim"), 1)
    ):
        raise bad("'encoder' must be null or {'ref': str|null, 'fingerprint': str|null, 'dim': int}")
    if (enc is None) != (DENSE_FILE not in files):
        raise bad(f"{DENSE_FILE} must be present exactly when an encoder is")
    qe = m.get("query_encoder")
    if qe is not None and not (
        isinstance(qe, dict)
        and isinstance(qe.get("fingerprint"), str)
        and str_or_none(qe.get("target_fingerprint"))
        and enc is not None
    ):
        raise bad("'query_encoder' must be null or {'fingerprint': str, 'target_fingerprint': str|null}")
    rr = m.get("reranker")
    if rr is not None and not (isinstance(rr, dict) and "ref" in rr and str_or_none(rr["ref"])):
        raise bad("'reranker' must be null or {'ref': str|null, ...}")
    if not is_int(m.get("next_chunk_id")):
        raise bad(f"next_chunk_id = {m.get('next_chunk_id')!r}; expected an int in [0, 2**62)")
    c = m["config"]
    if not isinstance(c, dict):
        raise bad("'config' must be an object")
    try:
        size = c["chunk_size"]
        if size is not None and not is_int(size, 1):
            raise bad(f"chunk_size = {size!r}; expected null or a positive int")
        overlap = c["chunk_overlap"]
        if not is_num(overlap):
            raise bad(f"chunk_overlap = {overlap!r}; expected a number")
        if size is not None:
            try:
                _check_size(size, overlap)
            except (ValueError, TypeError) as exc:
                raise bad(str(exc)) from exc
        if c["contextualize"] not in (None, "default", "custom"):
            raise bad(f"contextualize = {c['contextualize']!r}; expected null, 'default' or 'custom'")
        if not (is_num(c["rrf_k"]) and c["rrf_k"] >= 0):
            raise bad(f"rrf_k = {c['rrf_k']!r}; expected a finite number >= 0")
        if c.get("fusion", "rrf") not in ("rrf", "convex"):
            raise bad(f"fusion = {c['fusion']!r}; expected 'rrf' or 'convex'")
        fb = c.get("feedback")
        if fb is not None:
            if not isinstance(fb, dict):
                raise bad(f"feedback = {fb!r}; expected null or RM3's parameters")
            try:
                RM3(**fb)
            except (TypeError, ValueError) as exc:
                raise bad(f"feedback = {fb!r}: {exc}") from exc
        w = c["weights"]
        names = (["sparse"] if m.get("version") == 1 else ["bm25"]) + ["dense"] + m.get("stages", [])
        if w is not None and not (
            isinstance(w, dict) and all(k in names and is_num(v) for k, v in w.items())
        ):
            raise bad(f"weights = {w!r}; expected stage names ({names}) -> finite numbers")
        for key, lo in (("candidates", 1), ("rerank_candidates", 1), ("cache_size", 0)):
            if not is_int(c[key], lo, 1 << 31):
                raise bad(f"{key} = {c[key]!r}; expected an int >= {lo}")
    except KeyError as exc:
        raise bad(f"'config' lacks {exc}") from exc


def load_folder(
    cls: type,
    path: str | os.PathLike,
    encoder: Any,
    reranker: Any,
    contextualize: Any,
    stages: Sequence[Any],
    verify: bool,
    chunk_id_policy: Any = None,
) -> Any:
    """Reads a folder written by :func:`save_folder` (see :meth:`Retriever.load`)."""
    folder = Path(path)
    recover_folder(folder)
    if not folder.is_dir():
        raise RetrieverFolderError(f"{str(folder)!r} is not a folder (no saved retriever there)")
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise RetrieverFolderError(f"{str(folder)!r} has no {MANIFEST}; it is not a saved ragfind retriever")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
        fmt, version, files = manifest["format"], manifest["version"], manifest["files"]
        config = manifest["config"]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise RetrieverFolderError(f"{str(mpath)!r} is not a valid manifest: {exc}") from exc
    if fmt != FORMAT_NAME:
        raise RetrieverFolderError(f"{str(folder)!r} holds format {fmt!r}; expected {FORMAT_NAME!r}")
    if isinstance(version, bool) or version not in READS_VERSIONS:
        raise RetrieverFolderError(
            f"{str(folder)!r} has format version {version}; this ragfind reads versions "
            f"{', '.join(map(str, READS_VERSIONS))}"
        )
    check_manifest(manifest, mpath)
    for name, info in files.items():
        f = folder / name
        if not f.is_file():
            raise RetrieverFolderError(f"{str(folder)!r} is missing {name}")
        if f.stat().st_size != info["size"]:
            raise RetrieverFolderError(
                f"{str(f)!r} has {f.stat().st_size} bytes; the manifest says {info['size']} (truncated?)"
            )
        if verify and sha256(f) != info["sha256"]:
            raise RetrieverFolderError(f"{str(f)!r} does not match its checksum (corrupted)")
    enc_info = manifest.get("encoder")
    if enc_info is None:
        enc = None
        if encoder is not None:
            raise ValueError("this retriever was saved without an encoder; pass encoder=None")
    else:
        if encoder is None and not enc_info.get("ref"):
            raise ValueError(
                f"the retriever in {str(folder)!r} was saved with an encoder object of no known path; "
                "pass encoder="
            )
        enc = cls._load_encoder(encoder if encoder is not None else enc_info["ref"])
        if enc.fingerprint != enc_info["fingerprint"]:
            raise ModelMismatchError(
                f"the retriever in {str(folder)!r} was built with embedding model "
                f"{enc_info['fingerprint']!r} "
                f"but the encoder given is {enc.fingerprint!r}; load it with the same model or re-index"
            )
    encoder_ref = (
        None
        if enc_info is None
        else os.fspath(encoder)
        if isinstance(encoder, (str, os.PathLike))
        else enc_info["ref"]
        if encoder is None
        else _path_of(enc)
    )
    if reranker == "saved":
        rr_info = manifest.get("reranker")
        reranker = None if rr_info is None else rr_info["ref"]
    missing = set(manifest.get("stages", [])) - {s.name for s in stages}
    if missing:
        raise ValueError(f"the saved retriever had stages {sorted(missing)}; pass them (loaded) in stages=")
    bm25 = dense = None
    try:
        if BM25_FILE in files:
            bm25 = BM25Stage.load(folder / BM25_FILE)
        if DENSE_FILE in files:
            dense = DenseIndex.load(folder / DENSE_FILE, mmap=False)
    except (ValueError, OSError) as exc:
        raise RetrieverFolderError(f"{str(folder)!r}: an index file could not be read: {exc}") from exc
    if dense is not None:
        dense.check_fingerprint(enc.fingerprint)
        if dense.dim != enc.dim:
            raise ModelMismatchError(
                f"the retriever in {str(folder)!r} holds {dense.dim}-d vectors but the encoder "
                f"gives {enc.dim}-d ones"
            )
    qe_info = manifest.get("query_encoder")
    query_encoder = None
    if qe_info is not None and dense is not None:
        from ragfind.models.static import StaticEncoder

        query_encoder = StaticEncoder(folder / QUERY_ENCODER_DIR)
        if query_encoder.fingerprint != qe_info["fingerprint"]:
            raise RetrieverFolderError(
                f"{str(folder)!r}: the query encoder has fingerprint {query_encoder.fingerprint!r}, "
                f"the manifest says {qe_info['fingerprint']!r}"
            )
    weights = dict(config["weights"] or {})
    if version == 1:
        weights = {_V1_NAMES.get(k, k): v for k, v in weights.items()}
    next_chunk_id = int(manifest["next_chunk_id"])
    columns = None
    if COLUMNS_FILE in manifest["files"]:
        try:
            columns = PassageColumns.load(folder / COLUMNS_FILE, verify=verify)
        except (IndexFileError, OSError) as exc:
            raise RetrieverFolderError(f"{str(folder)!r}: {exc}") from exc
    store = DocumentStore.open(
        folder / STORE_FILE, next_chunk_id, manifest.get("fields", []), RetrieverFolderError, columns
    )
    store.add_kinds(manifest.get("kinds", {}))  # older folders: the metadata index's alone
    try:
        metadata = None
        if METADATA_FILE in manifest["files"]:
            try:
                metadata = MetadataFilters.load(folder / METADATA_FILE, verify=verify)
            except IndexFileError as exc:
                raise RetrieverFolderError(f"{str(folder)!r}: {exc}") from exc
        obj = cls.__new__(cls)
        obj._setup(
            encoder=enc,
            encoder_ref=encoder_ref,
            reranker=cls._load_reranker(reranker),
            reranker_ref=(
                reranker
                if isinstance(reranker, (str, os.PathLike)) or reranker is None
                else str(getattr(reranker, "path", ""))
            ),
            bm25=bm25,
            dense_index=dense,
            dense_kind=dense.kind if dense is not None else "exact",
            stages=stages,
            chunk_size=config["chunk_size"],
            chunk_overlap=config["chunk_overlap"],
            contextualize=contextualize
            or (default_context if config["contextualize"] == "default" else None),
            tokenizer=enc.tokenizer if enc is not None else None,
            rrf_k=config["rrf_k"],
            weights=weights,
            fusion=config.get("fusion", "rrf"),
            feedback=None if config.get("feedback") is None else RM3(**config["feedback"]),
            candidates=config["candidates"],
            rerank_candidates=config["rerank_candidates"],
            cache_size=int(config["cache_size"]),
            threads=2,
            show_progress=False,
            store=store,
            chunk_id_policy=chunk_id_policy,
            metadata=metadata,
            query_encoder=query_encoder,
            fit_queries=config.get("fit_query_encoder") is True,
        )
        chunk_ids = store.chunk_ids()
        for stage in obj.first_stages:
            if _builtin_file(stage) is None:
                continue
            if len(stage) != len(chunk_ids):
                raise RetrieverFolderError(
                    f"{str(folder)!r}: the {stage.name} index holds {len(stage)} chunks, "
                    f"the store {len(chunk_ids)}"
                )
            ids = stage.ids
            if len(ids) and (ids.dtype.kind not in "iu" or not np.array_equal(np.sort(ids), chunk_ids)):
                raise RetrieverFolderError(
                    f"{str(folder)!r}: the {stage.name} index holds other chunk ids than the store"
                )
        if metadata is not None and not np.array_equal(metadata.live_ids(), chunk_ids):
            raise RetrieverFolderError(
                f"{str(folder)!r}: the metadata index holds other chunk ids than the store"
            )
        if columns is not None and not np.array_equal(columns.ids(), chunk_ids):
            raise RetrieverFolderError(
                f"{str(folder)!r}: the passage columns hold other chunk ids than the store"
            )
    except BaseException:
        store.close()
        raise
    return obj


def _path_of(model: Any) -> str | None:
    path = getattr(model, "path", None)
    return os.fspath(path) if path is not None else None
