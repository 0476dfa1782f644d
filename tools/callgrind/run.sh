#!/usr/bin/env bash
# Instruction count of the fixed BM25 query workload (bm25_queries.cpp), built by the C++ test
# build (-DRAGFIND_BUILD_TESTS=ON). Usage: tools/callgrind/run.sh [build dir, default build/cpp-tests]
set -euo pipefail
build=${1:-build/cpp-tests}
cmake --build "$build" --target bm25_queries >/dev/null
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --collect-atstart=no \
  --toggle-collect='*run_queries*' "$build/cpp/tests/bm25_queries" 2>"$out/log"
grep -E "Collected" "$out/log"
rm -rf "$out"
