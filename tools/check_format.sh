#!/usr/bin/env bash
# clang-format check of every C++ file under cpp/ and tools/ (style: .clang-format).
#
#   tools/check_format.sh              # exit 1 and list the files clang-format would change
#   tools/check_format.sh --warn-only  # the same report, exit 0 (CI, until the tree is reformatted)
#   tools/check_format.sh --fix        # reformat those files in place
#   tools/check_format.sh -v           # also print each file's diff
#
# Generated files are skipped (cpp/src/text/unicode_tables.cpp and wordpiece_tables.cpp: cpp/tools/gen_*.py).
# Needs clang-format (Debian: apt-get install clang-format); CLANG_FORMAT overrides the binary.
# Exit status: 0 clean (or --warn-only), 1 files need formatting, 2 setup error.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=check
verbose=0
for arg in "$@"; do
  case "$arg" in
    --warn-only) mode=warn ;;
    --fix) mode=fix ;;
    -v | --verbose) verbose=1 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "tools/check_format.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "tools/check_format.sh: $CLANG_FORMAT not found (Debian: apt-get install clang-format)" >&2
  exit 2
fi

generated='^cpp/src/text/(unicode|wordpiece)_tables\.cpp$'
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- cpp tools |
  grep -E '\.(c|cc|cpp|cxx|h|hh|hpp)$' | grep -Ev "$generated" | sort -u)
if ((${#files[@]} == 0)); then
  echo "tools/check_format.sh: no C++ files found under cpp/ and tools/" >&2
  exit 2
fi

if [[ "$mode" == fix ]]; then
  "$CLANG_FORMAT" -i --style=file "${files[@]}"
  echo "tools/check_format.sh: formatted ${#files[@]} files with $("$CLANG_FORMAT" --version)"
  exit 0
fi

bad=()
changed=0
for f in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --dry-run -Werror --style=file "$f" >/dev/null 2>&1; then
    bad+=("$f")
    n=$("$CLANG_FORMAT" --style=file "$f" | diff "$f" - | grep -c '^[<>]' || true)
    changed=$((changed + n))
    echo "needs formatting: $f ($n lines differ)"
    if ((verbose)); then "$CLANG_FORMAT" --style=file "$f" | diff -u --label "$f" --label "$f (formatted)" "$f" - || true; fi
  fi
done

version=$("$CLANG_FORMAT" --version)
if ((${#bad[@]} == 0)); then
  echo "tools/check_format.sh: all ${#files[@]} C++ files are formatted ($version)"
  exit 0
fi
echo "tools/check_format.sh: ${#bad[@]} of ${#files[@]} C++ files need formatting ($changed lines differ;" \
  "$version); run tools/check_format.sh --fix"
[[ "$mode" == warn ]] && exit 0
exit 1
