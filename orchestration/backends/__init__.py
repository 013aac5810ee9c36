"""Cluster backends: sim (in-process, virtual time), process (loopback, no root), netns (namespaces, root)."""

from __future__ import annotations


def backend_class(name: str) -> type:
    if name == "process":
        from orchestration.backends.process import ProcessCluster

        return ProcessCluster
    if name == "netns":
        from orchestration.backends.netns import NetnsCluster

        return NetnsCluster
    raise ValueError(f"unknown backend {name!r}: process | netns (sim runs in-process: `chaosbed sim`)")
