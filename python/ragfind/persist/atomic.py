"""Crash-safety helpers for the Python index writers (the C++ twin is ragfind/common/crash_safety.hpp).

``fault_point(name)``: when the environment variable ``RAGFIND_FAULT_INJECT`` equals ``name``
the process kills itself with SIGKILL on the spot (no cleanup, like a power cut or an OOM
kill); tests/reliability/test_crash_safety.py uses it to stop saves at named points.

``temp_prefix(path)`` / ``remove_stale_temp_files(path)``: writers name their temporary file
``.<name>.tmp-<pid>-<random>``; the next save of the same path deletes those whose process is
gone, so files left by a killed writer never pile up.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

__all__ = ["fault_point", "temp_prefix", "remove_stale_temp_files", "fsync_dir"]


def fault_point(name: str) -> None:
    """Kills this process with SIGKILL if RAGFIND_FAULT_INJECT == name (testing hook)."""
    if os.environ.get("RAGFIND_FAULT_INJECT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def temp_prefix(path: Path) -> str:
    """The mkstemp prefix for a temporary file that will replace ``path``."""
    return f".{path.name}.tmp-{os.getpid()}-"


def remove_stale_temp_files(path: Path) -> None:
    """Deletes ``.<name>.tmp-<pid>-*`` siblings of ``path`` whose writer process has died."""
    pattern = re.compile(r"\." + re.escape(path.name) + r"\.tmp-(\d+)-")
    try:
        entries = os.listdir(path.parent)
    except OSError:
        return
    me = os.getpid()
    for entry in entries:
        m = pattern.match(entry)
        if not m:
            continue
        pid = int(m.group(1))
        if pid == me or pid <= 0:
            continue
        try:
            os.kill(pid, 0)
            continue  # alive (or not ours to signal): leave it
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(path.parent / entry)
        except OSError:
            pass


def fsync_dir(path: Path) -> None:
    """Flushes a directory entry (a rename into it) to disk; best effort where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
