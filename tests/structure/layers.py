"""The import contract of dslc's layers (docs/architecture.md), checked over the source's AST.

Every module under the folders pyproject.toml maps into ``dslc`` (dslc/, ir/, backends/, and
runtime/ once it exists) is parsed, never imported. Each ``import``/``from ... import`` statement
counts, wherever it stands (a function-local import is as much a dependency as a top-level one),
and so does ``importlib.import_module("literal")``. ``from pkg import name`` is an import of the
submodule ``pkg.name`` when there is one, else of ``pkg``; relative imports are resolved.

Three rules:

* layers: a module imports only the layers its own layer may (``ALLOWED``); the layer of a
  module is given by its name's longest prefix in ``PREFIXES`` (today's names and the target
  ones both, so a move changes nothing here);
* cycles: no strongly connected set of more than ``MAX_CYCLE`` modules;
* bases: a module that defines a class never imports a module that subclasses it.

``check(root)`` returns the violations found; the test compares them with its KNOWN list.
"""
from __future__ import annotations

import ast
import os
import tomllib
from dataclasses import dataclass, field

import networkx as nx

MAX_CYCLE = 4

# The layers, lowest first. A name's layer is its longest prefix here; dslc's own flat modules
# not yet moved into trace/, autodiff/, lower/ or driver/ are named one by one.
PREFIXES = {
    "dslc.ir": "ir",
    "dslc.ir.passes": "passes",
    "dslc.runtime": "runtime",
    "dslc.backends.runtime": "runtime",          # today's home of the runtime
    "dslc.backends": "registry",                 # the backend registry (backends/__init__.py)
    "dslc.backends.common": "backend.common",
    "dslc.backends.interp": "backend.interp",
    "dslc.backends.numba": "backend.numba",
    "dslc.backends.text": "backend.text",
    "dslc.backends.ray": "backend.ray",
    "dslc.backends.xla": "backend.xla",
    "dslc.trace": "trace",
    "dslc.autodiff": "autodiff",
    "dslc.lower": "lower",
    "dslc.driver": "driver",
    "dslc": "surface",                           # the modules that carry Caffe2's names
}
ROOT_PACKAGE = "dslc"                            # dslc/__init__.py: the version, the IR's names
FLAT = {
    "driver": "cli compat distributed",
}
for _layer, _names in FLAT.items():
    PREFIXES.update({f"dslc.{n}": _layer for n in _names.split()})

BACKENDS = ["backend.common", "backend.interp", "backend.numba", "backend.text", "backend.ray", "backend.xla"]
BELOW_BACKENDS = {"ir", "passes", "runtime"}
FRONT = {"trace", "autodiff", "lower"}
# which layers a layer may import (its own included)
ALLOWED = {
    "root": {"ir", "root"},
    "ir": {"ir"},
    "passes": {"ir", "passes"},
    "runtime": {"ir", "runtime"},
    "registry": {"ir", "registry"},
    **{b: BELOW_BACKENDS | {b, "registry", "backend.common"} for b in BACKENDS},
    "trace": BELOW_BACKENDS | {"trace"},
    "autodiff": BELOW_BACKENDS | {"trace", "autodiff"},
    # lowering builds on autodiff (RecurrentNetwork's backward differentiates its step net while
    # lowering); autodiff never imports lower
    "lower": BELOW_BACKENDS | {"trace", "autodiff", "lower"},
    # the driver reaches a backend through the registry only (dslc.backends.get)
    "driver": BELOW_BACKENDS | FRONT | {"driver", "registry"},
    "surface": BELOW_BACKENDS | FRONT | {"driver", "surface"},
}
# the package itself (``import dslc``, for its version or its folder) is there for whatever is above
# the backends: every module of dslc already runs it
for _layer in FRONT | {"driver", "surface"}:
    ALLOWED[_layer].add("root")
# a backend declared to build on another
ALLOWED["backend.numba"].add("backend.interp")
ALLOWED["backend.ray"].add("backend.interp")
ALLOWED["backend.xla"].add("backend.interp")


def layer_of(module: str) -> str:
    """The layer of a module of dslc (a KeyError for a name outside dslc)."""
    if module == ROOT_PACKAGE:
        return "root"
    name = module
    while name:
        if name in PREFIXES:
            return PREFIXES[name]
        name = name.rpartition(".")[0]
    raise KeyError(module)


@dataclass(frozen=True)
class Import:
    source: str     # the importing module
    target: str     # the module imported
    path: str       # the importing file, relative to the root
    line: int
    local: bool     # inside a function

    def where(self) -> str:
        return f"{self.path}:{self.line}" + (" (function-local)" if self.local else "")


@dataclass
class Violation:
    rule: str                   # one of RULES
    key: tuple                  # what a KNOWN entry names: (importer, imported) or the cycle's members
    message: str
    imports: list = field(default_factory=list)

    def __str__(self):
        return self.message + "".join(f"\n    {i.where()}: {i.source} imports {i.target}"
                                      for i in self.imports[:12])


def package_dirs(root: str) -> dict[str, str]:
    """pyproject.toml's ``package-dir``: package name -> folder (only those that exist)."""
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {pkg: folder for pkg, folder in mapping.items() if os.path.isdir(os.path.join(root, folder))}


def find_modules(root: str, packages: dict[str, str] | None = None) -> dict[str, str]:
    """Module name -> file path, for every .py file under the mapped folders."""
    packages = package_dirs(root) if packages is None else packages
    found = {}
    for pkg, folder in packages.items():
        top = os.path.join(root, folder)
        for dirpath, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__"
                             and os.path.exists(os.path.join(dirpath, d, "__init__.py")))
            # a folder mapped on its own (ir/ under dslc, say) is walked under its own name
            rel_dir = os.path.relpath(dirpath, top)
            parts = [] if rel_dir == "." else rel_dir.split(os.sep)
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                name = ".".join([pkg, *parts] + ([] if f == "__init__.py" else [f[:-3]]))
                found[name] = os.path.join(dirpath, f)
    return found


def _resolve(name: str, modules) -> str | None:
    """The module ``name`` is, or lies in (its longest prefix that is one)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


class _Scan:
    """One module's imports, and the names they bind (for the base-class rule).

    Only statements are walked (an import is one), plus the calls of a file that names
    ``import_module``: the expressions of a 40k-line tree are not worth a visit each.
    """

    def __init__(self, module, path, rel, modules, is_package):
        self.module, self.rel, self.modules = module, rel, modules
        self.package = module if is_package else module.rpartition(".")[0]
        self.imports: list[Import] = []
        self.bound: dict[str, tuple[str, str | None]] = {}   # name -> (module, attribute or None)
        self.classes: dict[str, list[ast.expr]] = {}          # class defined at top level -> its bases
        self.functions: list[tuple[int, int]] = []            # the lines of each function
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.tree = ast.parse(text, path)
        self._walk(self.tree.body, local=False, top=True)
        if "import_module" in text:
            self._import_module_calls()

    def _add(self, node, target, local):
        if target is not None and target != self.module:
            self.imports.append(Import(self.module, target, self.rel, node.lineno, local))

    def _walk(self, body, local, top):
        for node in body:
            if isinstance(node, ast.Import):
                self._import(node, local)
            elif isinstance(node, ast.ImportFrom):
                self._import_from(node, local)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.append((node.lineno, node.end_lineno))
                self._walk(node.body, True, False)
            elif isinstance(node, ast.ClassDef):
                if top:
                    self.classes[node.name] = node.bases
                self._walk(node.body, local, False)
            else:   # if, for, while, with, try, match: their blocks stand where they stand
                for name in ("body", "orelse", "finalbody", "handlers", "cases"):
                    for child in getattr(node, name, ()):
                        if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                            self._walk(child.body, local, top)
                        elif isinstance(child, ast.stmt):
                            self._walk([child], local, top)

    def _import(self, node, local):
        for alias in node.names:
            target = _resolve(alias.name, self.modules)
            self._add(node, target, local)
            if alias.asname and target == alias.name:
                self.bound[alias.asname] = (target, None)
            elif not alias.asname:
                self.bound[alias.name.partition(".")[0]] = (alias.name.partition(".")[0], None)

    def _import_from(self, node, local):
        if node.level:
            base = self.package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        for alias in node.names:
            if f"{source}.{alias.name}" in self.modules:
                target = f"{source}.{alias.name}"
                self.bound[alias.asname or alias.name] = (target, None)
            else:
                target = _resolve(source, self.modules)
                if target is not None:
                    self.bound[alias.asname or alias.name] = (target, alias.name)
            self._add(node, target, local)

    def _import_module_calls(self):
        # importlib.import_module("dslc.x") with a literal name
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            arg = node.args[0]
            if name == "import_module" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                local = any(a <= node.lineno <= b for a, b in self.functions)
                self._add(node, _resolve(arg.value, self.modules), local)


@dataclass
class Graph:
    root: str
    modules: dict[str, str]                 # name -> path
    imports: list[Import]
    scans: dict[str, _Scan]

    def digraph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(self.modules)
        for i in self.imports:
            g.add_edge(i.source, i.target)
        return g


def scan(root: str, packages: dict[str, str] | None = None) -> Graph:
    modules = find_modules(root, packages)
    scans, imports = {}, []
    for name, path in modules.items():
        s = _Scan(name, path, os.path.relpath(path, root), modules, path.endswith("__init__.py"))
        scans[name] = s
        imports += s.imports
    return Graph(root, modules, imports, scans)


def layer_violations(graph: Graph) -> list[Violation]:
    by_pair: dict[tuple[str, str], list[Import]] = {}
    for i in graph.imports:
        src, dst = layer_of(i.source), layer_of(i.target)
        if dst not in ALLOWED[src]:
            by_pair.setdefault((i.source, i.target), []).append(i)
    return [Violation("layer", pair, f"{pair[0]} ({layer_of(pair[0])}) may not import {pair[1]} "
                      f"({layer_of(pair[1])})", found)
            for pair, found in sorted(by_pair.items())]


def cycles(graph: Graph, limit: int = MAX_CYCLE) -> list[Violation]:
    """Import cycles of more than ``limit`` modules, every import counted (rule "cycle"), and
    cycles of top-level imports alone, of any size (rule "dag": with one, a script that imports
    the wrong module of it first fails)."""
    found = []
    for rule, imports, most in (("cycle", graph.imports, limit),
                                ("dag", [i for i in graph.imports if not i.local], 1)):
        g = nx.DiGraph((i.source, i.target) for i in imports)
        for members in nx.strongly_connected_components(g):
            if len(members) <= most:
                continue
            inside = [i for i in imports if i.source in members and i.target in members]
            # one concrete cycle through the set, for the message: the shortest through its first module
            first = min(members)
            sub = g.subgraph(members)
            back = min((nx.shortest_path(sub, t, first) for t in sub.successors(first)), key=len)
            what = (f"an import cycle of {len(members)} modules (more than {limit})" if rule == "cycle"
                    else f"a cycle of {len(members)} modules through top-level imports alone")
            found.append(Violation(rule, tuple(sorted(members)), f"{what}, e.g. {' -> '.join([first, *back])}; "
                                   f"its members: {' '.join(sorted(members))}", inside))
    return sorted(found, key=lambda v: (v.rule, v.key))


def _class_home(graph: Graph, module: str, name: str, hops: int = 6) -> str | None:
    """The module that defines class ``name`` as seen from ``module`` (following re-exports)."""
    for _ in range(hops):
        s = graph.scans.get(module)
        if s is None:
            return None
        if name in s.classes:
            return module
        bound = s.bound.get(name)
        if bound is None or bound[1] is None:
            return None
        module, name = bound
    return None


def _base_home(graph: Graph, scan_: _Scan, base: ast.expr) -> str | None:
    if isinstance(base, ast.Name):
        if base.id in scan_.classes:
            return scan_.module
        bound = scan_.bound.get(base.id)
        if bound and bound[1] is not None:
            return _class_home(graph, *bound)
        return None
    if isinstance(base, ast.Attribute):
        parts = []
        node = base
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in scan_.bound:
            return None
        module, attr = scan_.bound[node.id]
        if attr is not None:
            return None
        dotted = ".".join([module, *reversed(parts)])
        owner, _, cls = dotted.rpartition(".")
        return _class_home(graph, owner, cls) if owner in graph.modules else None
    return None


def base_violations(graph: Graph) -> list[Violation]:
    edges: dict[tuple[str, str], list[Import]] = {}
    for i in graph.imports:
        edges.setdefault((i.source, i.target), []).append(i)
    subclasses: dict[tuple[str, str], set[str]] = {}
    for name, s in graph.scans.items():
        for cls, bases in s.classes.items():
            for b in bases:
                home = _base_home(graph, s, b)
                if home and home != name and (home, name) in edges:
                    subclasses.setdefault((home, name), set()).add(cls)
    return [Violation("base", pair, f"{pair[0]} imports {pair[1]}, whose {', '.join(sorted(classes))} "
                      f"subclass its classes: a base module must not import its subclasses", edges[pair])
            for pair, classes in sorted(subclasses.items())]


def check(root: str, packages: dict[str, str] | None = None) -> list[Violation]:
    graph = scan(root, packages)
    return layer_violations(graph) + cycles(graph) + base_violations(graph)


# ---- the KNOWN list: what the tree violates today, each entry with the helper who removes it

RULES = ("layer", "cycle", "dag", "base")
SETS = ("cycle", "dag")     # the rules whose entries list a cycle's members


@dataclass(frozen=True)
class Known:
    owner: str      # who removes it (see the test's KNOWN list)
    rule: str       # one of RULES
    name: str       # layer, base: the importing modules (space-separated); cycle: a label for it
    names: str      # layer, base: the modules they may not import; cycle: its members

    # a layer or base entry names every pair (importer, imported) of its two lists: each must occur

    def members(self) -> set[str]:
        return set(self.names.split())


def compare(found: list[Violation], known: list[Known]) -> tuple[list[Violation], list[str]]:
    """The violations no KNOWN entry covers, and what KNOWN lists that no longer occurs.

    A layer or base entry covers exactly the (importer, imported) pairs it names. A cycle entry
    covers any cycle made only of its members (so a cycle that shrinks or splits stays covered,
    one that takes in a module not listed does not); a member found in no cycle is stale.
    """
    pairs: dict[tuple[str, str, str], Known] = {}
    cycle_entries = [k for k in known if k.rule in SETS]
    for k in known:
        if k.rule not in SETS:
            for importer in k.name.split():
                for n in k.names.split():
                    pairs[(k.rule, importer, n)] = k
    new, seen, still_cycling = [], set(), set()
    for v in found:
        if v.rule not in SETS:
            key = (v.rule, *v.key)
            if key in pairs:
                seen.add(key)
            else:
                new.append(v)
            continue
        members = set(v.key)
        entry = max((k for k in cycle_entries if k.rule == v.rule), key=lambda k: len(k.members() & members),
                    default=None)
        if entry is None or not entry.members() & members:
            new.append(v)
            continue
        still_cycling |= {(v.rule, m) for m in members & entry.members()}
        extra = members - entry.members()
        if extra:
            new.append(Violation(v.rule, v.key, f"{' '.join(sorted(extra))} joined the cycle KNOWN as "
                                 f"{entry.name!r} ({entry.owner}): {v.message}", v.imports))
    stale = [f"{k.owner}: {rule} {name} -> {n} no longer occurs: delete it from that entry"
             for (rule, name, n), k in pairs.items() if (rule, name, n) not in seen]
    for k in cycle_entries:
        gone = {m for m in k.members() if (k.rule, m) not in still_cycling}
        if gone:
            stale.append(f"{k.owner}: the cycle {k.name!r} no longer holds {' '.join(sorted(gone))}: "
                         f"delete them from its members")
    return new, stale


def report(new: list[Violation], stale: list[str]) -> str:
    parts = []
    if new:
        parts.append(f"{len(new)} new violation(s) of the layers (docs/architecture.md): fix the import "
                     "(or, where a KNOWN entry's module was moved or renamed, update its entry)")
        parts += [f"  [{v.rule}] {v}" for v in new]
    if stale:
        parts.append(f"{len(stale)} KNOWN entr(y/ies) no longer occur (fixed: thank you); shrink the list:")
        parts += [f"  {s}" for s in stale]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    """``python tests/structure/layers.py [ROOT]``: the graph's size and every violation (KNOWN ones
    included: the test, not this, compares them with its list)."""
    root = argv[1] if len(argv) > 1 else "."
    graph = scan(root)
    found = layer_violations(graph) + cycles(graph) + base_violations(graph)
    local = sum(i.local for i in graph.imports)
    print(f"{len(graph.modules)} modules, {len(graph.imports)} imports ({local} function-local), "
          f"{graph.digraph().number_of_edges()} edges; {len(found)} violations")
    for v in found:
        print(f"[{v.rule}] {v}")
    return 1 if found else 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv))
