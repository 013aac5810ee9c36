"""The interpreter that runs real members (`python3 -m node`) on the process and netns backends.

node/ is standard-library only, so any python3 >= 3.11 runs it. The docker backend's members run the distribution's
python3 (the member image's); the process and netns members run the same one when the host has it, so a scenario
meets members of the same speed on every real backend. The distribution's build is also the faster one here:
Debian's python3.11 (built with profile-guided and link-time optimisation) against the virtualenv's pyenv-built
3.11 moved 1.10-1.28x as many unicasts and multicasts at 100 and 1000 B (bench_network, side by side). Otherwise (no
such python3, or an older one) members run the orchestrator's own interpreter. CHAOSBED_MEMBER_PYTHON names one.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import node

ENV = "CHAOSBED_MEMBER_PYTHON"
SYSTEM_PYTHON = "/usr/bin/python3"
MINIMUM = (3, 11)
# the folder that holds the node package: members import the orchestrator's own copy of it, whatever their interpreter
PROJECT_ROOT = str(Path(node.__file__).resolve().parent.parent)


class MemberPythonError(RuntimeError):
    """CHAOSBED_MEMBER_PYTHON names something that cannot run members."""


def member_python() -> str:
    """The interpreter for members: CHAOSBED_MEMBER_PYTHON, else the distribution's python3 if it is new enough,
    else sys.executable."""
    chosen = os.environ.get(ENV)
    if chosen:
        return _checked(chosen)
    return _system_python() or sys.executable


def member_env() -> dict[str, str]:
    """The members' environment: the caller's, with the node package importable for any interpreter."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = PROJECT_ROOT + (os.pathsep + path if path else "")
    return env


@functools.cache
def _checked(path: str) -> str:
    exe = shutil.which(path)
    version, problem = _probe(exe) if exe else (None, "not found or not executable")
    if version is None:
        raise MemberPythonError(f"{ENV}={path}: cannot run members ({problem}); give the path of a python3 >= 3.11")
    if version < MINIMUM:
        raise MemberPythonError(
            f"{ENV}={path}: Python {'.'.join(map(str, version))}; members need {'.'.join(map(str, MINIMUM))} or newer"
        )
    return exe  # type: ignore[return-value]


@functools.cache
def _system_python() -> str | None:
    if Path(sys.executable).resolve() == Path(SYSTEM_PYTHON).resolve():
        return sys.executable
    version, _ = _probe(SYSTEM_PYTHON) if os.access(SYSTEM_PYTHON, os.X_OK) else (None, "")
    return SYSTEM_PYTHON if version is not None and version >= MINIMUM else None


def _probe(exe: str) -> tuple[tuple[int, int] | None, str]:
    """The interpreter's version, or None and why not. Only the version (14 ms): importing the member's code to be
    sure would cost 110 ms of every command, and a member that cannot start says why (RealCluster.wait_ready)."""
    try:
        out = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True,
                             timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:
        return None, str(e)
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None, (out.stderr.strip().splitlines() or ["it printed no Python version: not a Python interpreter"])[-1]
    return (int(parts[0]), int(parts[1])), ""
