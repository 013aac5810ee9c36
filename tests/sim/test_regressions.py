"""Named regression scenarios (scenarios/regressions/*.toml): every failure explore or the suite's property tests
found becomes one, and each must pass on the simulator today, run as `chaosbed run --backend sim` runs it (the
runner, then the checks; here the reference checker, which tests/analysis holds to the Spark pipeline's verdicts).

A failure found on today's code that is not fixed yet is kept as a regression that fails: OPEN names it with the
reason, and its test is an xfail(strict=True), so the day it passes the suite says so (and the entry goes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.explore.case import load_base, run_case

pytestmark = pytest.mark.sim

REGRESSIONS = Path(__file__).resolve().parents[2] / "scenarios" / "regressions"
FILES = sorted(REGRESSIONS.glob("*.toml"))

# file stem -> why it fails today (a protocol bug explore found and nobody has fixed yet)
OPEN: dict[str, str] = {}


def _param(path: Path) -> object:
    reason = OPEN.get(path.stem)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(path, id=path.stem, marks=marks)


def test_there_are_regression_scenarios() -> None:
    assert FILES, f"no regression scenarios in {REGRESSIONS}"
    unknown = set(OPEN) - {p.stem for p in FILES}
    assert not unknown, f"OPEN names files that do not exist: {unknown}"


@pytest.mark.parametrize("path", [_param(p) for p in FILES])
def test_regression_scenario_passes_on_the_simulator(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    assert text.startswith("#"), f"{path.name}: say at the top what it broke and how it was found"
    result = run_case(load_base(path, keep_faults=True), tmp_path / "run")
    assert result.error is None, result.error
    assert result.violated == (), f"{path.name} violates {', '.join(result.violated)}: " + "; ".join(result.details)
