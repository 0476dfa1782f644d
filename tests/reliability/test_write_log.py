"""The one write log (ragfind.persist.wal) of the service and the shards: durable appends, torn
tails dropped and cut off, corruption refused, and the logs the two older modules wrote (the
service's ``<crc32 hex> <json>`` lines, a shard's ``length | crc32 | json`` records) replay."""

from __future__ import annotations

import json
import os
import struct
import zlib

import pytest

from ragfind.persist.wal import WriteLog, WriteLogError, read_records

RECORDS = [
    {"op": "add", "lsn": 1, "documents": [{"id": "owls", "text": "Owls hunt at night. é ✓"}]},
    {"op": "delete", "lsn": 2, "ids": ["owls", "cats"]},
    {"op": "add", "lsn": 3, "documents": [{"id": "bats", "text": "line\nbreak"}]},
]


def old_service_line(record: dict) -> bytes:
    """A record as the service's log module wrote it before the logs were one."""
    payload = json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x " % zlib.crc32(payload) + payload + b"\n"


def old_shard_record(record: dict) -> bytes:
    """A record as a shard's write-ahead log module wrote it before the logs were one."""
    payload = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload


def test_append_recover_reset(tmp_path):
    log = WriteLog(tmp_path / "sub" / "w.log")
    assert log.recover() == [] and log.size == 0
    for r in RECORDS:
        log.append(r)
    assert log.size == (tmp_path / "sub" / "w.log").stat().st_size
    log.close()
    again = WriteLog(tmp_path / "sub" / "w.log")
    assert again.records() == RECORDS == again.recover()
    again.append({"op": "delete", "ids": ["x"]})
    assert len(again.records()) == 4
    again.reset()
    assert again.records() == [] and again.size == 0
    again.append(RECORDS[0])
    assert again.records() == RECORDS[:1]
    again.close()


def test_torn_tail_is_dropped_then_cut_before_appending(tmp_path):
    path = tmp_path / "w.log"
    log = WriteLog(path)
    for r in RECORDS:
        log.append(r)
    log.close()
    whole = path.read_bytes()
    for cut in (1, 5, 8, 9, len(old_shard_record(RECORDS[-1])) - 1):
        path.write_bytes(whole[:-cut])  # a crash mid-append: never acknowledged
        assert WriteLog(path).records() == RECORDS[:2]
    log = WriteLog(path)
    assert log.recover() == RECORDS[:2]
    assert path.stat().st_size == log.size == len(whole) - len(old_shard_record(RECORDS[-1]))
    log.append(RECORDS[2])
    assert log.records() == RECORDS
    log.close()


def test_corruption_before_the_end_is_refused(tmp_path):
    path = tmp_path / "w.log"
    log = WriteLog(path)
    for r in RECORDS:
        log.append(r)
    log.close()
    data = bytearray(path.read_bytes())
    data[len(old_shard_record(RECORDS[0])) + 12] ^= 1  # inside the second record
    path.write_bytes(bytes(data))
    with pytest.raises(WriteLogError, match="record 2 is corrupt"):
        WriteLog(path).recover()
    assert path.read_bytes() == bytes(data)  # nothing cut


def test_a_shard_log_written_before_replays(tmp_path):
    path = tmp_path / "wal.log"
    path.write_bytes(b"".join(old_shard_record(r) for r in RECORDS) + old_shard_record(RECORDS[0])[:7])
    log = WriteLog(path)
    assert log.records() == RECORDS
    assert log.recover() == RECORDS
    log.append({"op": "delete", "lsn": 4, "ids": ["bats"]})
    assert [r["lsn"] for r in log.records()] == [1, 2, 3, 4]
    log.close()


def test_a_service_log_written_before_replays_and_is_rewritten(tmp_path):
    path = tmp_path / "serve-log.jsonl"
    lines = b"".join(old_service_line(r) for r in RECORDS)
    path.write_bytes(lines + b'0badcafe {"op": "add", "docum')  # and a torn last line
    assert read_records(path)[0] == RECORDS and read_records(path)[2]
    log = WriteLog(path)
    assert log.recover() == RECORDS
    assert not read_records(path)[2]  # rewritten in the framed format
    log.append({"op": "delete", "ids": ["owls"]})
    assert log.records() == RECORDS + [{"op": "delete", "ids": ["owls"]}]
    log.close()
    bad = bytearray(lines)
    bad[12] ^= 1  # the first line, not the last: corruption
    path.write_bytes(bytes(bad))
    with pytest.raises(WriteLogError, match="record 1 is corrupt"):
        WriteLog(path).recover()


def test_a_failed_append_leaves_no_record(tmp_path, monkeypatch):
    path = tmp_path / "w.log"
    log = WriteLog(path)
    log.append(RECORDS[0])
    size = log.size

    real_fsync = os.fsync
    failed = []

    def no_space_once(fd):
        if not failed:
            failed.append(fd)
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr("ragfind.persist.wal.os.fsync", no_space_once)
    with pytest.raises(OSError, match="No space"):
        log.append(RECORDS[1])
    monkeypatch.undo()
    assert log.size == size == path.stat().st_size
    log.append(RECORDS[2])
    assert log.records() == [RECORDS[0], RECORDS[2]]
    log.close()
