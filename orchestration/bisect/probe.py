"""A bisect probe on real members: N runs of the scenario file on one release, as one matrix (a process per run,
`-j` at once, then one check pass: orchestration/matrix/run.py), in its own folder under the bisect's. A run
*fails* when it violates every check of `violates` (other violations do not count: bisect looks for the bug's
signature), or, with no `violates`, when its verdict is FAIL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.matrix.results import CellResult, MatrixResult
from orchestration.matrix.run import check_all, run_cells, set_aside, write_matrix
from orchestration.matrix.spec import Cell, Expectation, Matrix, _slug, system_label
from orchestration.scenario import Scenario, ScenarioError, load


class ProbeError(RuntimeError):
    """A probe's runs could not run or be checked: the message says which and why (bisect exits 2)."""


class Interrupted(Exception):
    """Ctrl-C during a probe: the runs that finished are kept (and checked), the probe is not counted."""


@dataclass
class Target:
    """What bisect runs: the file, the settings that choose a release's system (a catalogue bug's [bug.real]
    system), the backend, what a failing run violates, and where the probes go."""

    path: Path
    backend: str
    out: Path
    jobs: int = 1
    violates: list[str] = field(default_factory=list)
    system: dict[str, object] = field(default_factory=dict)
    master: str | None = None
    batches: dict[str, int] = field(default_factory=dict)  # version -> batches run so far

    def settings(self, version: str) -> dict[str, object]:
        return {**self.system, "cluster.version": version}

    def scenario(self, version: str) -> Scenario:
        """The file on that release (ScenarioError: e.g. the release cannot be had; its jar is fetched here)."""
        return load(self.path, settings=self.settings(version))

    def failed(self, r: CellResult) -> bool:
        if self.violates:
            return set(self.violates) <= set(r.violated)
        return bool(r.violated)

    def probe(self, version: str, runs: int) -> tuple[int, int, str]:
        """`runs` more runs of the release: (failed, ran, their folder relative to the bisect's out)."""
        try:
            sc = self.scenario(version)
        except ScenarioError as e:
            raise ProbeError(f"{version}: {e}") from None
        batch = self.batches.get(version, 0) + 1
        self.batches[version] = batch
        rel = Path("probes") / version / str(batch)
        folder = self.out / rel
        folder.mkdir(parents=True, exist_ok=True)
        cells = []
        for i in range(runs):
            seed = sc.seed + (batch - 1) * runs + i
            cell = Cell(i + 1, self.path, sc.name, self.settings(version), self.backend, seed, Expectation("pass"))
            cell.folder = f"{cell.id}-{_slug(sc.name)}-{version}"
            cell.system = system_label(sc)
            cells.append(cell)
        matrix = Matrix(f"{sc.name}-{version}", None, cells, {"seed": [c.seed for c in cells]}, ["scenario"], ["seed"])
        t0 = time.perf_counter()
        results, interrupted = run_cells(matrix, folder, self.jobs)
        result = MatrixResult(matrix, folder, results, interrupted, run_seconds=time.perf_counter() - t0)
        set_aside(folder, results)
        check_all(result, self.master)
        write_matrix(result)
        if interrupted:
            raise Interrupted(version)
        if result.check_error:
            raise ProbeError(f"{version}: the checker could not run: {result.check_error}")
        bad = [r for r in results if r.status != "ran"]
        if bad:
            raise ProbeError(f"{version}: run {bad[0].cell.folder} could not run: {bad[0].error or bad[0].status}")
        return sum(self.failed(r) for r in results), len(results), str(rel.parent)
