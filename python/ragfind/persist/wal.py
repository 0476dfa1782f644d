"""The write log: an append-only file of records, each fsync'd before the write it records is
acknowledged. ``ragfind serve`` keeps one in its folder and each shard of a sharded retriever
one in its home; what a record means and how it is replayed is theirs.

Records follow each other as ``length (u32 LE) | crc32 of the payload (u32 LE) | payload``, the
payload a JSON object in UTF-8, optionally followed by a NUL byte and binary data (JSON text
never holds a raw NUL) that a reader gets back as the record's ``"_blob"`` (bytes). A torn last
record (a crash mid-append: that write was never acknowledged) is dropped; a record that fails
its check before the end is an error (:class:`WriteLogError`): replaying past it would lose
acknowledged writes.

The service's log used to be lines of ``<crc32 hex> <json>``; such a file is read with the
same rules (byte 8 tells them apart: a space there, the payload's ``{`` here), and
:meth:`WriteLog.recover` rewrites it in this format before anything is appended.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import Any

from ragfind.persist.atomic import fsync_dir

__all__ = ["WriteLog", "WriteLogError", "read_records"]

_HEAD = struct.Struct("<II")


class WriteLogError(ValueError):
    """The write log is corrupt (a bad record that is not the torn last one)."""


def _encode(record: dict, blob: bytes = b"") -> bytes:
    payload = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if blob:
        payload += b"\0" + bytes(blob)
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _corrupt(path: Path, n: int) -> WriteLogError:
    return WriteLogError(f"{str(path)!r}: record {n} is corrupt; refusing to replay past it")


def _object(payload: bytes) -> dict | None:
    text, nul, blob = bytes(payload).partition(b"\0")
    try:
        rec = json.loads(text)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    if nul:
        rec["_blob"] = blob
    return rec


def _read_framed(path: Path, data: bytes) -> tuple:
    records: list = []
    pos = 0
    while pos < len(data):
        end = pos + _HEAD.size
        if end > len(data):
            break  # torn header
        n, crc = _HEAD.unpack_from(data, pos)
        body = data[end : end + n]
        if len(body) < n:
            break  # torn body
        rec = _object(body) if zlib.crc32(body) == crc else None
        if rec is None:
            if end + n == len(data):
                break  # the last append was torn
            raise _corrupt(path, len(records) + 1)
        records.append(rec)
        pos = end + n
    return records, pos


def _read_lines(path: Path, data: bytes) -> tuple:
    records: list = []
    pos = 0
    lines = data.split(b"\n")
    for n, line in enumerate(lines):
        last = n == len(lines) - 1
        if last and not line:
            break
        rec = None
        if len(line) > 9 and line[8:9] == b" ":
            try:
                if int(line[:8], 16) == zlib.crc32(line[9:]):
                    rec = _object(line[9:])
            except ValueError:
                pass
        if rec is None:
            if last:  # torn tail: never acknowledged
                break
            raise _corrupt(path, n + 1)
        records.append(rec)
        pos += len(line) + 1
    return records, pos


def read_records(path: str | os.PathLike) -> tuple:
    """``(records, valid bytes, legacy)``: the log's records in order, the length of its valid
    prefix, and whether it is in the older line format. No file: ``([], 0, False)``.

    Raises:
        WriteLogError: a damaged record before the end.
    """
    path = Path(path)
    if not path.is_file():
        return [], 0, False
    data = path.read_bytes()
    if len(data) > 8 and data[8:9] == b" ":
        return (*_read_lines(path, data), True)
    return (*_read_framed(path, data), False)


class WriteLog:
    """The append-only log at ``path`` (created, with its folder entry fsync'd, on the first
    append). ``size`` is its length in bytes."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fh: Any = None
        self.size = 0

    def records(self) -> list:
        """The records in order, the file untouched (a reader beside the one writer)."""
        return read_records(self.path)[0]

    def recover(self) -> list:
        """The records to replay, with the file made ready to append to: a torn tail is cut
        off, a log in the older line format rewritten in this one (atomically)."""
        records, good, legacy = read_records(self.path)
        with self._lock:
            self._close()
            if legacy:
                tmp = self.path.with_name(self.path.name + ".tmp")
                with open(tmp, "wb") as fh:
                    fh.write(b"".join(_encode(r) for r in records))
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
                fsync_dir(self.path.parent)
            elif self.path.is_file() and self.path.stat().st_size != good:
                with open(self.path, "rb+") as fh:
                    fh.truncate(good)
                    fh.flush()
                    os.fsync(fh.fileno())
            self.size = self.path.stat().st_size if self.path.is_file() else 0
        return records

    def _open(self) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            self._fh = open(self.path, "ab")
            if new:
                fsync_dir(self.path.parent)
            self.size = self._fh.tell()

    def append(self, record: dict, blob: bytes = b"") -> None:
        """Writes and fsyncs one record (with ``blob``, binary data read back as the record's
        ``"_blob"``); on failure the file is cut back to where it was."""
        blob = _encode(record, blob)
        with self._lock:
            self._open()
            start = self.size
            try:
                self._fh.write(blob)
                self._fh.flush()
                os.fsync(self._fh.fileno())
            except BaseException:
                self._cut(start)  # leave no torn record behind an error we report
                raise
            self.size = start + len(blob)

    def rewind(self, size: int) -> None:
        """Cuts the log back to its first ``size`` bytes (a record boundary), durably: the
        records after it were never acknowledged, and readers following the log start over."""
        with self._lock:
            self._open()
            if not 0 <= size <= self.size:
                raise ValueError(f"size: expected 0..{self.size}, got {size}")
            self._cut(size)

    def _cut(self, size: int) -> None:
        self._fh.flush()
        self._fh.truncate(size)
        os.fsync(self._fh.fileno())
        self._fh.seek(size)
        self.size = size

    def reset(self) -> None:
        """Empties the log durably (after a save that holds every record)."""
        with self._lock:
            self._close()
            if self.path.exists():
                with open(self.path, "rb+") as fh:
                    fh.truncate(0)
                    os.fsync(fh.fileno())
            self.size = 0

    def _close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            finally:
                self._fh = None

    def close(self) -> None:
        """Closes the file (the log stays as it is)."""
        with self._lock:
            self._close()
