"""chaos/ and orchestration/ stay small and acyclic: no module over 600 lines, no function over 80, and no import
cycle within chaos/ (deferred, function-level imports included; `if TYPE_CHECKING:` imports are not imports), nor an
import of orchestration/ or analysis/ from it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def modules(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its __init__)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, name: str) -> set[str]:
    """The modules a file imports at any depth, except under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for n in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
    return found


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


def test_no_module_or_function_is_too_long() -> None:
    too_long = []
    for package in ("chaos", "orchestration"):
        for name, path in modules(package).items():
            text = path.read_text()
            if (n := len(text.splitlines())) > MAX_MODULE_LINES:
                too_long.append(f"{name}: {n} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, too_long


def test_chaos_has_no_import_cycle_and_imports_neither_orchestration_nor_analysis() -> None:
    mods = modules("chaos")
    found = {name: imports(path, name) for name, path in mods.items()}
    edges = {name: {m for m in deps if m in mods and m != name} for name, deps in found.items()}
    cycle = cycle_in(edges)
    assert cycle is None, "import cycle in chaos/: " + " -> ".join(cycle or [])
    upward = sorted(
        f"{n} imports {m}"
        for n, deps in found.items()
        for m in deps
        if m.split(".")[0] in ("orchestration", "analysis")
    )
    assert not upward, upward


def test_the_checks_can_fail(tmp_path: Path) -> None:
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    source = tmp_path / "handler.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from chaos import kernel\n"
        "def main():\n    import chaos.nfqueue as package\n    from .judge import Judge\n"
    )
    found = imports(source, "chaos.nfqueue.handler")
    assert {"chaos.nfqueue", "chaos.nfqueue.judge"} <= found and "chaos.kernel" not in found
