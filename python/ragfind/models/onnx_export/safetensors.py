"""A torch-free reader for the safetensors format (header JSON + raw little-endian tensors).

The format is small enough to read with numpy alone: 8 bytes of little-endian header length,
that many bytes of JSON ({name: {dtype, shape, data_offsets}}, plus ``__metadata__``), then the
tensor bytes. Every size and offset is validated before any byte is trusted.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # widened to float32 below
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}

_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """A safetensors file is truncated, corrupt or uses an unsupported dtype."""


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Reads every tensor of a ``.safetensors`` file into numpy arrays (floats as float32).

    Args:
        path: the file.
    Returns:
        ``{name: array}``; BF16/F16/F64 tensors are converted to float32, integer tensors keep
        their dtype.
    Raises:
        FileNotFoundError: the file does not exist.
        SafetensorsError: the header or the offsets are inconsistent with the file size.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: truncated safetensors file ({size} bytes, no header length)")
        (header_len,) = struct.unpack("<Q", raw)
        if header_len > _MAX_HEADER or 8 + header_len > size:
            raise SafetensorsError(f"{path}: header length {header_len} does not fit a {size}-byte file")
        try:
            header = json.loads(f.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError(f"{path}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    data_start = 8 + header_len
    data_len = size - data_start
    buf = (
        np.memmap(path, dtype=np.uint8, mode="r", offset=data_start, shape=(data_len,)) if data_len else None
    )
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name!r} has a malformed header entry {info!r}") from None
        if dtype_name not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name!r} has unsupported dtype {dtype_name!r}")
        dtype = _DTYPES[dtype_name]
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= begin <= end <= data_len) or end - begin != count * dtype.itemsize:
            raise SafetensorsError(
                f"{path}: tensor {name!r} offsets [{begin}, {end}) do not match shape {shape} x "
                f"{dtype_name} within {data_len} data bytes (truncated or corrupt file)"
            )
        arr = np.frombuffer(buf[begin:end].tobytes(), dtype=dtype) if count else np.zeros(0, dtype)
        if dtype_name == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif dtype.kind == "f" and dtype != np.float32:
            arr = arr.astype(np.float32)
        out[name] = arr.reshape(shape)
    del buf
    return out
