"""A failure's folder: `minimal.toml`, and its run folder `run/` made the way `chaosbed run` makes one (the runner
in the simulator, then the normal check: the analysis pipeline writes verdict.json and report.html), so what users
open is what they know. The normal check's verdict is compared with the search's (the reference checker): a
difference is reported, as it would be a checker bug."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestration.explore.case import sentences
from orchestration.explore.confirm import ConfirmDoc
from orchestration.explore.minimal import Provenance, write_minimal
from orchestration.explore.search import Found
from orchestration.explore.shrink import Shrunk
from orchestration.scenario import ScenarioError

MINIMAL = "minimal.toml"
RUN = "run"


@dataclass
class Failure:
    """One reported failure: where its files are and what the normal check said."""

    number: int
    found: Found
    shrunk: Shrunk
    folder: Path
    checked: tuple[str, ...] | None = None  # the normal check's violated checks (None: not checked)
    check_error: str | None = None
    same_checks: list[int] = field(default_factory=list)  # seeds of later failures with the same checks
    confirm: ConfirmDoc | None = None
    details: tuple[str, ...] = ()  # the minimal run's first violations (the reference checker)
    backend: str = "sim"  # where it was found and its run folder ran

    @property
    def minimal(self) -> Path:
        return self.folder / MINIMAL

    @property
    def run(self) -> Path:
        return self.folder / RUN


def folder_name(number: int, found: Found) -> str:
    return f"failure-{number}-seed{found.seed}"


def write_failure(
    root: Path, number: int, found: Found, shrunk: Shrunk, command: str, *, check: bool = True, spark: str | None = None
) -> Failure:
    """The failure's folder under `root`: minimal.toml, then its run folder, checked unless `check` is False."""
    folder = root / folder_name(number, found)
    folder.mkdir(parents=True, exist_ok=True)
    prov = Provenance(command, found.index, found.seed, found.result.violated, tuple(found.faults))
    write_minimal(folder / MINIMAL, shrunk.raw, prov, shrunk.trail, shrunk.runs, shrunk.complete)
    failure = Failure(number, found, shrunk, folder)
    run_minimal(failure)
    if check:
        failure.checked, failure.check_error = normal_check(failure.run, spark)
    return failure


def run_minimal(failure: Failure) -> None:
    """minimal.toml through the runner in the simulator, into the failure's run folder; its first violations."""
    from analysis.config import InputError
    from analysis.reference import check_run
    from analysis.schema import RunFolder
    from orchestration.runner import run
    from orchestration.scenario import load

    try:
        run(load(failure.minimal), "sim", failure.run)
        failure.details = sentences(check_run(RunFolder(failure.run.name, failure.run)).violations)
    except (ScenarioError, InputError) as e:
        failure.check_error = f"the minimal scenario did not run: {e}"


def normal_check(run: Path, spark: str | None) -> tuple[tuple[str, ...] | None, str | None]:
    """The analysis pipeline over a run folder (verdict.json, report.html): its violated checks, or the error."""
    from analysis.command import write_outputs
    from analysis.config import InputError
    from analysis.pipeline import SparkUnavailable, analyze

    try:
        analysis = analyze(run, spark)
        write_outputs(analysis)
    except (InputError, SparkUnavailable, OSError) as e:
        return None, f"the normal check did not run: {e}"
    (res,) = analysis.results.values()
    return tuple(sorted({v.check for v in res.violations})), None
