"""A small container format for index files: magic, version, JSON header, aligned array sections.

Layout: 8-byte magic, uint32 version, uint32 header length, the JSON header, then each section
at a 64-byte-aligned offset. The header records per section its offset, dtype, shape, size and
CRC32. A header written with ``checksum_header=True`` starts ``{"header_crc32": "xxxxxxxx"``:
the CRC32 of the header bytes with those 8 hex digits as zeros, checked on every read. Writing
is atomic (temporary file in the same folder, fsync, os.replace, fsync of the folder); reading
checks magic, version, header, bounds and (optionally) checksums before any array is used;
every problem with a file raises ``IndexFileError`` (a ValueError).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np

from ragfind.errors import IndexFileError
from ragfind.persist.atomic import fault_point, fsync_dir, remove_stale_temp_files, temp_prefix

_ALIGN = 64
# A checksummed header starts with this key; its 8 hex digits are zeros while the CRC is taken.
_HEADER_CRC_KEY = b'{"header_crc32": "'
_HEADER_CRC_AT = len(_HEADER_CRC_KEY)


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def write_sectioned(
    path,
    magic: bytes,
    version: int,
    header: dict,
    sections: dict,
    *,
    checksum_header: bool = False,
    fault_prefix: str = "sectioned.save",
) -> None:
    """Atomically writes ``sections`` (name -> numpy array) with ``header`` (JSON-able dict).

    ``checksum_header`` adds the header's own CRC32 (see the module docstring); ``fault_prefix``
    names the crash-test points (``<prefix>.created`` ...).
    """
    assert len(magic) == 8
    arrays = {name: np.ascontiguousarray(a) for name, a in sections.items()}
    if checksum_header:
        header = {"header_crc32": "0" * 8, **{k: v for k, v in header.items() if k != "header_crc32"}}
    header = dict(header, sections={})
    base = _align(16 + len(json.dumps(header).encode()) + 512)
    while True:
        pos = base
        for name, a in arrays.items():
            header["sections"][name] = {
                "offset": pos,
                "dtype": a.dtype.str,
                "shape": list(a.shape),
                "nbytes": int(a.nbytes),
                "crc32": zlib.crc32(memoryview(a).cast("B")) if a.nbytes else 0,
            }
            pos = _align(pos + a.nbytes)
        hbytes = json.dumps(header).encode()
        if 16 + len(hbytes) <= base:
            break
        base = _align(16 + len(hbytes) + 512)
    if checksum_header:
        crc = f"{zlib.crc32(hbytes):08x}".encode()
        hbytes = hbytes[:_HEADER_CRC_AT] + crc + hbytes[_HEADER_CRC_AT + 8 :]
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    remove_stale_temp_files(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=temp_prefix(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            fault_point(f"{fault_prefix}.created")
            f.write(magic + struct.pack("<II", version, len(hbytes)) + hbytes)
            for name, a in arrays.items():
                f.write(b"\0" * (header["sections"][name]["offset"] - f.tell()))
                if a.nbytes:
                    f.write(memoryview(a).cast("B"))
                fault_point(f"{fault_prefix}.section_written")
            f.flush()
            os.fsync(f.fileno())
        fault_point(f"{fault_prefix}.before_rename")
        os.replace(tmp, path)
        fault_point(f"{fault_prefix}.after_rename")
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def refuse_old_version(path, magic: bytes, old: int, current: int, what: str, rebuild: str) -> None:
    """A clear IndexFileError for a file of this magic at version ``old`` (before the current
    layout); anything else is left to SectionedFile's checks."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return  # SectionedFile raises the OSError
    if len(head) == 12 and head[:8] == magic and struct.unpack("<I", head[8:12])[0] == old:
        raise IndexFileError(
            f"{path}: {what} of version {old} (written before ids and deletes); "
            f"this ragfind reads version {current}: {rebuild}"
        )


class SectionedFile:
    """A validated sectioned file; ``array(name, dtype, shape)`` returns checked sections."""

    def __init__(self, path, magic: bytes, version: int, what: str):
        self.path = Path(path)
        self.size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(16)
            if len(head) < 16 or head[:8] != magic:
                raise IndexFileError(f"{self.path} is not a ragfind {what} file (bad magic)")
            file_version, hlen = struct.unpack("<II", head[8:16])
            if file_version != version:
                raise IndexFileError(
                    f"{self.path}: unsupported {what} file version {file_version} "
                    f"(this ragfind reads {version})"
                )
            if hlen > min(self.size - 16, 1 << 24):
                raise IndexFileError(
                    f"{self.path}: header length {hlen} exceeds the file (truncated or corrupt)"
                )
            hbytes = f.read(hlen)
            if hbytes.startswith(_HEADER_CRC_KEY):
                got = hbytes[_HEADER_CRC_AT : _HEADER_CRC_AT + 8]
                zeroed = hbytes[:_HEADER_CRC_AT] + b"0" * 8 + hbytes[_HEADER_CRC_AT + 8 :]
                if got != f"{zlib.crc32(zeroed):08x}".encode():
                    raise IndexFileError(f"{self.path}: header checksum mismatch (corrupt file)")
            try:
                self.header = json.loads(hbytes.decode())
                self.sections = self.header["sections"]
                if not isinstance(self.sections, dict):
                    raise TypeError("sections is not an object")
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                raise IndexFileError(f"{self.path}: corrupt header ({e})") from None
        self.header_end = 16 + hlen

    def field(self, key, kind):
        """A header value converted with ``kind`` (int, str, float), or IndexFileError."""
        try:
            return kind(self.header[key])
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise IndexFileError(f"{self.path}: corrupt header field {key!r} ({e})") from None

    def shape_of(self, name: str, ndim: int) -> tuple:
        """The recorded shape of a section of ``ndim`` dimensions, or IndexFileError."""
        try:
            shape = tuple(int(x) for x in self.sections[name]["shape"])
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise IndexFileError(f"{self.path}: corrupt or missing section {name!r} ({e})") from None
        if len(shape) != ndim or min(shape, default=0) < 0:
            raise IndexFileError(
                f"{self.path}: section {name!r} has shape {shape}; expected {ndim} dimensions"
            )
        return shape

    def array(self, name: str, dtype, shape: tuple, *, mmap: bool, verify: bool) -> np.ndarray:
        """The section ``name`` checked against ``dtype``/``shape``, bounds and (``verify``) CRC32."""
        if name not in self.sections:
            raise IndexFileError(f"{self.path}: missing section {name!r}")
        s = self.sections[name]
        try:
            off, nbytes, crc = int(s["offset"]), int(s["nbytes"]), int(s["crc32"])
            got_shape = tuple(int(x) for x in s["shape"])
            dtype = np.dtype(dtype)
            # Compare the file's dtype string before np.dtype() parses it: np.dtype() of an
            # arbitrary string can raise SyntaxError or build a huge sub-array type.
            if s["dtype"] != dtype.str:
                raise IndexFileError(f"dtype {s['dtype']!r}, expected {dtype.str!r}")
            dt = dtype
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise IndexFileError(f"{self.path}: corrupt section {name!r} ({e})") from None
        if (
            dt != dtype
            or got_shape != tuple(shape)
            or nbytes != int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        ):
            raise IndexFileError(
                f"{self.path}: section {name!r} has dtype {dt} shape {got_shape}, "
                f"expected {dtype} {tuple(shape)}"
            )
        if off < self.header_end or off + nbytes > self.size:
            raise IndexFileError(f"{self.path}: section {name!r} lies outside the file (truncated?)")
        if nbytes == 0:
            return np.zeros(shape, dtype=dtype)
        arr = np.memmap(self.path, dtype=dtype, mode="r", offset=off, shape=tuple(shape))
        if verify and zlib.crc32(memoryview(arr).cast("B")) != crc:
            raise IndexFileError(f"{self.path}: checksum mismatch in section {name!r} (corrupt file)")
        return arr if mmap else np.array(arr)
