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


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist (``-n``), the Ray tests run in one worker, one after another: they
    share the session's local Ray (and start multi-node clusters of their own), and two Rays
    on one small machine would only slow each other down and blur their timeouts."""
    for item in items:
        if "/tests/distributed/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.xdist_group("ray"))


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


# --- models: the default ONNX models, built once per session into a private cache ---


@pytest.fixture(scope="session")
def model_home(tmp_path_factory):
    """$RAGFIND_HOME pointed at a fresh session folder, so tests build the defaults offline."""
    home = tmp_path_factory.mktemp("ragfind_home")
    before = os.environ.get("RAGFIND_HOME")
    os.environ["RAGFIND_HOME"] = str(home)
    try:
        yield home
    finally:
        if before is None:
            os.environ.pop("RAGFIND_HOME", None)
        else:
            os.environ["RAGFIND_HOME"] = before


@pytest.fixture(scope="session")
def minilm(model_home):
    """The float32 default bi-encoder (all-MiniLM-L6-v2), 2 threads."""
    return ragfind.load_model("all-MiniLM-L6-v2", threads=2)


@pytest.fixture(scope="session")
def minilm_int8(model_home):
    """The int8 default bi-encoder, 2 threads."""
    return ragfind.load_model("all-MiniLM-L6-v2-int8", threads=2)
