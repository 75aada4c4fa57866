#!/usr/bin/env python3
"""Hostile-input fuzzing of every SQL function of concurrency_ext.

Finds the functions of schema `concurrency` in pg_proc and calls each one many
times with NULLs, empty and very long strings, control characters, quotes and
SQL fragments in names, extreme numbers and intervals, and random mixes of
them. Every call must end in success or an ERROR with a documented SQLSTATE;
the server must not restart (no backend crash: pg_postmaster_start_time()
unchanged), and the registry and queue catalog must be consistent afterwards.

Prints one line per function and ends with "N passed, M failed".
Connection from the usual PG* environment variables.
Usage: fuzz.py [--calls-per-function N] [--seed S]
"""
import argparse
import random
import sys

import psycopg
from psycopg import sql

# SQLSTATEs docs/errors.md documents, plus the generic out-of-range classes a
# client can provoke with extreme numbers or times.
DOCUMENTED = {
    "22004",  # null value not allowed
    "22023",  # invalid parameter value
    "42704",  # undefined object
    "42710",  # duplicate object
    "42P07",  # duplicate table (create_queue: a name another queue's relations use)
    "23505",  # unique violation (subsystem name or key taken)
    "23514",  # check violation (a counter's bound would be crossed)
    "55P03",  # lock not available
    "CE001",  # lease lost
    "42501",  # insufficient privilege
    "22003",  # numeric value out of range
    "22008",  # datetime field overflow
    "2BP01",  # dependent objects still exist
    "25006",  # read-only transaction (hot standby)
    "54000",  # program limit exceeded (no free resource-lock slot)
    "40001",  # enqueue with a dedupe_key whose holder kept disappearing: retry
    "25001",  # run_transaction / run_ddl inside a transaction block
    "2D000",  # run_transaction / run_ddl statements with transaction control
    "25000",  # a named lock during a parallel operation
    "39P01",  # the registry trigger function called directly
    "0A000",  # a set-returning function where no set is accepted; a named lock on a Citus worker node; a distributed queue where there is no Citus coordinator
    "55000",  # lock history without the preload; a queue function under a module newer than the database's extension; queue permissions while the extension's objects are older than the module; an internal function of distributed queues on a queue that is not distributed
}

# A function without arguments has no bad input, so any error from one is a
# bug, except these preconditions: the lock history needs
# shared_preload_libraries (55000), and its reset is for administrators (42501).
ARGLESS_PRECONDITIONS = {
    "lock_history_episodes": {"55000"},
    "lock_history_status": {"55000"},
    "lock_history_reset": {"55000", "42501"},
}
# docs/errors.md also lists 53200 (out of memory) and XX000 (internal error):
# no input may provoke them, so they stay failures here.

HOSTILE_TEXT = [
    None, "", " ", "a", "fuzz_a", "fuzz_b", "Fuzz-Ä", "x" * 48, "y" * 49, "z" * 63, "w" * 64,
    "n" * 10000, "tab\there", "new\nline", "nul\x01byte", "\x7f", "\x1b[2J", "quote'd", 'dq"x',
    "'); DROP TABLE concurrency.subsystem; --", "\"; DROP SCHEMA concurrency CASCADE; --",
    "$$", "%I%L%s", "\\", "q_" + "a" * 46, "ñandú", "\u00a0nbsp", "\u2003em", "a\u3000b",
    "pg_catalog", "public", "NULL", "🦀", "a.b", "*",
]
BIGINTS = [None, 0, 1, -1, 42, 2**31 - 1, -2**31, 2**31, 2**32, 2**63 - 1, -2**63, 7, 123456789012]
INTS = [None, 0, 1, -1, 2, 5, 50, 1000, 2**31 - 1, -2**31]
BOOLS = [None, True, False]
INTERVALS = [None, "0", "-1 second", "1 microsecond", "10 milliseconds", "1 second", "30 seconds",
             "1 day", "100 years", "-100 years", "178000000 years", "-178000000 years", "1 mon -30 days"]
# dequeue's wait: every kind of bad value, and waits short enough that
# thousands of calls on an empty queue stay within the suite's budget (a
# long wait on an empty queue only ends at its deadline or statement_timeout)
WAITS = [None, "0", "-1 second", "1 microsecond", "1 millisecond", "-100 years", "-178000000 years",
         "178000000 years", "1 mon -30 days", "-1 mon 30 days"]
TIMESTAMPS = [None, "now", "infinity", "-infinity", "4713-01-01 00:00:00+00 BC", "294276-12-31 00:00:00+00",
              "2000-01-01 00:00:00+00", "2100-01-01 00:00:00+00"]
# Role names for the `role name` of grant_queue / revoke_queue: real roles,
# 'public', missing ones, and names that look like SQL.
ROLES = ["fuzz_user", "fuzz_worker", "public", "postgres"] * 3 + [
    None, "PUBLIC", "-", "", "no_such_role", "x'); DROP TABLE concurrency.queue; --", 'r"; DROP ROLE fuzz_user; --',
    "n" * 100]
PERMISSIONS = ["enqueue", "work", "read", "manage"] * 4 + ["Work", "all", "", None]
NUMERICS = [None, "0", "1", "-1", "3", "-3", "0.5", "-0.001", "1e20", "-1e20", "NaN", "Infinity", "-Infinity",
            "1e131071", "-1e131071", "12345678901234567890.123456789"]
JSONS = [None, "{}", "[]", "null", '"x"', '{"a": [1, 2, {"b": null}]}', "[" * 200 + "]" * 200,
         '{"k": "' + "v" * 5000 + '"}']


class Raw:
    """A SQL expression to splice in as it is (for composite arguments)."""
    def __init__(self, expr):
        self.expr = expr

    def __repr__(self):
        return self.expr


def crafted_lock_row(rng):
    """A pg_locks row, real or made up with hostile field values."""
    if rng.random() < 0.3:
        return Raw("(SELECT l FROM pg_catalog.pg_locks l ORDER BY random() LIMIT 1)")
    locktype = rng.choice(["relation", "extend", "frozenid", "page", "tuple", "transactionid", "virtualxid",
                           "spectoken", "object", "userlock", "advisory", "bogus", "", None])
    oid = lambda: rng.choice([0, 1, 1259, 16384, 4294967295, None])
    fields = [
        sql_literal(locktype), f"{sql_literal(oid())}::oid", f"{sql_literal(oid())}::oid",
        f"{sql_literal(rng.choice([0, -1, 2**31 - 1, None]))}::int",
        f"{sql_literal(rng.choice([0, -1, 32767, -32768, None]))}::int2",
        sql_literal(rng.choice(["1/1", "", "x" * 300, None])),
        f"{sql_literal(rng.choice([0, 1, 4294967295, None]))}::text::xid",
        f"{sql_literal(oid())}::oid", f"{sql_literal(oid())}::oid",
        f"{sql_literal(rng.choice([0, 1, 2, 3, 15, 16, 17, 65535 - 65536, 32767, -32768, None]))}::int2",
        sql_literal(rng.choice(["3/7", "", None])),
        f"{sql_literal(rng.choice([0, 1, -1, 2**31 - 1, None]))}::int",
        sql_literal(rng.choice(["ExclusiveLock", "AccessExclusiveLock", "ShareLock", "bogus", "", None])),
        f"{sql_literal(rng.choice([True, False, None]))}::bool",
        f"{sql_literal(rng.choice([True, False, None]))}::bool",
        f"{sql_literal(rng.choice(['now', 'infinity', None]))}::timestamptz",
    ]
    return Raw("ROW(" + ", ".join(fields) + ")::pg_catalog.pg_locks")


def sql_literal(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def value_for(type_name, rng, names):
    """A random hostile value for a parameter of the given SQL type, with its SQL cast."""
    if type_name == "text":
        # often a real subsystem or queue, so that calls get past the lookup
        # to the checks and statements behind it
        if names and rng.random() < 0.3:
            return rng.choice(names)
        return rng.choice(HOSTILE_TEXT + names)
    if type_name == "bigint":
        return rng.choice(BIGINTS + [rng.randint(-2**63, 2**63 - 1)])
    if type_name == "integer":
        return rng.choice(INTS + [rng.randint(-100, 100)])
    if type_name == "boolean":
        return rng.choice(BOOLS)
    if type_name == "interval":
        return rng.choice(INTERVALS)
    if type_name == "timestamp with time zone":
        return rng.choice(TIMESTAMPS)
    if type_name == "jsonb":
        return rng.choice(JSONS)
    if type_name == "name":
        return rng.choice(ROLES if rng.random() < 0.7 else HOSTILE_TEXT)
    if type_name == "text[]":
        if rng.random() < 0.1:
            return None
        # half of the arrays are permission words (grant_queue, revoke_queue)
        pool = PERMISSIONS if rng.random() < 0.5 else HOSTILE_TEXT + names
        return [rng.choice(pool) for _ in range(rng.randint(0, 5))]
    if type_name == "bigint[]":
        if rng.random() < 0.1:
            return None
        return [rng.choice(BIGINTS + list(range(1, 20))) for _ in range(rng.randint(0, 5))]
    if type_name == "integer[]":
        if rng.random() < 0.1:
            return None
        return [rng.choice(INTS + list(range(0, 20))) for _ in range(rng.randint(0, 5))]
    if type_name == "jsonb[]":
        if rng.random() < 0.1:
            return None
        return [rng.choice(JSONS[1:]) for _ in range(rng.randint(0, 60))]
    if type_name == "pg_locks":
        return crafted_lock_row(rng)
    if type_name == "oid":
        return rng.choice([None, 0, 1, 1259, 16384, 4294967295])
    if type_name == "numeric":
        return rng.choice(NUMERICS)
    if type_name == "smallint":
        return rng.choice([None, 0, 1, 2, 16, -1, 32767, -32768])
    raise ValueError(f"no generator for type {type_name}")


def functions(conn):
    rows = conn.execute("""
        SELECT p.pronamespace::regnamespace::text, p.proname, p.pronargs,
               coalesce(array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t), '{}') AS argtypes
          FROM pg_proc p
         WHERE p.pronamespace IN ('concurrency'::regnamespace, 'concurrency_internal'::regnamespace)
           AND p.prokind = 'f'
           AND p.prorettype <> 'trigger'::regtype
         ORDER BY p.proname, p.oid""").fetchall()
    return rows


def known_names(conn):
    names = [r[0] for r in conn.execute("SELECT name FROM concurrency.subsystem").fetchall()]
    if conn.execute("SELECT to_regclass('concurrency.queue') IS NOT NULL").fetchone()[0]:
        names += [r[0] for r in conn.execute("SELECT name FROM concurrency.queue").fetchall()]
    if conn.execute("SELECT to_regclass('concurrency.counters') IS NOT NULL").fetchone()[0]:
        names += [r[0] for r in conn.execute("SELECT name FROM concurrency.counters").fetchall()]
    return names


def consistency_problems(conn):
    """Registry and queue catalog consistent after the storm."""
    problems = []
    rows = conn.execute("""
        SELECT name FROM concurrency.subsystem
         WHERE name = '' OR length(name) > 63 OR name ~ '[[:space:][:cntrl:]]'""").fetchall()
    problems += [f"subsystem with a bad name: {r[0]!r}" for r in rows]
    if conn.execute("SELECT to_regclass('concurrency.queue') IS NOT NULL").fetchone()[0]:
        rows = conn.execute("""
            SELECT q.name FROM concurrency.queue q
             WHERE to_regclass(format('concurrency.%I', 'q_' || q.name)) IS NULL""").fetchall()
        problems += [f"queue without its table: {r[0]!r}" for r in rows]
        rows = conn.execute("""
            SELECT c.relname FROM pg_class c
             WHERE c.relnamespace = 'concurrency'::regnamespace AND c.relkind = 'r'
               AND c.relname LIKE 'q\\_%'
               AND NOT EXISTS (SELECT FROM concurrency.queue q WHERE 'q_' || q.name = c.relname)""").fetchall()
        problems += [f"queue table without its catalog row: {r[0]!r}" for r in rows]
    if conn.execute("SELECT to_regclass('concurrency.queue_permission') IS NOT NULL").fetchone()[0]:
        rows = conn.execute("""
            SELECT p.queue, p.grantee::text FROM concurrency.queue_permission p
             WHERE p.permission = 'read' AND p.grantee <> 0
               AND EXISTS (SELECT FROM pg_roles r WHERE r.oid = p.grantee)
               AND NOT has_table_privilege(p.grantee, format('concurrency.%I', 'q_' || p.queue), 'SELECT')""").fetchall()
        problems += [f"read without SELECT on the table: {r[0]!r} for {r[1]!r}" for r in rows]
    if conn.execute("SELECT to_regclass('concurrency.schedule') IS NOT NULL").fetchone()[0]:
        rows = conn.execute("""
            SELECT name FROM concurrency.schedule
             WHERE next_run_at IS NULL OR next_run_at <= last_due""").fetchall()
        problems += [f"schedule without a next due time after its last: {r[0]!r}" for r in rows]
    return problems


SEED = [
    "SELECT concurrency.register_subsystem('fuzz_a', 900001)",
    "SELECT concurrency.register_subsystem('fuzz_b', 900002)",
    "SELECT concurrency.create_queue('fuzz_a')",
    "SELECT concurrency.create_queue('fuzz_b', '1 second', 2)",
    "SELECT count(concurrency.enqueue('fuzz_a', '{}')) FROM generate_series(1, 20)",
    "SELECT count(*) FROM concurrency.dequeue('fuzz_a', 5)",
    "SELECT concurrency.grant_queue('fuzz_a', 'fuzz_worker', '{work}')",
    "SELECT concurrency.grant_queue('fuzz_b', 'fuzz_worker', '{enqueue}')",
    # a due schedule: dequeue calls on fuzz_a materialize it
    "SELECT concurrency.schedule('fuzz_s', 'fuzz_a', every => '1 second', catch_up => 3)",
]


def reseed(conn):
    """Real objects before each function, so that calls reach deep paths, not only lookups."""
    for stmt in SEED:
        try:
            conn.execute(stmt)
        except psycopg.errors.Error:
            pass  # a capability not present in this build, or the object is there already


def without_permissions(conn):
    """fuzz_user holds no queue permission: the superuser pass may have granted it some, or to PUBLIC."""
    if conn.execute("SELECT to_regclass('concurrency.queue_permission') IS NOT NULL").fetchone()[0]:
        conn.execute("DELETE FROM concurrency.queue_permission WHERE grantee IN (0, 'fuzz_user'::regrole)")


def fuzz_function(conn, rng, schema, name, argtypes, calls, role):
    """Calls one function `calls` times; returns (all clean?, calls made), or (None, n) on a lost connection."""
    bad = {}
    codes = {}
    n = 0
    names = known_names(conn)
    for _ in range(calls):
        values = [value_for(t, rng, names) for t in argtypes]
        if name == "dequeue" and len(argtypes) > 4:
            values[4] = rng.choice(WAITS)
        if name == "await_task" and len(argtypes) > 2:
            values[2] = rng.choice(WAITS)
        # results as text: a value the client cannot represent (a timestamp
        # before year 1 that a task was given) is the server's answer, not an
        # error of the function
        call = sql.SQL("SELECT r::text FROM {}.{}({}) AS r").format(
            sql.Identifier(schema), sql.Identifier(name),
            sql.SQL(", ").join(
                sql.SQL(v.expr) if isinstance(v, Raw) else sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(t))
                for v, t in zip(values, argtypes)))
        n += 1
        try:
            conn.execute(call).fetchall()
            codes["ok"] = codes.get("ok", 0) + 1
        except psycopg.errors.Error as e:
            # psycopg raises OperationalError for class 55 too (e.g. 55000):
            # only a broken connection is a lost one
            if conn.closed or conn.broken:
                print(f"FAIL {name}: connection lost: {e}")
                return None, n
            code = e.sqlstate or "?"
            codes[code] = codes.get(code, 0) + 1
            # A function without arguments has no bad input: any error is a bug
            # (but for the preconditions above).
            # (schema concurrency_internal is not for other roles: 42501 there)
            refused = schema == "concurrency_internal" and role is not None and code == "42501"
            if code not in DOCUMENTED or (not argtypes and code not in ARGLESS_PRECONDITIONS.get(name, ())
                                          and not refused):
                bad.setdefault(code, (str(e).splitlines()[0], values))
            if conn.closed or conn.broken:
                print(f"FAIL {name}: connection lost: {e}")
                return None, n
    label = f"{name}({', '.join(argtypes)})" + (f" as {role}" if role else "")
    if bad:
        for code, (msg, values) in bad.items():
            print(f"FAIL {label}: undocumented SQLSTATE {code}: {msg} with {values!r}"[:600])
        return False, n
    print(f"ok   {label}: " + ", ".join(f"{k}={v}" for k, v in sorted(codes.items())))
    return True, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls-per-function", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    conn = psycopg.connect(autocommit=True)
    conn.execute("SET statement_timeout = '5s'")
    conn.execute("SET lock_timeout = '2s'")
    started = conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
    for role in ("fuzz_user", "fuzz_worker"):
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    passed = failed = 0
    total_calls = 0
    # A pass as superuser reaches every path; a shorter one as a role with no
    # permissions must end in errors just as clean (42501 and friends), and
    # one as a role with some (work on fuzz_a, enqueue on fuzz_b) reaches the
    # paths behind the checks without being the queues' owner.
    short = max(1, args.calls_per_function // 3)
    for role, calls in ((None, args.calls_per_function), ("fuzz_user", short), ("fuzz_worker", short)):
        for schema, name, nargs, argtypes in functions(conn):
            reseed(conn)
            if role == "fuzz_user":
                without_permissions(conn)
            if role:
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
            ok, n = fuzz_function(conn, rng, schema, name, argtypes, calls, role)
            total_calls += n
            if ok is None:
                print(f"{passed} passed, {failed + 1} failed")
                return 1
            conn.execute("RESET ROLE")
            passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)

    # Session-level locks taken by the storm are released with the session.
    conn.execute("SELECT pg_advisory_unlock_all()")
    now_started = conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
    if now_started != started:
        failed += 1
        print("FAIL the server restarted during the run (a backend crashed)")
    else:
        passed += 1
        print(f"ok   no backend crash in {total_calls} calls")
    problems = consistency_problems(conn)
    if problems:
        failed += 1
        for p in problems:
            print(f"FAIL consistency: {p}")
    else:
        passed += 1
        print("ok   registry and queue catalog consistent")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
