#!/usr/bin/env bash
# Short fuzz run of every target (atheris / libFuzzer): tools/fuzz/run.sh [SECONDS_PER_TARGET]
# (FUZZ_TARGETS="load_bm25 query" limits the targets; FUZZ_SEED=N fixes libFuzzer's seed so a
# run can be repeated, as CI does; the default 0 picks a new seed each run; FUZZ_JOBS=N targets
# at once, default one per CPU)
#
# The repo's seed corpus (tools/fuzz/corpus/<target>) is read, never written: new interesting
# inputs go to build/fuzz/<target>, crashes/hangs to build/fuzz/artifacts/. A crash, an
# unexpected exception or an input that runs longer than 20 s fails the run; copy its
# artifact into tests/reliability/fuzz_regressions/<target>/ (tests/reliability/test_fuzz_regressions.py replays it).
set -uo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_TARGET=${1:-60}
# Use the developer build in python/ragfind when there is one, else the installed ragfind.
if [ -z "${PYTHONPATH:-}" ] && compgen -G "python/ragfind/_core*.so" >/dev/null; then
  export PYTHONPATH=python
fi
python -c "import atheris" 2>/dev/null || { echo "tools/fuzz/run.sh needs atheris (pip install atheris)"; exit 2; }
OUT=build/fuzz
mkdir -p "$OUT/artifacts"
# Targets run FUZZ_JOBS at a time (default: one per CPU; each harness is one process).
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

run_target() {
  local target=$1 max_len=8192 start rc runs
  mkdir -p "$OUT/$target"
  [ "$target" = load_retriever ] && max_len=16384  # a whole folder: SQLite store + manifest + 2 indexes
  start=$(date +%s)
  python "tools/fuzz/fuzz_$target.py" "$OUT/$target" "tools/fuzz/corpus/$target" \
    -seed="${FUZZ_SEED:-0}" -max_total_time="$SECONDS_PER_TARGET" -timeout=20 -rss_limit_mb=4096 -max_len="$max_len" \
    -artifact_prefix="$OUT/artifacts/$target-" -print_final_stats=1 >"$OUT/$target.log" 2>&1
  rc=$?
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$OUT/$target.log" | grep -Eo '[0-9]+$' | tail -1)
  echo "$rc" >"$OUT/$target.rc"
  echo "fuzz $target: rc=$rc, ${runs:-?} inputs in $(( $(date +%s) - start )) s"
}

targets=(${FUZZ_TARGETS:-analyzer query query_parser add_documents load_bm25 load_dense_exact load_dense_hnsw load_dense_ivf load_late load_sparse load_retriever})
running=0
for target in "${targets[@]}"; do
  rm -f "$OUT/$target.rc"
  run_target "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait
failed=0
for target in "${targets[@]}"; do
  rc=$(cat "$OUT/$target.rc" 2>/dev/null || echo missing)
  if [ "$rc" != 0 ]; then
    failed=1
    echo "fuzz $target failed (rc=$rc):"
    tail -40 "$OUT/$target.log"
  fi
done
exit $failed
