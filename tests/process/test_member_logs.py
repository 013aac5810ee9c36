"""A run folder keeps what its members printed: down moves each incarnation's output (stdout and stderr) from the
state folder, which it removes, into the run folder's logs/, so a failure can be triaged from the members' own
words after the cluster is gone. The process backend (no root) and netns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration.backends import backend_class
from orchestration.backends.real import RealCluster
from orchestration.cluster import ClusterSpec
from tests.clusters import BACKENDS, assert_nothing_left


def _ready_lines(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"ready"')]


@pytest.mark.parametrize("backend", BACKENDS)
def test_down_keeps_every_incarnations_output_in_the_run_folder(tmp_path: Path, backend: str) -> None:
    run = tmp_path / "run"
    cluster = backend_class(backend)(ClusterSpec(members=["A", "B"], stack="unicast3", backend=backend), workdir=run)
    assert isinstance(cluster, RealCluster)
    try:
        cluster.start()
        cluster.kill("B")
        cluster.restart("B")
    finally:
        cluster.down()
        assert_nothing_left(cluster)
    logs = run / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["A.1.log", "B.1.log", "B.2.log"]
    for name, log in (("A", "A.1.log"), ("B", "B.1.log"), ("B", "B.2.log")):
        assert [line["ready"] for line in _ready_lines(logs / log)] == [name], log
    assert not cluster.state_dir.exists()
    cluster.down()  # idempotent: a second teardown neither fails nor loses the kept logs
    assert sorted(p.name for p in logs.iterdir()) == ["A.1.log", "B.1.log", "B.2.log"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cluster_without_a_run_folder_leaves_no_logs_behind(backend: str) -> None:
    cluster = backend_class(backend)(ClusterSpec(members=["A"], stack="unicast3", backend=backend))
    assert isinstance(cluster, RealCluster)
    try:
        cluster.start()
        assert (cluster.state_dir / "A.1.log").exists()
    finally:
        cluster.down()
        assert_nothing_left(cluster)
    assert not cluster.state_dir.exists()
