"""DenseIndex files: version 2 is ragfind's sectioned container (``persist/sectioned.py``);
version 1, the dense index's own container before it, is still read.

Both hold the same header fields and sections; only the container differs, so a load reads
either into a header dict and a ``read(name, dtype, shape)`` of checked sections, and builds
the index from those. Sections: the backend's (``vectors``, ``scales``, ``sqnorms`` for exact;
``hnsw``, ``labels`` for HNSW; ``centroids``, ``list_offsets``, ``vectors``, ``scales``,
``sqnorms``, ``exact``, ``id_order`` for IVF, plus ``pq_codewords``, ``pq_codes`` (dtype "pq")
or ``rabitq_rotation``, ``rabitq_bits``, ``rabitq_norm``, ``rabitq_ipq``, ``rabitq_cdot`` (dtype
"rabitq"; files without ``rabitq_cdot`` are refused with a message to rebuild)),
then ``ids`` (int64) or ``ids_utf8`` + ``ids_offsets`` (str ids), in the order the backend's
rows are saved.
"""

from __future__ import annotations

import json
import mmap as _mmap
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ragfind.dense._common import CODED_DTYPES, ENCODINGS, DenseConfig
from ragfind.dense.exact import ExactBackend
from ragfind.dense.hnsw import HnswBackend
from ragfind.dense.ivf import IvfBackend
from ragfind.errors import IndexFileError
from ragfind.persist.sectioned import SectionedFile, write_sectioned

MAGIC = b"RFDENSE\x00"
VERSION = 2
_FORMAT = "ragfind.DenseIndex"
_METRICS = ("cosine", "ip", "l2")
_KINDS = ("exact", "hnsw", "ivf")

# Version 1: 8-byte magic, u32 version, u32 flags (0), u64 header length, u32 CRC-32 of the
# header, u32 zero; the JSON header; then 64-byte aligned sections, each listed in the header
# with offset, byte length, dtype, shape and CRC-32.
_V1 = 1
_V1_PREAMBLE = struct.Struct("<8sIIQII")
_V1_ALIGN = 64
_V1_MAX_HEADER = 1 << 26
# Section dtypes a version-1 file can hold (np.dtype() parses arbitrary strings: a corrupt file
# could make it raise SyntaxError or allocate huge sub-array types).
_V1_SECTION_DTYPES = frozenset({"<f4", "<f2", "|i1", "<i8", "|u1"})


def save_index(idx: Any, path: str | os.PathLike) -> None:
    """Writes ``idx`` (under its write lock) to ``path`` atomically."""
    path = Path(path)
    b = idx._backend
    sections, ids_in_order, extra = b.sections()
    sections = list(sections)
    if b.id_kind == "str":
        enc = [s.encode("utf-8") for s in ids_in_order]
        offsets = np.zeros(len(enc) + 1, np.int64)
        np.cumsum([len(e) for e in enc], out=offsets[1:])
        sections.append(("ids_utf8", np.frombuffer(b"".join(enc), dtype=np.uint8)))
        sections.append(("ids_offsets", offsets))
    else:
        sections.append(("ids", np.asarray(ids_in_order, dtype=np.int64)))
    header: dict = {
        "format": _FORMAT,
        "dim": idx.dim,
        "metric": idx.metric,
        "dtype": idx.dtype,
        "kind": idx.kind,
        "count": len(ids_in_order),
        "id_kind": b.id_kind,
        "next_auto_id": idx._next_auto_id,
        "fingerprint": idx.fingerprint,
        "M": idx._M,
        "ef_construction": idx._ef_construction,
        "ef": idx.ef,
        **extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_sectioned(
        path, MAGIC, VERSION, header, dict(sections), checksum_header=True, fault_prefix="dense.save"
    )


def load_index(cls: Any, path: str | os.PathLike, mmap: bool, verify: bool) -> Any:
    """The DenseIndex saved at ``path`` (either version)."""
    path = Path(path)
    where = str(path)

    def bad(msg: str) -> IndexFileError:
        return IndexFileError(f"{where} is not a valid ragfind dense index: {msg}")

    with open(path, "rb") as f:
        head = f.read(16)
    if head[:8] != MAGIC:
        raise bad(f"wrong magic {head[:8]!r}")
    if len(head) < 16:
        raise bad(f"file is {len(head)} bytes, shorter than the 16-byte preamble")
    (version,) = struct.unpack("<I", head[8:12])
    try:
        if version == VERSION:
            header, read = _open_v2(path, mmap, verify, where)
        elif version == _V1:
            header, read = _open_v1(path, mmap, verify, bad)
        else:
            raise bad(f"format version {version}, this ragfind reads versions {_V1} and {VERSION}")
        return _build(cls, header, read, bad)
    except IndexFileError as e:
        msg = str(e)
        if msg.startswith(f"{where} is not a valid ragfind dense index"):
            raise
        raise bad(msg[len(where) + 2 :] if msg.startswith(f"{where}: ") else msg) from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, struct.error, OverflowError) as e:
        raise bad(f"{type(e).__name__}: {e}") from None


def _open_v2(path: Path, mmap: bool, verify: bool, where: str) -> tuple[dict, Any]:
    f = SectionedFile(path, MAGIC, VERSION, "dense index")
    if "header_crc32" not in f.header:  # SectionedFile checks it when its key is intact
        raise IndexFileError(f"{where}: the header has no checksum (corrupt file)")

    def read(name: str, dtype: Any, shape: tuple | None, always_verify: bool = False) -> np.ndarray:
        if shape is None:
            shape = f.shape_of(name, 1)
        return f.array(name, dtype, shape, mmap=mmap, verify=verify or always_verify)

    return f.header, read


def _open_v1(path: Path, mmap: bool, verify: bool, bad: Any) -> tuple[dict, Any]:
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        buf: Any = _mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_READ) if mmap and size else fh.read()
    if size < _V1_PREAMBLE.size:
        raise bad(f"file is {size} bytes, shorter than the {_V1_PREAMBLE.size}-byte preamble")
    _magic, _version, _flags, hlen, hcrc, _ = _V1_PREAMBLE.unpack(bytes(buf[: _V1_PREAMBLE.size]))
    if hlen > _V1_MAX_HEADER or _V1_PREAMBLE.size + hlen > size:
        raise bad(f"header length {hlen} does not fit in the {size}-byte file (truncated?)")
    hbytes = bytes(buf[_V1_PREAMBLE.size : _V1_PREAMBLE.size + hlen])
    if zlib.crc32(hbytes) != hcrc:
        raise bad("header checksum mismatch")
    h = json.loads(hbytes.decode("utf-8"))
    if not isinstance(h, dict):
        raise bad("header does not describe a DenseIndex")
    secs: dict[str, np.ndarray] = {}
    for name, s in h["sections"].items():
        off, nbytes, shape = s["offset"], s["nbytes"], tuple(s["shape"])
        if s["dtype"] not in _V1_SECTION_DTYPES:  # never hand a file's string to np.dtype()
            raise bad(f"section {name!r} has an unexpected dtype {s['dtype']!r}")
        dt = np.dtype(s["dtype"])
        if not all(isinstance(v, int) and v >= 0 for v in (off, nbytes, *shape)):
            raise bad(f"section {name!r} has an invalid description")
        if off % _V1_ALIGN or off < _V1_PREAMBLE.size + hlen or off + nbytes > size:
            raise bad(f"section {name!r} lies outside the file (truncated?)")
        if int(np.prod(shape, dtype=np.int64)) * dt.itemsize != nbytes:
            raise bad(f"section {name!r} size does not match its shape")
        view = memoryview(buf)[off : off + nbytes]
        # The HNSW graph is always checked: hnswlib walks its neighbour ids without bounds
        # checks, so unverified graph bytes could crash the process (verify=False only skips
        # the vector sections, whose bad values cannot).
        if (verify or name == "hnsw") and zlib.crc32(view) != s["crc32"]:
            raise bad(f"section {name!r} checksum mismatch (corrupt file)")
        secs[name] = np.frombuffer(view, dtype=dt).reshape(shape)

    def read(name: str, dtype: Any, shape: tuple | None, always_verify: bool = False) -> np.ndarray:
        if name not in secs:
            raise bad(f"missing section {name!r}")
        arr = secs[name]
        if arr.dtype != np.dtype(dtype) or (shape is not None and arr.shape != tuple(shape)):
            raise bad(f"{name} section has the wrong shape or dtype")
        if shape is None and arr.ndim != 1:
            raise bad(f"{name} section has the wrong shape")
        return arr

    return h, read


def _build(cls: Any, h: dict, read: Any, bad: Any) -> Any:
    """The index described by header ``h`` with sections from ``read``."""
    if not isinstance(h, dict) or h.get("format") != _FORMAT:
        raise bad("header does not describe a DenseIndex")
    dim, count = h["dim"], h["count"]
    if not isinstance(dim, int) or dim <= 0 or not isinstance(count, int) or count < 0:
        raise bad(f"invalid dim {dim!r} or count {count!r}")
    if (
        h["metric"] not in _METRICS
        or h["dtype"] not in (*ENCODINGS, *CODED_DTYPES)
        or h["kind"] not in _KINDS
    ):
        raise bad("unknown metric, dtype or kind")
    id_kind = h["id_kind"]
    if id_kind not in (None, "int", "str"):
        raise bad(f"unknown id kind {id_kind!r}")
    kind = h["kind"]
    ivf_args = {}
    if kind == "ivf":
        ivf_args = {"nlist": h["nlist_arg"], "nprobe": h["nprobe_arg"], "rerank": h["rerank"]}
        if h["dtype"] == "pq":
            ivf_args.update(pq_m=h["pq_m"], pq_bits=h["pq_bits"])
        if h["dtype"] in CODED_DTYPES:  # files from before rerank_dtype re-score float32 rows
            ivf_args["rerank_dtype"] = h.get("rerank_dtype", "f32")
    idx = cls(
        dim,
        metric=h["metric"],
        dtype=h["dtype"],
        kind=kind,
        M=h["M"],
        ef_construction=h["ef_construction"],
        ef=h["ef"],
        fingerprint=h["fingerprint"],
        **ivf_args,
    )
    if id_kind == "str":
        blob = read("ids_utf8", np.uint8, None).tobytes()
        offs = read("ids_offsets", np.int64, (count + 1,))
        if offs[0] != 0 or offs[-1] != len(blob) or (np.diff(offs) < 0).any():
            raise bad("string id offsets are inconsistent")
        ids: list = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(count)]
    else:
        ids = read("ids", np.int64, (count,)).tolist()
    if len(set(ids)) != count:
        raise bad("duplicate ids")
    next_auto_id = h["next_auto_id"]
    if not isinstance(next_auto_id, int) or isinstance(next_auto_id, bool):
        raise bad(f"invalid next_auto_id {next_auto_id!r}")
    idx._next_auto_id = next_auto_id
    cfg: DenseConfig = idx._cfg
    if kind == "exact":
        idx._backend = ExactBackend.load(cfg, h, read, ids, id_kind)
    elif kind == "ivf":
        codes = idx._backend._codes  # a fresh codes object of the header's dtype, or None
        idx._backend = IvfBackend.load(cfg, h, read, ids, id_kind, bad, codes)
    else:
        secs = {"hnsw": read("hnsw", np.uint8, None, True), "labels": read("labels", np.int64, None)}
        b = HnswBackend.load(cfg, idx._M, idx._ef_construction, idx.ef, h, secs, ids, bad)
        b.id_kind = id_kind
        idx._backend = b
    return idx
