"""Shared by the simulator and the netns catalogue tests: runs every bug of scenarios/bugs/ (flawed and fixed) as
one matrix (one check pass) on a backend, or one bug as a two-cell matrix (so pytest-xdist spreads the slow netns
bugs over its workers; each check then takes seconds on the warm Spark service)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foreign import jgroups
from orchestration.matrix.bugs import CATALOGUE, Entry, bug_matrix, catalogue
from orchestration.matrix.results import CellResult, MatrixResult
from orchestration.matrix.run import check_all, run_cells, set_aside, write_matrix
from orchestration.scenario import load

BUG_FILES = sorted(CATALOGUE.glob("*.toml"))
# the bugs of chaosbed's own protocols (every backend, the simulator included) and of a foreign system (the real
# JGroups 2.12 jar: netns and docker only, and only where a JDK and the jar are)
NATIVE_BUG_FILES = [p for p in BUG_FILES if load(p).system.native]
FOREIGN_BUG_FILES = [p for p in BUG_FILES if not load(p).system.native]


def bug_params(paths: list[Path]) -> list[object]:
    """pytest parameters of bug files: a JGroups one is marked `jgroups` and skipped, with the reason, where this
    machine has no JDK or jar; a file with a real-release pair ([bug.real]) is marked `jgroups` too (its real
    cells run the JGroups 5 jars, fetched on first use: a cell that cannot run skips the test, run_catalogue)."""
    out: list[object] = []
    for p in paths:
        sc = load(p)
        marks = []
        if sc.system.requires == "jgroups":
            missing = jgroups.missing()
            marks = [pytest.mark.jgroups, pytest.mark.skipif(missing is not None, reason=str(missing))]
        elif sc.system.requires == "jgroups5" or (sc.bug is not None and sc.bug.real is not None):
            marks = [pytest.mark.jgroups]
        out.append(pytest.param(p, id=p.stem, marks=marks))
    return out


def run_catalogue(backend: str, out: Path, jobs: int = 2, only: Path | None = None) -> tuple[list[Entry], MatrixResult]:
    """Runs the catalogue (or the one bug file `only`) as a matrix on `backend`, checked in one pass."""
    entries = [e for e in catalogue() if only is None or e.path == only]
    assert entries, f"no bug file {only}"
    matrix = bug_matrix(entries, [backend], name=f"bugs-{backend}")
    if backend != "sim":  # a real cell this machine cannot run (no JDK, a jar not fetchable) skips, never passes
        skipped = [c for c in matrix.cells if c.skip]
        if skipped:
            pytest.skip(f"{skipped[0].folder}: {skipped[0].skip}")
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
    """Each flawed variant (the model's, the real release that had the bug) violates exactly the checks the file
    names for it; each fixed one passes (a bug with no_fix has the flawed variant only). On the simulator the real
    releases' cells are skipped, with the reason."""
    (entry,) = [e for e in entries if e.path == path]
    got = variants(result, path)
    assert sorted(got) == sorted(entry.bug.variants), describe(next(iter(got.values())))
    for label, r in got.items():
        if label.startswith("real-") and r.cell.backend == "sim":
            assert r.status == "skipped" and "not sim" in str(r.error), describe(r)
            continue
        assert r.status == "ran", "\n".join(describe(x) for x in got.values())
        must = entry.bug.must_violate(label)
        assert sorted(r.violated) == sorted(must or []), describe(r)
