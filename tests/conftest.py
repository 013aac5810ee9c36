"""What the whole suite shares: with CHAOSBED_REQUIRE (CI sets it: `netns,docker,jgroups,swarm,spark_cluster`), the
tests of those markers must run. A skipped one fails (a green run that silently skipped the chaos tests is the worst
kind of green) unless its reason names a kernel feature this machine kind lacks (KERNEL_GAPS), and the session fails
if a required marker had no test pass at all (they were deselected, or never collected)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.process.broken import Shell

REQUIRE_ENV = "CHAOSBED_REQUIRE"
# skip reasons that a missing kernel feature gives, allowed even where the chaos tests are required: this machine kind
# has no sch_netem, so the netem test skips (the NFQUEUE fallback is what runs here, and is tested)
KERNEL_GAPS = ("no netem here",)
_passed: Counter[str] = Counter()
# The suite starts some thirty short-lived Spark JVMs; C1 alone compiles far less than C1 + C2 for them (measured: a
# local check's driver 7.1 -> 3.6 CPU-s with the class-data archive): the JIT tier changes no result, only CPU.
os.environ.setdefault("CHAOSBED_SPARK_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")


def required_markers() -> set[str]:
    return {m.strip() for m in os.environ.get(REQUIRE_ENV, "").split(",") if m.strip()}


def _required_of(keywords: object) -> set[str]:
    return {m for m in required_markers() if m in keywords}  # type: ignore[operator]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    required = _required_of(item.keywords)
    if not required:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    if any(gap in reason for gap in KERNEL_GAPS):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{REQUIRE_ENV}={os.environ[REQUIRE_ENV]}: this {'/'.join(sorted(required))} test must run here, but it "
        f"was skipped: {reason}"
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed:
        for marker in _required_of(report.keywords):
            _passed[marker] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or not required_markers():
        return  # xdist workers report to the controller, which counts
    missing = sorted(m for m in required_markers() if _passed[m] == 0)
    if missing:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"{REQUIRE_ENV}: no {', '.join(missing)} test passed in this session: the chaos tests did not run"
        if reporter is not None:
            reporter.write_line(message, red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    """A user's shell on the test's own state root (tests/process/broken.py): `shell("up", ...)` runs `chaosbed` in a
    process of its own; what it leaves is taken down after the test, also on failure."""
    found = Shell(tmp_path)
    try:
        yield found
    finally:
        found.clean_up()
