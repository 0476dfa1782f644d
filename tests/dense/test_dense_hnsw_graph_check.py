"""HNSW graph files with valid checksums but tampered contents are refused before hnswlib reads them.

hnswlib trusts its saved graph (neighbour ids, list lengths, record size, levels), so a file
whose checksums were recomputed after tampering could make a later search or add read or write
out of bounds. ``DenseIndex.load`` parses the graph itself first (``_core.hnsw_check_graph``);
these tests tamper with one field at a time, recompute every checksum, and expect a ValueError.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from ragfind import DenseIndex, _core
from ragfind.dense.files import MAGIC, VERSION
from ragfind.persist.sectioned import write_sectioned

DIM = 8
M = 4
# hnswlib's graph header (HierarchicalNSW::saveIndex): field -> (byte offset, struct format)
HEADER = {
    "max_elements": (8, "<Q"),
    "count": (16, "<Q"),
    "size_per_element": (24, "<Q"),
    "max_level": (48, "<i"),
    "entry_point": (52, "<I"),
    "maxM0": (64, "<Q"),
    "M": (72, "<Q"),
    "mult": (80, "<d"),
}
HEADER_SIZE = 96


def _build(tmp_path, deletes=True):
    rng = np.random.default_rng(7)
    idx = DenseIndex(DIM, kind="hnsw", M=M, ef_construction=16)
    idx.add(rng.standard_normal((400, DIM)).astype(np.float32), ids=[f"d{i}" for i in range(400)])
    if deletes:
        idx.delete([f"d{i}" for i in range(0, 400, 9)])
    path = tmp_path / "g.rfd"
    idx.save(path)
    return path


def _read(path):
    raw = path.read_bytes()
    (hlen,) = struct.unpack_from("<I", raw, 12)
    header = json.loads(raw[16 : 16 + hlen])
    header.pop("header_crc32")
    table = header.pop("sections")
    sections = {}
    for name, s in table.items():
        arr = np.frombuffer(raw[s["offset"] : s["offset"] + s["nbytes"]], dtype=np.dtype(s["dtype"]))
        sections[name] = arr.reshape(s["shape"]).copy()
    order = sorted(table, key=lambda n: table[n]["offset"])
    return header, sections, order


def _tamper(path, graph=None, header=None, labels=None):
    """Rewrites the file with one part changed and every checksum recomputed."""
    h, secs, order = _read(path)
    if graph is not None:
        g = bytearray(secs["hnsw"].tobytes())
        graph(g)
        secs["hnsw"] = np.frombuffer(bytes(g), dtype=np.uint8)
    if header is not None:
        header(h)
    if labels is not None:
        labels(secs["labels"])
    write_sectioned(path, MAGIC, VERSION, h, {n: secs[n] for n in order}, checksum_header=True)


def _field(g, name):
    off, fmt = HEADER[name]
    return struct.unpack_from(fmt, g, off)[0]


def _set(g, name, value):
    off, fmt = HEADER[name]
    struct.pack_into(fmt, g, off, value)


def _record(g, i):
    return HEADER_SIZE + i * _field(g, "size_per_element")


def _upper_levels(g):
    """Python reading of the upper-level lists: [(element, level, byte offset of its list)]."""
    count, max_m = _field(g, "count"), _field(g, "M")
    pos = HEADER_SIZE + count * _field(g, "size_per_element")
    out = []
    for i in range(count):
        (size,) = struct.unpack_from("<I", g, pos)
        pos += 4
        for level in range(1, size // (4 + 4 * max_m) + 1):
            out.append((i, level, pos + (level - 1) * (4 + 4 * max_m)))
        pos += size
    return out


def _link_to_lower_element(g):
    """Gives a level-1 list a single neighbour that only lives on level 0."""
    ups = _upper_levels(g)
    on_upper = {i for i, _, _ in ups}
    low = next(i for i in range(_field(g, "count")) if i not in on_upper)
    _, _, off = next(u for u in ups if u[1] == 1)
    struct.pack_into("<H", g, off, 1)
    struct.pack_into("<I", g, off + 4, low)


CASES = {
    "neighbour id out of range": (
        lambda g: (
            struct.pack_into("<H", g, _record(g, 0), 1),
            struct.pack_into("<I", g, _record(g, 0) + 4, 10**6),
        ),
        "links to element",
    ),
    "list longer than maxM0": (
        lambda g: struct.pack_into("<H", g, _record(g, 3), 2 * M + 1),
        "neighbours at level 0",
    ),
    "entry point out of range": (lambda g: _set(g, "entry_point", _field(g, "count")), "entry point"),
    "top level above the entry point": (
        lambda g: _set(g, "max_level", _field(g, "max_level") + 1),
        "entry point is not on the top level",
    ),
    "record size for another dimension": (
        lambda g: _set(g, "size_per_element", _field(g, "size_per_element") + 4),
        "record layout",
    ),
    "more elements than stored": (
        lambda g: _set(g, "count", _field(g, "count") + 1),
        "HNSW graph is inconsistent",
    ),
    "trailing bytes": (lambda g: g.extend(b"\0\0\0\0"), "trailing bytes"),
    "truncated": (lambda g: g.__delitem__(slice(len(g) - 3, None)), "truncated"),
    "duplicate label": (
        lambda g: g.__setitem__(
            slice(_record(g, 1) + 4 + 8 * M + 4 * DIM, _record(g, 1) + 4 + 8 * M + 4 * DIM + 8),
            g[_record(g, 0) + 4 + 8 * M + 4 * DIM : _record(g, 0) + 4 + 8 * M + 4 * DIM + 8],
        ),
        "stored twice",
    ),
    "unknown deleted flag": (lambda g: g.__setitem__(_record(g, 2) + 2, 7), "deleted flag"),
    "level multiplier": (lambda g: _set(g, "mult", 1e300), "multiplier"),
    "M disagrees with maxM0": (lambda g: _set(g, "maxM0", 3 * M), "M, maxM and maxM0"),
    "upper-level link to an element below that level": (_link_to_lower_element, "below it"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tampered_graph_is_refused(tmp_path, case):
    path = _build(tmp_path)
    mutate, message = CASES[case]
    _tamper(path, graph=mutate)
    with pytest.raises(ValueError, match=message):
        DenseIndex.load(path)


def test_header_dimension_that_does_not_match_the_graph_is_refused(tmp_path):
    # The fuzz finding behind this file: dim 4 -> 8 in the JSON header made the next add
    # write 32-byte vectors into 16-byte slots (tests/reliability/fuzz_regressions/load_dense_hnsw).
    path = _build(tmp_path)
    _tamper(path, header=lambda h: h.update(dim=2 * DIM))
    with pytest.raises(ValueError, match="record layout does not match float32 vectors of dimension 16"):
        DenseIndex.load(path)


def test_header_parameters_must_match_the_graph(tmp_path):
    path = _build(tmp_path)
    _tamper(path, header=lambda h: h.update(M=M + 1))
    with pytest.raises(ValueError, match="M or ef_construction"):
        DenseIndex.load(path)


def test_labels_section_must_name_the_live_elements(tmp_path):
    path = _build(tmp_path)
    h, secs, _ = _read(path)
    deleted_label = 0  # d0 was deleted, its label stays in the graph marked deleted
    assert deleted_label not in set(secs["labels"].tolist())

    def swap(labels):
        labels[0] = deleted_label

    _tamper(path, labels=swap)
    with pytest.raises(ValueError, match="live elements"):
        DenseIndex.load(path)


def test_huge_max_elements_in_the_graph_is_not_allocated(tmp_path):
    path = _build(tmp_path, deletes=False)
    _tamper(
        path,
        graph=lambda g: _set(g, "max_elements", 1 << 40),
        header=lambda h: h.update(max_elements=1 << 40),
    )
    idx = DenseIndex.load(path)
    assert idx._backend.graph.max_elements <= 1024
    idx.add(np.ones((3, DIM), np.float32), ids=["x", "y", "z"])
    assert idx.search(np.ones(DIM, np.float32), k=1)[0][0] in ("x", "y", "z")


def test_check_reports_what_the_graph_holds(tmp_path):
    path = _build(tmp_path)
    _, secs, _ = _read(path)
    g = _core.hnsw_check_graph(secs["hnsw"], DIM)
    assert g["count"] == 400 and g["M"] == M and g["ef_construction"] == 16
    assert int(g["deleted"].sum()) == len(range(0, 400, 9))
    assert sorted(g["labels"][~g["deleted"]].tolist()) == sorted(secs["labels"].tolist())
    with pytest.raises(ValueError, match="dimension 9"):
        _core.hnsw_check_graph(secs["hnsw"], DIM + 1)
    with pytest.raises(ValueError, match="truncated"):
        _core.hnsw_check_graph(np.zeros(10, np.uint8), DIM)


def test_random_tampering_never_crashes(tmp_path):
    """Random words of the graph overwritten (checksums recomputed): refused, or the index works."""
    path = _build(tmp_path)
    original = path.read_bytes()
    rng = np.random.default_rng(2024)
    refused = 0
    for trial in range(150):
        path.write_bytes(original)

        def scribble(g, rng=rng):
            for _ in range(int(rng.integers(1, 4))):
                off = int(rng.integers(0, len(g) - 4))
                value = int(rng.choice([0, 1, 2**31, 2**32 - 1, int(rng.integers(0, 2**32))]))
                struct.pack_into("<I", g, off, value)

        _tamper(path, graph=scribble)
        try:
            idx = DenseIndex.load(path)
        except ValueError:
            refused += 1
            continue
        q = rng.standard_normal(DIM).astype(np.float32)
        idx.search(q, k=5)
        idx.search_batch_padded(np.stack([q, -q]), k=3, threads=2)
        idx.add(rng.standard_normal((5, DIM)).astype(np.float32), ids=[f"n{trial}-{i}" for i in range(5)])
        idx.search(q, k=5)
    assert refused > 0
