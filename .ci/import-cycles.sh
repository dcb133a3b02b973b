#!/usr/bin/env bash
# Fails when the modules of a crate import each other in a circle.
#
# A crate's modules are found from its roots (src/lib.rs, src/main.rs) through their `mod`
# declarations; a module declared `#[cfg(test)]` and every item under `#[cfg(test)]` are left out
# (a test may use anything). A module's edges are the modules its code names by a path starting
# with `crate::`, `super::`, `self::` or one of its own child modules, in `use` trees
# (`use crate::{a::X, b}`, `use super::*`) and in expressions alike. A path ends at the module
# that holds the name, following `pub use` re-exports to where the name is defined. A module
# naming its own ancestors is not an edge: a child may use what encloses it (`use super::*`).
# The script prints each module's edges and every circle (a strongly connected set of modules).
#
# Usage: .ci/import-cycles.sh [--allow CRATE:MOD,MOD ...] crates/a [crates/b ...]
# An --allow names the whole set of modules of one known circle, which is then reported but
# does not fail the check.
set -euo pipefail
exec python3 - "$@" <<'PY'
import os, re, sys

def strip(text):
    """The code without comments, string and char literals (a literal becomes "")."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), m.end())
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and (m := re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'").match(text, i)):
            out.append("' '")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)

def item_end(code, i):
    """Where the item starting at i ends: after its `;`, or after its brace-matched block."""
    semi, brace = code.find(";", i), code.find("{", i)
    if brace < 0 or (0 <= semi < brace):
        return semi + 1 if semi >= 0 else len(code)
    depth = 0
    for j in range(brace, len(code)):
        depth += {"{": 1, "}": -1}.get(code[j], 0)
        if depth == 0:
            return j + 1
    return len(code)

CFG_TEST = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*")

def without_tests(code):
    """The code less the items under `#[cfg(test)]`, and the names of the modules so declared."""
    test_mods = set()
    while m := CFG_TEST.search(code):
        if d := re.compile(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;").match(code, m.end()):
            test_mods.add(d.group(1))
        code = code[: m.start()] + code[item_end(code, m.end()):]
    return code, test_mods

def split_top(s):
    parts, depth, start = [], 0, 0
    for j, c in enumerate(s):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if c == "," and depth == 0:
            parts.append(s[start:j])
            start = j + 1
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]

def expand(tree, prefix=()):
    """`a::{b, c::d as e, self, *}` as (path, alias) pairs."""
    tree = tree.strip()
    if "{" in tree and tree.endswith("}"):
        head = re.sub(r"\s+", "", tree[: tree.index("{")]).rstrip(":")
        base = prefix + tuple(p for p in head.split("::") if p)
        return [x for part in split_top(tree[tree.index("{") + 1 : -1]) for x in expand(part, base)]
    m = re.fullmatch(r"(.*?)\s+as\s+(\w+)", tree, re.S)
    path, alias = (m.group(1), m.group(2)) if m else (tree, "")
    segs = [p for p in re.sub(r"\s+", "", path).split("::") if p]
    if segs == ["self"]:
        return [(prefix, alias or (prefix[-1] if prefix else None))]
    return [(prefix + tuple(segs), alias or (segs[-1] if segs else None))]

class Crate:
    def __init__(self, root_file):
        self.files, self.code, self.children, self.reexports = {}, {}, {}, {}
        self.load((), root_file, True)

    def load(self, module, path, owns_dir):
        code, test_mods = without_tests(strip(open(path).read()))
        self.files[module], self.children[module] = path, set()
        directory = os.path.dirname(path) if owns_dir else path[:-3]
        for d in re.finditer(r"(?:^|[;{}\s])(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            name = d.group(1)
            if name in test_mods:
                continue
            for candidate, owns in ((os.path.join(directory, name + ".rs"), False), (os.path.join(directory, name, "mod.rs"), True)):
                if os.path.exists(candidate):
                    self.children[module].add(name)
                    self.load(module + (name,), candidate, owns)
                    break
        self.code[module] = code
        self.reexports[module] = {}

    def absolute(self, module, segs):
        """A path named in `module` as segments from the crate root, or None if not the crate's."""
        segs = list(segs)
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] in ("self", "super"):
            base = list(module)
            while segs and segs[0] in ("self", "super"):
                if segs.pop(0) == "super":
                    base = base[:-1]
            return tuple(base + segs)
        if segs[0] in self.children[module]:
            return tuple(module) + tuple(segs)
        return None

    def holder(self, path, seen=()):
        """The module that holds the item `path` names (after re-exports)."""
        for n in range(len(path), -1, -1):
            if path[:n] in self.files:
                module, rest = path[:n], path[n:]
                if rest and rest[0] in self.reexports[module] and (module, rest[0]) not in seen:
                    target = self.reexports[module][rest[0]]
                    return self.holder(target + rest[1:], seen + ((module, rest[0]),))
                return module
        return None

    def paths(self, module):
        code = self.code[module]
        # `mod x;` lines name a child, they do not use it.
        code = re.sub(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*;", ";", code)
        found = []
        for m in re.finditer(r"(?<![\w:])(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
            for segs, alias in expand(m.group(2)):
                absolute = self.absolute(module, segs)
                if absolute is None:
                    continue
                found.append(absolute)
                if m.group(1) and alias and alias != "*" and segs[-1] != "*":
                    self.reexports[module][alias] = absolute
        rest = re.sub(r"(?<![\w:])use\s+[^;]+;", ";", code)
        roots = "|".join(["crate", "super", "self"] + sorted(self.children[module]))
        for m in re.finditer(r"(?<![\w:.])((?:" + roots + r")(?:::\w+)+)", rest):
            absolute = self.absolute(module, m.group(1).split("::"))
            if absolute is not None:
                found.append(absolute)
        return found

    def graph(self):
        named = {module: self.paths(module) for module in self.files}  # fills reexports first
        graph = {}
        for module, paths in named.items():
            edges = set()
            for path in paths:
                target = self.holder(tuple(s for s in path if s != "*"))
                if target is not None and target != module and module[: len(target)] != target:
                    edges.add(target)
            graph[module] = edges
        return graph

def name(module):
    return "::".join(module) or "crate"

def circles(graph):
    """Tarjan's strongly connected components with more than one module."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out

def example(graph, component):
    """One circle through the component, for the message."""
    members, start = set(component), component[0]
    paths, queue = {start: [start]}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                return paths[v] + [start]
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return component

args, allowed, crates = sys.argv[1:], set(), []
while args:
    a = args.pop(0)
    if a == "--allow":
        crate, _, modules = args.pop(0).partition(":")
        allowed.add((crate, frozenset(m.strip() for m in modules.split(","))))
    else:
        crates.append(a.rstrip("/"))
if not crates:
    sys.exit("usage: .ci/import-cycles.sh [--allow CRATE:MOD,MOD ...] crates/a [crates/b ...]")

status = 0
for crate_dir in crates:
    crate = os.path.basename(crate_dir)
    roots = [f for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(crate_dir, "src", f))]
    for root in roots:
        label = crate if len(roots) == 1 or root == "lib.rs" else f"{crate} (src/{root})"
        graph = Crate(os.path.join(crate_dir, "src", root)).graph()
        print(f"== {label}: imports per module")
        for module in sorted(graph):
            edges = ", ".join(sorted(name(t) for t in graph[module])) or "(none)"
            print(f"  {name(module):<28} -> {edges}")
        found = circles(graph)
        for component in found:
            names = frozenset(name(m) for m in component)
            known = (crate, names) in allowed
            status |= not known
            circle = example(graph, component)
            line = " -> ".join(name(m) for m in circle)
            if len(circle) - 1 < len(component):
                line += f" (the circle holds {', '.join(sorted(names))})"
            print(f"  {'known circle (allowed)' if known else 'CIRCLE'}: {line}")
        if not found:
            print("  no import circle")
sys.exit(status)
PY
