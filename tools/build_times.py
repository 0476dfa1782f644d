#!/usr/bin/env python3
"""Compile time and peak memory of every translation unit of the native build (bench/build.md).

    python tools/build_times.py                        # fresh build/times (the module), -j2
    python tools/build_times.py -j1 -- -DRAGFIND_BUILD_TESTS=ON -DRAGFIND_BUILD_MODULE=OFF
    python tools/build_times.py --ninja-log build/dev/.ninja_log   # wall times of a finished build

A fresh build wraps each compiler call in GNU time (CMAKE_CXX_COMPILER_LAUNCHER, so the compile
commands are CMake's own) and prints one row per object: CPU seconds (user + system, what the
machine's load changes least), wall seconds and peak resident memory, then the totals of each
group: the pybind11 bindings, the per-ISA kernels, the generated tables and the rest of the core.
The load average before and after is printed with them: on a shared machine compare ratios
measured in the same run. Needs cmake, ninja and GNU time (Debian: apt-get install time).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIME = "/usr/bin/time"


def group(path: str) -> str:
    """The group a source (or a linked output) is reported under."""
    p = path.replace(os.sep, "/")
    if "/cpp/bindings/" in p or "/_core.dir/Unity/" in p:
        return "bindings (pybind11)"
    if "/cpp/src/kernels/" in p:
        isa = Path(p).stem
        return f"kernels: {isa}" if isa in ("avx2", "avx512", "neon") else "kernels: scalar + dispatch"
    if p.endswith("_tables.cpp") or p.endswith("_tables.cpp.o"):
        return "generated tables"
    if "/cpp/src/" in p:
        return "core"
    if "/cpp/tests/" in p or "/tools/" in p:
        return "C++ tests and workloads"
    return "link"


def source_of(argv: list[str]) -> str:
    """The compiled source (the argument of -c), or the output of a link (-o)."""
    for flag in ("-c", "-o"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return argv[argv.index(flag) + 1]
    return " ".join(argv[:1])


def short(path: str) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return p.name


def read_time_log(log: Path) -> list[dict]:
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split(" ", 4)
        if len(parts) < 5 or parts[0] == "Command":
            continue  # GNU time's "Command exited with non-zero status" lines
        user, system, wall, rss_kb, cmd = parts
        src = source_of(shlex.split(cmd))
        rows.append(
            dict(
                tu=short(src),
                group=group(os.path.abspath(src)),
                cpu=float(user) + float(system),
                wall=float(wall),
                rss=int(rss_kb) / 1024,
            )
        )
    return rows


def read_ninja_log(log: Path) -> list[dict]:
    latest = {}  # a rebuilt output appends a line: its last one counts
    for line in log.read_text().splitlines()[1:]:
        start, end, _, out, _ = line.split("\t")
        if not out.endswith("verify_globs"):
            latest[out] = (int(end) - int(start)) / 1000
    rows = []
    for out, wall in latest.items():
        src = out[:-2] if out.endswith(".o") else out
        if "CMakeFiles/" in src:  # [<dir>/]CMakeFiles/<target>.dir/<source below <dir>, ".." as "__">
            head, rest = src.split("CMakeFiles/", 1)
            rest = "/".join(".." if p == "__" else p for p in rest.split(".dir/", 1)[1].split("/"))
            src = os.path.normpath(ROOT / head / rest)
        rows.append(dict(tu=short(src), group=group(src), cpu=None, wall=wall, rss=None))
    return rows


def fmt(x, spec: str) -> str:
    return "" if x is None else format(x, spec)


def row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def report(rows: list[dict], top: int) -> None:
    key = "cpu" if rows and rows[0]["cpu"] is not None else "wall"
    rows = sorted(rows, key=lambda r: -r[key])
    total = sum(r[key] for r in rows) or 1.0
    print(row("translation unit", "group", "CPU s", "wall s", "peak RSS MiB"))
    print(row("---", "---", "---:", "---:", "---:"))
    for r in rows[:top]:
        print(row(r["tu"], r["group"], fmt(r["cpu"], ".1f"), fmt(r["wall"], ".1f"), fmt(r["rss"], ".0f")))
    if len(rows) > top:
        rest = rows[top:]
        cpu = sum(r["cpu"] for r in rest) if key == "cpu" else None
        print(row(f"({len(rest)} more)", "", fmt(cpu, ".1f"), f"{sum(r['wall'] for r in rest):.1f}", ""))
    print()
    print(row("group", "files", f"{key} s", "share", "slowest file s", "peak RSS MiB"))
    print(row("---", "---:", "---:", "---:", "---:", "---:"))
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for name, rs in sorted(groups.items(), key=lambda kv: -sum(r[key] for r in kv[1])):
        s = sum(r[key] for r in rs)
        rss = max((r["rss"] for r in rs if r["rss"] is not None), default=None)
        slowest = max(r[key] for r in rs)
        print(row(name, len(rs), f"{s:.1f}", f"{100 * s / total:.0f}%", f"{slowest:.1f}", fmt(rss, ".0f")))
    print(row("all", len(rows), f"{total:.1f}", "100%", "", ""))


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) + f" on {os.cpu_count()} CPUs"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default="build/times", help="fresh build folder (deleted first)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--top", type=int, default=20, help="rows of the per-file table")
    ap.add_argument("--ninja-log", type=Path, help="report a finished build's .ninja_log instead (wall only)")
    ap.add_argument("cmake_args", nargs="*", help="after --: more cmake configure arguments")
    a = ap.parse_args()
    if a.ninja_log:
        report(read_ninja_log(a.ninja_log), a.top)
        return 0
    if not os.access(TIME, os.X_OK):
        print(f"tools/build_times.py: {TIME} not found (Debian: apt-get install time)", file=sys.stderr)
        return 2
    build = (ROOT / a.build_dir).resolve()
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    log = build / "tu_times.log"
    launcher = f"{TIME};-a;-o;{log};-f;%U %S %e %M %C"
    cfg = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build),
        "-G",
        "Ninja",
        f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}",
        f"-DRAGFIND_OUTPUT_DIR={build / 'pkg'}",
    ]  # never over the developer's python/ragfind/_core
    subprocess.run(cfg + a.cmake_args, check=True, stdout=subprocess.DEVNULL)
    print(f"load before: {load()}")
    t0 = time.perf_counter()
    subprocess.run(["cmake", "--build", str(build), "-j", str(a.jobs)], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    what = " ".join(a.cmake_args) or "the module"
    print(f"load after:  {load()}\nbuild: {wall:.0f} s wall at -j{a.jobs} ({what})\n")
    report(read_time_log(log), a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
