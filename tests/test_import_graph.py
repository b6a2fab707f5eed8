"""The import graph of src/trainlint has no circles.

Every `import` and `from ... import` statement of every module under src/trainlint is read from
the source (with `ast`, nothing is imported), wherever it stands: at the top of a module or
inside a function. Imports written inside functions are how circles used to be hidden (a lazy
import runs later, so the circle never fails at import time, but the two modules still depend on
each other). Relative imports are resolved against the importing module's package.

The modules are found by walking the files, not listed here: sub-packages appear and move.

A module that imports by computed name (`importlib.import_module(...)`: the rule registry
discovering the rules) is taken to import every module under its own package, since that is what
such a name can reach; the rules it finds import the engine and the analyses, so a circle through
the registry is a real one even though no import statement names it.

An edge goes from a module to the module it names; `from package import name` goes to
`package.name` when that is a module, else to `package`. Importing `a.b.c` also runs `a` and
`a.b` (their `__init__`), but those are not edges of the graph: a package's `__init__` that
imports nothing back is no part of a circle, and counting every parent would make every
sub-module "import" its own package.

Imports under `if TYPE_CHECKING:` are left out: they never run, so they cannot make an import
order fail, and they are how an annotation names a type from a module that must not be imported
at run time (the rule base names `FileContext` this way so that a run served by the cache does
not import libcst). They still must not be used to hide a run-time dependency: only annotations
may use what they import.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

import trainlint

PACKAGE_DIR = Path(trainlint.__file__).resolve().parent


def module_names() -> Dict[str, Path]:
    """dotted module name -> file, for every module of the package."""
    found: Dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> List[ast.stmt]:
    """Every import statement of the tree, inside functions too, except under TYPE_CHECKING."""
    out: List[ast.stmt] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    walk_stmt(other)
                continue
            walk_stmt(child)

    def walk_stmt(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        else:
            walk(node)

    walk(tree)
    return out


def _imports_by_computed_name(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == "import_module":
                return True
    return False


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(base: Optional[str], level: int, package: str) -> Optional[str]:
    if level == 0:
        return base
    parts = package.split(".")
    if level - 1 > len(parts):
        return None
    anchor = ".".join(parts[: len(parts) - (level - 1)])
    return f"{anchor}.{base}" if base else anchor


def import_graph() -> Dict[str, Set[str]]:
    modules = module_names()
    graph: Dict[str, Set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = _package_of(name, path)
        if _imports_by_computed_name(tree):
            graph[name].update(
                other
                for other in modules
                if other.startswith(package + ".")
                and other != name
                and not other.endswith(".__main__")  # a script, never imported
            )
        for node in _imports(tree):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                assert isinstance(node, ast.ImportFrom)
                base = _resolve(node.module, node.level, package)
                if base is None:
                    continue
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.append(submodule if submodule in modules else base)
            for target in targets:
                # `import trainlint.a.b` names the module a.b; anything outside is not ours.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[List[str]] = []
    counter = [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_cycle_in(graph, set(component)) for component in components]


def _cycle_in(graph: Dict[str, Set[str]], component: Set[str]) -> List[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start = min(component)
    previous: Dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    return sorted(component)


def test_the_walk_sees_imports_inside_functions_and_relative_imports():
    graph = import_graph()
    # cli/check.py imports the runner inside a function.
    assert "trainlint.runner" in set().union(*graph.values())
    assert any(target.startswith("trainlint.rules") for target in graph["trainlint.engine"])
    # The registry reaches every rule it discovers.
    assert any(target.endswith("trl002_unused_noqa") for target in graph["trainlint.rules"])


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles in src/trainlint:\n" + "\n".join(
        "  " + " -> ".join(cycle) for cycle in cycles
    )


def test_find_cycles_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
