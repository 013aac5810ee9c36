"""RealCluster.before_members: the hook runs once, after the network exists (every member has its address) and
before any member process starts (no pid yet, no history written), so a capture sees a run's first datagram; the
members then start as usual. The process backend (no root) and netns."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.backends import backend_class
from orchestration.backends.real import RealCluster
from orchestration.cluster import ClusterSpec
from tests.clusters import BACKENDS, assert_nothing_left


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_hook_runs_between_the_network_and_the_first_member(tmp_path: Path, backend: str) -> None:
    cluster = backend_class(backend)(ClusterSpec(members=["A", "B"], stack="unicast3", backend=backend),
                                     workdir=tmp_path / "run")  # fmt: skip
    assert isinstance(cluster, RealCluster)
    seen: list[dict[str, object]] = []

    def hook(c: RealCluster) -> None:
        seen.append({n: (m.ip, m.port, m.pid) for n, m in c.members.items()})
        seen.append({"histories": sorted(p.name for p in (c.workdir / "history").iterdir())})

    cluster.before_members = hook
    try:
        cluster.start()
        assert len(seen) == 2, seen
        placed, written = seen
        assert set(placed) == {"A", "B"} and all(ip and port and pid is None for ip, port, pid in placed.values())
        assert written == {"histories": []}
        assert sorted(cluster.running()) == ["A", "B"]
    finally:
        cluster.down()
        assert_nothing_left(cluster)
