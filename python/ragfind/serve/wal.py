"""The write log: every acknowledged write is one fsync'd line in ``FOLDER/serve-log.jsonl``.

A write is applied in memory, then appended here and fsync'd, and only then answered (a failed
append undoes it in memory, so searches may see a write a few milliseconds before it is
durable, never one that is lost); a checkpoint
re-saves the folder atomically (:meth:`Retriever.save`) and then empties the log. The log lives
inside the folder, so the atomic save that replaces the folder also drops the records it folded
in. If the process dies between the save and the truncation, the log is replayed over a folder
that already holds some of its records; replay therefore uses idempotent semantics (an add
replaces a document of the same id, a delete of a missing id is a no-op), under which every
document ends in the state of the last record that touched it, whatever state replay started
from.

Each line is ``<crc32 hex> <json>``; a torn last line (a crash while writing an unacknowledged
record) is dropped, any other bad line is an error (the log is corrupt).
"""

from __future__ import annotations

import json
import os
import threading
import zlib
from pathlib import Path
from typing import Any

from ragfind.persist.atomic import fsync_dir

__all__ = ["WriteLog", "LOG_FILE", "WriteLogError", "replay"]

LOG_FILE = "serve-log.jsonl"


class WriteLogError(ValueError):
    """The write log is corrupt (a bad record that is not the torn last line)."""


def _encode(record: dict) -> bytes:
    payload = json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x " % zlib.crc32(payload) + payload + b"\n"


def read_records(path: Path) -> tuple:
    """``(records, good_bytes)``: the log's records and the length of its valid prefix."""
    if not path.is_file():
        return [], 0
    data = path.read_bytes()
    records, pos = [], 0
    lines = data.split(b"\n")
    for n, line in enumerate(lines):
        last = n == len(lines) - 1
        if last and not line:
            break
        ok = False
        rec: Any = None
        if len(line) > 9 and line[8:9] == b" ":
            payload = line[9:]
            try:
                ok = int(line[:8], 16) == zlib.crc32(payload)
                rec = json.loads(payload) if ok else None
            except ValueError:
                ok = False
        if not ok or not isinstance(rec, dict) or rec.get("op") not in ("add", "delete"):
            if last:  # torn tail: never acknowledged
                break
            raise WriteLogError(f"{str(path)!r}: record {n + 1} is corrupt; refusing to replay past it")
        records.append(rec)
        pos += len(line) + 1
    return records, pos


def replay(retriever: Any, records: list) -> int:
    """Applies ``records`` idempotently (see the module docstring); returns how many."""
    for rec in records:
        if rec["op"] == "add":
            docs = rec["documents"]
            present = []
            for d in docs:
                try:
                    retriever.get_document(d["id"])
                    present.append(str(d["id"]))
                except KeyError:
                    pass
            if present:
                retriever.delete_documents(present)
            retriever.add_documents(docs)
        else:
            gone = []
            for i in rec["ids"]:
                try:
                    retriever.get_document(i)
                    gone.append(i)
                except KeyError:
                    pass
            if gone:
                retriever.delete_documents(gone)
    return len(records)


class WriteLog:
    """The append-only log of one folder; callers serialise :meth:`append` and :meth:`reset`."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOG_FILE
        self.lock = threading.Lock()
        self._fh: Any = None
        self.size = 0

    def recover(self) -> list:
        """The records to replay; a torn tail is cut off the file."""
        records, good = read_records(self.path)
        if self.path.is_file() and self.path.stat().st_size != good:
            with open(self.path, "rb+") as fh:
                fh.truncate(good)
                fh.flush()
                os.fsync(fh.fileno())
        return records

    def _open(self) -> None:
        if self._fh is None:
            new = not self.path.exists()
            self._fh = open(self.path, "ab")
            if new:
                fsync_dir(self.folder)
            self.size = self._fh.tell()

    def append(self, record: dict) -> None:
        """Writes and fsyncs one record; on failure the file is cut back to where it was."""
        self._open()
        line = _encode(record)
        start = self.size
        try:
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except BaseException:
            self.rewind(start)
            raise
        self.size = start + len(line)

    def rewind(self, size: int) -> None:
        """Cuts the log back to ``size`` bytes (a record whose write was not applied)."""
        self._open()
        self._fh.flush()
        self._fh.truncate(size)
        os.fsync(self._fh.fileno())
        self._fh.seek(size)
        self.size = size

    def reset(self) -> None:
        """After an atomic save: the old log went with the old folder; start a new one."""
        self.close()
        if self.path.exists():  # save kept the folder in place (or it never moved): empty it
            with open(self.path, "rb+") as fh:
                fh.truncate(0)
                os.fsync(fh.fileno())
        self.size = 0

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            finally:
                self._fh = None
