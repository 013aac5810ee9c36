"""What a matrix run found: one CellResult per cell (how it ended, what the checker said) and the MatrixResult over
them all. Their own module because both the run (run.py fills them in) and the report (report.py renders them) need
them, and neither should need the other to have them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestration.matrix.spec import Cell, Matrix
from orchestration.runner import OutcomeDoc, warning_lines


@dataclass
class CellResult:
    cell: Cell
    status: str  # "ran" | "error" (could not run: exit 2 of the cell) | "interrupted" | "not run" | "skipped"
    seconds: float = 0.0
    error: str | None = None
    outcome: OutcomeDoc = field(default_factory=lambda: OutcomeDoc())
    violated: list[str] = field(default_factory=list)
    checked: bool = False

    @property
    def passed(self) -> bool:
        return self.status == "ran" and self.checked and not self.violated

    @property
    def warnings(self) -> list[str]:
        """What the cell's run did not do as planned (its outcome.json: late member actions, warnings)."""
        return warning_lines(self.outcome.get("late") or [], self.outcome.get("warnings") or [])

    @property
    def ok(self) -> bool:
        """As expected: passed where a pass is expected, failed (with exactly the named checks) where not. A skipped
        cell (its system cannot run here, `error` says why) is neither: it does not count."""
        return self.status == "skipped" or (
            self.status == "ran" and self.checked and self.cell.expect.met(self.violated)
        )


@dataclass
class MatrixResult:
    matrix: Matrix
    out: Path
    results: list[CellResult]
    interrupted: bool = False
    check_seconds: float = 0.0
    run_seconds: float = 0.0
    check_error: str | None = None
    events: int = 0

    @property
    def ok(self) -> bool:
        return not self.interrupted and self.check_error is None and all(r.ok for r in self.results)
