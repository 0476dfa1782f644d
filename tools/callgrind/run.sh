#!/usr/bin/env bash
# Instruction count of a fixed workload (bm25_queries.cpp or dense_scan.cpp), built by the C++
# test build (-DRAGFIND_BUILD_TESTS=ON): the count covers run_queries only (the corpus build is
# not counted), and the checksum shows whether the answers changed.
#   tools/callgrind/run.sh [bm25_queries|dense_scan] [build dir, default build/cpp-tests]
set -euo pipefail
name=${1:-bm25_queries}
build=${2:-build/cpp-tests}
cmake --build "$build" --target "$name" >/dev/null
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --collect-atstart=no \
  --toggle-collect='*run_queries*' "$build/cpp/tests/$name" >"$out/stdout" 2>"$out/log"
cat "$out/stdout"
grep -E "Collected" "$out/log"
rm -rf "$out"
