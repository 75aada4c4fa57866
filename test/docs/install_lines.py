#!/usr/bin/env python3
"""Runs the install lines of the client READMEs as a reader would paste them:
the ```sh block that follows the line `<!-- doc-test: install -->` in
clients/node, clients/python and clients/go's README.md, with
/path/to/concurrency_ext replaced by this checkout, in a fresh temporary
directory (for Go, a fresh module: the README says "in your module"). Then it
loads the installed package the way the README's first example does
(require, import, go build). Needs node and npm, python3 with venv, and go
(also in /usr/local/go/bin), and the package registries the READMEs use.

run_docs.py runs it without arguments; alone: test/docs/install_lines.py [node|python|go ...]
Each client prints "ok …" or "FAIL …"; the last line is "N passed, M failed".
"""
import os
import re
import shutil
import subprocess
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


def install_block(client):
    """The ```sh block after the install mark of the client's README."""
    lines = (ROOT / "clients" / client / "README.md").read_text().splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == MARK)
    except StopIteration:
        raise ValueError(f"clients/{client}/README.md has no line {MARK}")
    if not re.match(r"^```(sh|bash)\s*$", lines[start + 1]):
        raise ValueError(f"clients/{client}/README.md: no ```sh block right after {MARK}")
    end = next(i for i in range(start + 2, len(lines)) if lines[i].strip() == "```")
    return "\n".join(lines[start + 2:end])


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
    return passed, failed


if __name__ == "__main__":
    p, f = run(sys.argv[1:] or list(CLIENTS))
    print(f"{p} passed, {f} failed")
    sys.exit(1 if f else 0)
