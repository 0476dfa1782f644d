#!/usr/bin/env bash
# Instructions per query of Retriever.search (BM25 only, SciFact, k=10, cache off) and of the
# BM25Index.search beneath it, and their ratio: a noise-free view of the Retriever's overhead.
# Each count is a run of N queries minus a run of 0 (the loading and warm-up cancel out).
#   RAGFIND_DATA=../shared/data PYTHONPATH=python tools/callgrind/retriever_search.sh [N, default 200]
set -euo pipefail
n=${1:-200}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python "$here/retriever_search.py" "$work/retriever" build 0
count() {
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" --collect-atstart=no \
    --toggle-collect=builtin_sorted python "$here/retriever_search.py" "$work/retriever" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
w=$(($(count whole "$n") - $(count whole 0)))
b=$(($(count bm25 "$n") - $(count bm25 0)))
python -c "w, b = $w / $n, $b / $n; print(f'Retriever.search {w:,.0f} instructions/query, BM25Index.search {b:,.0f}, ratio {w / b:.3f}')"
