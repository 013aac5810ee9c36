"""Cluster backends, one Cluster API (orchestration/cluster.py): sim (in-process, virtual time), process (loopback,
no root), netns (namespaces, root), docker (containers on a bridge network, root and a Docker engine), swarm
(services on the hosts of a Docker Swarm, a chaos agent per host)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.cluster import STATE_ROOT, ClusterError, ClusterSpec, MemberInfo

if TYPE_CHECKING:
    from orchestration.backends.real import RealCluster

BACKENDS = ("sim", "process", "netns", "docker", "swarm")


def backend_class(name: str, *, foreign: bool = False) -> type:
    """The cluster class of a backend; `foreign`: its variant for members of a foreign system (backends/foreign.py)."""
    if foreign and name == "compose":  # attached containers that are not chaosbed's members
        from orchestration.backends.compose import ForeignCompose

        return ForeignCompose
    if foreign:
        from orchestration.backends.foreign import foreign_class

        return foreign_class(name)
    if name == "sim":
        from orchestration.sim.cluster import SimCluster

        return SimCluster
    if name == "process":
        from orchestration.backends.process import ProcessCluster

        return ProcessCluster
    if name == "netns":
        from orchestration.backends.netns import NetnsCluster

        return NetnsCluster
    if name == "docker":
        from orchestration.backends.docker import DockerCluster

        return DockerCluster
    if name == "swarm":
        from orchestration.backends.swarm import SwarmCluster

        return SwarmCluster
    if name == "compose":  # attached, not started: `chaosbed compose attach`
        from orchestration.backends.compose import ComposeCluster

        return ComposeCluster
    raise ValueError(f"unknown backend {name!r}: {' | '.join(BACKENDS)}")


def attach(label: str) -> RealCluster:
    """A cluster object for a running real cluster (e.g. for `chaosbed status`), from its state file."""
    path = STATE_ROOT / label / "state.json"
    try:
        state = json.loads(path.read_text())
    except OSError:
        raise ClusterError(f"no cluster {label} (no {path})") from None
    spec = ClusterSpec(**state["spec"])
    cluster = backend_class(state["backend"], foreign=spec.system is not None)(
        spec, label=label, workdir=Path(state["workdir"])
    )
    cluster.token = state["token"]
    cluster.members = {n: MemberInfo(**m) for n, m in state["members"].items()}
    cluster._restore_network(state.get("network", {}))
    return cluster
