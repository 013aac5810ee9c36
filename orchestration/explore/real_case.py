"""A schedule on real members: the scenario (case.py's `with_faults`) run through the normal runner on a real backend
(netns, docker), as `chaosbed run` does, into a run folder, and checked with the plain-Python checker
(analysis/reference.py), as the simulator's cases are. Each run is a fresh cluster with its own namespaces (its own
label, subnet and multicast group: orchestration/host/claims.py), so several run side by side.

`Keep` says what happens to the run folder: removed (the search's passing schedules), kept where it is, or moved
to a folder of its own when it failed (the search keeps its failures' runs)."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from orchestration.explore.case import CaseResult, scenario_of, sentences
from orchestration.explore.coverage import coverage_of
from orchestration.explore.pressure import pressure_of
from orchestration.explore.tables import TomlTable
from orchestration.scenario import ScenarioError

REAL_BACKENDS = ("netns", "docker")


@dataclass(frozen=True)
class Keep:
    """Where a run folder goes: `always` kept at `path` (the run is written there), or moved to `path` if it
    failed (`path` None: removed either way)."""

    path: str | None = None
    always: bool = False


REMOVE = Keep()  # the run folder is removed


def run_real_case(raw: TomlTable, scratch: Path, backend: str, keep: Keep = REMOVE, *, tap: bool = False) -> CaseResult:
    """Runs a scenario on a real backend and checks it; a scenario that cannot run (or be checked) is an `error`.
    `tap`: the run's wire tap is on (netns) and the result carries what the schedule reached (coverage.py)."""
    from analysis.config import InputError
    from analysis.reference import check_run
    from analysis.schema import RunFolder
    from orchestration.runner import run

    out = Path(keep.path) if keep.always and keep.path else scratch
    t0 = time.perf_counter()
    result: CaseResult
    try:
        sc = scenario_of(raw)
        run(sc, backend, out, tap=tap)
        res = check_run(RunFolder(out.name, out))
        violated = tuple(sorted({v.check for v in res.violations}))
        cov = coverage_of(out) if tap else None
        result = CaseResult(
            violated, None, res.events, time.perf_counter() - t0, sentences(res.violations),
            tuple(sorted(cov.features)) if cov else (), cov.targets if cov else (), pressure=pressure_of(res),
            tails=cov.tails if cov else (),
        )  # fmt: skip
    except (ScenarioError, InputError) as e:
        result = CaseResult(error=str(e), seconds=time.perf_counter() - t0)
    if not keep.always:
        if result.failed and keep.path:
            Path(keep.path).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(out), keep.path)
        shutil.rmtree(out, ignore_errors=True)
    return result
