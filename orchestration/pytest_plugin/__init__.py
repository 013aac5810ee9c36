"""The chaosbed pytest plugin (entry point `chaosbed`): users write their own chaos tests (docs/pytest.md).

- `@pytest.mark.chaosbed(members=3, stack="unicast3+nakack2", backend=None, transport="udp", properties=None,
  seed=0, system="chaosbed", member=None)` describes the test's cluster; `system` names a system (`chaosbed
  systems`), or with `member={"command": [...], ...}` defines one inline as a scenario's [cluster.member] does.
- `chaos_cluster`: that cluster, started (and formed into one group on membership stacks). Every fault done through
  it (`cluster.chaos.add/remove/heal`, `kill`, `restart`, `pause`, `resume`, `leave`, the control commands `close`
  and `set`) goes to `faults.jsonl` next to its histories in the test's tmp folder. It is taken down after the
  test, also when the test fails or is interrupted, and the test fails if anything of it is left (namespaces,
  processes, state).
- `history_check(cluster, fifo=True, ...)`: waits until the cluster is quiet (the runner's `wait_quiet`), stops the
  members, lays the folder out as a run folder and checks it with `analysis.pipeline.analyze`; a violation fails the
  test with one line per violation and the command that replays the case.

Backend: the marker's `backend` wins; else `--chaosbed-backend`, else the ini option `chaosbed_backend`, else
`CHAOSBED_BACKEND`, else netns when root with the `ip` tool, else process. A backend that cannot run here skips.

Spark: the checks need Spark; the plugin sets CHAOSBED_SPARK=auto (unless the user set it, or `--chaosbed-spark`)
so every check of a session (all xdist workers) uses one warm Spark Connect service, started on first use, and the
controller stops it at the end of the session if the session started it.

This module holds the hooks and the fixtures; marker.py the marker and the choice of backend, recording.py the
cluster that records its faults, check.py history_check, teardown.py the teardown and its leftover check, spark.py
the warm Spark service's lifetime.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestration.cluster import Cluster  # standard library only: cheap in every pytest session
from orchestration.pytest_plugin.check import check_history, replay_command
from orchestration.pytest_plugin.marker import (
    MARKER_HELP,
    backend_problem,
    choose_backend,
    cluster_spec,
    marker_options,
)
from orchestration.pytest_plugin.recording import recording_class
from orchestration.pytest_plugin.spark import spark_pid, spark_service
from orchestration.pytest_plugin.teardown import take_down

if TYPE_CHECKING:
    from docker import DockerClient

    from orchestration.pytest_plugin.checked_run import CheckedRun

__all__ = ["chaos_cluster", "chaosbed_docker_engine", "check_history", "history_check"]

FORM_TIMEOUT = 30.0  # seconds for a membership stack's members to form one view at the start
RUN_FOLDER = "chaosbed"  # the cluster's run folder under the test's tmp_path
_SPARK_BEFORE = pytest.StashKey[int | None]()  # the service's pid when the session began


# --- options, marker, session ----------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaosbed", "chaosbed chaos tests")
    group.addoption(
        "--chaosbed-backend",
        default=None,
        metavar="NAME",
        help="backend for chaos_cluster tests whose marker names none: sim | process | netns | docker "
        "(default: the ini option chaosbed_backend, then CHAOSBED_BACKEND, then netns as root, else process)",
    )
    group.addoption(
        "--chaosbed-spark",
        default=None,
        metavar="WHERE",
        help="where history_check runs Spark: auto (a warm local Spark Connect service, started on first use and "
        "stopped at the end of the session if it started it) | local | sc://host:port | spark://master "
        "(default: CHAOSBED_SPARK, else auto)",
    )
    parser.addini("chaosbed_backend", "default backend of chaos_cluster tests (as --chaosbed-backend)", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    spark = config.getoption("chaosbed_spark")
    if spark:
        os.environ["CHAOSBED_SPARK"] = spark
    else:
        os.environ.setdefault("CHAOSBED_SPARK", "auto")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) owns the service's lifetime
        config.stash[_SPARK_BEFORE] = spark_pid()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stops the warm Spark service at the end of the session if this session started it: one runs now that did
    not run (with that pid) when the session began. Only the controller does this: xdist workers end before it,
    and each of them may have been the one that started the service for all."""
    config = session.config
    client = sys.modules.get("analysis.spark")  # imported only where a test checked histories
    if client is not None:
        client.stop_spark()  # this process's client (or local session) first: the server may go next
    if hasattr(config, "workerinput") or _SPARK_BEFORE not in config.stash:
        return
    service = spark_service()
    now = spark_pid()
    if service is None or now is None or now == config.stash[_SPARK_BEFORE]:
        return
    in_flight = getattr(service, "_live_leases", None)  # checks of other sessions holding the service right now
    if in_flight is not None and in_flight(service.service_dir()):
        return  # theirs to finish: the service's idle timeout stops it later
    service.stop()


# --- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture
def chaos_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A started cluster as the `chaosbed` marker describes it (see the module's docstring)."""
    from orchestration.backends import backend_class
    from orchestration.cluster import ClusterError
    from orchestration.systems import system_of
    from orchestration.systems.clusters import backend_problem as system_problem
    from orchestration.systems.clusters import forms_group

    options = marker_options(request.node)
    backend = choose_backend(request.config, options.backend)
    problem = backend_problem(backend)
    if problem:
        pytest.skip(problem)
    spec = cluster_spec(options, backend, request.node.nodeid)
    if (problem := system_problem(system_of(spec.system), backend)) is not None:
        pytest.skip(problem)
    if backend == "docker":
        request.getfixturevalue("chaosbed_docker_engine")
    cls = backend_class(backend, foreign=spec.system is not None)
    cluster = recording_class(cls)(spec, workdir=tmp_path / RUN_FOLDER)
    try:
        try:
            cluster.start()
            if forms_group(cluster):
                cluster.wait_for_view(timeout=FORM_TIMEOUT)
        except ClusterError as e:
            pytest.fail(f"chaosbed: the {backend} cluster did not start: {e}", pytrace=False)
        cluster.record_start()
        yield cluster
    finally:
        take_down(cluster)


@pytest.fixture
def history_check(request: pytest.FixtureRequest) -> Callable[..., CheckedRun]:
    """`history_check(cluster, fifo=True, exactly_once=True, complete=True, no_phantoms=True, views_converge="10s",
    delivered_within=None, control_per_heal=None, quiet_within="30s")`: see check_history."""
    return functools.partial(check_history, replay=replay_command(request.config, request.node.nodeid))


@pytest.fixture(scope="session")
def chaosbed_docker_engine() -> Iterator[DockerClient]:
    """The Docker engine of this session's docker clusters: the running one, or one started for the session and
    stopped when the last session (xdist worker) using it ends."""
    from orchestration.host import docker_engine

    with docker_engine.engine() as client:
        yield client
