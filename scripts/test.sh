#!/usr/bin/env bash
# Runs every suite of concurrency_ext against each tested PostgreSQL version
# (15 from Debian; 17 and 18 built from Debian's source packages by
# scripts/build-pg.sh) and ends with one line "N passed, M failed" summing
# them all, after one such line per version:
#   per version: pg_regress suites and isolation specs, the fuzz suite and the
#     upgrade check (each on a throw-away cluster of its own, scripts/cluster.sh),
#     on a cluster with the library preloaded the docs' SQL blocks
#     (test/docs/run_docs.py) and make installcheck leaving the lock history
#     alone (test/live/installcheck_live.py), and on 15 the durable-workflow
#     chaos test (test/chaos/workflows.sh: workers SIGKILLed, a server restart),
#     TAP tests (PostgreSQL::Test::Cluster, run as the postgres user because
#     initdb refuses root; they include PgBouncer and postgres_exporter);
#     on 18 the Citus suite (scripts/citus-check.sh; skipped without Citus);
#     on 17 the build, the pg_regress suites, isolation specs and upgrade
#     check only, reaching the server over TCP as pg_virtualenv does (its
#     build starts in the background at the beginning);
#   once: the dashboard's browser tests (clients/dashboard/test/run.sh), the
#     memory-safety run (PostgreSQL 15), the C++ formatting check
#     (scripts/format-check.sh), the structure checks (no include circle
#     between the rooms of src/: scripts/include-rooms.py; every entry point
#     found by its SQL name in ctags' tags: scripts/tags-check.sh),
#     GoogleTest unit tests (CTest),
#     the Node.js client's tests (clients/node, with PgBouncer; they include its
#     command line and the KEDA query of docs/operations.md), the Python
#     client's tests (clients/python/run-tests.sh, pytest, with PgBouncer),
#     the Go client's (clients/go/run-tests.sh, go vet and go test -race, with
#     PgBouncer; Go from PATH or /usr/local/go/bin),
#     the Debian package (built, installed, smoke-tested) and the check that the
#     module needs no shared library beyond the server and the C/C++ runtime.
# Usage: sudo scripts/test.sh
#   PG_VERSIONS="15" to test one version only (default "15 17 18"); 17 and
#   18 are built on first use (about 7 minutes each) and reused afterwards.
#   SKIP="sanitize package" to leave out steps (dashboard, sanitize, format, structure, scripts,
#   unit, node, python, go, package, chaos, and citus: the Citus suite on PostgreSQL 18);
#   CHAOS_WORKFLOWS: how many workflows the chaos test runs (default 1000, about 45 s on 2 cores);
#   CI runs them all.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[ "$(id -u)" = 0 ] || { echo "run as root (it installs packages and the extension): sudo $0" >&2; exit 2; }
. scripts/cluster.sh

bash scripts/deps.sh || exit 1
logs=$(mktemp -d /tmp/concurrency_ext-test.XXXXXX); chmod 755 "$logs"
trap 'cluster_stop; rm -rf "$logs"' EXIT
passed=0 failed=0        # everything
vpassed=0 vfailed=0      # the current version
count() { # passed failed name
  passed=$((passed + $1)); failed=$((failed + $2)); vpassed=$((vpassed + $1)); vfailed=$((vfailed + $2))
  echo "== $3: $1 passed, $2 failed ($(elapsed) since the start)"
}
elapsed() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }
# Adds the closing "N passed, M failed" line of a suite's log; a log without
# one (the suite died) counts as one failure and shows its tail.
count_summary() { # name log
  local line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$2" | tail -1)
  if [ -n "$line" ]; then count "$(echo "$line" | cut -d' ' -f1)" "$(echo "$line" | cut -d' ' -f3)" "$1"
  else tail -n 30 "$2"; count 0 1 "$1"; fi
}
skipped() { case " ${SKIP:-} " in *" $1 "*) echo "== $1: skipped (SKIP)"; return 0;; esac; return 1; }

# A copy of the source tree (tracked and new files, no build products), so
# that each version builds in a tree of its own and the postgres user can run
# the TAP tests in it.
copy_tree() { # destination
  mkdir -p "$1"
  git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$1"
  chmod -R a+rX "$1"
}

# pg_regress and isolation output: "test name ... ok" lines, then a summary per run.
count_installcheck() { # name log dir [runs: how many summaries it must have, default 4]
  local started ok bad summaries d runs=${4:-4}
  grep -E '\.\.\. |^(not )?ok +[0-9]+ |tests? (passed|failed)' "$2"
  started=$(grep -cE '^(test |     |ok +[0-9]+ +[-+] |not ok +[0-9]+ +[-+] )' "$2")
  ok=$(grep -cE '^((test |     )\S+ +\.\.\. +ok |ok +[0-9]+ +[-+] )' "$2")
  bad=$((started - ok))
  # each run (regress, isolation, the border's regress and isolation) must
  # end with its summary; a run that died early fails
  summaries=$(grep -cE 'tests? (passed|failed)|^# All [0-9]+ tests passed|^# [0-9]+ of [0-9]+ tests failed' "$2")
  [ "$summaries" -lt "$runs" ] && bad=$((bad + runs - summaries))
  for d in "$3/regression.diffs" "$3/output_iso/regression.diffs" "$3/test/module/regression.diffs" \
           "$3/test/module/output_iso/regression.diffs"; do
    [ -s "$d" ] && { echo "---- $d"; head -n 200 "$d"; }
  done
  count "$ok" "$bad" "$1"
}

# PostgreSQL 17: the regression and isolation suites and the upgrade check
# only (15 and 18 run everything).
suites_only() { [ "$1" = 17 ]; }

test_version() { # version pg_config
  local v=$1 pg_config=$2 tree=$logs/pg$1 extra=()
  # this version's psql, pg_ctl and pgbench first
  local -x PATH="$("$pg_config" --bindir):$PATH"
  echo; echo "######## PostgreSQL $v ($pg_config)"
  vpassed=0 vfailed=0
  copy_tree "$tree"
  # A PostgreSQL built without --enable-tap-tests still has the TAP modules
  # (scripts/build-pg.sh installs them); tell its PGXS to use them.
  grep -q '^enable_tap_tests.*yes' "$("$pg_config" --pgxs | sed 's|src/makefiles/pgxs.mk|src/Makefile.global|')" \
    || extra=(enable_tap_tests=yes PROVE=prove)

  echo "== $v: build and install (PGXS)"
  if ! (cd "$tree" && make -s -j2 PG_CONFIG="$pg_config" WERROR=1 && make -s install PG_CONFIG="$pg_config" \
        && make -s test-module PG_CONFIG="$pg_config" WERROR=1 && make -s install-test-module PG_CONFIG="$pg_config") >"$logs/build-$v.log" 2>&1; then
    tail -n 40 "$logs/build-$v.log"; count 0 1 "$v build"
    echo "PostgreSQL $v: $vpassed passed, $vfailed failed"; return
  fi
  # The module must load on a server that has nothing but PostgreSQL and the
  # C/C++ runtime: no libfmt.so (fmt is header-only) or anything else.
  local deps
  deps=$(ldd "$("$pg_config" --pkglibdir)/concurrency_ext.so" | awk '{print $1}' \
         | grep -vE '^(linux-vdso|/lib64/ld-linux|libstdc\+\+|libgcc_s|libc|libm)\.so' | grep -vE '^/lib64/ld-linux')
  if [ -z "$deps" ]; then count 1 0 "$v module links only the C/C++ runtime (ldd)"
  else echo "unexpected shared libraries: $deps"; count 0 1 "$v module links only the C/C++ runtime (ldd)"; fi

  # 15 and 18 reach the server through its Unix socket, 17 over TCP, as
  # pg_virtualenv does: the suites pass either way
  local tcp=() over=""
  suites_only "$v" && tcp=("listen_addresses = '127.0.0.1'") over=" (over TCP)"
  echo "== $v: regression and isolation suites (and the border module's)$over"
  if cluster_start "$pg_config" "${tcp[@]}"; then
    [ -n "$over" ] && export PGHOST=127.0.0.1
    (cd "$tree" && make -s installcheck PG_CONFIG="$pg_config" ISOLATION=; make -s installcheck PG_CONFIG="$pg_config" REGRESS=
     make -s installcheck-border PG_CONFIG="$pg_config") >"$logs/installcheck-$v.log" 2>&1
    # the test-only border module must not stay in the server
    (cd "$tree" && make -s uninstall-test-module PG_CONFIG="$pg_config") >/dev/null 2>&1
    count_installcheck "$v pg_regress + isolation$over" "$logs/installcheck-$v.log" "$tree"

    if ! suites_only "$v"; then
    echo "== $v: hostile-input fuzzing (test/fuzz)"
    psql -Xqc "CREATE EXTENSION concurrency_ext" >"$logs/fuzz-$v.log" 2>&1 \
      && /usr/bin/python3 test/fuzz/fuzz.py >>"$logs/fuzz-$v.log" 2>&1
    grep -E '^(ok|FAIL) ' "$logs/fuzz-$v.log"
    count_summary "$v fuzz" "$logs/fuzz-$v.log"
    fi

    echo "== $v: upgrades from every released version (scripts/upgrade-check.sh)"
    PG_CONFIG=$pg_config bash scripts/upgrade-check.sh >"$logs/upgrade-$v.log" 2>&1
    grep -E '^(ok|FAIL) ' "$logs/upgrade-$v.log"
    count_summary "$v upgrade" "$logs/upgrade-$v.log"
    cluster_stop
  else
    count 0 1 "$v cluster start"
  fi
  if suites_only "$v"; then
    echo "PostgreSQL $v: $vpassed passed, $vfailed failed"
    version_lines+=("PostgreSQL $v: $vpassed passed, $vfailed failed"); return
  fi

  # The queue's suites again on a server where every claim is the claim
  # statement: the direct claim (src/queue/claim_direct.cpp) must change
  # nothing that they can see. This server preloads the module, so that
  # dequeue(…, wait) is woken by commits through shared memory here (the
  # server above has waiters poll): queue_wait passes either way.
  echo "== $v: the queue's regression and isolation suites with concurrency.direct_claim = off, module preloaded"
  if cluster_start "$pg_config" "concurrency.direct_claim = off" "shared_preload_libraries = 'concurrency_ext'"; then
    local queue_regress queue_isolation
    queue_regress=$(cd "$tree/sql" && ls 2*_queue*.sql | sed 's/\.sql$//' | tr '\n' ' ')
    queue_isolation=$(cd "$tree/test/isolation/specs" && ls queue_*.spec | sed 's/\.spec$//' | tr '\n' ' ')
    (cd "$tree" && make -s installcheck PG_CONFIG="$pg_config" REGRESS="$queue_regress" ISOLATION=
     make -s installcheck PG_CONFIG="$pg_config" REGRESS= ISOLATION="$queue_isolation") >"$logs/installcheck-statement-$v.log" 2>&1
    count_installcheck "$v queue suites, direct_claim off" "$logs/installcheck-statement-$v.log" "$tree" 2
    cluster_stop
  else
    count 0 1 "$v cluster start (direct_claim off)"
  fi

  # A server as users run it, with the library preloaded (the lock-history
  # sampler running): the docs' SQL examples run as pasted, and make
  # installcheck passes there and leaves the server's lock history alone.
  if cluster_start "$pg_config" "shared_preload_libraries = 'concurrency_ext'" "concurrency.history_interval = '20ms'"; then
    echo "== $v: every SQL block of README.md and docs/**/*.md, as pasted (test/docs/run_docs.py)"
    # the client READMEs' install lines and the getting-started programs: once, on the first version
    local first=${PG_VERSIONS:-15 18}
    DOCS_CLIENTS=$([ "$v" = "${first%% *}" ] && echo 1 || echo 0) \
      /usr/bin/python3 test/docs/run_docs.py >"$logs/docs-$v.log" 2>&1
    grep -E '^FAIL ' "$logs/docs-$v.log"
    count_summary "$v docs" "$logs/docs-$v.log"

    echo "== $v: make installcheck on a live server with the preload (test/live/installcheck_live.py)"
    /usr/bin/python3 test/live/installcheck_live.py "$pg_config" "$tree" >"$logs/live-$v.log" 2>&1
    grep -E '^(ok|FAIL) ' "$logs/live-$v.log"
    grep -q '^FAIL ' "$logs/live-$v.log" && sed -n '/^FAIL /,$p' "$logs/live-$v.log" | head -n 80
    count_summary "$v installcheck on a live server" "$logs/live-$v.log"

    # last on this server: it restarts it
    if [ "$v" = 15 ] && ! skipped chaos; then
      echo "== $v: durable workflows with workers SIGKILLed and a server restart (test/chaos/workflows.sh)"
      bash test/chaos/workflows.sh >"$logs/chaos-$v.log" 2>&1
      grep -E '^(ok|FAIL) |^workflows ' "$logs/chaos-$v.log"
      count_summary "$v chaos: workflows" "$logs/chaos-$v.log"
    fi
    cluster_stop
  else
    count 0 1 "$v cluster start (preloaded)"
  fi

  echo "== $v: TAP tests"
  chown -R postgres "$tree"
  (cd "$tree" && runuser -u postgres -- make -s installcheck-tap PG_CONFIG="$pg_config" "${extra[@]}") >"$logs/tap-$v.log" 2>&1
  grep -vE '^(echo|\+\+\+)' "$logs/tap-$v.log" | tail -n 40
  # failed subtests, plus one for each test file that died after passing all
  # the subtests it ran ("Dubious" ... "All N subtests passed")
  local total nfail died
  total=$(grep -oE 'Tests=[0-9]+' "$logs/tap-$v.log" | tail -1 | cut -d= -f2)
  nfail=$(grep -oE 'Failed [0-9]+/[0-9]+ subtests' "$logs/tap-$v.log" | awk '{split($2,a,"/"); s+=a[1]} END {print s+0}')
  died=$(grep -A1 'Dubious' "$logs/tap-$v.log" | grep -cE 'All [0-9]+ subtests passed|No subtests run')
  if [ -z "$total" ]; then count 0 1 "$v TAP"; else
    count $((total - nfail)) $((nfail + died)) "$v TAP"
    [ $((nfail + died)) = 0 ] && ! grep -q 'Result: PASS' "$logs/tap-$v.log" && count 0 1 "$v TAP (result)"
  fi
  [ "${KEEP_TAP_LOGS:-}" ] && cp -r "$tree/tmp_check" "/tmp/concurrency_ext-tap-$v.$$" 2>/dev/null

  if [ "$v" = 18 ] && ! skipped citus; then
    echo "== 18: Citus: named locks, diagnostics and distributed queues on a coordinator and two workers (scripts/citus-check.sh)"
    local ports=() p
    while [ ${#ports[@]} -lt 3 ]; do
      p=$(free_port) || break
      case " ${ports[*]} " in *" $p "*) ;; *) ports+=("$p") ;; esac
    done
    CITUS_PORTS="${ports[*]}" bash scripts/citus-check.sh >"$logs/citus.log" 2>&1
    grep -E '^(ok|FAIL|skip) |^Citus' "$logs/citus.log"
    count_summary "18 Citus" "$logs/citus.log"
  fi
  echo "PostgreSQL $v: $vpassed passed, $vfailed failed"
  version_lines+=("PostgreSQL $v: $vpassed passed, $vfailed failed")
}

# The valgrind run (scripts/sanitize.sh: its own server, a private copy of
# PostgreSQL 15, one backend at a time) takes a core for about twenty
# minutes: it runs beside the suites of each version, and is reported with
# the steps run once.
sanitize_pid=
if ! skipped sanitize; then
  bash scripts/sanitize.sh >"$logs/sanitize.log" 2>&1 &
  sanitize_pid=$!
fi

# ---- PostgreSQL 17: its build (scripts/build-pg.sh 17, about 7 minutes of
# two cores, niced under the suites) runs beside 15's suites from here on,
# and its suites run when it is done.
pg17_pid=
case " ${PG_VERSIONS:-15 17 18} " in
*" 17 "*) nice -n 10 bash scripts/build-pg.sh 17 >"$logs/build-pg17.log" 2>&1 & pg17_pid=$! ;;
esac
# A version built from Debian's source package: tested with the pg_config
# that the build printed last, or reported as skipped where the source
# cannot be had.
test_built() { # version build-log
  local pgc; pgc=$(tail -1 "$2")
  if [ -x "$pgc" ]; then test_version "$1" "$pgc"
  elif grep -q 'skipped, source unavailable' "$2"; then
    echo "PostgreSQL $1: skipped, source unavailable"; version_lines+=("PostgreSQL $1: skipped, source unavailable")
  else
    tail -n 30 "$2"; vpassed=0 vfailed=0; count 0 1 "building PostgreSQL $1"
    version_lines+=("PostgreSQL $1: 0 passed, 1 failed (build)")
  fi
}
# ----

version_lines=()
for v in ${PG_VERSIONS:-15 17 18}; do
  case $v in
    17) wait "$pg17_pid"; test_built 17 "$logs/build-pg17.log" ;;
    18) bash scripts/build-pg.sh 18 >"$logs/build-pg18.log" 2>&1; pg18=$(tail -1 "$logs/build-pg18.log")
        test_built 18 "$logs/build-pg18.log" ;;
    *) test_version "$v" "/usr/lib/postgresql/$v/bin/pg_config" ;;
  esac
done

echo; echo "######## once"
vpassed=0 vfailed=0
# Before the package check: that one's dpkg -r takes the installed module away.
if ! skipped dashboard; then
  echo "== dashboard: the page in headless Chromium against a real server (clients/dashboard/test/run.sh)"
  case " ${PG_VERSIONS:-15 17 18} " in
    *" 15 "*) dashboard_pg=/usr/lib/postgresql/15/bin/pg_config ;;
    *) dashboard_pg=${pg18:-} ;;
  esac
  PG_CONFIG=$dashboard_pg bash clients/dashboard/test/run.sh >"$logs/dashboard.log" 2>&1
  grep -E '^(not )?ok [0-9]+ ' "$logs/dashboard.log"
  grep -q '^not ok' "$logs/dashboard.log" && grep -A30 '^not ok' "$logs/dashboard.log" | head -80
  count_summary dashboard "$logs/dashboard.log"
fi
if [ -n "$sanitize_pid" ]; then
  echo "== memory safety: suites under valgrind with a UBSan build (scripts/sanitize.sh, PostgreSQL 15; started at the beginning)"
  wait "$sanitize_pid"
  grep -E 'valgrind errors|Invalid|runtime error|\.\.\. +FAILED|\.\.\. +failed' "$logs/sanitize.log" | head -20
  grep -q -E '\.\.\. +(FAILED|failed)' "$logs/sanitize.log" && sed -n '/^diff /,$p' "$logs/sanitize.log" | head -80
  count_summary sanitize "$logs/sanitize.log"
fi

if ! skipped format; then
  echo "== C++ formatting (scripts/format-check.sh: clang-format --dry-run --Werror)"
  bash scripts/format-check.sh >"$logs/format.log" 2>&1
  grep -E '^FAIL ' "$logs/format.log" | head -20
  count_summary format "$logs/format.log"
fi

# ---- structure: no include circle between the rooms of src/, every entry
# point found by its SQL name in ctags' tags (a second each)
if ! skipped structure; then
  echo "== no include circle between the rooms of src/ (scripts/include-rooms.py)"
  /usr/bin/python3 scripts/include-rooms.py >"$logs/rooms.log" 2>&1
  grep -E '^(FAIL|    )' "$logs/rooms.log" | head -40
  count_summary "include rooms" "$logs/rooms.log"
  bash test/scripts/include_rooms.sh >"$logs/rooms-test.log" 2>&1
  grep -E '^FAIL ' "$logs/rooms-test.log"
  count_summary "include rooms on fake trees (test/scripts/include_rooms.sh)" "$logs/rooms-test.log"
  echo "== entry points found by their SQL name in ctags' tags (scripts/tags-check.sh)"
  bash scripts/tags-check.sh >"$logs/tags.log" 2>&1
  grep -E '^FAIL ' "$logs/tags.log" | head -20
  count_summary tags "$logs/tags.log"
fi
# ----

if ! skipped scripts; then
  echo "== the PostgreSQL builder keeps a tree per prefix and major version (test/scripts/build_pg_prefix.sh, --dry-run)"
  bash test/scripts/build_pg_prefix.sh >"$logs/scripts.log" 2>&1
  grep -E '^FAIL ' "$logs/scripts.log" | head -20
  count_summary scripts "$logs/scripts.log"
fi

if ! skipped unit; then
  echo "== unit tests (CMake + CTest)"
  if cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug >"$logs/cmake.log" 2>&1 && cmake --build build -j2 >>"$logs/cmake.log" 2>&1; then
    (cd build && ctest --output-on-failure) >"$logs/ctest.log" 2>&1
    tail -n 20 "$logs/ctest.log"
    line=$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$logs/ctest.log")
    total=$(echo "$line" | sed -E 's/.*out of ([0-9]+).*/\1/')
    nfail=$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed.*/\1/')
    [ -n "$total" ] && count $((total - nfail)) "$nfail" "unit" || count 0 1 "unit"
  else
    cat "$logs/cmake.log"; count 0 1 "unit (build)"
  fi
fi

# the clients before the package check, whose dpkg -r takes the extension out
# of the system's PostgreSQL 15 again
if ! skipped node; then
  echo "== Node.js client: clients/node on PostgreSQL 15, with PgBouncer (clients/node/test/run.sh)"
  PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config bash clients/node/test/run.sh >"$logs/node.log" 2>&1
  grep -E '^[[:space:]]*(✔|✖) ' "$logs/node.log" | grep -vE '^[[:space:]]{4,}'
  grep -q '^ℹ fail [1-9]' "$logs/node.log" && sed -n '/failing tests:/,$p' "$logs/node.log" | head -80
  count_summary node "$logs/node.log"
fi
if ! skipped python; then
  echo "== Python client: pytest on PostgreSQL 15, with PgBouncer (clients/python/run-tests.sh)"
  bash clients/python/run-tests.sh /usr/lib/postgresql/15/bin/pg_config >"$logs/python.log" 2>&1
  grep -E '^(FAILED|ERROR) |^SKIPPED' "$logs/python.log"
  count_summary python "$logs/python.log"
fi
if ! skipped go; then
  echo "== Go client: go vet and go test -race on PostgreSQL 15, with PgBouncer (clients/go/run-tests.sh)"
  bash clients/go/run-tests.sh /usr/lib/postgresql/15/bin/pg_config >"$logs/go.log" 2>&1
  grep -E '^--- (FAIL|SKIP): ' "$logs/go.log"
  count_summary go "$logs/go.log"
fi

if ! skipped package; then
  echo "== Debian package (scripts/package-check.sh)"
  bash scripts/package-check.sh >"$logs/package.log" 2>&1
  grep -E '^(ok|FAIL) ' "$logs/package.log"
  count_summary package "$logs/package.log"
fi
version_lines+=("once: $vpassed passed, $vfailed failed")

echo
printf '%s\n' "${version_lines[@]}"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
