"""`chaosbed bugs run --all` prints one row per bug that stays readable in a 100- and a 120-column terminal: every
bug's name and id, what its flawed variant must violate, what each variant did, and whether both went as planned."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from orchestration.cli.matrix import bugs_table
from orchestration.matrix.bugs import bug_matrix, catalogue
from orchestration.matrix.results import CellResult, MatrixResult


def result_as_planned(backends: list[str]) -> MatrixResult:
    matrix = bug_matrix(catalogue(), backends)
    results = []
    for cell in matrix.cells:
        violated = list(cell.expect.violates or []) if cell.expect.result == "fail" else []
        results.append(CellResult(cell, "ran", violated=violated, checked=True))
    results[0].violated = []  # the first bug's flawed variant passed: not as expected
    return MatrixResult(matrix, Path("/nonexistent"), results)


@pytest.mark.parametrize("width", [100, 120])
@pytest.mark.parametrize("backends", [["sim"], ["sim", "netns"]])
def test_the_bugs_table_fits_the_terminal_and_names_every_bug(width: int, backends: list[str]) -> None:
    result = result_as_planned(backends)
    console = Console(width=width, record=True, color_system=None)
    console.print(bugs_table(result, {e.path: e.bug.id for e in catalogue()}))
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    header = next(line for line in lines if line.lstrip().startswith("bug"))
    for word in ("flawed", "fixed", "as expected", *(["backend"] if len(backends) > 1 else [])):
        assert word in header, header
    # a row per pair: the model's (flawed/fixed) and the real releases' ([bug.real]), named under the bug
    pairs = sum(int(e.bug.modelled) + int(e.bug.real is not None) for e in catalogue())
    real = [e for e in catalogue() if e.bug.real is not None]
    assert real, "the catalogue has real-release pairs"
    for backend in backends[1:]:
        assert text.count(f", {backend}") == pairs
    for e in catalogue():
        assert e.path.stem in text and e.bug.id in text
    for e in real:
        assert e.bug.real is not None and f"real {e.bug.real.flawed} -> {e.bug.real.fixed}" in text
    rows = [line for line in lines if line.strip().endswith(("yes", "NO"))]
    assert len(rows) == pairs * len(backends)
    assert sum(line.strip().endswith("NO") for line in rows) == 1  # only the first bug's pair went wrong
    n = pairs * len(backends)
    no_fix = sum(1 for e in catalogue() if e.bug.no_fix) * len(backends)  # flawed variant only: "no fix", no PASS
    assert no_fix and text.count("no fix") == no_fix
    assert text.count("FAIL") == n - 1 and text.count("PASS") == n + 1 - no_fix
