"""The shape of node/ (the member, which runs in any container with python3): standard library only, small modules
and functions, and no import cycle, counting imports inside functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

NODE = Path(__file__).resolve().parents[2] / "node"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(NODE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(NODE.rglob("*.py"))}


def imported(path: Path) -> set[str]:
    """Every module an import statement anywhere in the file names (a `from package import name` names the
    submodule when there is one)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names} & MODULES.keys()
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself), Tarjan's way."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_node_has_no_import_cycle() -> None:
    graph = {m: {i for i in imported(p) if i in MODULES and i != "node"} for m, p in MODULES.items()}
    assert sum(map(len, graph.values())) > 30  # the graph is the real one
    assert cycles(graph) == []


def test_node_imports_the_standard_library_only() -> None:
    allowed = set(sys.stdlib_module_names) | {"__future__", "node"}
    outside = {
        f"{module}: {name}"
        for module, path in MODULES.items()
        for name in imported(path)
        if name.split(".")[0] not in allowed
    }
    assert outside == set()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_and_functions_are_small(module: str) -> None:
    source = MODULES[module].read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []
