#!/usr/bin/env bash
# Builds the Debian package the way the PostgreSQL apt repository builds
# extensions (debian/, pg_buildext: dpkg-buildpackage -us -uc -b), installs
# postgresql-15-concurrency-ext, and checks it in a fresh cluster: the module
# needs no library beyond the server and the C/C++ runtime, CREATE EXTENSION
# works from the package's files, and a smoke test of each capability passes.
# The package is removed again at the end. Ends with "N passed, M failed".
# Usage: sudo scripts/package-check.sh        (scripts/test.sh runs it)
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 2; }
. scripts/cluster.sh
passed=0 failed=0
check() { # description command...
  local what=$1; shift
  if out=$("$@" 2>&1); then echo "ok   $what"; passed=$((passed + 1))
  else echo "FAIL $what"; echo "$out" | tail -n 30; failed=$((failed + 1)); fi
}
version=15
package=postgresql-$version-concurrency-ext
work=$(mktemp -d /tmp/concurrency_ext-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT

# A clean copy of the tree: dpkg-buildpackage writes the .deb next to it.
mkdir -p "$work/src"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$work/src"
build() { (cd "$work/src" && DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" dpkg-buildpackage -us -uc -b); }
check "dpkg-buildpackage -us -uc -b" build
deb=$(ls "$work"/${package}_*.deb 2>/dev/null | head -1)
check "it produced $package" test -f "$deb"
[ -f "$deb" ] || { echo "$passed passed, $failed failed"; exit 1; }

# Only the server and the C/C++ runtime at run time (no libfmt.so).
runtime_only() {
  local so deps
  dpkg-deb -x "$deb" "$work/root"
  so=$(find "$work/root" -name concurrency_ext.so | head -1)
  [ -n "$so" ] || { echo "no concurrency_ext.so in the package"; return 1; }
  deps=$(ldd "$so" | awk '{print $1}' | grep -vE '^(linux-vdso|libstdc\+\+|libgcc_s|libc|libm)\.so|^/lib64/ld-linux')
  [ -z "$deps" ] || { echo "needs: $deps"; return 1; }
}
check "the packaged module needs only the C/C++ runtime (ldd)" runtime_only
check "its Depends name the server" sh -c "dpkg-deb -f '$deb' Depends | grep -q 'postgresql-$version'"

check "dpkg -i $(basename "$deb")" dpkg -i "$deb"
# The files in place are the package's (not left over from a make install).
check "dpkg --verify $package" sh -c "test -z \"\$(dpkg --verify $package)\""

smoke() {
  local out rc
  cluster_start "/usr/lib/postgresql/$version/bin/pg_config" || return 1
  out=$(psql -X -q -v ON_ERROR_STOP=1 -At 2>&1 <<'SQL'
CREATE EXTENSION concurrency_ext;
SELECT concurrency.version() = (SELECT extversion FROM pg_extension WHERE extname = 'concurrency_ext');
SELECT concurrency.register_subsystem('nightly_report', 1001);
BEGIN; SELECT concurrency.xact_lock('nightly_report');
SELECT count(*) = 1 FROM concurrency.my_locks WHERE name = 'nightly_report'; COMMIT;
SELECT concurrency.create_queue('emails');
SELECT concurrency.enqueue('emails', '{"to": "a@example.com"}') > 0;
SELECT concurrency.complete('emails', task_id, lease_token) FROM concurrency.dequeue('emails');
SELECT ready = 0 AND leased = 0 FROM concurrency.queue_stats WHERE queue = 'emails';
SELECT count(*) = 0 FROM concurrency.lock_tree;
SQL
)
  rc=$?
  cluster_stop          # (check runs this in a subshell: stop the cluster here)
  echo "$out"
  # every one of the five checks printed true
  [ "$rc" = 0 ] && [ "$(echo "$out" | grep -c '^t$')" = 5 ] && ! echo "$out" | grep -q '^f$'
}
check "CREATE EXTENSION and a smoke test of each capability in a fresh cluster" smoke
check "dpkg -r $package" dpkg -r "$package"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
