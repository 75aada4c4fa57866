#!/usr/bin/env bash
# scripts/build-pg.sh keeps one build tree per prefix, and configures again
# a tree whose config.status names another prefix (issue 64: a tree built for
# PG18_PREFIX=/opt/pg18 was reused for the default prefix, installed into
# /opt/pg18, and the TAP modules were then missing from the default prefix);
# for each major version it builds (17, 18), and a tree of one major version
# is never taken for another's. scripts/build-pg18.sh is build-pg.sh 18.
# Checked with --dry-run on fake trees: nothing is downloaded or built.
# Ends with "N passed, M failed".
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { # name expected-pattern output
  if printf '%s\n' "$3" | grep -qE "$2"; then passed=$((passed + 1)); echo "ok $1"
  else failed=$((failed + 1)); echo "FAIL $1: got: $3"; fi
}
dry() { # major prefix [work]
  env "PG$1_PREFIX=$2" "PG$1_WORK=${3:-$tmp/work$1}" bash "$here/scripts/build-pg.sh" "$1" --dry-run
}
# a source tree of major version $3 configured for prefix $2, in tree $1
fake_tree() { # dir prefix major
  mkdir -p "$1/postgresql-$3.1"
  printf '#!/bin/sh\n[ "$1" = --config ] && echo "'"'"'--prefix=%s'"'"' '"'"'--enable-tap-tests'"'"'"\n' "$2" \
    >"$1/postgresql-$3.1/config.status"
  chmod +x "$1/postgresql-$3.1/config.status"
}
tree_of() { printf '%s' "$1" | sed -E 's/^tree ([^:]*):.*/\1/'; }

for m in 17 18; do
  a=$tmp/a/pg$m b=$tmp/b/pg$m
  out_a=$(dry $m "$a"); out_b=$(dry $m "$b")
  check "$m: nothing built yet: extract and configure" "would be extracted and configured for $a" "$out_a"
  tree_a=$(tree_of "$out_a") tree_b=$(tree_of "$out_b")
  check "$m: each prefix has a tree of its own" "^x$" "$([ "$tree_a" != "$tree_b" ] && echo x)"
  # the old layout: one tree in the work directory, configured for prefix a
  fake_tree "$tmp/work$m" "$a" $m
  check "$m: a tree of the old layout is not reused for another prefix" "would be extracted and configured for $b" "$(dry $m "$b")"
  fake_tree "$tree_a" "$a" $m
  check "$m: a tree configured for its prefix is reused" "configured for $a, reused" "$(dry $m "$a")"
  check "$m: the other prefix still gets a tree of its own" "would be extracted and configured for $b" "$(dry $m "$b")"
  # a prefix's tree configured for another prefix (copied, or by hand) is configured again
  fake_tree "$tree_b" "$a" $m
  check "$m: a tree configured for another prefix is configured again" "would be configured for $b" "$(dry $m "$b")"
done
# one work directory for both: a tree of 18 for the prefix is not 17's
c=$tmp/c/pg
out=$(dry 18 "$c" "$tmp/shared"); fake_tree "$(tree_of "$out")" "$c" 18
check "a tree of 18 is not taken for 17's" "would be extracted and configured for $c" "$(dry 17 "$c" "$tmp/shared")"
check "build-pg18.sh is build-pg.sh 18" "configured for $c, reused" \
  "$(PG18_PREFIX=$c PG18_WORK=$tmp/shared bash "$here/scripts/build-pg18.sh" --dry-run)"
check "the default prefix of 17 is /opt/concurrency_ext/pg17" "configured for /opt/concurrency_ext/pg17\$" \
  "$(env -u PG17_PREFIX PG17_WORK=$tmp/work-default bash "$here/scripts/build-pg.sh" 17 --dry-run)"
check "a major version it does not build is refused" "^usage:" "$(bash "$here/scripts/build-pg.sh" 16 --dry-run 2>&1)"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
