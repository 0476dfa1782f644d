"""BM25Index.save / load: round trips, atomic saves, and corrupt, truncated or foreign files."""

from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest

from ragfind import Analyzer, BM25Index, IndexFileError

DOCS = [
    "The XJ-2000 pump ships in May",
    "Request failed with E_ACCESS_DENIED",
    "Call getUserById to fetch the user record",
    "Pumps and valves for industrial use",
    "",
    "Upgrade to v2.3.1 for the pump fix",
]
QUERIES = ["pump", "XJ-2000", "user record", "access denied valves", "nothing matches zzz"]


def same_results(a: BM25Index, b: BM25Index) -> None:
    assert len(a) == len(b)
    assert list(a.ids) == list(b.ids)
    for q in QUERIES:
        ia, sa = a.search(q, k=10)
        ib, sb = b.search(q, k=10)
        assert list(ia) == list(ib)
        np.testing.assert_array_equal(sa, sb)
        np.testing.assert_array_equal(a.score(q), b.score(q))


@pytest.mark.parametrize("name", ["default", "cjk"])
def test_index_saved_before_symbol_letters_loads_without_them(tmp_path, name):
    # An index written before the option existed has no "symbol_letters" in its settings: its
    # documents were analyzed without one-letter terms, so its queries must be too.
    docs = ["T cells and vitamin D", "vitamin levels in cells", "hepatitis B cells"]
    old = Analyzer.from_config({**Analyzer.named(name).config(), "symbol_letters": False})
    idx = BM25Index(analyzer=old)
    idx.add(docs)
    config = dict(old.config())
    del config["symbol_letters"]
    path = tmp_path / "old.bm25"
    idx._core.save(os.fspath(path), json.dumps({"analyzer": config}))
    loaded = BM25Index.load(path)
    assert loaded.analyzer.config()["symbol_letters"] is False
    assert loaded.analyzer.config()["name"] == name
    assert loaded.analyzer.analyze("vitamin D") == ["vitamin"]
    for q in ["vitamin D", "T cells", "hepatitis B"]:
        a, b = idx.search(q, k=3), loaded.search(q, k=3)
        assert list(a[0]) == list(b[0])
        np.testing.assert_array_equal(a[1], b[1])
    # Saved again, it keeps its settings; a new default index keeps the new ones.
    loaded.save(tmp_path / "again.bm25")
    assert BM25Index.load(tmp_path / "again.bm25").analyzer.analyze("vitamin D") == ["vitamin"]
    new = BM25Index(analyzer=name)
    new.add(docs)
    new.save(tmp_path / "new.bm25")
    reloaded = BM25Index.load(tmp_path / "new.bm25").analyzer
    assert reloaded.name == name and reloaded.analyze("vitamin D") == ["vitamin", "d"]


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("ids", [None, ["a", "b", "c", "d", "e", "f"], [10, -5, 7, 3, 99, 1 << 40]])
@pytest.mark.parametrize("method", ["lucene", "bm25l"])
def test_round_trip(tmp_path, mmap, ids, method):
    idx = BM25Index(method=method, k1=0.9, b=0.4)
    idx.add(DOCS[:3], ids=None if ids is None else ids[:3])
    idx.add(DOCS[3:], ids=None if ids is None else ids[3:])  # two segments merged on save
    path = tmp_path / "index.bm25"
    idx.save(path)
    loaded = BM25Index.load(path, mmap=mmap)
    assert (loaded.method, loaded.k1, loaded.b, loaded.delta) == (method, 0.9, 0.4, idx.delta)
    assert loaded.analyzer.config() == idx.analyzer.config()
    same_results(idx, loaded)
    ex_a, ex_b = idx.explain("pump fix", idx.ids[5]), loaded.explain("pump fix", loaded.ids[5])
    assert ex_a == ex_b
    # The loaded index keeps working: add, delete, save again.
    more = ["another pump document"]
    new_id = None if ids is None else [("g" if isinstance(ids[0], str) else 12345)]
    for target in (idx, loaded):
        target.add(more, ids=new_id)
        target.delete([target.ids[0]])
    same_results(idx, loaded)
    loaded.save(path)
    same_results(idx, BM25Index.load(path, mmap=mmap))


def test_empty_index_round_trip(tmp_path):
    path = tmp_path / "empty.bm25"
    BM25Index().save(path)
    loaded = BM25Index.load(path)
    assert len(loaded) == 0 and len(loaded.search("x", k=3)[0]) == 0
    loaded.add(["now it has text"])
    assert list(loaded.search("text", k=3)[0]) == [0]


def test_custom_analyzer_settings_are_kept(tmp_path):
    analyzer = Analyzer(lowercase=False, stopwords=["pump"], stemmer="french", split_identifiers=False)
    idx = BM25Index(analyzer=analyzer)
    idx.add(DOCS)
    idx.save(tmp_path / "i")
    loaded = BM25Index.load(tmp_path / "i")
    assert loaded.analyzer.config() == analyzer.config()
    same_results(idx, loaded)


def test_custom_tokenizer_must_be_passed_again(tmp_path):
    analyzer = Analyzer(tokenizer=str.split, stemmer=None)
    idx = BM25Index(analyzer=analyzer)
    idx.add(DOCS)
    idx.save(tmp_path / "i")
    with pytest.raises(ValueError, match="custom tokenizer"):
        BM25Index.load(tmp_path / "i")
    same_results(idx, BM25Index.load(tmp_path / "i", analyzer=analyzer))


@pytest.fixture
def saved(tmp_path):
    idx = BM25Index()
    idx.add(DOCS, ids=[f"doc{i}" for i in range(len(DOCS))])
    path = tmp_path / "index.bm25"
    idx.save(path)
    return path, path.read_bytes()


def test_bit_flips_are_detected(saved, tmp_path):
    path, data = saved
    bad = tmp_path / "bad.bm25"
    rng = np.random.default_rng(0)
    offsets = sorted(set(range(0, 512)) | set(rng.integers(0, len(data), 400).tolist()))
    for off in offsets:
        corrupt = bytearray(data)
        corrupt[off] ^= 1 << int(rng.integers(0, 8))
        bad.write_bytes(bytes(corrupt))
        for mmap in (True, False):
            with pytest.raises(IndexFileError):
                BM25Index.load(bad, mmap=mmap)


def test_truncation_is_detected(saved, tmp_path):
    path, data = saved
    bad = tmp_path / "short.bm25"
    for n in sorted(set(range(0, 200)) | set(range(0, len(data), 37)) | {len(data) - 1}):
        bad.write_bytes(data[:n])
        with pytest.raises(IndexFileError, match="not a valid|truncated|shorter"):
            BM25Index.load(bad)
    bad.write_bytes(data + b"\0" * 8)
    with pytest.raises(IndexFileError, match="trailing"):
        BM25Index.load(bad)


def test_foreign_and_missing_files(tmp_path):
    (tmp_path / "text.txt").write_text("hello, I am not an index\n" * 10)
    (tmp_path / "zeros").write_bytes(b"\0" * 4096)
    (tmp_path / "npy").write_bytes(b"\x93NUMPY" + b"\1" * 200)
    for name in ("text.txt", "zeros", "npy"):
        with pytest.raises(IndexFileError, match="magic"):
            BM25Index.load(tmp_path / name)
    with pytest.raises(IndexFileError, match="cannot open"):
        BM25Index.load(tmp_path / "missing")
    with pytest.raises(IndexFileError, match="regular file"):
        BM25Index.load(tmp_path)
    assert issubclass(IndexFileError, ValueError)


def test_future_version_is_refused(saved, tmp_path):
    _, data = saved
    head = bytearray(data[:64])
    struct.pack_into("<I", head, 8, 99)  # version
    crc = zlib.crc32(bytes(head[40:64]), zlib.crc32(bytes(head[:36])))
    struct.pack_into("<I", head, 36, crc)
    (tmp_path / "v99").write_bytes(bytes(head) + data[64:])
    with pytest.raises(IndexFileError, match="version 99"):
        BM25Index.load(tmp_path / "v99")


def test_checksums_are_crc32(saved):
    # The format is documented as CRC-32 (zlib's polynomial): the payload CRC is verifiable
    # with zlib alone.
    _, data = saved
    header_bytes, file_size, _, payload_crc = struct.unpack_from("<IQII", data, 12)
    assert file_size == len(data)
    assert zlib.crc32(data[header_bytes:]) == payload_crc


def test_save_is_atomic(saved, tmp_path):
    path, data = saved
    idx = BM25Index()
    idx.add(["a different index"])
    # A save that cannot complete (the target is a directory) raises and leaves no temp file.
    target_dir = tmp_path / "a_directory"
    target_dir.mkdir()
    with pytest.raises(OSError):
        idx.save(target_dir)
    assert os.listdir(target_dir) == []
    # Replacing an existing file: the old content stays readable until the rename.
    idx.save(path)
    assert path.read_bytes() != data
    assert list(BM25Index.load(path).search("different", k=1)[0]) == [0]
    assert sorted(os.listdir(tmp_path)) == ["a_directory", "index.bm25"]
    with pytest.raises(OSError):
        idx.save(tmp_path / "no" / "such" / "folder" / "x")


def test_mmap_index_outlives_file_replacement(saved, tmp_path):
    path, _ = saved
    loaded = BM25Index.load(path, mmap=True)
    before = loaded.search("pump", k=3)
    other = BM25Index()
    other.add(["unrelated"])
    other.save(path)  # rename over the mapped file: the mapping keeps the old inode
    after = loaded.search("pump", k=3)
    assert list(before[0]) == list(after[0])
