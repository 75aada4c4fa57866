#!/usr/bin/env bash
# scripts/include-rooms.py on small fake trees: it finds a circle between
# rooms and names the includes that draw it, resolves includes beside the
# file and from src/, takes a room inside another for a room of its own (a
# hall that includes its room, which includes the hall, is a circle), and
# excepts no arrow. Ends with "N passed, M failed".
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { # name expected-pattern output
  if printf '%s\n' "$3" | grep -qE "$2"; then passed=$((passed + 1)); echo "ok $1"
  else failed=$((failed + 1)); echo "FAIL $1: got: $3"; fi
}
rooms() { python3 "$here/scripts/include-rooms.py" "$tmp/src" "$@"; echo "rc=$?"; }
mkdir -p "$tmp/src/a/inner" "$tmp/src/b" "$tmp/src/c"
printf '#include "b/b.hpp"\n#include "utils/guc.h"\n' >"$tmp/src/a/a.cpp"
printf '#include "inner/x.hpp"\n' >"$tmp/src/a/a.hpp"   # beside the file
printf '#include "c/c.hpp"\n' >"$tmp/src/a/inner/x.hpp"
printf '#pragma once\n' >"$tmp/src/b/b.hpp"
printf '#pragma once\n' >"$tmp/src/c/c.hpp"
check "no circle: passes" "^4 passed, 0 failed$" "$(rooms)"
printf '#include "a/a.hpp"\n' >"$tmp/src/c/c.cpp"
out=$(rooms)
check "a circle through an include resolved beside the file fails" "^rc=1$" "$out"
check "the circle is named" "^FAIL include circle between rooms: a, a/inner, c$" "$out"
check "with the includes that draw it" "a/inner -> c: a/inner/x.hpp:1 #include \"c/c.hpp\"" "$out"
check "a room off the circle passes" "^ok b$" "$out"
rm "$tmp/src/c/c.cpp"
check "the circle gone: passes" "^4 passed, 0 failed$" "$(rooms)"
# a hall and its room: b includes its room b/inner, which includes b back
mkdir -p "$tmp/src/b/inner"
printf '#include "b/b.hpp"\n' >"$tmp/src/b/inner/y.cpp"
check "a room that includes the hall it is in, which does not include it: passes" "^rc=0$" "$(rooms)"
printf '#pragma once\n#include "inner/y.hpp"\n' >"$tmp/src/b/b.hpp"
printf '#pragma once\n' >"$tmp/src/b/inner/y.hpp"
out=$(rooms)
check "a hall that includes its room, which includes the hall: a circle" "^FAIL include circle between rooms: b, b/inner$" "$out"
check "drawn by the hall's include, resolved beside its file" "b -> b/inner: b/b.hpp:2 #include \"inner/y.hpp\"" "$out"
check "and the check fails" "^rc=1$" "$out"
check "no list of arrows to except: a second argument is refused" "^usage: scripts/include-rooms.py \\[SRC_DIR\\]$" "$(rooms "$tmp/known" 2>&1)"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
