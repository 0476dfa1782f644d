"""The sharded folder format: ``shards.json`` plus ``shard-0000/`` ... (ordinary Retriever folders).

``shards.json``: ``{"format": "ragfind-sharded", "version": 1, "num_shards": N,
"next_doc_seq": int, "lsn": [per shard], "options": {...}}``; ``lsn[i]`` is the last write
shard ``i``'s folder holds (a restarted shard replays its log after it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ragfind.persist.atomic import fsync_dir

MANIFEST = "shards.json"
FORMAT_NAME = "ragfind-sharded"
FORMAT_VERSION = 1


class ShardedFolderError(ValueError):
    """A sharded folder that is missing, of another format or version, or inconsistent."""


def shard_dir(num: int) -> str:
    return f"shard-{num:04d}"


def is_sharded_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder written by :meth:`ShardedRetriever.save`."""
    m = Path(path) / MANIFEST
    if not m.is_file():
        return False
    try:
        with open(m, encoding="utf-8") as fh:
            return json.load(fh).get("format") == FORMAT_NAME
    except (OSError, ValueError, AttributeError):
        return False


def read_manifest(path: str | os.PathLike) -> dict:
    folder = Path(path)
    m = folder / MANIFEST
    if not folder.is_dir():
        raise ShardedFolderError(f"{str(folder)!r} is not a folder; expected a sharded retriever folder")
    if not m.is_file():
        hint = (
            " (it is a single Retriever folder: use Retriever.load)"
            if (folder / "manifest.json").is_file()
            else ""
        )
        raise ShardedFolderError(
            f"{str(folder)!r} has no {MANIFEST}; expected a sharded retriever folder{hint}"
        )
    try:
        with open(m, encoding="utf-8") as fh:
            data: Any = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ShardedFolderError(f"{str(m)!r} is not readable JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise ShardedFolderError(f"{str(m)!r} is not a {FORMAT_NAME!r} manifest")
    if data.get("version") != FORMAT_VERSION:
        raise ShardedFolderError(
            f"{str(m)!r} has version {data.get('version')!r}; this ragfind reads version {FORMAT_VERSION}"
        )
    n = data.get("num_shards")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ShardedFolderError(f"{str(m)!r}: num_shards = {n!r}; expected a positive int")
    lsn = data.get("lsn")
    if not isinstance(lsn, list) or len(lsn) != n or not all(isinstance(x, int) and x >= 0 for x in lsn):
        raise ShardedFolderError(f"{str(m)!r}: lsn = {lsn!r}; expected {n} ints >= 0")
    seq = data.get("next_doc_seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise ShardedFolderError(f"{str(m)!r}: next_doc_seq = {seq!r}; expected an int >= 0")
    for i in range(n):
        if not (folder / shard_dir(i)).is_dir():
            raise ShardedFolderError(f"{str(folder)!r} lacks {shard_dir(i)}/ (num_shards = {n})")
    if not isinstance(data.get("options", {}), dict):
        raise ShardedFolderError(f"{str(m)!r}: options must be an object")
    return data


def write_manifest(folder: Path, data: dict) -> None:
    tmp = folder / (MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / MANIFEST)


def read_tree(folder: str | os.PathLike) -> dict:
    """``{relative path: bytes}`` of every file under ``folder``: a shard folder sent from one
    node to another through Ray (no file system is shared)."""
    root = Path(folder)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_tree(folder: str | os.PathLike, files: dict) -> None:
    """Writes :func:`read_tree`'s ``files`` under the new folder ``folder``, every file and
    folder entry fsynced (the caller publishes it by a rename or a state file)."""
    root = Path(folder)
    root.mkdir(parents=True)
    dirs = {root}
    for rel, data in files.items():
        dst = root / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise ShardedFolderError(f"refusing a file outside the folder: {rel!r}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(dst, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        dirs.add(dst.parent)
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(d)
