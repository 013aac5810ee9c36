"""orchestration/host/member_python.py: real members run the distribution's python3 when the host has a new enough one
(as docker members do), CHAOSBED_MEMBER_PYTHON when it is set, else the orchestrator's interpreter; from any working
directory, and a bad choice is refused with the variable's name."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from orchestration.cluster import ClusterError
from orchestration.host import member_python as mp

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mp.ENV, raising=False)
    mp._checked.cache_clear()
    mp._system_python.cache_clear()
    yield
    mp._checked.cache_clear()
    mp._system_python.cache_clear()


def _exe(pid: int) -> str:
    return os.path.realpath(f"/proc/{pid}/exe")


def test_members_run_the_chosen_interpreter_from_any_directory(
    make_cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # `-m node` must not depend on the orchestrator's working directory
    expected = mp.member_python()
    system = Path(mp.SYSTEM_PYTHON)
    if system.exists() and (mp._probe(str(system))[0] or (0, 0)) >= mp.MINIMUM:
        assert os.path.realpath(expected) == os.path.realpath(mp.SYSTEM_PYTHON), "the distribution's python3"
    else:
        assert expected == sys.executable
    cluster = make_cluster("process", 2)
    assert {_exe(m.pid) for m in cluster.members.values()} == {os.path.realpath(expected)}
    cluster.control("A", "send", to="B", count=50, size=10)
    delivered = lambda: cluster.control("B", "stats")["counters"]["unicast3"]["msgs_delivered"]  # noqa: E731
    cluster.wait_until(lambda: delivered() == 50, 30, "50 unicasts delivered at B")


def test_the_variable_picks_the_interpreter_and_a_bad_one_is_refused(
    make_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(mp.ENV, sys.executable)
    cluster = make_cluster("process", 1)
    assert _exe(cluster.members["A"].pid) == os.path.realpath(sys.executable)
    monkeypatch.setenv(mp.ENV, "/bin/true")
    with pytest.raises(ClusterError, match=f"{mp.ENV}=/bin/true: cannot run members"):
        make_cluster("process", 1)


def test_without_a_system_python_members_run_the_orchestrators(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mp, "SYSTEM_PYTHON", "/nonexistent/python3")
    assert mp.member_python() == sys.executable
    assert mp.member_env()["PYTHONPATH"].split(os.pathsep)[0] == mp.PROJECT_ROOT


def test_a_member_that_cannot_start_under_the_chosen_interpreter_says_which(
    make_cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "python3"  # answers the version probe, then fails as an interpreter without asyncio would
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = "-c" ]; then echo "3 12"; exit 0; fi\necho "No module named asyncio" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv(mp.ENV, str(fake))
    with pytest.raises(ClusterError) as e:
        make_cluster("process", 1)
    assert f"members run {fake}; {mp.ENV} picks another" in str(e.value) and "No module named asyncio" in str(e.value)
