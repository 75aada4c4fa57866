#!/usr/bin/env python3
"""Runs the install lines of the client READMEs, and the getting-started pages
of the runtimes, as a reader would paste them.

The READMEs: the
the ```sh block that follows the line `<!-- doc-test: install -->` in
clients/node, clients/python and clients/go's README.md, with
/path/to/concurrency_ext replaced by this checkout, in a fresh temporary
directory (for Go, a fresh module: the README says "in your module"). Then it
loads the installed package the way the README's first example does
(require, import, go build).

The pages docs/getting-started/{node,python,go}.md: in a fresh temporary
directory, the page's install block (marked as above), then its program (the
block after `<!-- doc-test: file NAME -->`, written to NAME), run against a
database of its own where the page's first ```sql block ran. The program
enqueues three tasks and works them, printing "sent …" for each: once it
has printed three, it gets SIGTERM, must exit with status 0 (a graceful
shutdown), and the table sent_mail must hold the three e-mails.

Needs node and npm, python3 with venv, and go (also in /usr/local/go/bin),
the package registries the READMEs use, and for the pages psql and
PGHOST/PGPORT/PGUSER of a superuser on a server with the extension.

run_docs.py runs it without arguments; alone: test/docs/install_lines.py [node|python|go ...]
Each check prints "ok …" or "FAIL …"; the last line is "N passed, M failed".
"""
import getpass
import os
import re
import queue
import shutil
import signal
import subprocess
import threading
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- doc-test: install -->"
PLACEHOLDER = "/path/to/concurrency_ext"

GO_MAIN = """package main

import (
	"fmt"

	concurrency "github.com/concurrency-ext/concurrency-ext/clients/go"
)

func main() { fmt.Println(concurrency.ErrLeaseLost) }
"""

# per client: what a reader has before pasting, and what proves the install worked
CLIENTS = {
    "node": ([], ["node", "-e", "require('pg'); const c = require('concurrency-ext'); "
                  "if (typeof c.Worker !== 'function') throw new Error('no Worker')"]),
    "python": ([], ["bash", "-c", ". .venv/bin/activate && python -c "
                    "'import psycopg, concurrency_ext; assert concurrency_ext.Worker'"]),
    "go": ([["go", "mod", "init", "example.com/app"]], ["go", "build", "-o", "app", "."]),
}


def marked_block(path, mark):
    """The fenced block right after the line `mark` of the Markdown file path."""
    lines = (ROOT / path).read_text().splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == mark)
    except StopIteration:
        raise ValueError(f"{path} has no line {mark}")
    if not lines[start + 1].startswith("```"):
        raise ValueError(f"{path}: no fenced block right after {mark}")
    end = next(i for i in range(start + 2, len(lines)) if lines[i].strip() == "```")
    return "\n".join(lines[start + 2:end])


def install_block(client):
    """The ```sh block after the install mark of the client's README."""
    return marked_block(f"clients/{client}/README.md", MARK)


def check(client):
    """None if the README's install line works, else what went wrong."""
    try:
        block = install_block(client)
    except ValueError as e:
        return str(e)
    if PLACEHOLDER not in block:
        return f"the install block does not name {PLACEHOLDER} (the checkout): {block!r}"
    setup, probe = CLIENTS[client]
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/local/go/bin",
               GOFLAGS="", GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "local"))
    # pip builds the package in its own directory: leave the checkout as it was
    leftovers = [ROOT / "clients/python/build", ROOT / "clients/python/concurrency_ext.egg-info"]
    existed = {p for p in leftovers if p.exists()}
    work = tempfile.mkdtemp(prefix=f"readme-install-{client}-")
    try:
        for cmd in setup:
            r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=300)
            if r.returncode:
                return f"set-up {' '.join(cmd)} failed: {r.stderr.strip()[-500:]}"
        if client == "go":
            Path(work, "main.go").write_text(GO_MAIN)
        script = "set -e\n" + block.replace(PLACEHOLDER, str(ROOT)) + "\n"
        r = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True, env=env, timeout=600)
        if r.returncode:
            return f"the README's install lines failed: {(r.stderr or r.stdout).strip()[-800:]}"
        r = subprocess.run(probe, cwd=work, capture_output=True, text=True, env=env, timeout=300)
        if r.returncode:
            return f"installed, but {' '.join(probe)} failed: {(r.stderr or r.stdout).strip()[-800:]}"
        return None
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not run: {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for p in leftovers:
            if p not in existed:
                shutil.rmtree(p, ignore_errors=True)


# per runtime: the program's file, and how the page runs it (go: built first, so that SIGTERM reaches it)
PAGES = {
    "node": ("worker.js", [], ["node", "worker.js"]),
    "python": ("worker.py", [], ["bash", "-c", ". .venv/bin/activate && exec python worker.py"]),
    "go": ("main.go", [["go", "build", "-o", "worker", "."]], ["./worker"]),
}
SENT = 3  # the e-mails the pages' programs enqueue


def first_sql_block(path):
    text = (ROOT / path).read_text()
    m = re.search(r"^```sql\n(.*?)^```", text, re.S | re.M)
    return m.group(1) if m else ""


def psql(db, sql):
    return subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                          capture_output=True, text=True, timeout=120)


def check_page(client):
    """None if docs/getting-started/<client>.md works as written, else what went wrong."""
    page = f"docs/getting-started/{client}.md"
    name, build, run_cmd = PAGES[client]
    try:
        block = marked_block(page, MARK)
        program = marked_block(page, f"<!-- doc-test: file {name} -->")
    except ValueError as e:
        return str(e)
    db = f"doc_test_getting_started_{client}"
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/local/go/bin",
               GOFLAGS="", GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "local"), PGDATABASE=db,
               # node-postgres takes the user from USER, where libpq asks the system
               PGUSER=os.environ.get("PGUSER") or getpass.getuser())
    leftovers = [ROOT / "clients/python/build", ROOT / "clients/python/concurrency_ext.egg-info"]
    existed = {p for p in leftovers if p.exists()}
    work = tempfile.mkdtemp(prefix=f"getting-started-{client}-")
    proc = None
    try:
        r = psql("postgres", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        r = r if r.returncode else psql("postgres", f'CREATE DATABASE "{db}"')
        r = r if r.returncode else psql(db, first_sql_block(page))
        if r.returncode:
            return f"the page's first SQL block failed: {r.stderr.strip()}"
        script = "set -e\n" + block.replace(PLACEHOLDER, str(ROOT)) + "\n"
        r = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True, env=env, timeout=600)
        if r.returncode:
            return f"the page's install lines failed: {(r.stderr or r.stdout).strip()[-800:]}"
        Path(work, name).write_text(program + "\n")
        for cmd in build:
            r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=600)
            if r.returncode:
                return f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()[-800:]}"
        proc = subprocess.Popen(run_cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)], daemon=True).start()
        output, sent = [], 0
        while sent < SENT:
            try:
                line = lines.get(timeout=120)
            except queue.Empty:
                return f"no {SENT} 'sent' lines within 120 s; output: {''.join(output)[-800:]}"
            if line is None:
                return f"the program ended (status {proc.wait()}) before it sent {SENT}: {''.join(output)[-800:]}"
            output.append(line)
            sent += "sent " in line
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            return "the program did not stop within 60 s of SIGTERM"
        if status != 0:
            return f"after SIGTERM the program exited with status {status}: {''.join(output)[-800:]}"
        r = psql(db, "SELECT count(*) FROM sent_mail")
        if r.returncode or r.stdout.strip() != str(SENT):
            return f"sent_mail holds {r.stdout.strip() or r.stderr.strip()} rows, not {SENT}"
        return None
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not run: {e}"
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        psql("postgres", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
        for p in leftovers:
            if p not in existed:
                shutil.rmtree(p, ignore_errors=True)


def run(clients):
    """Prints one line per client; returns (passed, failed)."""
    passed = failed = 0
    for client in clients:
        failure = check(client)
        if failure:
            failed += 1
            print(f"FAIL clients/{client}/README.md install: {failure}")
        else:
            passed += 1
            print(f"ok clients/{client}/README.md installs as written")
        failure = check_page(client)
        if failure:
            failed += 1
            print(f"FAIL docs/getting-started/{client}.md: {failure}")
        else:
            passed += 1
            print(f"ok docs/getting-started/{client}.md: installed, {SENT} tasks worked, stopped by SIGTERM")
    return passed, failed


if __name__ == "__main__":
    p, f = run(sys.argv[1:] or list(CLIENTS))
    print(f"{p} passed, {f} failed")
    sys.exit(1 if f else 0)
