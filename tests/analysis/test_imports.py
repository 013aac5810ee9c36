"""analysis/'s import graph: acyclic, deferred (function-level) imports included, and free of orchestration/ and chaos/
(the checker reads histories; it may use node/ for their format, nothing of the orchestrator)."""

from __future__ import annotations

import ast
from pathlib import Path

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
MODULES = {p.stem for p in ANALYSIS.glob("*.py")}


def imported(path: Path) -> list[tuple[str, int]]:
    """Every module an `import x` or `from x import y` names, at any depth of the file, with its line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "analysis":  # from analysis import spark_service
                out += [(f"analysis.{a.name}", node.lineno) for a in node.names]
            else:
                out.append((node.module, node.lineno))
    return out


def graph() -> dict[str, set[str]]:
    """analysis module -> the analysis modules it imports."""
    edges: dict[str, set[str]] = {}
    for name in MODULES:
        deps = {m.split(".")[1] for m, _ in imported(ANALYSIS / f"{name}.py") if m.startswith("analysis.")}
        edges[name] = {d for d in deps if d in MODULES and d != name}
    return edges


def cycle_in(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_is_acyclic() -> None:
    cycle = cycle_in(graph())
    assert cycle is None, "import cycle in analysis/: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_deferred_cycle() -> None:
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


def test_analysis_does_not_import_the_orchestrator() -> None:
    bad = [
        f"{name}.py:{line} imports {mod}"
        for name in sorted(MODULES)
        for mod, line in imported(ANALYSIS / f"{name}.py")
        if mod.split(".")[0] in ("orchestration", "chaos")
    ]
    assert not bad, bad
