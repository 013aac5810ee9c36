"""Cluster backends, one Cluster API (orchestration/cluster.py): sim (in-process, virtual time), process (loopback,
no root), netns (namespaces, root), docker (containers on a bridge network, root and a Docker engine), swarm
(services on the hosts of a Docker Swarm, a chaos agent per host)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    """A cluster object for a running real cluster (e.g. for `chaosbed status`), from its state file: ClusterError
    when there is none, StateFileError (orchestration/backends/state_file.py) when it cannot be used."""
    from orchestration.backends.state_file import StateFileError, read_raw, read_state, state_path

    state = read_state(label)
    spec = state.spec
    try:  # the backend, the system and the network section are read by the cluster's class
        cluster: RealCluster = backend_class(state.backend, foreign=spec.system is not None)(
            spec, label=label, workdir=state.workdir
        )
        cluster._restore_network(state.network)
    except (KeyError, TypeError, ValueError) as e:
        problem = f"has {e} (written by another chaosbed version?)"
        raise StateFileError(label, state_path(label), problem, read_raw(label)) from None
    cluster.token = state.token
    cluster.members = state.members
    return cluster
