#!/usr/bin/env bash
# Cross-compiles the NEON kernels (similarity, nearest centroid, MaxSim, impact columns, PQ fast
# scan; with the
# scalar references, the dispatch and cpu.cpp) and the kernel checker cpp/tests/check_kernels.cpp
# (also a ctest test of the native build) for AArch64, then runs it under user-mode QEMU: the
# scalar and NEON levels against a float64 reference, and NEON against scalar. Exits non-zero on
# any mismatch (1) or a setup problem (2).
#
# Needs (Debian/Ubuntu; this script installs nothing):
#   sudo apt-get install g++-aarch64-linux-gnu qemu-user
# Overrides: CXX_AARCH64 (default aarch64-linux-gnu-g++), QEMU_AARCH64 (default qemu-aarch64),
# AARCH64_SYSROOT (default /usr/aarch64-linux-gnu), BUILD_DIR (default build/neon).
# On an AArch64 machine the same sources build natively: CXX_AARCH64=g++ QEMU_AARCH64=env.
set -euo pipefail
cd "$(dirname "$0")/../.."

CXX_AARCH64=${CXX_AARCH64:-aarch64-linux-gnu-g++}
QEMU_AARCH64=${QEMU_AARCH64:-qemu-aarch64}
AARCH64_SYSROOT=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
BUILD_DIR=${BUILD_DIR:-build/neon}

missing=""
command -v "$CXX_AARCH64" >/dev/null 2>&1 || missing+=" $CXX_AARCH64 (apt package g++-aarch64-linux-gnu)"
command -v "$QEMU_AARCH64" >/dev/null 2>&1 || missing+=" $QEMU_AARCH64 (apt package qemu-user)"
if [[ "$QEMU_AARCH64" != env && ! -d "$AARCH64_SYSROOT/lib" ]]; then
  missing+=" the AArch64 sysroot $AARCH64_SYSROOT (apt package g++-aarch64-linux-gnu)"
fi
if [[ -n "$missing" ]]; then
  echo "tools/neon/run.sh: missing:$missing" >&2
  echo "install with: sudo apt-get install g++-aarch64-linux-gnu qemu-user" >&2
  exit 2
fi

mkdir -p "$BUILD_DIR"
# The flags of the CMake build (-O3, warnings) plus -Werror; RAGFIND_HAVE_NEON as CMake
# defines it when it compiles kernels/<family>/neon.cpp (aarch64).
# -ffp-contract=off as CMakeLists.txt sets it for the impact-column files (bit-identical sums).
flags=(-std=c++17 -O3 -Wall -Wextra -Wno-unused-parameter -Werror -DRAGFIND_HAVE_NEON=1 -Icpp/include
  -pthread -ffp-contract=off)
sources=(
  cpp/src/common/cpu.cpp
  cpp/src/late/maxsim.cpp
  cpp/src/kernels/similarity/scalar.cpp
  cpp/src/kernels/similarity/neon.cpp
  cpp/src/kernels/similarity/dispatch.cpp
  cpp/src/kernels/nearest/scalar.cpp
  cpp/src/kernels/nearest/neon.cpp
  cpp/src/kernels/nearest/dispatch.cpp
  cpp/src/kernels/maxsim/scalar.cpp
  cpp/src/kernels/maxsim/neon.cpp
  cpp/src/kernels/maxsim/dispatch.cpp
  cpp/src/kernels/impact_column/scalar.cpp
  cpp/src/kernels/impact_column/neon.cpp
  cpp/src/kernels/impact_column/dispatch.cpp
  cpp/src/kernels/pq_scan/scalar.cpp
  cpp/src/kernels/pq_scan/neon.cpp
  cpp/src/kernels/pq_scan/dispatch.cpp
  cpp/src/dense/pq.cpp
  cpp/src/dense/coarse.cpp
  cpp/src/dense/kmeans.cpp
  cpp/tests/check_kernels.cpp
)
echo "+ $CXX_AARCH64 ${flags[*]} ${sources[*]} -o $BUILD_DIR/check_kernels"
"$CXX_AARCH64" "${flags[@]}" "${sources[@]}" -o "$BUILD_DIR/check_kernels"

if [[ "$QEMU_AARCH64" == env ]]; then
  run=(env)
else
  run=("$QEMU_AARCH64" -L "$AARCH64_SYSROOT")
fi
echo "+ ${run[*]} $BUILD_DIR/check_kernels"
rc=0
"${run[@]}" "$BUILD_DIR/check_kernels" || rc=$?
if ((rc > 128)); then
  # Inputs end at a PROT_NONE page: a SIGSEGV is most likely a kernel reading past a row.
  echo "tools/neon/run.sh: the checker died with signal $((rc - 128)) (SIGSEGV = a kernel read or" \
    "wrote past the end of a buffer)" >&2
fi
exit "$rc"
