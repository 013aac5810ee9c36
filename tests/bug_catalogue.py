"""Shared by the simulator and the netns catalogue tests: runs every bug of scenarios/bugs/ (flawed and fixed) as
one matrix (one check pass) on a backend, or one bug as a two-cell matrix (so pytest-xdist spreads the slow netns
bugs over its workers; each check then takes seconds on the warm Spark service)."""

from __future__ import annotations

from pathlib import Path

from orchestration.matrix.bugs import CATALOGUE, Entry, bug_matrix, catalogue
from orchestration.matrix.run import CellResult, MatrixResult, check_all, run_cells, set_aside, write_matrix

BUG_FILES = sorted(CATALOGUE.glob("*.toml"))


def run_catalogue(backend: str, out: Path, jobs: int = 2, only: Path | None = None) -> tuple[list[Entry], MatrixResult]:
    """Runs the catalogue (or the one bug file `only`) as a matrix on `backend`, checked in one pass."""
    entries = [e for e in catalogue() if only is None or e.path == only]
    assert entries, f"no bug file {only}"
    matrix = bug_matrix(entries, [backend], name=f"bugs-{backend}")
    results, interrupted = run_cells(matrix, out, jobs)
    assert not interrupted
    result = MatrixResult(matrix, out, results)
    set_aside(out, results)
    check_all(result, None)
    write_matrix(result)
    assert result.check_error is None, result.check_error
    return entries, result


def variants(result: MatrixResult, path: Path) -> dict[str, CellResult]:
    return {r.cell.label: r for r in result.results if r.cell.scenario == path}


def describe(r: CellResult) -> str:
    return f"{r.cell.label}: status {r.status} {r.error or ''} violated {r.violated}; replay: {r.cell.replay()}"


def assert_reproduced(result: MatrixResult, path: Path, entries: list[Entry]) -> None:
    """The flawed variant violates exactly the checks the file names; the fixed one passes."""
    (entry,) = [e for e in entries if e.path == path]
    got = variants(result, path)
    flawed, fixed = got["flawed"], got["fixed"]
    assert flawed.status == "ran" and fixed.status == "ran", f"{describe(flawed)}\n{describe(fixed)}"
    assert sorted(flawed.violated) == sorted(entry.bug.violates), describe(flawed)
    assert fixed.violated == [], describe(fixed)
