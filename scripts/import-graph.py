#!/usr/bin/env python3
"""The crate's import graph, from its own `use` lines: which top-level module (a "room":
`src/engine/`, `src/time/`, `src/plot.rs`) imports which, the rooms in floors (each above
everything it imports), every circle of rooms, every circle of sibling files inside a room,
and every import that runs back up a floor. Test code (after `#[cfg(test)]`, `tests.rs`) is
left out.

    python3 scripts/import-graph.py            # the working tree
    python3 scripts/import-graph.py 8eb057d    # a commit, read with git show

Exits 1 when there is a circle or an import back up, so CI or a reviewer can hold the shape.
"""

import re
import subprocess
import sys
from collections import defaultdict


def files_at(rev):
    if rev is None:
        out = subprocess.check_output(["git", "ls-files", "src"], text=True)
        names = [n for n in out.split() if n.endswith(".rs")]
        return {n: open(n, encoding="utf-8").read() for n in names}
    out = subprocess.check_output(["git", "ls-tree", "-r", "--name-only", rev, "src"], text=True)
    names = [n for n in out.split() if n.endswith(".rs")]
    return {n: subprocess.check_output(["git", "show", f"{rev}:{n}"], text=True) for n in names}


def room_of(path):
    """src/engine/source.rs -> engine; src/plot.rs -> plot; the binary's files -> cli."""
    parts = path.split("/")[1:]
    if parts[0] in ("main.rs", "cli"):
        return "cli"
    return parts[0][:-3] if parts[0].endswith(".rs") else parts[0]


def module_of(path):
    """src/run/spec.rs -> run::spec; src/run/mod.rs -> run; src/lib.rs -> ''."""
    p = path[len("src/"):-len(".rs")]
    if p in ("lib", "main"):
        return ""
    if p.endswith("/mod"):
        p = p[: -len("/mod")]
    return p.replace("/", "::")


def code_of(text):
    """The file without its test module and comments."""
    text = text.split("#[cfg(test)]")[0]
    return "\n".join(line.split("//")[0] for line in text.splitlines())


PATH = re.compile(r"\b(crate|lazybatch|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|lazybatch|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^{}]*)\}")


def paths(code):
    """Every (root, ::path) the code names, `use a::{b, c::d}` spelled out."""
    found = PATH.findall(code)
    for root, prefix, items in GROUP.findall(code):
        for item in items.split(","):
            item = item.strip().split(" as ")[0]
            if item and item != "self":
                found.append((root, f"{prefix}::{item}"))
            elif item == "self":
                found.append((root, prefix))
    return found


def imports(files):
    """(room arrows, file arrows) as sets of pairs."""
    modules = {module_of(p): p for p in files}
    rooms, file_arrows = set(), set()
    for path, text in files.items():
        if path.endswith("/tests.rs"):
            continue
        me = module_of(path)
        for root, rest in paths(code_of(text)):
            segs = [s for s in rest.split("::") if s]
            if root == "super":
                # the parent module (of a::b and of a/mod.rs's a alike: one level up)
                base = me.split("::")[:-1] if me else []
                while segs and segs[0] == "super":
                    base, segs = base[:-1], segs[1:]
                segs = base + segs
            # the longest module the path names
            target = None
            for k in range(len(segs), 0, -1):
                m = "::".join(segs[:k])
                if m in modules:
                    target = modules[m]
                    break
            if target is None or target == path:
                continue
            a, b = room_of(path), room_of(target)
            if a != b:
                rooms.add((a, b))
            elif (os_dir(path) == os_dir(target) and not path.endswith("/mod.rs")
                  and not target.endswith("/mod.rs")):
                file_arrows.add((path, target))
    return rooms, file_arrows


def os_dir(p):
    return p.rsplit("/", 1)[0]


def circles(arrows):
    """Strongly connected sets of more than one node (Tarjan)."""
    graph = defaultdict(set)
    for a, b in arrows:
        graph[a].add(b)
        graph[b]
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def floors(arrows, rooms):
    """Floor 1: imports nothing; otherwise one above the highest room it imports (circles
    broken by leaving their arrows out)."""
    looped = {frozenset(c) for c in circles(arrows)}
    inside = {r: c for c in looped for r in c}
    up = defaultdict(set)
    for a, b in arrows:
        if not (a in inside and b in inside[a]):
            up[a].add(b)
    memo = {}

    def floor(r):
        if r not in memo:
            memo[r] = 0
            memo[r] = 1 + max((floor(b) for b in up[r]), default=0)
        return memo[r]

    return {r: floor(r) for r in rooms}


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    files = files_at(rev)
    rooms = sorted({room_of(p) for p in files})
    arrows, file_arrows = imports(files)
    fl = floors(arrows, rooms)
    back = sorted((a, b) for a, b in arrows if fl[b] >= fl[a])
    room_circles = circles(arrows)
    file_circles = circles(file_arrows)
    print(f"# import graph of {rev or 'the working tree'}: {len(rooms)} rooms, "
          f"{len(arrows)} arrows, {len(room_circles)} circles of rooms, "
          f"{len(file_circles)} circles of files inside a room, {len(back)} arrows back up")
    for f in sorted(set(fl.values()), reverse=True):
        members = []
        for r in sorted(r for r in rooms if fl[r] == f):
            lines = sum(code_of(t).count("\n") for p, t in files.items() if room_of(p) == r)
            members.append(f"{r} ({lines})")
        print(f"floor {f:2}: " + ", ".join(members))
    for c in room_circles:
        print("circle of rooms: " + " <-> ".join(c))
    for c in file_circles:
        print("circle of files: " + " <-> ".join(c))
    for a, b in back:
        print(f"back up: {a} -> {b}")
    return 1 if room_circles or file_circles or back else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `| head`
        sys.exit(0)
