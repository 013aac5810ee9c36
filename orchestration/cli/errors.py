"""A machine that changed under a command ends it with one line and exit 2, never a traceback.

Commands catch what they can explain in their own words (a member that is not running, a bad scenario key). What
they do not catch and that comes from outside chaosbed's code (a Docker engine that stopped, a namespace or container
that went away, a full disk, a port taken, a Spark service that died, a cluster torn down from another shell) reaches
`guarded`, which prints what went wrong and what to do and exits 2: the "could not run" of every command's exit
codes. Anything else is a bug in chaosbed and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from orchestration.host.os_errors import os_problem

# chaosbed's own errors for what it found on the machine (their messages say what to do), by module and class: an
# error of a module that was never imported cannot have been raised, so only imported ones are looked up
_MACHINE_ERRORS = (
    ("orchestration.cluster", "ClusterError"),  # and its kinds: DockerUnavailable, StateFileError, ...
    ("chaos.faults", "ChaosError"),
    ("chaos.kernel", "KernelError"),
    ("chaos.netem", "NetemError"),
    ("analysis.spark_service", "SparkServiceError"),
    ("analysis.pipeline", "SparkUnavailable"),
)


def environment_problem(e: BaseException) -> str | None:
    """The one line for an error that comes from the machine, not from chaosbed (None: a bug, keep the traceback)."""
    ours = tuple(getattr(sys.modules[m], name) for m, name in _MACHINE_ERRORS if m in sys.modules)
    if isinstance(e, ours):
        return str(e)
    if isinstance(e, OSError) and (problem := os_problem(e)) is not None:
        return problem
    return _docker_problem(e)


def _docker_problem(e: BaseException) -> str | None:
    """The Docker engine or a container going away under a command (the docker SDK's errors, and requests' when
    the engine's socket closed mid-request)."""
    if "docker" not in sys.modules:
        return None
    import docker
    import requests

    if isinstance(e, docker.errors.NotFound):
        return f"{_first_line(e)}: a container, network or image went away meanwhile (removed from another shell?)"
    if isinstance(e, docker.errors.DockerException | requests.exceptions.ConnectionError):
        return f"the Docker engine: {_first_line(e)} (did it stop? `docker info` tells)"
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def guarded(command: Callable[[], object]) -> Callable[[], object]:
    """`command` (a click command in standalone mode), with a machine's errors as one line on stderr and exit 2."""

    def call() -> object:
        try:
            return command()
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as e:
            problem = environment_problem(e)
            if problem is None:
                raise
            print(f"Error: {problem}", file=sys.stderr)
            raise SystemExit(2) from None

    return call
