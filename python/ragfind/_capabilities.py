"""What the native core detected and chose: CPU features and the SIMD level in use."""

from __future__ import annotations

import os

from ragfind import _core


def capabilities() -> dict:
    """Report the CPU features, the SIMD levels compiled in and the one kernels use now.

    Returns a dict with keys ``features`` (flag -> bool), ``compiled`` and ``supported``
    (level names, lowest first), ``best`` (the best supported level), ``active`` (the level
    kernels dispatch to now) and ``requested`` (the ``RAGFIND_SIMD`` environment variable, or
    None). An unknown or unsupported ``RAGFIND_SIMD`` is ignored and ``active`` shows that.
    """
    return {
        "features": _core.cpu_features(),
        "compiled": _core.compiled_simd_levels(),
        "supported": _core.supported_simd_levels(),
        "best": _core.best_simd_level(),
        "active": _core.get_simd_level(),
        "requested": os.environ.get("RAGFIND_SIMD") or None,
    }


def set_simd_level(level: str) -> None:
    """Force every kernel to ``level`` ("scalar", "avx2", "avx512", "neon").

    Meant for testing and benchmarking lower levels. Raises ValueError when the level is
    unknown, not compiled into this build or not supported by this CPU.
    """
    if not isinstance(level, str):
        raise TypeError(f"level must be a str, got {type(level).__name__}")
    _core.set_simd_level(level)
