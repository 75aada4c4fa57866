#!/usr/bin/env bash
# Checks that ALTER EXTENSION concurrency_ext UPDATE, from every released
# version to the current one, gives the same objects as a fresh install.
#
# Released versions are listed in src/sql/RELEASES, one "<version> <commit>" a
# line. For each, the install script is built from that commit's NN_*.sql
# parts (src/sql/, or sql/ before 0.2.0), installed as that version next to the
# current module (as a package upgrade leaves them: old objects, new library),
# updated with ALTER EXTENSION … UPDATE along the installed
# concurrency_ext--A--B.sql scripts (committed; an unreleased one generated
# from src/sql/concurrency_ext--A--B/ by `make upgrade-scripts`),
# and its catalog (every member object, with definitions) compared with a
# fresh CREATE EXTENSION. Data made under a released version survives too:
# test/upgrade/<version>/*before.sql run before the update, *after.sql after
# it (see below; they may create roles: run against a server of your own).
# Needs a running server (PG* variables) whose
# extension directory is PG_CONFIG's, and the current version installed.
# Ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
pg_config=${PG_CONFIG:-pg_config}
extdir="$($pg_config --sharedir)/extension"
current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" concurrency_ext.control)
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
psql=(psql -X -q -v ON_ERROR_STOP=1 -At)
passed=0 failed=0

# Every object of the extension with its definition, in a stable order.
catalog_of() { # database
  "${psql[@]}" -d "$1" <<'SQL'
SELECT pg_describe_object(classid, objid, objsubid) || ' :: ' || coalesce(
         CASE classid
           WHEN 'pg_proc'::regclass THEN pg_get_functiondef(objid) || coalesce(obj_description(objid, 'pg_proc'), '')
           WHEN 'pg_class'::regclass THEN coalesce(pg_get_viewdef(objid), '') || coalesce(
               (SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || CASE WHEN attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY attnum)
                  FROM pg_attribute WHERE attrelid = objid AND attnum > 0 AND NOT attisdropped), '')
         END, '')
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'concurrency_ext')
   AND deptype = 'e'
 UNION ALL -- the triggers, indexes and row security policies of its tables
SELECT 'trigger ' || pg_get_triggerdef(t.oid)
  FROM pg_trigger t JOIN pg_depend d ON d.objid = t.tgrelid AND d.classid = 'pg_class'::regclass
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND NOT t.tgisinternal
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'concurrency_ext')
 UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_depend d ON d.objid = i.indrelid AND d.classid = 'pg_class'::regclass
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'concurrency_ext')
 UNION ALL
SELECT 'policy ' || p.policyname || ' on ' || p.schemaname || '.' || p.tablename || ' ' || p.cmd || ' ' || coalesce(p.qual, '')
  FROM pg_policies p WHERE p.schemaname = 'concurrency'
 UNION ALL -- the tables and sequences whose contents pg_dump keeps
SELECT 'dumped with condition ' || quote_literal(coalesce(e.extcondition[i], '')) || ' :: ' || e.extconfig[i]::regclass::text
  FROM pg_extension e, generate_subscripts(e.extconfig, 1) AS i
 WHERE e.extname = 'concurrency_ext'
 ORDER BY 1;
SQL
}

releases=()
[ -f src/sql/RELEASES ] && while read -r version commit; do
  [ -n "$version" ] && [ "${version:0:1}" != "#" ] && releases+=("$version $commit")
done < src/sql/RELEASES

"${psql[@]}" -d postgres -c "DROP DATABASE IF EXISTS upgrade_fresh" -c "CREATE DATABASE upgrade_fresh"
"${psql[@]}" -d upgrade_fresh -c "CREATE EXTENSION concurrency_ext"
fresh=$(catalog_of upgrade_fresh)
if [ -z "$fresh" ]; then echo "FAIL no catalog for a fresh install"; failed=$((failed + 1))
else echo "ok   a fresh install of $current has $(echo "$fresh" | wc -l) member objects"; passed=$((passed + 1)); fi

# Every shipped update script starts from a released version. One whose
# target is unreleased is what its parts give (src/sql/concurrency_ext--A--B/
# and every install part: `make upgrade-scripts`); one whose target is released
# is frozen: it has no parts any more and is the file of its release commit.
if make -s --no-print-directory check-upgrade-scripts PG_CONFIG="$pg_config"; then passed=$((passed + 1))
else echo "FAIL an update script is not what its parts give"; failed=$((failed + 1)); fi
for script in concurrency_ext--*--*.sql; do
  [ -e "$script" ] || continue
  step=${script%.sql}
  from=$(echo "$step" | sed -E 's/^concurrency_ext--(.*)--(.*)$/\1/')
  to=$(echo "$step" | sed -E 's/^concurrency_ext--(.*)--(.*)$/\2/')
  if printf '%s\n' "${releases[@]}" | grep -q "^$from "; then passed=$((passed + 1))
  else echo "FAIL $script starts from $from, which src/sql/RELEASES does not list"; failed=$((failed + 1)); fi
  released=$(printf '%s\n' "${releases[@]}" | sed -n "s/^$to //p")
  [ -n "$released" ] || continue
  if [ -e "src/sql/$step" ]; then
    echo "FAIL $to is released: src/sql/$step/ must go (the committed $script is its only source)"; failed=$((failed + 1))
  elif git show "$released:$script" 2>/dev/null | cmp -s - "$script"; then
    echo "ok   $script is the one released with $to"; passed=$((passed + 1))
  else
    echo "FAIL $script differs from the one released with $to (commit $released): a released update never changes"
    failed=$((failed + 1))
  fi
done

for release in "${releases[@]}"; do
  read -r version commit <<<"$release"
  [ "$version" = "$current" ] && continue
  old=$(mktemp -d)
  parts=src/sql
  git cat-file -e "$commit:$parts/00_schema.sql" 2>/dev/null || parts=sql
  if ! git archive "$commit" src $([ "$parts" = sql ] && echo sql) | tar -x -C "$old"; then
    echo "FAIL $version: commit $commit not found"; failed=$((failed + 1)); continue
  fi
  { printf '%s\n' "\\echo Use \"CREATE EXTENSION concurrency_ext\" to load this file. \\quit"
    cat "$old/$parts"/[0-9][0-9]_*.sql; } >"$extdir/concurrency_ext--$version.sql"
  "${psql[@]}" -d postgres -c "DROP DATABASE IF EXISTS upgrade_from" -c "CREATE DATABASE upgrade_from"
  # test/upgrade/<version>/*before.sql put live data (queues, tasks, leases,
  # grants) into the old version, in name order; after the update each
  # *after.sql checks that nothing was lost and everything works: it raises
  # an error otherwise, or, when NAME.after.out exists, its output (errors
  # included) must equal that file.
  live=test/upgrade/$version
  # test/upgrade/<version>/NAME.cpp: a program built against the release
  # commit's pure C++ sources (those on its "upgrade-check sources:" line), so
  # that the *before.sql files can run that version's own code (e.g. the DDL
  # its create_queue ran) instead of a copy of it: psql variable :NAME.
  programs=()
  for program in "$live"/*.cpp; do
    [ -e "$program" ] || continue
    name=$(basename "$program" .cpp)
    sources=$(sed -n 's|^// upgrade-check sources: ||p' "$program")
    # shellcheck disable=SC2086 # the sources are words
    if (cd "$old" && ${CXX:-g++} -std=c++17 -DFMT_HEADER_ONLY -Isrc -o "$name" "$OLDPWD/$program" $sources); then
      programs+=(-v "$name=$old/$name")
    else
      echo "FAIL $program does not build against $version ($commit)"; failed=$((failed + 1))
    fi
  done
  if "${psql[@]}" -d upgrade_from -c "CREATE EXTENSION concurrency_ext VERSION '$version'"; then
    for before in "$live"/*before.sql; do
      [ -e "$before" ] || continue
      "${psql[@]}" -d upgrade_from "${programs[@]}" -o /dev/null -f "$before" || { echo "FAIL $before"; failed=$((failed + 1)); }
    done
  fi
  if "${psql[@]}" -d upgrade_from -c "ALTER EXTENSION concurrency_ext UPDATE" \
       && [ "$(catalog_of upgrade_from)" = "$fresh" ]; then
    echo "ok   $version -> $current gives the objects of a fresh install"; passed=$((passed + 1))
    for after in "$live"/*after.sql; do
      [ -e "$after" ] || continue
      expected=${after%.sql}.out
      if [ -f "$expected" ]; then
        actual=$(psql -X -q -a -d upgrade_from -f "$after" 2>&1 | sed -E 's/^psql:[^:]*:[0-9]+: //')
        if [ "$actual" = "$(cat "$expected")" ]; then
          echo "ok   $version -> $current: $after gives $expected"; passed=$((passed + 1))
        else
          saved=$(mktemp --suffix=.out); echo "$actual" >"$saved"
          echo "FAIL $version -> $current: $after (output in $saved differs from $expected)"
          diff "$expected" "$saved" | head -40
          failed=$((failed + 1))
        fi
      elif "${psql[@]}" -d upgrade_from -f "$after" >/dev/null; then
        echo "ok   $version -> $current keeps the live data ($after)"; passed=$((passed + 1))
      else
        echo "FAIL $version -> $current: $after"; failed=$((failed + 1))
      fi
    done
  else
    echo "FAIL $version -> $current differs from a fresh install:"
    diff <(catalog_of upgrade_from) <(echo "$fresh") | head -40
    failed=$((failed + 1))
  fi
  rm -f "$extdir/concurrency_ext--$version.sql"; rm -rf "$old"
  "${psql[@]}" -d postgres -c "DROP DATABASE upgrade_from"
done
[ ${#releases[@]} -eq 0 ] && echo "ok   no released version precedes $current: nothing to upgrade from yet (src/sql/RELEASES)"

# The next release's update script takes every install part as it is
# (Makefile): each must run again over the current version's objects, with
# live data, and change nothing. Run them as an update to a version of their
# own, then compare and use what they ran over.
again="$current.again"
{ printf '%s\n' '\echo Use "ALTER EXTENSION concurrency_ext UPDATE" to load this file. \quit'
  cat src/sql/[0-9][0-9]_*.sql; } >"$extdir/concurrency_ext--$current--$again.sql"
"${psql[@]}" -d postgres -c "DROP DATABASE IF EXISTS upgrade_again" -c "CREATE DATABASE upgrade_again"
if "${psql[@]}" -d upgrade_again -o /dev/null <<SQL
CREATE EXTENSION concurrency_ext;
SELECT concurrency.register_subsystem('again_report', 4242);
SELECT concurrency.create_queue('again', lease => '1 hour');
SELECT concurrency.enqueue('again', jsonb_build_object('n', n)) FROM generate_series(1, 3) AS n;
CREATE TABLE again_claim AS SELECT task_id, lease_token FROM concurrency.dequeue('again');
SELECT concurrency.create_counter('again_balance', slots => 4, min_value => 0);
SELECT concurrency.counter_add('again_balance', 10);
ALTER EXTENSION concurrency_ext UPDATE TO '$again';
SQL
then
  if [ "$(catalog_of upgrade_again)" = "$fresh" ] \
     && [ "$("${psql[@]}" -d upgrade_again <<'SQL'
SELECT count(*) FROM (SELECT concurrency.complete('again', task_id, lease_token) FROM again_claim) AS c;
SELECT count(*) FROM concurrency.dequeue('again', 5);
SELECT concurrency.counter_value('again_balance');
SELECT count(*) FROM concurrency.subsystem WHERE name = 'again_report';
SQL
)" = "$(printf '1\n2\n10\n1')" ]; then
    echo "ok   the install parts run again over $current change nothing and keep its data"; passed=$((passed + 1))
  else
    echo "FAIL the install parts run again over $current:"
    diff <(catalog_of upgrade_again) <(echo "$fresh") | head -40
    failed=$((failed + 1))
  fi
else
  echo "FAIL the install parts do not run again over $current"; failed=$((failed + 1))
fi
rm -f "$extdir/concurrency_ext--$current--$again.sql"
"${psql[@]}" -d postgres -c "DROP DATABASE upgrade_again"
"${psql[@]}" -d postgres -c "DROP DATABASE upgrade_fresh"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
