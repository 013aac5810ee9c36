"""Docker tests run against a real engine: the one that runs, or (as root) one the session starts and the last
xdist worker's session stops (orchestration/host/docker_engine.py, which also checks that the host is left as before).
The member image is built from this checkout, on a base image made without a registry where none can be pulled."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestration.backends.docker import LABEL, DockerCluster
from orchestration.backends.netns import list_namespaces
from orchestration.host import docker_engine, docker_images
from tests.clusters import make_cluster, netns_skip_reason  # noqa: F401 - make_cluster: the fixture


def docker_skip_reason() -> str | None:
    return netns_skip_reason() or docker_engine.unavailable_reason()


SKIP_REASON = docker_skip_reason()
needs_docker = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(SKIP_REASON is not None, reason=f"no Docker engine: {SKIP_REASON}"),
]


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A client of the engine, with the member image built (the base image too, if none is there)."""
    with docker_engine.engine() as client:
        docker_images.member_image(client, build_base=True)
        yield client


def leftovers(client: Any, label: str) -> list[str]:
    """Everything of cluster `label` still there: containers, networks, namespaces."""
    found = [f"container {c.name}" for c in client.containers.list(all=True, filters={"label": f"{LABEL}={label}"})]
    found += [f"network {n.name}" for n in client.networks.list(filters={"label": f"{LABEL}={label}"})]
    found += [f"namespace {ns}" for ns in list_namespaces() if ns.startswith(f"{label}-")]
    return found


@pytest.fixture
def docker_cluster(docker_client: Any, make_cluster: Any) -> Iterator:  # noqa: F811 - the fixture, by name
    """tests/clusters.py's make_cluster on the docker backend (each cluster taken down after the test, no namespace,
    member process or state of it left), and no container or network with its label either."""
    made: list[DockerCluster] = []

    def make(n: int = 3, **spec: Any) -> DockerCluster:
        cluster = make_cluster("docker", n, **spec)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:  # before make_cluster's own teardown, which takes them down again (idempotent)
        cluster.down()
        assert not leftovers(docker_client, cluster.label), leftovers(docker_client, cluster.label)
