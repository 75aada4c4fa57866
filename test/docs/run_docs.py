#!/usr/bin/env python3
"""Runs every ```sql block of README.md and docs/**/*.md (subfolders too) as a reader would paste
them: in document order, in one psql session per file, in a fresh database of
that file's own (with the extension created, unless the file's first block
creates it). Roles that a file's blocks create are dropped after the file, so
that files do not depend on each other.

Marks, for the blocks that must not simply succeed:
  * a block whose first line is `-- error: SQLSTATE` shows an error on purpose:
    it must fail, and its first error must carry that SQLSTATE;
  * a block preceded by the line `<!-- doc-test: skip (why) -->` is not run
    (a placeholder, or a set-up this test has not got, such as Citus).

Every block counts once; the last line is "N passed, M failed". Needs psql on
PATH and PGHOST/PGPORT/PGUSER of a superuser on a server where the extension is
installed (scripts/test.sh starts one with the library preloaded, so that the
lock history's examples run too).

Without arguments it also checks that every function and view of schema
concurrency appears in a reference page (docs/reference/*.md) as a heading
whose section shows a ```sql example (or says it is not for direct use),
runs the install lines of the client READMEs and the programs of the
getting-started pages (test/docs/install_lines.py), and checks that no
command of the README's ```sh blocks starts with sudo (a fresh Debian
machine where one is root has none; the scripts check for root themselves).
DOCS_CLIENTS=0 leaves the client installs and programs out.

Usage: test/docs/run_docs.py [FILE.md ...]   (default: README.md and docs/**/*.md)
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import install_lines

ROOT = Path(__file__).resolve().parents[2]
FENCE_OPEN = re.compile(r"^(\s*)```sql\s*$")
FENCE_CLOSE = re.compile(r"^\s*```\s*$")
SKIP_MARK = re.compile(r"^\s*<!--\s*doc-test:\s*skip\b.*-->\s*$")
ERROR_MARK = re.compile(r"^--\s*error:\s*([0-9A-Z]{5})\b")
# psql -f with VERBOSITY verbose: "psql:FILE:LINE: ERROR:  42501: message"
SERVER_ERROR = re.compile(r"^psql:[^:]*:\d+: (?:ERROR|FATAL|PANIC):  ([0-9A-Z]{5}): (.*)$")
CLIENT_ERROR = re.compile(r"^psql:[^:]*:\d+: error: (.*)$")
MARKER = re.compile(r"^@@doc-test (begin|end) (\d+)$")


class Block:
    def __init__(self, path, line, text, skip, expect):
        self.path, self.line, self.text, self.skip, self.expect = path, line, text, skip, expect

    def name(self):
        return f"{self.path}:{self.line}"


def blocks_of(path):
    """The ```sql blocks of a Markdown file, indentation removed."""
    lines = Path(ROOT / path).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m.group(1)), i + 1
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body = []
        i += 1
        while i < len(lines) and not FENCE_CLOSE.match(lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        first = next((l for l in body if l.strip()), "")
        em = ERROR_MARK.match(first.strip())
        out.append(Block(path, start, "\n".join(body), bool(SKIP_MARK.match(prev)), em.group(1) if em else None))
    return out


def strip_comment(line):
    """The line without a trailing -- comment (one outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif line.startswith("--", i):
            return line[:i]
    return line


def ends_statement(text):
    """False when the block leaves a statement unterminated (it would run
    together with the next block's first statement)."""
    code = [strip_comment(l).rstrip() for l in text.splitlines()]
    code = [l for l in code if l.strip()]
    # a statement ends with ";", or is sent by \g, \gset, \gexec, \gx; a
    # line that is only a meta-command (\set, \x) leaves nothing pending
    return (not code or code[-1].endswith(";") or code[-1].lstrip().startswith("\\")
            or re.search(r"\\g(set|exec|x|desc)?\b[^;]*$", code[-1]) is not None)


def psql(*args, **kw):
    return subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", *args],
                          capture_output=True, text=True, **kw)


def roles():
    r = psql("-d", "postgres", "-Atc", "SELECT rolname FROM pg_roles")
    return set(r.stdout.split())


def run_file(path, blocks):
    """Returns a list of (block, failure or None, skipped)."""
    db = "doc_test_" + re.sub(r"[^a-z0-9]+", "_", path.lower()).strip("_")
    results = []
    before = roles()
    setup = psql("-d", "postgres", "-c", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)', "-c", f'CREATE DATABASE "{db}"')
    if setup.returncode != 0:
        return [(b, "could not create the database: " + setup.stderr.strip(), False) for b in blocks]
    # created for the file, unless its first block does that itself (the
    # README's installation); later blocks may say CREATE EXTENSION IF NOT EXISTS
    first = next((b for b in blocks if not b.skip), None)
    if not (first and re.search(r"CREATE EXTENSION\b[^;]*\bconcurrency_ext", first.text, re.I)):
        ext = psql("-d", db, "-c", "CREATE EXTENSION concurrency_ext")
        if ext.returncode != 0:
            return [(b, "CREATE EXTENSION failed: " + ext.stderr.strip(), False) for b in blocks]

    script = ["\\set VERBOSITY verbose", "\\set SHOW_CONTEXT never"]
    for n, b in enumerate(blocks):
        if b.skip:
            continue
        script += [f"\\warn '@@doc-test begin {n}'", b.text, f"\\warn '@@doc-test end {n}'"]
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write("\n".join(script) + "\n")
        script_path = f.name
    os.chmod(script_path, 0o644)
    try:
        # a doc block that waits forever would hang the suite: bound each statement
        env = dict(os.environ, PGOPTIONS=(os.environ.get("PGOPTIONS", "") + " -c statement_timeout=60s").strip())
        r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=0", "-d", db, "-f", script_path],
                           capture_output=True, text=True, env=env, timeout=600)
        stderr = r.stderr
    except subprocess.TimeoutExpired as e:
        stderr = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        stderr += "\n(psql did not finish within 600 s)"
    finally:
        os.unlink(script_path)

    errors, current, seen = {}, None, set()
    for line in stderr.splitlines():
        m = MARKER.match(line)
        if m:
            current = int(m.group(2)) if m.group(1) == "begin" else None
            if m.group(1) == "end":
                seen.add(int(m.group(2)))
            continue
        if current is None:
            continue
        se, ce = SERVER_ERROR.match(line), CLIENT_ERROR.match(line)
        if se:
            errors.setdefault(current, []).append((se.group(1), se.group(2)))
        elif ce:
            errors.setdefault(current, []).append(("psql", ce.group(1)))

    for n, b in enumerate(blocks):
        if b.skip:
            results.append((b, None, True))
            continue
        errs = errors.get(n, [])
        if n not in seen:
            failure = "did not run to its end" + (": " + stderr.strip().splitlines()[-1] if stderr.strip() else "")
        elif not ends_statement(b.text):
            failure = "its last statement has no terminating ';' (it would run into the next block)"
        elif b.expect:
            if not errs:
                failure = f"expected error {b.expect}, but it succeeded"
            elif errs[0][0] != b.expect:
                failure = f"expected error {b.expect}, got {errs[0][0]}: {errs[0][1]}"
            else:
                failure = None
        elif errs:
            failure = "; ".join(f"{c}: {m}" for c, m in errs[:3])
        else:
            failure = None
        results.append((b, failure, False))

    psql("-d", "postgres", "-c", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    for role in sorted(roles() - before):
        d = psql("-d", "postgres", "-c", f'DROP ROLE "{role}"')
        if d.returncode != 0:
            results.append((Block(path, 0, "", False, None), f"role {role} created by the file could not be dropped: {d.stderr.strip()}", False))
    return results


def undocumented_objects(pages):
    """The functions, procedures and views of schema concurrency that no reference page
    names in a heading (a line starting with #): \\df concurrency.* is the public API,
    internals live in concurrency_internal."""
    db = "docs_api_check"
    psql("-d", "postgres", "-c", f"DROP DATABASE IF EXISTS {db}")
    psql("-d", "postgres", "-c", f"CREATE DATABASE {db}")
    r = psql("-d", db, "-At", "-c", "CREATE EXTENSION concurrency_ext",
             "-c", "SELECT DISTINCT proname FROM pg_proc WHERE pronamespace = 'concurrency'::regnamespace"
                   " UNION SELECT relname FROM pg_class WHERE relnamespace = 'concurrency'::regnamespace AND relkind = 'v'")
    psql("-d", "postgres", "-c", f"DROP DATABASE IF EXISTS {db}")
    if r.returncode != 0:
        return [f"(the extension could not be created: {r.stderr.strip()})"]
    headings = "\n".join(line for page in pages for line in (ROOT / page).read_text().splitlines()
                         if line.startswith("#"))
    return sorted(f for f in r.stdout.split() if not re.search(r"\b" + re.escape(f) + r"\b", headings))


def sections_without_example(pages):
    """The ### sections of the reference pages that show no ```sql example, except those of
    functions not for direct use (the rows behind a view, triggers), which say so."""
    out = []
    for page in pages:
        parts = re.split(r"^(#{2,3} .*)$", (ROOT / page).read_text(), flags=re.M)
        for heading, body in zip(parts[1::2], parts[2::2]):
            if heading.startswith("### ") and "```sql" not in body and "not for direct use" not in body.lower():
                out.append(f"{page}: {heading[4:]}")
    return out


def sudo_lines(path):
    """The lines of the ```sh blocks of path that run a command with sudo."""
    out, inside = [], False
    for n, line in enumerate((ROOT / path).read_text().splitlines(), 1):
        if re.match(r"^\s*```(sh|bash)\s*$", line):
            inside = True
        elif inside and FENCE_CLOSE.match(line):
            inside = False
        elif inside and re.match(r"^\s*(\S+=\S+\s+)*sudo\b", line):
            out.append(f"{path}:{n}")
    return out


def main():
    files = sys.argv[1:] or ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))
    passed = failed = 0
    if not sys.argv[1:]:
        reference = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "reference").glob("*.md"))
        missing = undocumented_objects(reference)
        if missing:
            failed += 1
            print(f"FAIL schema concurrency holds functions or views no reference page has a heading for: {', '.join(missing)}")
        else:
            passed += 1
            print("ok every function and view of schema concurrency has a heading in docs/reference/ (the rest is in concurrency_internal)")
        bare = sections_without_example(reference)
        if bare:
            failed += 1
            print(f"FAIL reference sections without an example: {'; '.join(bare)}")
        else:
            passed += 1
            print("ok every function and view of the reference pages has an example")
        sudo = sudo_lines("README.md")
        if sudo:
            failed += 1
            print(f"FAIL README.md runs commands with sudo, which a fresh machine may not have: {', '.join(sudo)}")
        else:
            passed += 1
            print("ok README.md's commands run as root without sudo")
        if os.environ.get("DOCS_CLIENTS", "1") != "0":  # 0: leave them out (they need no second server version)
            p, f = install_lines.run(list(install_lines.CLIENTS))
            passed, failed = passed + p, failed + f
    for path in files:
        blocks = blocks_of(path)
        if not blocks:
            continue
        for b, failure, skipped in run_file(path, blocks):
            if skipped:
                print(f"skip {b.name()}")
            elif failure:
                failed += 1
                print(f"FAIL {b.name()}: {failure}")
            else:
                passed += 1
                print(f"ok {b.name()}" + (f" (error {b.expect}, as shown)" if b.expect else ""))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
