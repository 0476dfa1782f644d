"""DenseIndex save/load: round trips (mmap and not), atomic saves, corrupt files."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from ragfind import DenseIndex


def _unit(rng, n, d):
    X = rng.standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.mark.parametrize("kind,dtype", [("exact", "f32"), ("exact", "f16"), ("exact", "i8"), ("hnsw", "f32")])
@pytest.mark.parametrize("metric", ["cosine", "l2"])
@pytest.mark.parametrize("use_mmap", [True, False])
def test_round_trip(tmp_path, kind, dtype, metric, use_mmap):
    rng = np.random.default_rng(0)
    X = _unit(rng, 700, 24)
    idx = DenseIndex(24, metric=metric, dtype=dtype, kind=kind, fingerprint="model@1")
    idx.add(X, ids=[f"doc-{i}" for i in range(700)])
    idx.delete(["doc-3", "doc-9"])
    path = tmp_path / "index.rfd"
    idx.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["index.rfd"]  # no temp files left
    back = DenseIndex.load(path, mmap=use_mmap)
    assert (back.dim, back.metric, back.dtype, back.kind, back.fingerprint) == (
        24,
        metric,
        dtype,
        kind,
        "model@1",
    )
    assert len(back) == 698 and "doc-3" not in back
    Q = X[:20]
    a_ids, a_sc = idx.search_batch(Q, k=5)
    b_ids, b_sc = back.search_batch(Q, k=5)
    np.testing.assert_array_equal(a_ids, b_ids)
    np.testing.assert_allclose(a_sc, b_sc, rtol=1e-6, atol=1e-6)
    s_ids, _ = back.search(X[10], k=1)
    assert s_ids.tolist() == ["doc-10"]
    # a loaded (possibly memory-mapped) index stays writable through copy-on-add
    back.add(X[3], ids=["doc-3"])
    back.delete(["doc-10"])
    assert back.search(X[3], k=1)[0].tolist() == ["doc-3"]
    assert "doc-10" not in back.search(X[10], k=3)[0].tolist()
    # the original file is untouched by writes to the loaded index
    again = DenseIndex.load(path)
    assert len(again) == 698 and "doc-10" in again


def test_int_ids_auto_counter_survives(tmp_path):
    idx = DenseIndex(3, metric="ip")
    idx.add(np.eye(3, dtype=np.float32))
    idx.save(tmp_path / "a")
    back = DenseIndex.load(tmp_path / "a")
    assert back.add(np.ones((1, 3), np.float32)) == [3]
    empty = DenseIndex(5)
    empty.save(tmp_path / "e")
    e = DenseIndex.load(tmp_path / "e")
    assert len(e) == 0 and e.search(np.ones(5, np.float32))[0].shape == (0,)


def test_save_replaces_existing_file_atomically(tmp_path):
    path = tmp_path / "idx"
    a = DenseIndex(4)
    a.add(np.eye(4, dtype=np.float32))
    a.save(path)
    b = DenseIndex(4)
    b.add(np.eye(4, dtype=np.float32)[:2], ids=[7, 8])
    b.save(path)
    assert sorted(DenseIndex.load(path).ids) == [7, 8]
    assert len(list(tmp_path.iterdir())) == 1


@pytest.fixture
def saved(tmp_path):
    rng = np.random.default_rng(1)
    idx = DenseIndex(16, dtype="i8")
    idx.add(_unit(rng, 200, 16))
    path = tmp_path / "idx.rfd"
    idx.save(path)
    return path


def _rewrite(path, fn):
    data = bytearray(path.read_bytes())
    fn(data)
    path.write_bytes(bytes(data))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        DenseIndex.load(tmp_path / "nope")


@pytest.mark.parametrize("use_mmap", [True, False])
def test_corrupt_files_raise_value_error(saved, use_mmap):
    original = saved.read_bytes()
    hlen = struct.unpack_from("<Q", original, 16)[0]
    cases = {
        "empty": lambda b: b.clear(),
        "truncated preamble": lambda b: b.__delitem__(slice(10, None)),
        "truncated header": lambda b: b.__delitem__(slice(40, None)),
        "truncated data": lambda b: b.__delitem__(slice(len(b) - 100, None)),
        "bad magic": lambda b: b.__setitem__(slice(0, 8), b"NOTMAGIC"),
        "future version": lambda b: b.__setitem__(slice(8, 12), struct.pack("<I", 99)),
        "huge header length": lambda b: b.__setitem__(slice(16, 24), struct.pack("<Q", 1 << 40)),
        "header bit flip": lambda b: b.__setitem__(40, b[40] ^ 0x01),
        "data bit flip": lambda b: b.__setitem__(len(b) - 300, b[len(b) - 300] ^ 0x40),
    }
    for name, mutate in cases.items():
        saved.write_bytes(original)
        _rewrite(saved, mutate)
        with pytest.raises(ValueError, match="not a valid ragfind dense index"):
            DenseIndex.load(saved, mmap=use_mmap)
            pytest.fail(name)
    assert hlen > 0


def test_header_with_consistent_crc_but_bad_offsets_is_rejected(saved):
    import json
    import zlib

    raw = saved.read_bytes()
    magic, ver, flags, hlen, _crc, z = struct.unpack_from("<8sIIQII", raw, 0)
    h = json.loads(raw[32 : 32 + hlen])
    h["sections"]["vectors"]["offset"] = 10**12
    hb = json.dumps(h, separators=(",", ":")).encode()
    assert len(hb) <= hlen
    hb += b" " * (hlen - len(hb))  # same length, so the sections stay where they were
    new = struct.pack("<8sIIQII", magic, ver, flags, len(hb), zlib.crc32(hb), z) + hb
    saved.write_bytes(new + raw[32 + hlen :])
    with pytest.raises(ValueError, match="outside the file"):
        DenseIndex.load(saved)


def test_foreign_file(tmp_path):
    p = tmp_path / "foreign.npy"
    np.save(p, np.ones(10))
    with pytest.raises(ValueError, match="wrong magic"):
        DenseIndex.load(p)
    q = tmp_path / "rand"
    q.write_bytes(os.urandom(5000))
    with pytest.raises(ValueError):
        DenseIndex.load(q)


def test_verify_false_skips_data_checksums_but_not_header(saved):
    idx = DenseIndex.load(saved, verify=False)
    assert len(idx) == 200
