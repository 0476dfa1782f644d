import os
import subprocess
import sys

import pytest

import ragfind
from ragfind import _core


def test_capabilities_report_consistent_levels():
    caps = ragfind.capabilities()
    assert caps["compiled"][0] == "scalar"
    assert caps["supported"][0] == "scalar"
    assert set(caps["supported"]) <= set(caps["compiled"])
    assert caps["best"] == caps["supported"][-1]
    assert caps["active"] in caps["supported"]
    assert isinstance(caps["features"]["avx2"], bool)


def test_set_simd_level_round_trip(simd_level):
    assert ragfind.capabilities()["active"] == simd_level


def test_set_simd_level_rejects_unknown_and_unsupported():
    before = ragfind.capabilities()["active"]
    with pytest.raises(ValueError, match="unknown SIMD level"):
        ragfind.set_simd_level("sse9")
    with pytest.raises(TypeError):
        ragfind.set_simd_level(3)
    # Every level this build or CPU lacks: not compiled in, or compiled but not run by this CPU.
    unsupported = {"scalar", "neon", "avx2", "avx512"} - set(_core.supported_simd_levels())
    assert "scalar" not in unsupported
    for level in unsupported:
        with pytest.raises(ValueError, match="not available"):
            ragfind.set_simd_level(level)
    assert ragfind.capabilities()["active"] == before  # a rejected level changes nothing


def test_env_override_forces_lower_level():
    code = "import ragfind; print(ragfind.capabilities()['active'])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "RAGFIND_SIMD": "scalar"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "scalar"
