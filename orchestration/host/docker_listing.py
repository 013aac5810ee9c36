"""Listing containers when containers come and go: the one way the product lists them.

The docker SDK's `containers.list()` asks the engine for the list, then inspects every container in it, one request
each; a container removed in between (an auto-removed member, a swarm task being replaced, a cluster torn down from
another shell) makes that inspect raise `docker.errors.NotFound`, and the whole listing fails. Here the list is the
engine's one low-level request (`listed`: id, name, labels, state, as the list reports them), and `containers`
inspects each listed container alone, leaving out one that went away meanwhile. A container can still vanish after
it was listed: callers act on it as on any container that may be gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

Filters = Mapping[str, str | Sequence[str]]


@dataclass(frozen=True)
class Listed:
    """A container as the engine's list reports it: no inspect, so it cannot fail for a container gone since."""

    id: str
    name: str
    labels: Mapping[str, str]
    state: str  # created, running, paused, restarting, removing, exited, dead


def listed(client: DockerClient, *, all: bool = False, filters: Filters | None = None) -> list[Listed]:
    """The containers the engine lists (running ones, or every one with `all`), matching `filters` as the Engine
    API reads them (e.g. {"label": "chaosbed.cluster"}), in one request."""
    wanted = {key: [value] if isinstance(value, str) else list(value) for key, value in (filters or {}).items()}
    rows = client.api.containers(all=all, filters=wanted)
    return [
        Listed(
            id=str(row["Id"]),
            name=str((row.get("Names") or ["/"])[0]).lstrip("/"),
            labels=dict(row.get("Labels") or {}),
            state=str(row.get("State") or ""),
        )
        for row in rows
    ]


def containers(client: DockerClient, *, all: bool = False, filters: Filters | None = None) -> list[Container]:
    """The listed containers, each inspected (the SDK's Container, with its attrs); a container that went away
    between the list and its inspect is left out."""
    import docker

    found = []
    for entry in listed(client, all=all, filters=filters):
        try:
            found.append(client.containers.get(entry.id))
        except docker.errors.NotFound:
            continue
    return found
