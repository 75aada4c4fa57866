#!/usr/bin/env bash
# Checks that every C++ source file of the tree is formatted as .clang-format
# says (clang-format --dry-run --Werror), one line per file that is not, and
# ends with "N passed, M failed" (a file each). Fix with:
#   git ls-files '*.cpp' '*.hpp' '*.h' | xargs clang-format -i
set -uo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "clang-format is needed (scripts/deps.sh installs it)"; echo "0 passed, 1 failed"; exit 1; }
passed=0 failed=0
while IFS= read -r -d '' f; do
  if clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then passed=$((passed + 1))
  else echo "FAIL $f is not formatted (clang-format -i $f)"; failed=$((failed + 1)); fi
done < <(git ls-files -z '*.cpp' '*.hpp' '*.h')
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
