"""Helpers for the plugin's tests: run pytest on generated test files in a subprocess (as a user would, with the
installed plugin and pytest-xdist), in a private chaosbed state root with its own warm Spark service."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clusters import netns_skip_reason

CASES = Path(__file__).parent / "cases"
EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "test_my_cluster.py"
INNER_TIMEOUT = 480.0


BACKENDS = [
    pytest.param("sim", id="sim", marks=pytest.mark.sim),
    pytest.param(
        "netns",
        id="netns",
        marks=[pytest.mark.netns, pytest.mark.skipif(netns_skip_reason() is not None, reason=str(netns_skip_reason()))],
    ),
]


def inner_env(state: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's pytest run: no trace of the outer run (xdist worker ids, CHAOSBED_SPARK, which
    the outer plugin set), a chaosbed state root of its own (its clusters' state and its Spark service)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CHAOSBED_"))}
    return {**env, "CHAOSBED_STATE": str(state), **extra}


def chaosbed(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestration", *args], env=env, capture_output=True, text=True, timeout=300
    )


@dataclass
class Outcome:
    ret: int
    output: str
    folder: Path

    def block(self, test: str) -> list[str]:
        """The lines of one test's section in the FAILURES/ERRORS part of the output."""
        lines = self.output.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("_") and f" {test} " in line)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("_", "="))), len(lines))
        return lines[start + 1 : end]


@dataclass
class Inner:
    """Runs pytest on test files copied into a folder of its own."""

    folder: Path
    state: Path

    def run(self, files: dict[str, Path], *args: str, **env: str) -> Outcome:
        for name, source in files.items():
            shutil.copy(source, self.folder / name)
        base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", f"--basetemp={self.folder / 'tmp'}"]
        proc = subprocess.run(
            [*base, *args],
            cwd=self.folder,
            env=inner_env(self.state, **env),
            capture_output=True,
            text=True,
            timeout=INNER_TIMEOUT,
        )
        return Outcome(proc.returncode, proc.stdout + proc.stderr, self.folder)


@pytest.fixture(scope="session")
def warm_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A chaosbed state root whose warm Spark service runs for this (outer) session: the user's runs in it find it
    running, so they neither start nor stop it."""
    state = tmp_path_factory.mktemp("chaosbed-state")
    started = chaosbed(inner_env(state), "spark", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    yield state
    chaosbed(inner_env(state), "spark", "stop")


def service_pid(state: Path) -> int | None:
    """The pid of the Spark service of a state root (None: not running), asked in a process of that root."""
    code = "from analysis import spark_service as s; i = s.status(); print(i.pid if i else '')"
    proc = subprocess.run([sys.executable, "-c", code], env=inner_env(state), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout) if proc.stdout.strip() else None


@pytest.fixture
def inner(tmp_path: Path, warm_state: Path) -> Inner:
    (tmp_path / "user").mkdir()
    return Inner(tmp_path / "user", warm_state)


@pytest.fixture
def inner_cold(tmp_path: Path) -> Inner:
    """A user's run in a state root of its own with no Spark service: for tests that check nothing, or that watch
    the session start and stop the service."""
    (tmp_path / "user").mkdir()
    (tmp_path / "state").mkdir()
    return Inner(tmp_path / "user", tmp_path / "state")
