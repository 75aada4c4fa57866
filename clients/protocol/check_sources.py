#!/usr/bin/env python3
"""Fails (exit 1, naming the lines) when a runtime's source outside its generated protocol file calls a
function of the concurrency schema in SQL text: every statement the worker runtimes and producers send
comes from clients/protocol/statements.json (the Node.js command-line tool, cli/, is not a runtime).

Usage: clients/protocol/check_sources.py node|python|go"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = os.path.dirname(HERE)
SOURCES = {
    "node": (os.path.join(CLIENTS, "node"), (".js",), ("lib/protocol.js",), ("node_modules", "test", "examples", "cli", "bin")),
    "python": (os.path.join(CLIENTS, "python", "concurrency_ext"), (".py",), ("_protocol.py",), ()),
    "go": (os.path.join(CLIENTS, "go"), (".go",), ("protocol_gen.go",), ("examples",)),
}
# a call of a schema function inside a string (not a comment's mention)
CALL = re.compile(r"""["'`][^"'`]*\bconcurrency\.[a-z_]+\(""")
COMMENT = re.compile(r"^\s*(//|#|\*)")


def main():
    root, exts, generated, skipped = SOURCES[sys.argv[1]]
    found = []
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.relpath(os.path.join(base, d), root) not in skipped]
        for name in files:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            if not name.endswith(exts) or rel in generated or name.endswith("_test.go"):
                continue
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if CALL.search(line) and not COMMENT.match(line):
                        found.append(f"{os.path.relpath(path, CLIENTS)}:{number}: {line.strip()}")
    if found:
        print("statements outside clients/protocol/statements.json:\n" + "\n".join(found), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
