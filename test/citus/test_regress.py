"""The local queue's regress suite, run against distributed queues.

Each file of sql/ named in FILES runs, as pg_regress runs it (psql -a -q, its
settings), in a database of its own on the Citus cluster's coordinator, with
one change: every queue it creates is distributed right after
(concurrency.distribute_queue, as the superuser). One shard a queue, so that
the order of claims is the queue's order, as on one server. Twice: with the
shards on a worker node, every call of the file routed there from the
coordinator ("routed"), and with the shards on the coordinator, every call
served by the node of its shard as a worker node serves its own ("here").
The output is compared with the file's expected output in expected/, the
local one, with these allowances:

- task ids and lease tokens of a distributed queue are other numbers (they
  carry the shard and the node, SPEC 8.1), so a line that differs from the
  expected one only where the expected line has a number and this one has
  such a number (at least 2^20) is the same line; spacing and the width of
  table borders, which follow the numbers' width, are not compared;
- Citus's warning that a function in pg_temp is made on this node only is
  left out; a role that a file creates is created with LOGIN (Citus
  connects to the other nodes as the role that runs a statement there), its
  statement shown as the file wrote it;
- what else differs is a documented difference: test/citus/regress/FILE.diff
  lists the expected lines (-) and the lines of the run (+) that differ, in
  order, after a comment that says why; a line that begins with "@routed "
  or "@here " is a difference of that run only. In the lines of the run a
  distributed id or token is written <id>, a node's port <port> and a
  shard's number <shard>. A file without differences has no .diff.

Not run here: 20_queue_claim_direct and 20_queue_plans, which check the
plans of one server's statements against the queue's own table (indexes,
triggers and constraints they add to it, which Citus keeps to its shards).

A difference that is not listed fails the file, and so does a listed one that
no longer occurs. Run by scripts/citus-check.sh; with CITUS_REGRESS_WRITE=1
each run's differences are written beside, into FILE.diff.routed.new and
FILE.diff.here.new, for a deliberate change to be documented from.
"""
import difflib
import os
import re
import subprocess

from citus_lib import COORDINATOR, NODES, check, connect, run

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DIFFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regress")
PSQL = os.path.join(os.environ.get("CITUS_BIN", "/opt/concurrency_ext/pg18/bin"), "psql")
DB = "regress_distributed"
SHARDS = 1

FILES = [
    "20_queue_api", "20_queue_grants", "20_queue_permissions_attacks", "20_queue_run_at", "21_queue_settings", "22_queue_finish", "22_queue_keys",
    "23_queue_stats", "24_queue_replace", "24_queue_wait", "25_queue_pause", "26_queue_schedules",
    "27_queue_dependencies", "27_queue_finally", "28_queue_rate", "28_queue_key_rate", "29_queue_fair", "80_workflows",
]

CREATE = re.compile(r"concurrency\.create_queue\('([a-z0-9_]+)'")
# what follows a statement that created a queue: distributes it, as the
# superuser, unless the statement failed or the queue is distributed already
INJECTED = [
    "\\if :ERROR",
    "\\else",
    None,  # the DO statement, made per queue
    "\\endif",
]
DISTRIBUTE = ("DO $regress$DECLARE r text := current_user; BEGIN "
              "IF EXISTS (SELECT FROM concurrency.queue WHERE name = '{q}') AND NOT EXISTS "
              "(SELECT FROM concurrency.distributed_queue d WHERE d.queue = '{q}') THEN "
              "PERFORM pg_catalog.set_config('role', 'none', false); "
              "PERFORM concurrency.distribute_queue('{q}', {n}); "
              "PERFORM pg_catalog.set_config('role', r, false); END IF; END$regress$;")
ID_FLOOR = 1 << 20
TEMP_WARNING = re.compile(r'WARNING:  "function pg_temp_\d+\..*" has dependency on unsupported object')


# a role the file creates: with LOGIN, for Citus connects to the other nodes
# as the role that runs the statement there (docs/scaling-out.md, "Limits")
CREATE_ROLE = re.compile(r'^(CREATE ROLE\s+(?:"(?:[^"]|"")*"|\w+))(;.*|\s.*)$')


def distributed_input(text):
    """The file's statements, each statement that creates a queue followed by its distribution and each role
    created with LOGIN; the lines added, and the lines changed (each with the line it replaces)."""
    out, injected, changed = [], set(), {}
    pending = None
    for line in text.splitlines():
        m = CREATE_ROLE.match(line)
        if m and "LOGIN" not in m.group(2).upper():
            new = m.group(1) + " LOGIN" + m.group(2)
            changed[new] = line
            line = new
        out.append(line)
        m = CREATE.search(line)
        if m and not line.lstrip().startswith("--"):
            pending = m.group(1)
        code = line.split("--", 1)[0].rstrip()
        if pending and code.endswith(";"):
            do = DISTRIBUTE.format(q=pending, n=SHARDS)
            for inj in INJECTED:
                out.append(do if inj is None else inj)
                injected.add(do if inj is None else inj)
            pending = None
    return "\n".join(out) + "\n", injected, changed


def normal(line):
    line = re.sub(r"\s+", " ", line).strip()
    if re.fullmatch(r"[-+]+", line):
        line = re.sub(r"-+", "-", line)
    return line


NUMBER = re.compile(r"(-?\d+)")


def same_but_ids(expected, got):
    """Whether the lines differ only where got has a distributed id or token for one of expected's numbers."""
    e, g = NUMBER.split(expected), NUMBER.split(got)
    if len(e) != len(g):
        return False
    for i, (a, b) in enumerate(zip(e, g)):
        if i % 2 == 0:
            if a != b:
                return False
        elif a != b and abs(int(b)) < ID_FLOOR:
            return False
    return True


def differences(expected, got):
    """The lines that differ, as '-expected' and '+got' lines, ids allowed to differ."""
    e, g = [normal(x) for x in expected], [normal(x) for x in got]
    lines = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, e, g, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        if op == "replace" and i2 - i1 == j2 - j1 and all(
                same_but_ids(e[i], g[j]) for i, j in zip(range(i1, i2), range(j1, j2))):
            continue
        lines += ["-" + x for x in e[i1:i2]] + ["+" + ids_named(x) for x in g[j1:j2]]
    return lines


def ids_named(line):
    """The line with each distributed id or token written <id> (their values follow the sequence's), each
    node's port <port> (scripts/test.sh chooses them) and each shard's number <shard>."""
    line = re.sub(r"(port=|127\.0\.0\.1:)\d+", r"\1<port>", line)
    line = re.sub(r"_\d{6,}\b", "_<shard>", line)
    return NUMBER.sub(lambda m: "<id>" if abs(int(m.group(1))) >= ID_FLOOR else m.group(1), line)


def documented(path, where):
    """The differences listed in path for the run `where`: its lines that begin with - or +, and those that
    begin with "@where " (differences of that run only)."""
    if not os.path.exists(path):
        return []
    lines = []
    with open(path, encoding="utf-8") as f:
        for x in f.read().splitlines():
            m = re.match(r"@(\w+) (.*)", x)
            if m:
                if m.group(1) != where:
                    continue
                x = m.group(2)
            if x[:1] in ("-", "+"):
                lines.append(normal_diff(x))
    return lines


def normal_diff(line):
    return line[0] + normal(line[1:])


def file_roles():
    """The roles the files create."""
    roles = set()
    for name in FILES:
        with open(os.path.join(ROOT, "sql", name + ".sql"), encoding="utf-8") as f:
            for line in f:
                m = CREATE_ROLE.match(line.rstrip("\n"))
                if m:
                    roles.add(m.group(1)[len("CREATE ROLE"):].strip())
    return sorted(roles)


def make_database(shards_here=False):
    """A new database on every node, the nodes in its Citus metadata, the extension created; the roles that the
    files create dropped (from a run that stopped before its file dropped them: roles are the cluster's).
    Returns the port of the node where a new one-shard table's shard is placed."""
    for port in NODES:
        with connect(port) as c:
            c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    for port in NODES:
        with connect(port) as c:
            for role in file_roles():
                c.execute(f"DROP ROLE IF EXISTS {role}")
    for port in NODES:
        with connect(port) as c:
            exists = c.execute("SELECT FROM pg_database WHERE datname = %s", (DB,)).fetchone()
            if not exists:
                c.execute(f"CREATE DATABASE {DB} TEMPLATE template0 LOCALE 'C' ENCODING 'UTF8'")
        with connect(port, dbname=DB) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS citus")
    with connect(COORDINATOR, dbname=DB) as c:
        c.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (COORDINATOR,))
        for port in NODES[1:]:
            c.execute("SELECT citus_add_node('127.0.0.1', %s)", (port,))
        # new shards on the coordinator only, or on the worker nodes only
        # (Citus would place a one-shard table on the first node by port)
        for port in NODES:
            c.execute("SELECT citus_set_node_property('127.0.0.1', %s, 'shouldhaveshards', %s)",
                      (port, (port == COORDINATOR) == shards_here))
        c.execute("CREATE EXTENSION concurrency_ext")
        c.execute("CREATE TABLE regress_placement (x int)")
        c.execute("SELECT create_distributed_table('regress_placement', 'x', shard_count => 1)")
        port = c.execute("SELECT p.nodeport FROM pg_dist_shard s JOIN pg_dist_placement pl USING (shardid)"
                         " JOIN pg_dist_node p USING (groupid) WHERE s.logicalrelid = 'regress_placement'::regclass"
                         ).fetchone()[0]
        c.execute("DROP TABLE regress_placement")
    return port


def run_file(name, port):
    with open(os.path.join(ROOT, "sql", name + ".sql"), encoding="utf-8") as f:
        text, injected, changed = distributed_input(f.read())
    # the settings of pg_regress
    env = dict(os.environ, PGTZ="America/Los_Angeles", PGDATESTYLE="Postgres, MDY",
               PGOPTIONS="-c intervalstyle=postgres_verbose", LC_MESSAGES="C", PGAPPNAME="pg_regress")
    p = subprocess.run([PSQL, "-X", "-a", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                        "-d", DB, "-v", "HIDE_TABLEAM=on", "-v", "HIDE_TOAST_COMPRESSION=on"],
                       input=text, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                       timeout=300)
    got, skip = [], False
    for x in p.stdout.splitlines():
        if skip and x.startswith("DETAIL:  "):
            skip = False
            continue
        skip = bool(TEMP_WARNING.match(x))
        if not skip and x not in injected:
            got.append(changed.get(x, x))
    with open(os.path.join(ROOT, "expected", name + ".out"), encoding="utf-8") as f:
        expected = f.read().splitlines()
    return differences(expected, got)


def regress_suite(where):
    """The files, with every queue's shard on a worker node (where = "routed") or on the coordinator ("here")."""
    def test():
        port = make_database(shards_here=where == "here")
        check(f"regress: a new queue's shard is placed {PLACED[where]}",
              (port == COORDINATOR) == (where == "here"), f"on the node of port {port}")
        for name in FILES:
            found = run_file(name, COORDINATOR)
            path = os.path.join(DIFFS, name + ".diff")
            if os.environ.get("CITUS_REGRESS_WRITE") and (found or os.path.exists(path)):
                with open(f"{path}.{where}.new", "w", encoding="utf-8") as f:
                    f.write("".join(x + "\n" for x in found))
            want = documented(path, where)
            check(f"regress {name}, distributed queues served {WHERE[where]}: as on one server but for its "
                  f"documented differences", found == want,
                  "\n".join(difflib.unified_diff(want, found, "documented", "this run", n=1, lineterm="")))
    test.__name__ = f"test_regress_{where}"
    return test


WHERE = {"routed": "from another node", "here": "on the node of their shard"}
PLACED = {"routed": "on a worker node", "here": "on the coordinator"}


if __name__ == "__main__":
    run([regress_suite("routed"), regress_suite("here")])
