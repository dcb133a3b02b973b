#!/usr/bin/env bash
# Fails when the modules of a crate import each other in a circle. For each module file under
# <crate>/src (tests excluded: a `mod tests` may use anything), the `crate::<module>` paths it
# names are its edges; a name the crate root defines is an edge to the root (`crate`), one it
# re-exports (`pub use error::Error`) an edge to that module, and the root's own edges are the
# modules its code names. The script prints the graph and any cycle it finds.
# Usage: .ci/import-cycles.sh crates/gantry-core [crates/gantry-store ...]
set -euo pipefail
status=0
for crate in "$@"; do
  python3 - "$crate" <<'PY' || status=1
import os, re, sys

src = os.path.join(sys.argv[1], "src")

def module_of(path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return "::".join(rel) or "crate"

files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".rs")]
modules = {module_of(f): f for f in files}

root_file = next((modules["crate"] for _ in [0] if "crate" in modules), None)
root_text = open(root_file).read() if root_file else ""
# Names the root re-exports from a module: `pub use error::{Error, Result};`.
reexported = {}
for m in re.finditer(r"pub use (\w+)::(\{[^}]*\}|\w+);", root_text):
    for item in m.group(2).strip("{}").split(","):
        if item.strip():
            reexported[item.strip().split(" as ")[-1]] = m.group(1)

def resolve(path):
    # The longest module named by `crate::a::b::c`: `a::b` if that is a module, else `a`; a
    # name of the root's own, the root or the module it re-exports it from.
    parts = path.split("::")
    for n in range(len(parts), 0, -1):
        name = "::".join(parts[:n])
        if name in modules and name != "crate":
            return name
    if parts[0] in reexported:
        return reexported[parts[0]]
    if re.search(r"\b(struct|enum|fn|type|trait|const|static)\s+" + re.escape(parts[0]) + r"\b", root_text):
        return "crate"
    return None

graph = {}
for name, path in sorted(modules.items()):
    text = open(path).read()
    # Leave out the unit tests at the end of a file.
    text = re.split(r"\n#\[cfg\(test\)\]\s*\nmod tests", text)[0]
    edges = set()
    for m in re.finditer(r"\bcrate::((?:\w+::)*\w+|\{[^}]*\})", text):
        body = m.group(1)
        if body.startswith("{"):
            items = [i.strip() for i in body[1:-1].split(",")]
        else:
            items = [body]
        for item in items:
            target = resolve(item.split(" ")[0].strip("{} "))
            if target and target != name and not name.startswith(target + "::") and not target.startswith(name + "::"):
                edges.add(target)
    if name == "crate":
        # The root names its modules without `crate::` (`auth::AuthService`).
        code = re.sub(r"(?m)^\s*(pub )?mod \w+;.*$|^\s*pub use .*$", "", text)
        edges |= {m for m in modules if m != "crate" and "::" not in m and re.search(r"(?<!::)\b" + m + r"::", code)}
    graph[name] = sorted(edges)

print(f"== {sys.argv[1]}: crate:: imports per module")
for name, edges in graph.items():
    print(f"{name:<20} -> {', '.join(edges) if edges else '(none)'}")

# Depth-first search for a back edge.
WHITE, GREY, BLACK = 0, 1, 2
colour = {n: WHITE for n in graph}
stack, cycles = [], []

def visit(n):
    colour[n] = GREY
    stack.append(n)
    for m in graph.get(n, []):
        if colour.get(m) == GREY:
            cycles.append(stack[stack.index(m):] + [m])
        elif colour.get(m) == WHITE:
            visit(m)
    stack.pop()
    colour[n] = BLACK

sys.setrecursionlimit(10000)
for n in graph:
    if colour[n] == WHITE:
        visit(n)
if cycles:
    for c in cycles:
        print("cycle: " + " -> ".join(c))
    sys.exit(1)
print("no import cycle")
PY
done
exit $status
