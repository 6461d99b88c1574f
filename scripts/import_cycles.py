"""Import hygiene of the `rstf` package: cycles, and underscored names imported across modules.

Usage::

    python scripts/import_cycles.py [PACKAGE_DIR]   # default: rstf/ next to this script

Reads every module's imports with `ast`, at module level and inside functions alike
(`from . import x`, `from .a import b`, `import rstf.a`), and reports

* every cycle among the package's modules (strongly connected components of more than one
  module, or a module importing itself), and
* every `from X import _name` where X is another module of the package and `_name` is not
  a dunder, and every `x._name` where `x` names another module of the package (`from . import
  x`, `import rstf.x as x`): a private name used outside the module that owns it.

A package's `__init__` counts as a module; importing a submodule `from . import sub` is an
edge to `sub`. Exit status 1 when it finds anything, else 0.
"""
from __future__ import annotations

import ast
import os
import sys


def modules(root: str) -> dict[str, str]:
    """Dotted module name -> file, for every .py under `root` (a package folder)."""
    base = os.path.basename(os.path.normpath(root))
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), root)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join([base, *rel])] = os.path.join(d, f)
    return out


def _resolve(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    parts = mod.split(".")
    if not is_pkg:
        parts = parts[:-1]
    if level > 1:
        parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def imports(mods: dict[str, str]) -> tuple[dict[str, set[str]], list[str]]:
    """(module -> the package modules it imports, private-name findings)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for mod, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        tree = ast.parse(open(path).read(), path)
        aliases: dict[str, str] = {}  # local name -> the package module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    name = a.name
                    while name and name not in mods:
                        name = name.rpartition(".")[0]
                    if name:
                        edges[mod].add(name)
                        if a.asname and name == a.name:
                            aliases[a.asname] = name
            elif isinstance(node, ast.ImportFrom):
                src = (_resolve(mod, is_pkg, node.level, node.module) if node.level
                       else node.module or "")
                if src not in mods:
                    continue
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    if sub in mods:
                        edges[mod].add(sub)
                        aliases[a.asname or a.name] = sub
                        continue
                    edges[mod].add(src)
                    if (a.name.startswith("_") and not a.name.startswith("__")
                            and src != mod):
                        private.append(f"{path}:{node.lineno}: {mod} imports {src}.{a.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and aliases.get(node.value.id, mod) != mod
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                private.append(f"{path}:{node.lineno}: {mod} uses "
                               f"{aliases[node.value.id]}.{node.attr}")
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(root: str) -> list[str]:
    """Every finding, one line each (empty: clean)."""
    mods = modules(root)
    edges, private = imports(mods)
    # A package importing its own submodules, and a submodule its package's __init__, is
    # the ordinary shape of a package (`from . import x` in __init__); only cycles through
    # two or more plain modules, or through an __init__ and a module it does not contain,
    # are findings.
    pkgs = {m for m, p in mods.items() if p.endswith("__init__.py")}
    for m in edges:
        edges[m] = {w for w in edges[m] if not (w in pkgs and m.startswith(w + "."))}
    found = [f"import cycle: {' -> '.join(c)}" for c in cycles(edges)]
    return found + [f"private import: {p}" for p in private]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = argv[0] if argv else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rstf")
    found = check(root)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
