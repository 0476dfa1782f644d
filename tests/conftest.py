"""Shared fixtures: where the shared evaluation data lives, and every SIMD level."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ragfind
from ragfind import _core

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    """../shared/data next to the repository, or $RAGFIND_DATA."""
    return Path(os.environ.get("RAGFIND_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = shared_data_dir()
    if not (d / "scifact" / "corpus.jsonl").exists():
        pytest.skip(f"shared evaluation data not found at {d} (set RAGFIND_DATA)")
    return d


@pytest.fixture(params=_core.supported_simd_levels())
def simd_level(request):
    """Runs the test once per SIMD level this machine supports, restoring the level after."""
    before = _core.get_simd_level()
    ragfind.set_simd_level(request.param)
    try:
        yield request.param
    finally:
        ragfind.set_simd_level(before)
