#!/usr/bin/env bash
# ASan + UBSan run of the native-core tests.
#
#   tools/sanitize.sh                 # build build/asan, run the default native test files
#                                     # (on every CPU with pytest-xdist)
#   tools/sanitize.sh tests/dense     # ... or the given pytest arguments instead
#
# Builds ragfind._core with -DRAGFIND_SANITIZE=address,undefined into build/asan/pkg/ragfind (a
# copy of python/ragfind, so the normal dev module in python/ragfind is never replaced), then
# runs pytest with the sanitizer runtimes preloaded into the (uninstrumented) CPython. Any ASan
# or UBSan report aborts the process (halt_on_error, -fno-sanitize-recover) and fails the run.
# Leak checking is off: CPython's allocator and interned objects are reported as leaks.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${RAGFIND_SANITIZE_BUILD:-build/asan}
CXX_BIN=${CXX:-c++}
cmake -S . -B "$BUILD" -G Ninja -DRAGFIND_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD"

# The Python sources next to the sanitized module (refreshed every run; the .so stays).
PKG="$BUILD/pkg"
mkdir -p "$PKG/ragfind"
(cd python/ragfind && find . -type f ! -name '_core*.so' ! -path '*/__pycache__/*' -print0 |
  while IFS= read -r -d '' f; do mkdir -p "../../$PKG/ragfind/$(dirname "$f")"; cp -p "$f" "../../$PKG/ragfind/$f"; done)

LIBASAN=$($CXX_BIN -print-file-name=libasan.so)
LIBUBSAN=$($CXX_BIN -print-file-name=libubsan.so)
LIBSTDCXX=$($CXX_BIN -print-file-name=libstdc++.so)
LOG_DIR="$BUILD/reports"
rm -rf "$LOG_DIR" && mkdir -p "$LOG_DIR"

if [ "$#" -eq 0 ]; then
  # The native core: BM25 + analyzer, dense kernels/exact/HNSW wrapper, fusion, MaxSim/late
  # interaction, the passage columns and the JSON rows written from them, plus the reliability
  # suites (properties, concurrency, crash safety, fuzz seeds).
  set -- tests/sparse tests/dense tests/late tests/pipeline/test_pipeline_fusion.py tests/reliability \
    tests/pipeline/test_passage_columns.py tests/serve/test_serve_rows.py -p no:cacheprovider -q
  # One pytest-xdist worker per CPU when the plugin is there: the instrumented tests are
  # mostly single-threaded and CPU-bound (on 2 CPUs: 387 s in one process, ~250 s in two).
  if python -c "import xdist" 2>/dev/null; then set -- "$@" -n auto; fi
fi

# alloc_dealloc_mismatch=0: hnswlib's own Python bindings (third party, not instrumented) free
# the new[]-allocated knn_query result arrays with a scalar delete in their capsule destructor
# (python_bindings/bindings.cpp); with the check on, every HNSW search aborts the run there.
export ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=0:allocator_may_return_null=1:log_path=$PWD/$LOG_DIR/asan:handle_segv=1:strict_string_checks=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$PWD/$LOG_DIR/ubsan"
export RAGFIND_SANITIZED=1   # tests that are meaningless under ASan (RSS limits) skip themselves
status=0
# libstdc++ is preloaded too so that ASan's operator new/delete interposition sees one C++ runtime.
LD_PRELOAD="$LIBASAN $LIBUBSAN $LIBSTDCXX" PYTHONPATH="$PWD/$PKG" \
  python -c "import ragfind, ragfind._core as c; print('sanitized module:', c.__file__)" || status=$?
if [ $status -eq 0 ]; then
  LD_PRELOAD="$LIBASAN $LIBUBSAN $LIBSTDCXX" PYTHONPATH="$PWD/$PKG" python -m pytest "$@" || status=$?
fi
if compgen -G "$LOG_DIR/*" >/dev/null; then
  echo "=== sanitizer reports ($LOG_DIR) ==="
  cat "$LOG_DIR"/*
  status=1
fi
if [ $status -eq 0 ]; then echo "sanitize: no ASan/UBSan reports"; fi
exit $status
