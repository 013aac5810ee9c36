"""tests/conftest.py's CHAOSBED_REQUIRE: a skipped test of a required marker fails, a kernel gap is allowed, and a
session in which no test of a required marker passed fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CASES = """
import pytest

@pytest.mark.netns
def test_runs():
    pass

@pytest.mark.netns
def test_skipped_for_want_of_root():
    pytest.skip("needs root for network namespaces")

@pytest.mark.netns
def test_skipped_for_a_kernel_gap():
    pytest.skip("no netem here: this kernel has no sch_netem")

def test_unmarked_skip():
    pytest.skip("not a chaos test")
"""


def run(tmp_path: Path, require: str, *select: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    env = {**os.environ, "CHAOSBED_REQUIRE": require}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
         "-o", "addopts=", "--rootdir", str(tmp_path), str(tmp_path / "test_cases.py"), *select],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_required_skip_fails_and_a_kernel_gap_does_not(tmp_path: Path) -> None:
    out = run(tmp_path, "netns")
    assert out.returncode == 1, out.stdout
    assert "FAILED" in out.stdout and "test_skipped_for_want_of_root" in out.stdout
    assert "must run here, but it was skipped: needs root for network namespaces" in out.stdout
    assert "1 failed, 1 passed, 2 skipped" in out.stdout


def test_nothing_required_changes_nothing(tmp_path: Path) -> None:
    out = run(tmp_path, "")
    assert out.returncode == 0, out.stdout
    assert "1 passed, 3 skipped" in out.stdout


@pytest.mark.parametrize(("require", "select"), [("docker", []), ("netns", ["-k", "unmarked"])])
def test_a_session_where_no_required_test_passed_fails(tmp_path: Path, require: str, select: list[str]) -> None:
    out = run(tmp_path, require, *select)
    assert out.returncode == 1, out.stdout
    assert f"no {require} test passed in this session" in out.stdout
