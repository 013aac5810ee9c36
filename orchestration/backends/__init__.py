"""Cluster backends, one Cluster API (orchestration/cluster.py): sim (in-process, virtual time), process (loopback,
no root), netns (namespaces, root), docker (containers on a bridge network, root and a Docker engine)."""

from __future__ import annotations

BACKENDS = ("sim", "process", "netns", "docker")


def backend_class(name: str) -> type:
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
    if name == "compose":  # attached, not started: `chaosbed compose attach`
        from orchestration.backends.compose import ComposeCluster

        return ComposeCluster
    raise ValueError(f"unknown backend {name!r}: {' | '.join(BACKENDS)}")
