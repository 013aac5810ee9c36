"""A cluster of a system: the spec a scenario's [cluster] gives, the class that runs it on a backend, and whether
its members form a group before the schedule starts. Used by `chaosbed run`/`matrix`, `up`, `conform` and the pytest
plugin, so a foreign system is started the same way everywhere."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from orchestration.backends import backend_class
from orchestration.cluster import Cluster, ClusterSpec
from orchestration.systems import System, system_of


def spec_of(
    system: System,
    members: list[str],
    backend: str,
    *,
    stack: str = "unicast3",
    transport: str = "udp",
    properties: dict | None = None,
    seed: int = 0,
) -> ClusterSpec:
    """The ClusterSpec of a system's cluster (a foreign system travels in it, so `attach` rebuilds the same class).
    A foreign system with stacks of its own runs `stack` when it is one of them, else its default."""
    if system.native:
        return ClusterSpec(members, stack, transport, dict(properties or {}), backend, seed=seed)
    if system.stacks and stack in system.stacks and stack != system.stack:
        if system.requires == "jgroups5":
            from orchestration.systems.jgroups5 import with_stack

            system = with_stack(system, stack)
        else:
            system = replace(system, stack=stack)
    transport = system.transport or transport
    return ClusterSpec(members, system.stack or system.name, transport, {}, backend, seed=seed, system=system.to_dict())


def new_cluster(spec: ClusterSpec, *, workdir: Path | None = None, label: str | None = None) -> Cluster:
    """The cluster object (not started) for the spec on its backend."""
    cls = backend_class(spec.backend, foreign=spec.system is not None)
    return cls(spec, workdir=workdir, label=label)


def backend_problem(system: System, backend: str) -> str | None:
    """Why the system cannot run on this backend (None if it can)."""
    if backend in system.backends:
        return None
    return (
        f"system {system.name!r} runs on the {', '.join(system.backends)} backends, not {backend} (the simulator runs "
        "chaosbed's own protocols only)"
    )


def forms_group(cluster: Cluster) -> bool:
    """Whether to wait for one view after the start: chaosbed's stacks with membership, and a foreign system whose
    members answer `view` with a view."""
    from node.stack import has_membership

    system = system_of(cluster.spec.system)
    if system.native:
        return has_membership(cluster.spec.stack)
    has_views = getattr(cluster, "has_views", None)
    return bool(has_views()) if has_views is not None else False
