#!/usr/bin/env python3
"""Checks that no include circle runs between the rooms of src/.

A room is a directory of src/ (src/queue/lifecycle is the room
"queue/lifecycle"; the files directly in src/ are the room "."). A file of
room A that includes ("#include "...", resolved beside the file, then from
src/) a file of room B draws an arrow A -> B. Rooms that reach each other by
arrows form a circle; every circle is listed with the include lines that draw
its arrows, and the check fails. Includes that resolve to no file of src/
(PostgreSQL's and the system's headers) are not arrows. No arrow is excepted:
a room inside another (src/queue/time in src/queue) is a room of its own, and
the outer room's files include it only where it includes nothing of theirs.

Usage: scripts/include-rooms.py [SRC_DIR]   (default: src/ of this checkout)
Ends with "N passed, M failed": one check per room, failed when it is on a
circle.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def room_of(path, src):
    room = os.path.relpath(os.path.dirname(path), src)
    return room


def sources(src):
    for dirpath, _, names in os.walk(src):
        for name in sorted(names):
            if name.endswith((".cpp", ".hpp")):
                yield os.path.join(dirpath, name)


def arrows(src):
    """{(from_room, to_room): [(file, line number, included name)]}"""
    found = {}
    for path in sources(src):
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                name = m.group(1)
                for base in (os.path.dirname(path), src):
                    target = os.path.normpath(os.path.join(base, name))
                    if os.path.isfile(target) and os.path.commonpath([target, src]) == src:
                        break
                else:
                    continue
                a, b = room_of(path, src), room_of(target, src)
                if a != b:
                    found.setdefault((a, b), []).append((os.path.relpath(path, src), number, name))
    return found


def circles(rooms, edges):
    """The strongly connected components of more than one room (Tarjan)."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []
    succ = {r: sorted(b for (a, b) in edges if a == r) for r in rooms}

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for r in sorted(rooms):
        if r not in index:
            visit(r)
    return result


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if len(sys.argv) > 2:
        sys.exit("usage: scripts/include-rooms.py [SRC_DIR]")
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "src"))
    edges = arrows(src)
    rooms = {room_of(p, src) for p in sources(src)} | {r for e in edges for r in e}
    found = circles(rooms, edges)
    on_circle = set()
    for component in found:
        on_circle.update(component)
        print("FAIL include circle between rooms: " + ", ".join(component))
        members = set(component)
        for (a, b), lines in sorted(edges.items()):
            if a in members and b in members:
                for path, number, name in lines:
                    print(f'    {a} -> {b}: {path}:{number} #include "{name}"')
    for r in sorted(rooms - on_circle):
        print(f"ok {r}")
    print(f"{len(rooms - on_circle)} passed, {len(on_circle)} failed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
