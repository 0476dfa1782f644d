"""Block-compressed BM25 postings: lists around the block size, the file format (version 2,
mapped in place) and loading a version-1 file (flat postings, encoded into blocks at load).

tests/sparse/data/bm25_v1.idx was written by the last version-1 writer from v1_corpus() with
BM25Index(method="lucene", k1=1.2, b=0.75) and ids d0, d1, ...
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from ragfind import BM25Index, IndexFileError

V1_FILE = Path(__file__).parent / "data" / "bm25_v1.idx"
ALGORITHMS = ("exhaustive", "maxscore", "blockmax", "auto")


def v1_corpus() -> list[str]:
    """300 documents over 40 words: lists from 1 to ~300 postings (past two 128-blocks), tf up to 5."""
    state = 12345
    docs = []
    for i in range(300):
        words = []
        for _ in range(3 + i % 17):
            state = (state * 1103515245 + 12345) % (1 << 31)
            r = state >> 8
            words.append(f"w{(r % 40) * (r % 3 == 0) + (r % 7)}")
        words.append("common")
        if i % 50 == 0:
            words.append(f"rare{i}")
        docs.append(" ".join(words))
    return docs


def assert_same(a: BM25Index, b: BM25Index, queries: list[str]) -> None:
    assert list(a.ids) == list(b.ids)
    for q in queries:
        for algorithm in ALGORITHMS:
            for k in (1, 10, 1000):
                ia, sa = a.search(q, k=k, algorithm=algorithm)
                ib, sb = b.search(q, k=k, algorithm=algorithm)
                assert list(ia) == list(ib), (q, algorithm, k)
                np.testing.assert_array_equal(sa, sb)
        np.testing.assert_array_equal(a.score(q), b.score(q))
        assert a.explain(q, a.ids[7]) == b.explain(q, b.ids[7])


QUERIES = ["common", "w0 w3", "w1 w2 w5 common", "rare0 rare250 w6", "w12 w30 w39", "zzz"]


def sections(data: bytes) -> dict[int, tuple[int, int, int]]:
    """Section id -> (offset, bytes, count) from the section table."""
    (count,) = struct.unpack_from("<I", data, 24)
    out = {}
    for i in range(count):
        sid, _, off, nbytes, n, _ = struct.unpack_from("<IIQQQQ", data, 64 + 40 * i)
        out[sid] = (off, nbytes, n)
    return out


def with_crcs(data: bytearray) -> bytes:
    """data with its payload, table and header checksums recomputed."""
    header_bytes, _, count = struct.unpack_from("<IQI", data, 12)
    struct.pack_into("<I", data, 28, zlib.crc32(bytes(data[header_bytes:])))
    struct.pack_into("<I", data, 32, zlib.crc32(bytes(data[64 : 64 + 40 * count])))
    struct.pack_into("<I", data, 36, zlib.crc32(bytes(data[40:64]), zlib.crc32(bytes(data[:36]))))
    return bytes(data)


@pytest.mark.parametrize("mmap", [True, False])
def test_version_1_file_loads_and_scores_as_a_fresh_build(tmp_path, mmap):
    assert struct.unpack_from("<I", V1_FILE.read_bytes(), 8) == (1,)
    old = BM25Index.load(V1_FILE, mmap=mmap)
    fresh = BM25Index(method="lucene", k1=1.2, b=0.75)
    docs = v1_corpus()
    fresh.add(docs, ids=[f"d{i}" for i in range(len(docs))])
    assert_same(old, fresh, QUERIES)
    # Saved again, it is a version-2 file with the same results.
    path = tmp_path / "v2.idx"
    old.save(path)
    assert struct.unpack_from("<I", path.read_bytes(), 8) == (2,)
    assert_same(BM25Index.load(path, mmap=mmap), fresh, QUERIES)
    # It keeps working after writes.
    old.add(["common w1 new"], ids=["new"])
    old.delete(["d3", "d200"])
    fresh.add(["common w1 new"], ids=["new"])
    fresh.delete(["d3", "d200"])
    assert_same(old, fresh, QUERIES)


@pytest.mark.parametrize("length", [1, 2, 127, 128, 129, 255, 256, 257, 383, 384, 385])
def test_lists_around_the_block_size(tmp_path, length):
    # Term "term" in `length` documents spread over 1000 (a few consecutive runs: gaps of width 0),
    # with tfs 1..4; every algorithm and the loaded file agree with the exhaustive scan and with
    # term frequencies read back through explain.
    n = 1000
    rng = np.random.default_rng(length)
    where = np.sort(rng.choice(n, size=length, replace=False))
    if length > 10:
        where[:10] = np.arange(10)
    docs = [["filler", f"group{i % 7}"] for i in range(n)]
    tf = {}
    for j, d in enumerate(where):
        tf[int(d)] = 1 + (j * 7 + int(d)) % 4 if j % 3 == 0 else 1
        docs[int(d)] += ["term"] * tf[int(d)]
    idx = BM25Index()
    idx.add([" ".join(d) for d in docs])
    path = tmp_path / "i.idx"
    idx.save(path)
    loaded = BM25Index.load(path, mmap=True)
    for index in (idx, loaded):
        ref_ids, ref_scores = index.search("term group3", k=n, algorithm="exhaustive")
        for algorithm in ALGORITHMS[1:]:
            ids, scores = index.search("term group3", k=n, algorithm=algorithm)
            np.testing.assert_array_equal(scores, ref_scores)
            assert sorted(ids) == sorted(ref_ids)
        assert set(index.search("term", k=n)[0]) == set(int(d) for d in where)
        for d in [int(where[0]), int(where[-1]), int(where[length // 2])]:
            (term,) = index.explain("term", d).contributions
            assert term.detail["tf"] == tf[d]
    assert_same(idx, loaded, ["term", "term group1", "filler term"])


def test_corrupt_bit_widths_and_block_offsets_are_refused(tmp_path):
    idx = BM25Index()
    idx.add(v1_corpus())
    path = tmp_path / "i.idx"
    idx.save(path)
    data = path.read_bytes()
    sec = sections(data)
    bits_off, bits_len, _ = sec[16]
    words_off, _, nwords = sec[15]
    last_off, _, _ = sec[14]
    cases = {
        "width": (bits_off, struct.pack("<B", 33)),
        "width of the tfs": (bits_off + 1, struct.pack("<B", 40)),
        "block offset": (words_off + 4, struct.pack("<I", 1 << 31)),
        "last doc": (last_off, struct.pack("<I", 299)),
    }
    for name, (at, patch) in cases.items():
        bad = bytearray(data)
        bad[at : at + len(patch)] = patch
        (tmp_path / "bad").write_bytes(with_crcs(bad))
        for mmap in (True, False):
            with pytest.raises(IndexFileError):
                BM25Index.load(tmp_path / "bad", mmap=mmap)
            assert name  # each corruption is refused, never read out of bounds
    # Every single-width change of a block either stays consistent or is refused.
    for b in range(min(bits_len, 64)):
        for width in (0, 1, 31, 32):
            bad = bytearray(data)
            bad[bits_off + b] = width
            (tmp_path / "bad").write_bytes(with_crcs(bad))
            try:
                BM25Index.load(tmp_path / "bad").search("common w1", k=5)
            except IndexFileError:
                pass
    assert nwords > 0
