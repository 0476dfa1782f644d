"""No module of ``ragfind`` imports a cycle, and the index packages import nothing above them.

The graph is read from the source with ``ast``, not by importing: every ``import`` and
``from ... import`` counts, at module level, inside functions and under ``TYPE_CHECKING``
alike (a cycle deferred into a function still ties the two modules together). Relative imports
are resolved; ``from package import name`` is an edge to ``package.name`` when that is a
module, else to the package. Importing a submodule is not counted as an edge to its parent
package: a package that re-exports its children would otherwise be a cycle with each of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "python" / "ragfind"


def _modules(root: Path) -> dict:
    """``{module name: file}`` for every Python module under ``root``, plus compiled ones
    (named by their ``.pyi`` or extension file, with no source to read)."""
    out: dict = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root.parent)
        if path.suffix == ".py":
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
        elif path.suffix in (".pyi", ".so", ".pyd"):
            name = ".".join((*rel.parent.parts, path.name.split(".")[0]))
            out.setdefault(name, None)
    return out


def _resolve(name: str, modules: dict) -> str | None:
    """The module ``name`` names, or its nearest enclosing one in the tree; None outside it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = PACKAGE_DIR) -> dict:
    """``{module: {modules it imports}}`` over the package at ``root``."""
    modules = _modules(root)
    graph: dict = {m: set() for m in modules}
    for name, path in modules.items():
        if path is None:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for a in node.names:
                    sub = f"{base}.{a.name}" if base else a.name
                    targets.append(sub if sub in modules else base)
            for t in targets:
                dep = _resolve(t, modules)
                if dep is not None and dep != name:
                    graph[name].add(dep)
    return graph


def cycles(graph: dict) -> list:
    """One shortest cycle per strongly connected component of more than one module."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    components: list = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in sorted(components):
        members = set(comp)
        start = comp[0]
        # Breadth-first from `start` back to itself within the component: a shortest cycle.
        prev: dict = {}
        frontier = [start]
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & members):
                    if w == start:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found is not None:
                    break
            frontier = nxt
        path = [found]
        while path[-1] != start:
            path.append(prev[path[-1]])
        out.append(list(reversed(path)) + [start])
    return out


def test_the_graph_sees_relative_deferred_and_compiled_imports():
    graph = import_graph()
    assert "ragfind._core" in graph["ragfind.sparse.bm25"]  # `from ragfind import _core`
    assert "ragfind.pipeline.retriever" in graph["ragfind.distributed.router"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles in ragfind:\n" + "\n".join(" -> ".join(c) for c in found)


#: The index kinds sit below everything that builds on them: no module of these packages
#: imports one of the upper ones (not even inside a function), so an index never needs a
#: model, a pipeline, the service or Ray.
LOWER = ("ragfind.sparse", "ragfind.dense", "ragfind.late")
UPPER = ("ragfind.pipeline", "ragfind.serve", "ragfind.distributed", "ragfind.models")


def _within(module: str, packages: tuple) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_index_packages_import_nothing_above_them():
    graph = import_graph()
    upward = sorted(
        f"{m} -> {dep}"
        for m, deps in graph.items()
        if _within(m, LOWER)
        for dep in deps
        if _within(dep, UPPER)
    )
    assert not upward, "upward imports:\n" + "\n".join(upward)
    assert "ragfind.sparse.query" in graph["ragfind.sparse.bm25"]  # the rule reads real edges
