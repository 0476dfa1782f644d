"""DenseIndex save/load: round trips (mmap and not), atomic saves, corrupt files."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from ragfind import DenseIndex
from ragfind.errors import IndexFileError

DATA = Path(__file__).parent / "data"
EXPECTED = json.loads((DATA / "expected.json").read_text())


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
    a_ids, a_sc = idx.search_batch_padded(Q, k=5)
    b_ids, b_sc = back.search_batch_padded(Q, k=5)
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
    assert back.add(np.ones((1, 3), np.float32)).tolist() == [3]
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
    from ragfind.dense.files import MAGIC, VERSION

    raw = saved.read_bytes()
    magic, ver, hlen = struct.unpack_from("<8sII", raw, 0)
    assert (magic, ver) == (MAGIC, VERSION)
    h = json.loads(raw[16 : 16 + hlen])
    h["sections"]["vectors"]["offset"] = (len(raw) + 127) // 64 * 64  # past the end
    h["sections"]["vectors"]["crc32"] = 0  # room for the longer offset; bounds come first
    hb = json.dumps(h).encode()
    assert len(hb) <= hlen, (len(hb), hlen)
    hb += b" " * (hlen - len(hb))  # same length, so the sections stay where they were
    zeroed = hb[:18] + b"0" * 8 + hb[26:]
    hb = hb[:18] + f"{zlib.crc32(zeroed):08x}".encode() + hb[26:]
    saved.write_bytes(raw[:16] + hb + raw[16 + hlen :])
    with pytest.raises(ValueError, match="outside the file"):
        DenseIndex.load(saved)


def test_version_1_header_with_consistent_crc_but_bad_offsets_is_rejected(tmp_path):
    raw = (DATA / "v1_exact_i8_l2.rfd").read_bytes()
    magic, ver, flags, hlen, _crc, z = struct.unpack_from("<8sIIQII", raw, 0)
    assert ver == 1
    h = json.loads(raw[32 : 32 + hlen])
    h["sections"]["vectors"]["offset"] = 10**12
    hb = json.dumps(h, separators=(",", ":")).encode()
    assert len(hb) <= hlen
    hb += b" " * (hlen - len(hb))
    path = tmp_path / "v1.rfd"
    path.write_bytes(
        struct.pack("<8sIIQII", magic, ver, flags, len(hb), zlib.crc32(hb), z) + hb + raw[32 + hlen :]
    )
    with pytest.raises(ValueError, match="outside the file"):
        DenseIndex.load(path)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("use_mmap", [True, False])
def test_version_1_files_load_with_the_same_results(name, use_mmap, tmp_path):
    """Files written before dense saved through the sectioned container (tests/dense/data)."""
    want = EXPECTED[name]
    Q = np.random.default_rng(want["queries_seed"]).standard_normal((4, 8)).astype(np.float32)
    old = DenseIndex.load(DATA / name, mmap=use_mmap)
    assert len(old) == want["len"] and old.fingerprint == "fixture@1"
    for q, row in zip(Q, want["results"]):
        ids, scores = old.search(q, k=want["k"])
        assert ids.tolist() == row["ids"]
        # The fixture's scores came from one SIMD level; another sums in another order.
        np.testing.assert_allclose(scores, np.asarray(row["scores"], np.float32), rtol=1e-6, atol=1e-6)
    # Saved again it is a version-2 file with the same results, and stays writable.
    old.save(tmp_path / "v2.rfd")
    assert struct.unpack_from("<I", (tmp_path / "v2.rfd").read_bytes(), 8)[0] == 2
    new = DenseIndex.load(tmp_path / "v2.rfd", mmap=use_mmap)
    for q, row in zip(Q, want["results"]):
        assert new.search(q, k=want["k"])[0].tolist() == row["ids"]
    first = old.ids[0]
    old.delete([first])
    old.add(Q[0], ids=[first])
    assert first in old


def test_version_1_corrupt_files_still_raise(tmp_path):
    raw = (DATA / "v1_hnsw_ip.rfd").read_bytes()
    path = tmp_path / "bad.rfd"
    for pos in (8, 16, 40, len(raw) - 200, len(raw) - 1):
        data = bytearray(raw)
        data[pos] ^= 0x10
        path.write_bytes(bytes(data))
        with pytest.raises(IndexFileError, match="not a valid ragfind dense index"):
            DenseIndex.load(path)
    path.write_bytes(raw[:-50])
    with pytest.raises(IndexFileError):
        DenseIndex.load(path)


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


FUZZ_SEEDS = sorted((Path(__file__).parents[2] / "tools" / "fuzz" / "corpus").glob("load_dense_*/v1-seed-*"))


@pytest.mark.parametrize("seed", FUZZ_SEEDS[::3], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_version_1_fuzz_seeds_still_load(seed, tmp_path):
    """The fuzz seed corpus holds version-1 files (after one mode byte): they load and search."""
    data = seed.read_bytes()
    path = tmp_path / "seed.rfd"
    path.write_bytes(data[1:])
    assert struct.unpack_from("<I", data, 9)[0] == 1
    index = DenseIndex.load(path, mmap=bool(data[0] & 2), verify=not data[0] & 4)
    ids, _ = index.search(np.ones(index.dim, np.float32), k=3)
    assert len(ids) == min(3, len(index))


def test_every_header_byte_flip_is_refused(saved):
    original = saved.read_bytes()
    (hlen,) = struct.unpack_from("<I", original, 12)
    for pos in range(16, 16 + hlen, 7):
        data = bytearray(original)
        data[pos] ^= 0x02
        saved.write_bytes(bytes(data))
        with pytest.raises(IndexFileError, match="not a valid ragfind dense index"):
            DenseIndex.load(saved)
