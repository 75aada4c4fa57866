#!/usr/bin/env bash
# Named locks: a registry of fixed keys, a lock that blocks, a timeout that names its holder, held_locks
# Run by scripts/demo.sh in a throw-away cluster (psql connects by default);
# on your own database: PGDATABASE=… bash examples/demo/10_locks.sh
set -euo pipefail
q() { psql -X -q -P pager=off -v ON_ERROR_STOP=1 "$@" 2>&1; }
say() { printf '\n-- %s\n' "$*"; }

say "register the subsystems once (in a migration): fixed keys, no hashing of names"
q <<'SQL'
\o /dev/null
SELECT concurrency.register_subsystem('outbox_relay', 1001, 'relays the outbox to the broker');
SELECT concurrency.register_subsystem('room_booking', 1002, 'one booking per room at a time', xact_only => true);
SELECT concurrency.register_subsystem('nightly_report', 1003);
\o
SELECT name, key, slot, xact_only, description FROM concurrency.subsystem
 WHERE name IN ('outbox_relay', 'room_booking', 'nightly_report') ORDER BY key;
SQL

say "worker-1 takes the relay lock and keeps its transaction open for 4 s"
PGAPPNAME=relay-worker-1 q -c "BEGIN" -c "SELECT concurrency.xact_lock('outbox_relay')" \
    -c "SELECT pg_sleep(4)" -c "COMMIT" >/dev/null &
worker=$!
sleep 1

say "worker-2: try_xact_lock does not wait"
PGAPPNAME=relay-worker-2 q -c "SELECT concurrency.try_xact_lock('outbox_relay') AS got_it"

say "worker-2: xact_lock with a timeout gives up (SQLSTATE 55P03) and says who holds the lock"
PGAPPNAME=relay-worker-2 q -c "SELECT concurrency.xact_lock('outbox_relay', timeout => '300 ms')" || true

say "every named lock in the database, with its holder (concurrency.held_locks)"
q -c "SELECT subsystem, resource, mode, granted, state, application, suspect_leak
        FROM concurrency.held_locks ORDER BY subsystem"

say "worker-2 waits without a timeout, and gets the lock when worker-1 commits"
PGAPPNAME=relay-worker-2 q -c "\\timing on" -c "SELECT concurrency.xact_lock('outbox_relay')" |
    sed -n 's/^Time: \([0-9]*\)[0-9]\{3\}\.[0-9]* ms.*/waited about \1 s, then got it/p'
wait "$worker"

say "a session lock left behind: its connection sits idle (as a pooled one would)"
(echo "SELECT concurrency.session_lock('nightly_report');"; sleep 4) |
    PGAPPNAME=pooled-app psql -X -q >/dev/null 2>&1 &
leaker=$!
sleep 1
q -c "SELECT subsystem, state, application, suspect_leak FROM concurrency.held_locks"
q -c "SELECT concurrency.xact_lock('nightly_report', timeout => '100 ms')" || true
say "the cure for a leak: end the idle session that holds it"
q -c "SELECT pg_terminate_backend(pid) AS terminated FROM concurrency.held_locks WHERE suspect_leak"
wait "$leaker" || true
q -c "SELECT concurrency.try_xact_lock('nightly_report') AS free_again"

say "resource locks: one room at a time, the other rooms stay free"
PGAPPNAME=booker-1 q -c "BEGIN" -c "SELECT concurrency.xact_lock('room_booking', 42)" \
    -c "SELECT pg_sleep(2)" -c "COMMIT" >/dev/null &
booker=$!
sleep 0.5
q -c "SELECT concurrency.try_xact_lock('room_booking', 42) AS room_42, concurrency.try_xact_lock('room_booking', 43) AS room_43"
q -c "SELECT subsystem, resource, application FROM concurrency.held_locks WHERE subsystem = 'room_booking'"
wait "$booker"

say "room_booking is xact_only: a session lock would leak behind a transaction-mode pooler"
q -c "SELECT concurrency.session_lock('room_booking', 42)" || true

say "several subsystems at once: always in ascending key order (no deadlock), one timeout for the call"
q <<'SQL'
BEGIN;
\o /dev/null
SELECT concurrency.xact_lock(ARRAY['nightly_report', 'outbox_relay'], timeout => '2 s');
\o
SELECT name, resource, level, mode, count FROM concurrency.my_locks ORDER BY name;
COMMIT;
SQL

say "a subsystem lock is the plain advisory lock on its key: code using the key and code using the name exclude each other"
q <<'SQL'
BEGIN;
\o /dev/null
SELECT pg_advisory_xact_lock(1001);
\o
SELECT subsystem, mode FROM concurrency.held_locks WHERE pid = pg_backend_pid();
COMMIT;
SQL

q -c "SELECT concurrency.unregister_subsystem(name) FROM concurrency.subsystem
       WHERE name IN ('outbox_relay', 'room_booking', 'nightly_report')" >/dev/null
