"""A shard's write-ahead log: the adds and deletes acknowledged since its last saved folder.

An append-only file of records, each ``length (u32 LE) | crc32 (u32 LE) | JSON``; every append
is fsynced before the write it records is acknowledged. Replay stops at a torn last record (a
crash mid-append: that write was never acknowledged); a bad checksum before the end is an
error (the log is corrupt, and replaying past it would lose acknowledged writes). Each record
carries the shard's log sequence number (lsn), so a record already in the saved folder is
skipped, and a log is truncated once a save that holds all of it is published.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ragfind.persist.atomic import fsync_dir

_HEAD = struct.Struct("<II")


class WALCorruptError(ValueError):
    """The write-ahead log has a damaged record before its end."""


def encode_array(a: np.ndarray | None) -> dict | None:
    if a is None:
        return None
    a = np.ascontiguousarray(a, dtype="<f4")
    return {"shape": list(a.shape), "f4": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(d: dict | None) -> np.ndarray | None:
    if d is None:
        return None
    return np.frombuffer(base64.b64decode(d["f4"]), dtype="<f4").reshape(d["shape"]).copy()


class WriteAheadLog:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            with open(self.path, "ab") as fh:
                os.fsync(fh.fileno())
            fsync_dir(self.path.parent)

    def append(self, record: dict) -> None:
        """Appends a record durably (fsync) before returning."""
        payload = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        blob = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        with self._lock, open(self.path, "ab") as fh:
            start = fh.tell()
            try:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
            except BaseException:
                fh.truncate(start)  # leave no torn record behind an error we report
                raise

    def records(self) -> Iterator[dict]:
        """The records in order; a torn last record is dropped (never acknowledged)."""
        data = self.path.read_bytes() if self.path.exists() else b""
        pos = 0
        while pos < len(data):
            if pos + _HEAD.size > len(data):
                return
            n, crc = _HEAD.unpack_from(data, pos)
            body = data[pos + _HEAD.size : pos + _HEAD.size + n]
            if len(body) < n:
                return
            if zlib.crc32(body) != crc:
                if pos + _HEAD.size + n == len(data):
                    return  # the last append was torn
                raise WALCorruptError(f"{self.path}: record at byte {pos} fails its checksum")
            yield json.loads(body.decode("utf-8"))
            pos += _HEAD.size + n

    def truncate(self) -> None:
        """Empties the log (after a save that holds every record was published)."""
        with self._lock:
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "wb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
